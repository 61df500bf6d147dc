"""What crosses step boundaries, and the one place it changes: :meth:`RunState.update`.

The per-question history, the run totals of the retry ledger, the violation counts and
the estimator lock are the monitor's only memory between steps. ``update`` folds a
finished step in (once per step, at its end, a failing step included) and returns the
metrics that memory yields; the estimator lock is replaced by the narrowed one the evaluate
stage returns (:func:`grpo_monitor.step.evaluate.evaluate`'s ``Verdict``). Both happen in one
place, ``GRPOMonitor._apply`` (with the counts and the said-once set); nothing else mutates
this state, and :meth:`state_dict` saves all of it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from ..config import MonitorConfig
from ..estimators.judge import EstimatorJudge
from ..step.accumulator import HostGroups
from ..step.inputs import plain_state
from .questions import QuestionTracker

_TOTALS = ("generated_groups", "generated_responses", "retained_groups")


@dataclasses.dataclass(frozen=True)
class RunUpdate:
    """What the run state yields for one step: metrics, stuck questions, the per-question table (or None)."""

    metrics: dict[str, float]
    flagged: tuple[Hashable, ...] = ()
    table: list[dict[str, Any]] | None = None


def _reward_range(rollout: dict[str, float] | None, groups: HostGroups) -> tuple[float, float] | None:
    """The batch's reward range for the degenerate split of the history: the rollout's, widened by the
    generated groups' degenerate values (dynamic sampling discards groups outside the retained range)."""
    if not rollout or not rollout.get("groups", 0) > 0:
        return None
    lo, hi = rollout["reward_min"], rollout["reward_max"]
    for g in groups.generated:
        scored = g.degenerate & (g.n > 0)
        if scored.any():
            values = g.reward_sum[scored] / g.n[scored]
            lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
    return lo, hi


class RunState:
    """The monitor's memory between steps (see module docstring)."""

    def __init__(self, config: MonitorConfig):
        self.config = config
        self.questions = QuestionTracker(config)
        self.estimator = EstimatorJudge(config)
        self.totals: dict[str, float] = {}  # _TOTALS summed over the run (absent: 0)
        self.counts: Counter[str] = Counter()
        self.said_declared: set[str] = set()  # declared checks already said to lack an input (step/declared.py)

    def redeclare(self, config: MonitorConfig) -> None:
        """A newly declared estimator: a fresh lock, the rest of the memory kept."""
        self.config = config
        self.estimator = EstimatorJudge(config)

    def count(self, violations: Sequence[Any]) -> None:
        for v in violations:
            self.counts[v.invariant] += 1

    def update(self, step: int, rollout: dict[str, float] | None, ledger: dict[str, float] | None,
               groups: HostGroups | None) -> RunUpdate:
        """Fold one finished step in: ledger totals and the per-question history."""
        metrics = self._fold_totals(rollout, ledger)
        if groups is None or not (groups.kept or groups.generated or len(groups.adv)):
            return RunUpdate(metrics)
        binary = (rollout or {}).get("nonbinary", 0) == 0 and (ledger or {}).get("generated_nonbinary", 0) == 0
        span = _reward_range(rollout, groups)
        metrics.update(self.questions.update(step, groups.kept, groups.generated, binary, span))
        table = None
        if step % self.config.table_every == 0 and len(self.questions.history):
            table = self.questions.table(self.config.table_rows)
        return RunUpdate(metrics, tuple(self.questions.flagged()), table)

    def _fold_totals(self, rollout: dict[str, float] | None, ledger: dict[str, float] | None) -> dict[str, float]:
        if ledger is not None:
            self._add_total("generated_groups", ledger["generated_groups"])
            self._add_total("generated_responses", ledger["generated_responses"])
        if rollout is not None:
            self._add_total("retained_groups", rollout["groups"])
        if self.totals.get("generated_groups", 0) <= 0:
            return {}
        return {f"grpo/sampling/total_{k}": float(self.totals.get(k, 0)) for k in _TOTALS}

    def _add_total(self, key: str, value: float) -> None:
        self.totals[key] = self.totals.get(key, 0) + value

    def state_dict(self) -> dict[str, Any]:
        """Plain Python values only (numpy/torch ids converted): JSON and ``weights_only`` friendly."""
        cfg = self.config
        return plain_state({
            "config": {"group_size": cfg.group_size, "estimator": cfg.estimator,
                       "stabilizer": cfg.stabilizer},
            "conventions": self.estimator.state_dict(),
            "questions": self.questions.state_dict(),
            "counts": dict(self.counts),
            "totals": dict(self.totals),
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (validated first by :func:`validate_state`, so nothing here can fail
        half-way). The history keeps this config's limits: ``history_cap`` (the newest questions kept),
        ``stuck_after``, ``success_halflife``. A state of another estimator leaves the lock fresh."""
        saved = state.get("config") or {}
        if saved.get("estimator", saved.get("std_convention", self.config.estimator)) == self.config.estimator:
            self.estimator.load_state_dict(state["conventions"])
        questions = dict(state["questions"])
        cfg = self.config
        questions.update(cap=cfg.history_cap, stuck_after=cfg.stuck_after, halflife=cfg.success_halflife,
                         questions=list(questions["questions"])[-cfg.history_cap:])
        self.questions.load_state_dict(questions)
        self.counts = Counter(state.get("counts", {}))
        self.totals = dict(state.get("totals", {}))
