"""The audit's probe invariants: what ``grpo-monitor audit`` checks on a function beyond the monitor's checks.

The audit (:mod:`grpo_monitor.tools.audit`) feeds crafted batches to an advantage function; the probe
definitions live here as data and pure functions, so the audit imports them and the core never imports
the audit. :data:`PROBES` are not in ``INVARIANTS`` (no run checks them, ``policies=`` does not name them).
Each function takes ``advantages``: the function under audit, already checked to return a tensor of the
rewards' shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .record import Invariant

Advantages = Callable[[torch.Tensor], torch.Tensor]

PERMUTATION = Invariant(
    "permutation_equivariance", "advantages follow their responses under any within-group permutation",
    "rows misaligned with rewards, or statistics over the wrong axis", "audit", None, "error",
    lambda cfg: "advantages follow their responses under any within-group permutation")

#: The audit's own invariants, by name.
PROBES: dict[str, Invariant] = {PERMUTATION.name: PERMUTATION}


def equivariance_error(advantages: Advantages, rewards: torch.Tensor, seed: int = 1) -> float:
    """Max |f(r permuted within each row) - f(r) permuted| relative to max |f(r)| (independent row permutations).

    >>> rewards = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    >>> equivariance_error(lambda r: r - r.mean(1, keepdim=True), rewards)
    0.0
    """
    gen = torch.Generator().manual_seed(seed)
    perm = torch.stack([torch.randperm(rewards.shape[1], generator=gen) for _ in range(len(rewards))])
    base = advantages(rewards).to(torch.float64)
    moved = advantages(rewards.gather(1, perm)).to(torch.float64)
    return relative(moved, base.gather(1, perm))


def batch_dependence(advantages: Advantages, rewards: torch.Tensor) -> float:
    """Max difference between each group's advantages in the batch and alone, relative to max |advantage|."""
    whole = advantages(rewards).to(torch.float64)
    alone = torch.cat([advantages(rewards[i:i + 1]).to(torch.float64) for i in range(len(rewards))])
    return relative(alone, whole)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max |a - b| over max finite |b| (equal values, infinities and NaN included, agree; else a NaN is infinite)."""
    scale = b.abs().nan_to_num(0.0, posinf=0.0).max().clamp(min=1e-300)
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return float(torch.where(same, 0.0, (a - b).abs().nan_to_num(math.inf)).max() / scale)
