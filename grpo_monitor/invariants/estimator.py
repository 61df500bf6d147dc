"""The estimator-side invariants: what a step's advantage estimator must keep across the batch and the steps.

``one_nonzero_per_group`` is a promise a pass@k estimator makes (checked by replaying the rows on the host);
``convention`` and ``unknown_estimator`` are the estimator judge's verdicts
(:mod:`grpo_monitor.estimators.judge` decides, :func:`grpo_monitor.step.checks.rollout_findings` words them).
:data:`JUDGE_PROMISES` are promises an estimator may make that judge it without being an invariant of their own.
"""

from __future__ import annotations

from .record import Invariant, MonitorConfig, tol


def _convention(cfg: MonitorConfig) -> str:
    c = cfg.std_convention
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
              "or a stabilizer that changes", "steps", "convention", "error", _convention),
    Invariant("unknown_estimator", "under std_convention='auto', a registry estimator (or your declared one) "
              "explains the advantages",
              "an estimator the registry does not know, which keeps the universal invariants (finite, non-decreasing "
              "in reward within each group, one common advantage on constant groups): declare it, "
              "MonitorConfig(std_convention=your_fn) or grpo_monitor.estimators.custom(fn, name=...), to check it "
              "exactly", "steps", "estimator_residual", "warning",
              lambda cfg: "a registry estimator, or a declared one, reproduces the advantages"),
)

#: Promises that only judge an estimator (no invariant of their own, no device count): what it promises.
JUDGE_PROMISES: dict[str, str] = {
    "batch_zero_mean": "the advantages of all scorable rows average to 0 over the batch (each row weighted by "
    "its token count when the estimator whitens tokens and lengths are given)",
}
