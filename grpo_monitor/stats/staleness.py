"""Staleness of a rollout: each row's age, trained version minus the version of the weights that generated it.

``age_fields`` reduces the per-row ages of one ``observe_rollout`` call to sums, a count, an
extremum and a fixed histogram (ages 0, 1, 2 and 3 or more), so calls and ranks merge exactly
(they are slots of the rollout vector, ``AGE_FIELDS``); the off-policy family's
``age_metrics`` (:mod:`grpo_monitor.catalog.family_offpolicy`) turns the merged values into
``grpo/offpolicy/*``. No host sync.
"""

from __future__ import annotations

import torch

from ..catalog.family_offpolicy import AGE_BINS, age_metrics  # noqa: F401 - age_metrics: its old import path

AGE_FIELDS: tuple[tuple[str, str], ...] = (
    ("age_rows", "sum"), ("age_sum", "sum"), ("age_max", "max"), ("age_min", "min"),
    *((f"age_{a}", "sum") for a in range(AGE_BINS)),
)


def age_fields(versions: torch.Tensor, trained: int) -> dict[str, torch.Tensor]:
    """The slots of ``AGE_FIELDS`` for per-row weight versions (integers) trained at version ``trained``.

    >>> {k: v.item() for k, v in age_fields(torch.tensor([5, 4, 4, 1]), 5).items()}["age_sum"]
    6.0
    """
    age = (trained - versions.to(torch.float64)).reshape(-1)
    out = {"age_rows": torch.full((), float(age.numel()), dtype=torch.float64, device=age.device),
           "age_sum": age.sum(), "age_max": age.max(), "age_min": age.min()}
    binned = age.clamp(0, AGE_BINS - 1)
    out.update({f"age_{a}": (binned == a).sum().to(torch.float64) for a in range(AGE_BINS)})
    return out
