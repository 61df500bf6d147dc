"""A user's own advantage estimator (no registry entry), its three classic bugs, and its reference.

``reference(rewards (B, G)) -> advantages (B, G)`` is what the user declares to the monitor
(``MonitorConfig(std_convention=reference)``); ``rows(scores, uid, variant)`` is the same estimator
as the trainer runs it on flat rows with uid group labels, healthy or with one bug.
"""

from __future__ import annotations

import numpy as np
import torch

VARIANTS = ("healthy", "misaligned", "wrong_slice", "swapped_branch")


def _std(x: torch.Tensor, dim=None) -> torch.Tensor:
    """Bessel std over the non-NaN entries (TRL's nanstd)."""
    keep = dim is not None
    c = x - (x.nanmean(dim, keepdim=True) if keep else x.nanmean())
    n = (~torch.isnan(x)).sum(dim, keepdim=True) if keep else (~torch.isnan(x)).sum()
    return torch.sqrt(torch.nansum(c * c, dim, keepdim=True) / (n - 1).clamp(min=1)) if keep else \
        torch.sqrt(torch.nansum(c * c) / (n - 1).clamp(min=1))


def reference(rewards: torch.Tensor) -> torch.Tensor:
    """tanh of the group z-score (Bessel + 1e-3; NaN rows out of the statistics, advantage 0): bounded,
    monotone, no registry entry."""
    c = rewards - rewards.nanmean(1, keepdim=True)
    return torch.nan_to_num(torch.tanh(c / (_std(rewards, 1) + 1e-3)), nan=0.0)


def rows(scores: torch.Tensor, uid: np.ndarray, variant: str = "healthy", group_size: int = 4) -> torch.Tensor:
    """The estimator on flat rows grouped by ``uid`` (any row order); ``variant`` injects one bug."""
    if variant == "wrong_slice":  # a contiguous view(-1, G) over rows that are not grouped contiguously
        return reference(scores.reshape(-1, group_size)).reshape(-1)
    out = torch.zeros_like(scores)
    for u in dict.fromkeys(uid.tolist()):
        idx = torch.from_numpy(np.flatnonzero(uid == u))
        r = scores[idx]
        if variant == "swapped_branch":  # the batch's std where the group's was meant
            out[idx] = torch.nan_to_num(torch.tanh((r - r.nanmean()) / (_std(scores) + 1e-3)), nan=0.0)
        else:
            out[idx] = reference(r[None])[0]
    if variant == "misaligned":  # advantages of a shuffled copy handed back in the original order
        out = out[torch.roll(torch.arange(len(out)), 1)]
    return out
