"""How a group's advantage scale k_g relates to its reward std, per classic estimator (the device fit).

A convention predicts 1/k_g up to one common stabilizer e: population 1/k = std + e,
Bessel 1/k = std * sqrt(n/(n-1)) + e, none 1/k = 1, leave-one-out 1/k = (n-1)/n,
batch 1/k = a constant. ``stabilizer_residuals`` returns e_g = 1/k_g - base_g for every
convention; the data fit a convention when e_g is the same in every live group.
"""

from __future__ import annotations

import torch

#: Conventions in order of preference when several fit the same data.
CONVENTIONS: tuple[str, ...] = ("population", "bessel", "none", "leave_one_out", "batch")


def convention_base(name: str, std: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """The part of 1/k_g a convention explains (the rest is the stabilizer)."""
    if name == "population":
        return std
    if name == "bessel":
        return std * torch.sqrt(n / (n - 1).clamp(min=1))
    if name == "none":
        return torch.ones_like(std)
    if name == "leave_one_out":
        return (n - 1) / n.clamp(min=1)
    if name == "batch":
        return torch.zeros_like(std)
    raise ValueError(f"unknown convention {name!r}; expected one of {CONVENTIONS}")


def stabilizer_residuals(slope: torch.Tensor, std: torch.Tensor, n: torch.Tensor) -> dict[str, torch.Tensor]:
    """e_g = 1/k_g - base_g for each convention (NaN where the slope is NaN).

    >>> e = stabilizer_residuals(torch.tensor([2.0]), torch.tensor([0.5]), torch.tensor([4.0]))
    >>> round(float(e["population"][0]), 6), round(float(e["none"][0]), 6)
    (0.0, -0.5)
    """
    inv_k = 1.0 / slope
    return {name: inv_k - convention_base(name, std, n) for name in CONVENTIONS}


def stabilizer_range(
    slope: torch.Tensor, std: torch.Tensor, n: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Smallest and largest e_g over the ``mask``-ed groups, per convention (two ``(len(CONVENTIONS),)`` tensors).

    The same numbers as :func:`stabilizer_residuals` in a few whole-batch operations
    (``+inf``/``-inf`` where no group qualifies).

    >>> lo, hi = stabilizer_range(torch.tensor([2.0, 1.0]), torch.tensor([0.5, 1.0]), torch.tensor([4.0, 4.0]),
    ...                           torch.tensor([True, True]))
    >>> lo[0].item(), hi[0].item(), lo[2].item(), hi[2].item()
    (0.0, 0.0, -0.5, 0.0)
    """
    base = torch.stack([convention_base(name, std, n) for name in CONVENTIONS])
    e = (1.0 / slope) - base
    ok = mask & torch.isfinite(e)
    return torch.where(ok, e, torch.inf).amin(-1), torch.where(ok, e, -torch.inf).amax(-1)


def scale_factor(name: str, group_size: int) -> float:
    """Population std of the advantages of a live group under ``name`` with no stabilizer.

    1 for population z-scores and sqrt((G-1)/G) for Bessel (0.866 at G=4). The worked numerical example's
    section 5 states sqrt(G/(G-1)) = 1.155 for Bessel; its own section 2 table (+-0.866
    at G=4) shows the value is sqrt((G-1)/G): the direct computation wins.
    """
    if name == "population":
        return 1.0
    if name == "bessel":
        return ((group_size - 1) / group_size) ** 0.5
    raise ValueError(f"the scale of {name!r} depends on the rewards; only population and bessel have a fixed one")
