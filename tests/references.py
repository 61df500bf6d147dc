"""Reference group-relative advantages for the tests: one definition per convention, independent of grpo_monitor.

Each works on rewards ``r`` of shape ``(B, G)`` (one group per row) and computes in
``r``'s floating dtype: pass float64 rewards for a float64 reference, float32 ones to get
the rounding trainers produce. The trainers' own code (TRL, verl, NeMo-RL), which a test
re-creates to check the monitor accepts it as written, stays in that test.

>>> r = torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
>>> advantages(r, "population").tolist(), advantages(r, "none").tolist()
([[1.0, -1.0, 1.0, -1.0]], [[0.5, -0.5, 0.5, -0.5]])
"""

from __future__ import annotations

import math

import torch

#: Every convention :func:`advantages` knows (the names of ``grpo_monitor.stats.conventions.CONVENTIONS``).
CONVENTIONS = ("population", "bessel", "none", "leave_one_out", "batch")


def advantages(r: torch.Tensor, convention: str = "population", eps: float = 0.0) -> torch.Tensor:
    """Group-relative advantages of ``r`` (B, G) under one convention, in ``r``'s float dtype.

    ``population`` / ``bessel``: ``(r - mean) / (std + eps)`` per row, with the population
    or Bessel std; ``none``: ``r - mean``; ``leave_one_out``: ``r`` minus the mean of the
    other responses of its group; ``batch``: ``(r - row mean) / (std of the whole batch + eps)``.
    With no stabilizer (``eps == 0``) an all-equal group gets advantage 0 explicitly (seed 000,
    section 3).
    """
    r = r if r.is_floating_point() else r.float()
    mean = r.mean(1, keepdim=True)
    if convention in ("population", "bessel"):
        std = r.std(1, keepdim=True, correction=0 if convention == "population" else 1)
        return _scaled(r - mean, std, eps)
    if convention == "none":
        return r - mean
    if convention == "leave_one_out":
        return r - (r.sum(1, keepdim=True) - r) / (r.shape[1] - 1)
    if convention == "batch":
        return (r - mean) / (r.std() + eps)
    raise ValueError(f"Expected argument `convention` to be one of {', '.join(CONVENTIONS)} but got {convention!r}")


def _scaled(centered: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    if eps:
        return centered / (std + eps)
    return torch.where(std > 0, centered / std, 0.0)


def population_of_groups(r: list[float], groups: list[list[int]], eps: float) -> list[float]:
    """Population z-scores of the rows ``groups`` lists (any layout, ragged too), in plain Python floats.

    NaN (unscorable) rows are left out of their group's statistics and get 0; a group holding
    an infinite reward gets a NaN std.
    """
    out = [0.0] * len(r)
    for rows in groups:
        vals = [r[i] for i in rows if not math.isnan(r[i])]
        if not vals:
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((x - mean) ** 2 for x in vals) / len(vals)) if all(map(math.isfinite, vals)) else math.nan
        for i in rows:
            out[i] = 0.0 if math.isnan(r[i]) else (r[i] - mean) / (std + eps) if std + eps > 0 else 0.0
    return out
