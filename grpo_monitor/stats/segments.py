"""Segment reductions: per-group sums, minima and maxima without a Python loop."""

from __future__ import annotations

import torch


def segment_sum(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Sum of ``values`` per group.

    >>> segment_sum(torch.tensor([1., 2., 3.]), torch.tensor([0, 1, 0]), 2)
    tensor([4., 2.])
    """
    out = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    return out.index_add_(0, gid, values)


def segment_max(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Maximum of ``values`` per group (``-inf`` for an empty group).

    >>> segment_max(torch.tensor([1., 2., 3.]), torch.tensor([0, 1, 0]), 2)
    tensor([3., 2.])
    """
    out = torch.full((num_groups,), -torch.inf, dtype=values.dtype, device=values.device)
    return out.scatter_reduce_(0, gid, values, reduce="amax", include_self=True)


def segment_min(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Minimum of ``values`` per group (``+inf`` for an empty group)."""
    return -segment_max(-values, gid, num_groups)
