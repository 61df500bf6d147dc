"""The estimator-side invariants: what a step's advantage estimator must keep across the batch and the steps.

``one_nonzero_per_group`` is a promise a pass@k estimator makes, checked on the step's rows on the host when the
estimator promises it (:data:`REPLAY_CHECKS`, run by :func:`replay_violations`);
``convention`` and ``unknown_estimator`` are the estimator judge's verdicts
(:mod:`grpo_monitor.estimators.judge` decides, :func:`grpo_monitor.step.checks.rollout_findings` words them).
:data:`JUDGE_PROMISES` are promises an estimator may make that judge it without being an invariant of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from .record import Invariant, MonitorConfig, Violation, tol, violation

_MAX_GROUPS = 5


def _convention(cfg: MonitorConfig) -> str:
    c = cfg.estimator
    return "one convention across groups and steps" if c == "auto" else f"std_convention={c!r}"


RECORDS: tuple[Invariant, ...] = (
    Invariant("one_nonzero_per_group", "with a pass@k estimator, at most one row per group has a nonzero advantage, "
              "and it is a best-rewarded row",
              "a pass@k estimator that credits every row, or the wrong row of the group",
              "replay", "zero_group_mean",
              "error", tol("zero_group_mean", "one row with |advantage| > {:g} x typical per group, a best one"),
              promise="at most one row per group has a nonzero advantage (pass@k)"),
    Invariant("convention", "one std-scaling convention and one stabilizer hold across the batch and across steps",
              "a swapped scale_rewards branch, Bessel (torch.std's default) where population was meant, "
              "or a stabilizer that changes", "steps", "stabilizer_spread", "error", _convention),
    Invariant("unknown_estimator", "under estimator='auto', a registry estimator (or your declared one) "
              "explains the advantages",
              "an estimator the registry does not know, which keeps the universal invariants (finite, non-decreasing "
              "in reward within each group, one common advantage on constant groups): declare it, "
              "MonitorConfig(estimator=your_fn) or grpo_monitor.estimators.custom(fn, name=...), to check it "
              "exactly", "steps", "estimator_residual", "warning",
              lambda cfg: "a registry estimator, or a declared one, reproduces the advantages"),
)

#: Promises that only judge an estimator (no invariant of their own, no device count): what it promises.
JUDGE_PROMISES: dict[str, str] = {
    "batch_zero_mean": "the advantages of all scorable rows average to 0 over the batch (each row weighted by "
    "its token count when the estimator whitens tokens and lengths are given)",
}


def one_nonzero_per_group(rows: Any, config: MonitorConfig, step: int) -> list[Violation]:
    """pass@k: in each group with reward variation at most one row is nonzero, and it holds the group's best reward.

    ``rows``: the step's :class:`~grpo_monitor.estimators.rows.Rows` (float64, on the host).
    """
    r, g, a, labels = rows.rewards, rows.gid, rows.advantages, rows.labels
    if a is None or not rows.replayable or not len(a):
        return []
    valid = ~np.isnan(r)
    n_groups = int(g.max()) + 1
    best = np.full(n_groups, -np.inf)
    np.maximum.at(best, g[valid], r[valid])
    nonzero = valid & (np.abs(a) > config.tolerances.zero_group_mean * _typical_nonzero(a, valid))
    count = np.bincount(g[nonzero], minlength=n_groups)
    wrong_row = np.bincount(g[nonzero & (r < best[g])], minlength=n_groups)
    bad = np.flatnonzero((count > 1) | (wrong_row > 0))
    if not len(bad):
        return []
    first = tuple(labels[i] for i in bad[:_MAX_GROUPS])
    observed = (f"{len(bad)} groups with more than one nonzero row or a nonzero row below the group's best "
                f"(max {int(count.max())} nonzero rows in a group)")
    return [violation("one_nonzero_per_group", step, observed, config, first, count=len(bad))]


def _typical_nonzero(a: np.ndarray, valid: np.ndarray) -> float:
    vals = np.abs(a[valid])
    vals = vals[vals > 0]
    return float(np.median(vals)) if len(vals) else 1.0


#: The promises checked on the step's rows on the host, run only for an estimator that promises them.
REPLAY_CHECKS: dict[str, Callable[[Any, MonitorConfig, int], list[Violation]]] = {
    "one_nonzero_per_group": one_nonzero_per_group,
}


def replay_violations(promises: Collection[str], rows: Callable[[], Any], config: MonitorConfig,
                      step: int) -> list[Violation]:
    """The :data:`REPLAY_CHECKS` the estimator ``promises``, on the step's host rows (``rows()`` copies them once,
    only when one of them runs)."""
    checks = [check for name, check in REPLAY_CHECKS.items() if name in promises]
    if not checks:
        return []
    host = rows()
    return [v for check in checks for v in check(host, config, step)]
