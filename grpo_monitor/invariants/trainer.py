"""``trainer_metric``: the trainer's own logged numbers agree with the monitor's exact ones (the decision, key
by key with each key's tolerance: :mod:`grpo_monitor.step.trainer_audit`, on the records of
:mod:`grpo_monitor.catalog.trainer_keys`)."""

from __future__ import annotations

from .record import Invariant

RECORDS: tuple[Invariant, ...] = (
    Invariant("trainer_metric", "the trainer's own logged metrics equal the monitor's exact values of the same "
              "quantities, within each key's documented tolerance",
              "the trainer's dashboard reduces the value differently (the finding names the likely cause: mean of "
              "per-rank means, float32 zero-std test, per-micro-batch averaging, accumulation scaling, a sum over "
              "data-parallel ranks, a cap the clip ratio misses, an off-by-one window); the update is right, the "
              "dashboard is not", "steps", None, "warning",
              lambda cfg: "|trainer - exact| <= atol + rtol |exact| per key (docs/trainer_metrics.md)"),
)
