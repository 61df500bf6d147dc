"""Per-group reward statistics and the affine fit of advantages on rewards.

Pure tensor functions: no state, no I/O, no host synchronisation. Computation is in
float64 on the rewards' device; NaN rewards mark unscorable rows and are left out. Each
function makes a handful of passes over the rows and reduces them per group through
:class:`~grpo_monitor.stats.segments.Segments` (dense ``(B, G)`` reductions when the
groups are contiguous blocks, ``index_add_``/``scatter_reduce_`` otherwise).
"""

from __future__ import annotations

import dataclasses

import torch

from .segments import Segments, as_segments


@dataclasses.dataclass
class GroupRewardStats:
    """Per-group reward statistics over scorable rows (per-group tensors of shape (groups,)).

    ``std`` is the population std (divide by n); ``degenerate`` marks groups with no
    reward variation (all scorable rewards exactly equal, or fewer than two of them);
    ``nonfinite`` groups holding an infinite reward. ``centered`` and ``valid`` are per
    row, in the segments' row shape.
    """

    rows: torch.Tensor
    n: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    degenerate: torch.Tensor
    centered: torch.Tensor | None  # per row: reward minus its group mean, 0 on unscorable rows
    valid: torch.Tensor | None  # per row: bool, reward is not NaN (None once a step keeps per-group data only)
    reward_sum: torch.Tensor  # per group: sum of scorable rewards
    nonfinite: torch.Tensor  # per group: bool, an infinite reward
    nonbinary: torch.Tensor  # 0-d: scorable rewards other than 0 and 1

    @property
    def live(self) -> torch.Tensor:
        """Groups with reward variation (not degenerate)."""
        return ~self.degenerate


def group_reward_stats(
    rewards: torch.Tensor, gid: torch.Tensor | Segments, num_groups: int | None = None
) -> GroupRewardStats:
    """Counts, mean, population std and the degenerate mask of each group.

    ``rewards`` is flat ``(N,)`` float64; ``gid`` a group index (with ``num_groups``) or
    :class:`Segments`.

    >>> s = group_reward_stats(torch.tensor([1., 0., 1., 0.]), torch.zeros(4, dtype=torch.long), 1)
    >>> float(s.mean[0]), float(s.std[0]), bool(s.degenerate[0])
    (0.5, 0.5, False)
    """
    seg = as_segments(gid, num_groups)
    r = seg.rows(rewards)
    valid = ~torch.isnan(r)
    filled = torch.where(valid, r, 0.0)
    n = seg.sum(valid.to(r.dtype))
    count = n.clamp(min=1)
    reward_sum = seg.sum(filled)
    mean = reward_sum / count
    centered = torch.where(valid, r - seg.expand(mean), 0.0)
    std = torch.sqrt(seg.sum(centered * centered) / count)
    hi = seg.max(torch.where(valid, r, -torch.inf))
    lo = seg.min(torch.where(valid, r, torch.inf))
    return GroupRewardStats(
        rows=seg.count(r.dtype), n=n, mean=mean, std=std, degenerate=~(hi > lo), centered=centered, valid=valid,
        reward_sum=reward_sum, nonfinite=~torch.isfinite(reward_sum),
        nonbinary=(filled * (filled - 1) != 0).sum(),
    )


def degenerate_blocks(rewards: torch.Tensor) -> torch.Tensor:
    """:func:`group_reward_stats`'s ``degenerate`` (as float64 0/1) of contiguous groups, the rows of ``(B, G)``
    ``rewards``, in four operations (no counts, means or stds).

    >>> degenerate_blocks(torch.tensor([[1., 1.], [0., 1.], [float("nan"), 0.]], dtype=torch.float64)).tolist()
    [1.0, 0.0, 1.0]
    """
    valid = ~torch.isnan(rewards)
    hi = torch.where(valid, rewards, -torch.inf).amax(1)
    lo = torch.where(valid, rewards, torch.inf).amin(1)
    return (~(hi > lo)).double()


@dataclasses.dataclass
class AdvantageFit:
    """Least-squares fit a_i = k_g (r_i - mean_g) + b_g inside each group (per-group tensors).

    ``slope`` (k_g) is NaN on degenerate groups; ``intercept`` (b_g) is the group mean of
    the advantages; ``resid_rms`` the root-mean-square residual of the fit (of a_i - b_g on
    degenerate groups); ``adv_std`` the population std of the advantages; ``abs_max`` the
    largest |advantage| over scorable rows and ``unscorable_abs_max`` over NaN-reward rows
    (0 when there are none); ``nonfinite`` marks groups with a NaN or infinite advantage;
    ``sum`` and ``sq_sum`` are the sums of a and a^2 over scorable rows; ``typical`` (0-d)
    is :func:`typical_abs_advantage`. Everything is over scorable rows only.
    """

    slope: torch.Tensor
    intercept: torch.Tensor
    resid_rms: torch.Tensor
    adv_std: torch.Tensor
    abs_max: torch.Tensor
    unscorable_abs_max: torch.Tensor
    nonfinite: torch.Tensor
    sum: torch.Tensor
    sq_sum: torch.Tensor
    typical: torch.Tensor


def advantage_fit(
    advantages: torch.Tensor, stats: GroupRewardStats, gid: torch.Tensor | Segments, num_groups: int | None = None
) -> AdvantageFit:
    """Fit each group's advantages on its centred rewards (see :class:`AdvantageFit`).

    Residuals come from the per-group sums S_aa, S_ac, S_cc (no extra pass over the rows):
    RSS = S_aa - n b^2 - S_ac^2 / S_cc, computed in float64.
    """
    seg = as_segments(gid, len(stats.n) if num_groups is None else num_groups)
    a = seg.rows(advantages)
    valid, c, live = stats.valid, stats.centered, stats.live
    if valid is None or c is None:
        raise ValueError("stats has no per-row tensors (centered, valid); pass the GroupRewardStats that "
                         "group_reward_stats returned for these rows")
    av = torch.where(valid, a, 0.0)
    absa = a.abs()
    n = stats.n.clamp(min=1)
    s_a, s_ac, s_aa = seg.sum(av), seg.sum(av * c), seg.sum(av * av)
    s_cc = stats.std * stats.std * stats.n
    intercept = s_a / n
    slope = torch.where(live, s_ac / s_cc.clamp(min=1e-300), torch.nan)
    dev_ss = (s_aa - n * intercept * intercept).clamp(min=0)
    resid_ss = torch.where(live, dev_ss - slope.nan_to_num(0.0) * s_ac, dev_ss).clamp(min=0)
    unscorable = seg.max(torch.where(valid, 0.0, absa))
    nonfinite = ~(torch.isfinite(s_aa) & torch.isfinite(unscorable))
    return AdvantageFit(
        slope=slope, intercept=intercept, resid_rms=torch.sqrt(resid_ss / n), adv_std=torch.sqrt(dev_ss / n),
        abs_max=seg.max(torch.where(valid, absa, 0.0)), unscorable_abs_max=unscorable, nonfinite=nonfinite,
        sum=s_a, sq_sum=s_aa, typical=_typical(absa, valid & seg.expand(live & ~nonfinite)),
    )


def typical_abs_advantage(
    advantages: torch.Tensor, stats: GroupRewardStats, gid: torch.Tensor | Segments, num_groups: int | None = None
) -> torch.Tensor:
    """Median |advantage| over scorable rows of live groups; 1.0 when there are none.

    The scale every relative tolerance is measured against (a 0-d tensor, no host sync).
    """
    return advantage_fit(advantages, stats, gid, num_groups).typical


def _typical(absa: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    med = torch.nanmedian(torch.where(rows, absa, torch.nan))
    return torch.where(torch.isnan(med) | (med <= 0), torch.ones_like(med), med)
