"""The evaluate stage of a step: what one sync shows, as data (:class:`Verdict`); nothing changes here.

``GRPOMonitor.end_step`` is sync -> :func:`evaluate` -> apply -> emit. :func:`evaluate` judges the
synced rollout's estimator under the run's lock, decides the rollout, token, loss-weight and
declared-check violations, and returns them with the judgement, the narrowed lock, the notes to
say once and the loss-weight metrics. The monitor's ``_apply`` is the one place any of it
changes the run (:class:`~grpo_monitor.run.state.RunState`) or the step's findings so far
(:class:`StepFindings`; the accumulator holds the step's inputs only). The eager check of
``observe_rollout`` evaluates its own rollout the same way (``final=False``: no tokens, weights
or declared checks yet).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from ..config import MonitorConfig
from ..estimators.judge import EstimatorJudge, Judgement
from ..violations import Violation
from . import declared
from .accumulator import Accumulator
from .checks import batch_axis_note, check_rollout, token_violations
from .sync import SyncedStep
from .weights import WeightsCheck


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What checking one sync found, to be applied once (``GRPOMonitor._apply``).

    ``found``: the violations, in the order rollout, tokens, loss weights, declared checks;
    ``judged``: the estimator judgement (None: no live group carried advantages); ``lock``: the
    run's estimator lock after the check (None: no rollout, unchanged); ``notes``: texts to say
    once per run; ``declared``: the declared checks said now to lack an input (said once per run);
    ``weights``: the ``grpo/weights/`` metrics and histograms (None: no loss-weight rows).
    """

    found: list[Violation]
    judged: Judgement | None = None
    lock: EstimatorJudge | None = None
    notes: tuple[str, ...] = ()
    declared: tuple[str, ...] = ()
    weights: WeightsCheck | None = None

    def with_found(self, found: list[Violation]) -> Verdict:
        return dataclasses.replace(self, found=found)


@dataclasses.dataclass
class StepFindings:
    """What the step's checks found so far: its violations in the order found (every eager check's and the final
    one's) and the latest estimator judgement (the report's ``estimator``)."""

    violations: list[Violation] = dataclasses.field(default_factory=list)
    estimator: Judgement | None = None


def evaluate(synced: SyncedStep, acc: Accumulator, lock: EstimatorJudge, said: Collection[str],
             config: MonitorConfig, step: int, *, final: bool = False,
             weights: Callable[[SyncedStep], WeightsCheck | None] | None = None) -> Verdict:
    """The violations of ``synced`` (``acc``: the step's inputs; ``lock``: the run's estimator lock; ``said``: what
    was said once already), as a :class:`Verdict`. ``weights(synced)``: the loss-weight check (the monitor's,
    guarded: None when it faulted or is off); ``final``: the end of the step (the declared checks run)."""
    found: list[Violation] = []
    notes: tuple[str, ...] = ()
    judged, after = None, None
    if synced.has_rollout:
        assert synced.rollout is not None, "synced.has_rollout"
        checked = check_rollout(synced.rollout, synced.records, lock, config, step)
        found, judged, after = list(checked.found), checked.judged, checked.lock
        note = batch_axis_note(judged, config)
        notes = (note,) if note is not None else ()
    if synced.tokens is not None:
        found += token_violations(synced.tokens, config, step, acc.mismatch_batches, acc.observed_lag())
    weighed = weights(synced) if weights is not None and synced.weights is not None else None
    if weighed is not None:
        found += weighed.found
    unmet = declared.pending(config, acc.calls, said, step) if final else []
    found += [v for _, v in unmet]
    return Verdict(found, judged, after, notes, tuple(key for key, _ in unmet), weighed)


def narrowed(verdict: Verdict, lock: EstimatorJudge) -> EstimatorJudge:
    """The run's estimator lock once ``verdict`` is applied."""
    return verdict.lock if verdict.lock is not None else lock


__all__ = ["StepFindings", "Verdict", "evaluate", "narrowed"]
