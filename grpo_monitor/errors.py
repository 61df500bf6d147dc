"""Every exception a user of grpo-monitor may catch, in one module; each is also exported from ``grpo_monitor``.

>>> from grpo_monitor import InputValueError, InvariantViolation
>>> issubclass(InputValueError, ValueError), issubclass(InvariantViolation, RuntimeError)
(True, True)

Each class keeps the built-in base it always had, so ``except ValueError`` still catches
an input error. The modules that raise them re-export them under their old paths
(``grpo_monitor.step.inputs.InputValueError``, ``grpo_monitor.violations.InvariantViolation``,
...), which keep working. This module imports nothing from the package: any module may
raise from it. A new error is defined here and listed in ``__all__``; ``grpo_monitor`` exports
every name listed.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = [
    "EstimatorFunctionError", "InputError", "InputFileError", "InputTypeError", "InputValueError", "InvariantViolation",
    "LogFormatError", "MonitorClosedError", "RunStalled", "UnknownEstimatorError", "UnsafeOutputError",
    "UnsafePathError", "WebhookError",
]


class _Record(Protocol):
    """What a breach needs of its records (:class:`grpo_monitor.Violation`, not imported here: no cycle)."""

    def message(self) -> str: ...


# ------------------------------------------------------------ what a training run raises
class InvariantViolation(RuntimeError):
    """Raised when an invariant breaks under the ``"raise"`` policy.

    ``violations`` holds the :class:`~grpo_monitor.Violation` records of the step.
    """

    def __init__(self, violations: Sequence[_Record]):
        self.violations: list[Any] = list(violations)  # grpo_monitor.Violation records
        lines = [v.message() for v in self.violations]
        super().__init__("\n".join(lines) if lines else "invariant violation")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its records (a Ray actor's breach reaches the driver's ``ray.get`` as itself)."""
        return (type(self), (self.violations,))


class InputError(Exception):
    """Base of the errors raised for bad input at the API boundary (an argument's name, type, shape or value)."""


class InputValueError(InputError, ValueError):
    """A value of the wrong shape, length or layout."""


class InputTypeError(InputError, TypeError):
    """A value of the wrong type or dtype."""


class MonitorClosedError(RuntimeError):
    """A public method was called on a closed monitor."""


class UnknownEstimatorError(ValueError):
    """An estimator name the registry does not hold; the message is one line naming the closest names."""


# ------------------------------------------------------------ files the monitor reads or writes
class InputFileError(ValueError):
    """A file that cannot be read as a recording: not a regular file, too large, or JSON out of bounds."""


class LogFormatError(ValueError):
    """A line of a run's JSONL log that is valid JSON but not a step record."""


class UnsafePathError(PermissionError):
    """A folder or file the monitor would use is not private to the current user."""


class UnsafeOutputError(PermissionError):
    """An output path the command will not write through (a symlink, or not a folder)."""


# ------------------------------------------------------------ run health
class RunStalled(RuntimeError):
    """A run-health finding matched ``MonitorConfig.halt_on`` after holding for its patience.

    Not an invariant breach: every update was computed right, the run is just not learning.
    ``findings`` holds the matching :class:`~grpo_monitor.health.FindingState` records.
    """

    def __init__(self, findings: Sequence[Any]):
        self.findings = tuple(findings)
        names = ", ".join(f"{f.name} ({f.severity} since step {f.since})" for f in self.findings)
        text = f"grpo-monitor: the run stalled: {names}; MonitorConfig.halt_on stopped it"
        details = "\n".join(f"- {f.message}" for f in self.findings)
        super().__init__(f"{text}\n{details}" if details else text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.findings,))


class EstimatorFunctionError(ValueError):
    """Your own estimator function raised: the user's error, naming the function and its exception.

    A ``ValueError`` so a replay reports it as the declared estimator's misfit (a ``convention`` error naming
    both), never as the monitor's internal fault that would switch the rollout checks off.
    """


class WebhookError(RuntimeError):
    """A ``webhook:URL`` sink's message could not be delivered after its retries (counted; the sink backs off)."""


# ------------------------------------------------------------ the words of a wrong name
#: Names trainers use for the monitor's arguments (a hint only; the valid names come from each signature).
SYNONYMS = {
    "question_ids": ("prompt_ids", "prompt_id", "prompts", "prompt_index", "problem_ids", "questions", "qids"),
    "group_ids": ("uid", "uids", "index", "group_index", "groups"),
    "rewards": ("scores", "reward", "token_level_scores"),
    "lengths": ("response_lengths", "completion_lengths", "seq_lens", "response_length"),
    "mask": ("attention_mask", "response_mask", "completion_mask", "loss_mask", "action_mask"),
    "logprobs": ("log_probs", "log_prob", "per_token_logps"),
    "old_logprobs": ("old_log_probs", "old_log_prob", "old_per_token_logps"),
    "ref_logprobs": ("ref_log_probs", "ref_log_prob", "ref_per_token_logps"),
    "group_size": ("num_generations", "n_samples_per_prompt", "rollout_n", "n_samples", "num_samples"),
}
_SYNONYM_OF = {alias: name for name, aliases in SYNONYMS.items() for alias in aliases}


def unknown_keywords(call: str, unknown: Sequence[str], valid: Sequence[str], *, listed: bool = False
                     ) -> InputTypeError:
    """The error for keywords ``call`` does not take: each named with the nearest ``valid`` one (all of them
    ``listed`` too, for a short signature).

    >>> print(unknown_keywords("MonitorConfig", ["num_generations"], ["group_size", "history_cap"]))
    MonitorConfig() got an unexpected keyword argument 'num_generations'; did you mean group_size?
    """
    hints = "; ".join(f"did you mean {nearest_name(k, valid)}?" for k in unknown)
    names = f" (its arguments: {', '.join(valid)})" if listed else ""
    return InputTypeError(f"{call}() got an unexpected keyword argument {', '.join(map(repr, unknown))}; {hints}"
                          f"{names}")


def nearest_name(wrong: str, valid: Sequence[str]) -> str:
    """The valid name ``wrong`` most likely meant: a trainer's synonym of it, else the closest spelling.

    >>> nearest_name("prompt_ids", ["rewards", "group_ids", "question_ids"]), nearest_name("advantage", ["advantages"])
    ('question_ids', 'advantages')
    """
    alias = _SYNONYM_OF.get(wrong) or _SYNONYM_OF.get(wrong.lower())
    if alias is not None and alias in valid:
        return alias
    return max(valid, key=lambda v: difflib.SequenceMatcher(None, wrong.lower(), v).ratio())
