"""Declared checks and the inputs they need: a check the config declares either runs or says, once, what is missing.

One :class:`Requirement` per declared check: which setting declares it, which observe call must pass which
arguments (together, in one call) for it to run, or which other setting it needs. The monitor notes the
arguments of every observe call of a step (``Accumulator.calls``); at the step's end :func:`pending` compares them
with :data:`REQUIREMENTS` and each requirement not met is one ``declared_check`` warning (a
:class:`~grpo_monitor.violations.Violation`, so JSONL and every sink see it), once per run.

>>> from grpo_monitor import MonitorConfig
>>> calls = {"observe_loss": [{"mask", "logprobs"}]}
>>> [v.observed for v in unmet(MonitorConfig(expect_on_policy=True), calls, said=set(), step=0)]  # doctest: +ELLIPSIS
['expect_on_policy=True declares the on_policy check, but no observe_loss call of step 0 passed old_logprobs=; ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ..violations import Violation

#: The arguments each observe call of a step passed (not None), one set per call, by call name.
Calls = Mapping[str, Iterable[set[str] | frozenset[str]]]


@dataclasses.dataclass(frozen=True)
class Requirement:
    """A check a setting declares, and what it needs to run.

    ``declared(config)``: the declaration as the user wrote it (``"expect_on_policy=True"``), None when not
    declared. Either ``call``/``needs``: arguments ``call`` must pass together (``given``: only calls passing
    these count, e.g. ``loss`` for measured weights), or ``setting(config)``: the other setting it needs, None
    when set. ``needs`` may be a function of the config (an estimator's replay inputs).
    """

    key: str
    check: str
    declared: Callable[[Any], str | None]
    call: str | None = None
    needs: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = ()
    given: tuple[str, ...] = ()
    setting: Callable[[Any], str | None] | None = None

    def needed(self, config: Any) -> tuple[str, ...]:
        return self.needs(config) if callable(self.needs) else self.needs

    def missing(self, config: Any, calls: Calls) -> str | None:
        """What is missing for this step (None: it runs, or it was not declared, or there was nothing to check)."""
        declared = self.declared(config)
        if declared is None:
            return None
        if self.setting is not None:
            other = self.setting(config)
            return None if other is None else f"{declared} needs {other}, which is not set"
        needs = self.needed(config)
        passed = [set(c) for c in calls.get(self.call or "", ()) if set(self.given) <= set(c)]
        if not needs or not passed or any(set(needs) <= c for c in passed):
            return None
        seen: set[str] = set().union(*passed)
        lacking = sorted(set(needs) - seen) or list(needs)
        args = " and ".join(f"{n}=" for n in lacking)
        if self.given:
            return f"no {self.call} call of step {{step}} that passed {', '.join(self.given)}= also passed {args}"
        return f"no {self.call} call of step {{step}} passed {args}"


def _estimator_needs(config: Any) -> tuple[str, ...]:
    from ..estimators.judge import replay_needs
    from ..estimators.registry import get

    return replay_needs(get(config.estimator)) if config.estimator != "auto" else ()


REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement("on_policy", "on_policy", lambda c: "expect_on_policy=True" if c.expect_on_policy else None,
                "observe_loss", ("logprobs", "old_logprobs")),
    Requirement("on_policy_bitwise", "on_policy", lambda c: "on_policy_bitwise=True" if c.on_policy_bitwise else None,
                setting=lambda c: None if c.expect_on_policy else "expect_on_policy=True"),
    Requirement("loss_aggregation", "loss_aggregation",
                lambda c: f"loss_aggregation={c.loss_aggregation!r}" if c.loss_aggregation != "auto" else None,
                "observe_loss", ("advantages",), given=("loss",)),
    Requirement("estimator_inputs", "estimator replay",
                lambda c: f"std_convention={c.estimator!r}" if _estimator_needs(c) else None,
                "observe_rollout", _estimator_needs, given=("advantages",)),
)

_HINT = ("pass the missing argument (or drop the declaration); until then this check does not run. Said once per "
         "run and declared check")


def pending(config: Any, calls: Calls, said: Collection[str], step: int) -> list[tuple[str, Violation]]:
    """Pure: ``(key, declared_check warning)`` per requirement unmet this step and not in ``said`` (the keys
    already said); the caller adds the keys to its said set when it applies the warnings."""
    from ..invariants import violation

    out = []
    for req in REQUIREMENTS:
        if req.key in said:
            continue
        why = req.missing(config, calls)
        if why is None:
            continue
        text = why.format(step=step)
        if req.setting is None:
            text = f"{req.declared(config)} declares the {req.check} check, but {text}"
        out.append((req.key, violation("declared_check", step, f"{text}; the {req.check} check did not run", config,
                                       hint=_HINT)))
    return out


def unmet(config: Any, calls: Calls, *, said: set[str], step: int) -> list[Violation]:
    """:func:`pending`, its keys added to ``said``: the warnings once per run."""
    found = pending(config, calls, said, step)
    said.update(key for key, _ in found)
    return [v for _, v in found]
