"""Per-group reward statistics and the affine fit of advantages on rewards.

Pure tensor functions: no state, no I/O, no host synchronisation. Computation is in
float64 on the rewards' device; NaN rewards mark unscorable rows and are left out.
"""

from __future__ import annotations

import dataclasses

import torch

from .segments import segment_max, segment_min, segment_sum


@dataclasses.dataclass
class GroupRewardStats:
    """Per-group reward statistics over scorable rows (all tensors of shape (groups,)).

    ``std`` is the population std (divide by n); ``degenerate`` marks groups with no
    reward variation (all scorable rewards exactly equal, or fewer than two of them).
    """

    rows: torch.Tensor
    n: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    degenerate: torch.Tensor
    centered: torch.Tensor  # (N,) reward minus its group mean, 0 on unscorable rows
    valid: torch.Tensor  # (N,) bool, reward is not NaN

    @property
    def live(self) -> torch.Tensor:
        return ~self.degenerate


def group_reward_stats(rewards: torch.Tensor, gid: torch.Tensor, num_groups: int) -> GroupRewardStats:
    """Counts, mean, population std and the degenerate mask of each group.

    >>> s = group_reward_stats(torch.tensor([1., 0., 1., 0.]), torch.zeros(4, dtype=torch.long), 1)
    >>> float(s.mean[0]), float(s.std[0]), bool(s.degenerate[0])
    (0.5, 0.5, False)
    """
    valid = ~torch.isnan(rewards)
    ones = torch.ones_like(rewards)
    n = segment_sum(valid.to(rewards.dtype), gid, num_groups)
    rows = segment_sum(ones, gid, num_groups)
    mean = segment_sum(torch.where(valid, rewards, 0.0), gid, num_groups) / n.clamp(min=1)
    centered = torch.where(valid, rewards - mean[gid], 0.0)
    std = torch.sqrt(segment_sum(centered * centered, gid, num_groups) / n.clamp(min=1))
    hi = segment_max(torch.where(valid, rewards, -torch.inf), gid, num_groups)
    lo = segment_min(torch.where(valid, rewards, torch.inf), gid, num_groups)
    degenerate = ~(hi > lo)
    return GroupRewardStats(rows, n, mean, std, degenerate, centered, valid)


@dataclasses.dataclass
class AdvantageFit:
    """Least-squares fit a_i = k_g (r_i - mean_g) + b_g inside each group.

    ``slope`` (k_g) is NaN on degenerate groups; ``intercept`` is the group mean of the
    advantages; ``resid_max`` the largest |residual|; ``adv_std`` the population std of
    the advantages; ``abs_max`` the largest |advantage| over scorable rows and
    ``unscorable_abs_max`` over NaN-reward rows (``-inf`` when there are none).
    """

    slope: torch.Tensor
    intercept: torch.Tensor
    resid_max: torch.Tensor
    adv_std: torch.Tensor
    abs_max: torch.Tensor
    unscorable_abs_max: torch.Tensor
    nonfinite: torch.Tensor  # per group: count of non-finite advantages


def advantage_fit(advantages: torch.Tensor, stats: GroupRewardStats, gid: torch.Tensor) -> AdvantageFit:
    """Fit each group's advantages on its centred rewards (see :class:`AdvantageFit`)."""
    ng, valid, c = len(stats.n), stats.valid, stats.centered
    a = torch.where(valid, advantages, 0.0)
    intercept = segment_sum(a, gid, ng) / stats.n.clamp(min=1)
    ss = segment_sum(c * c, gid, ng)
    slope = torch.where(stats.live, segment_sum(a * c, gid, ng) / ss.clamp(min=1e-300), torch.nan)
    resid = torch.where(valid, advantages - intercept[gid] - slope.nan_to_num(0.0)[gid] * c, 0.0)
    dev = torch.where(valid, advantages - intercept[gid], 0.0)
    adv_std = torch.sqrt(segment_sum(dev * dev, gid, ng) / stats.n.clamp(min=1))
    absval = advantages.abs()
    return AdvantageFit(
        slope=slope,
        intercept=intercept,
        resid_max=segment_max(resid.abs(), gid, ng),
        adv_std=adv_std,
        abs_max=segment_max(torch.where(valid, absval, -torch.inf), gid, ng),
        unscorable_abs_max=segment_max(torch.where(valid, -torch.inf, absval), gid, ng),
        nonfinite=segment_sum((~torch.isfinite(advantages)).to(advantages.dtype), gid, ng),
    )


def typical_abs_advantage(advantages: torch.Tensor, stats: GroupRewardStats, gid: torch.Tensor) -> torch.Tensor:
    """Median |advantage| over scorable rows of live groups; 1.0 when there are none.

    The scale every relative tolerance is measured against (a 0-d tensor, no host sync).
    """
    live_row = stats.valid & stats.live[gid] & torch.isfinite(advantages)
    med = torch.nanmedian(torch.where(live_row, advantages.abs(), torch.nan))
    return torch.where(torch.isnan(med) | (med <= 0), torch.ones_like(med), med)
