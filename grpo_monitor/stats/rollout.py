"""The rollout's sufficient statistics as one reducible vector, plus per-group detail.

``rollout_stats`` turns one batch of rewards (and advantages) into a float64 vector laid
out by ``ROLLOUT_FIELDS`` (sums, minima, maxima: they merge across calls and ranks) and a
:class:`RolloutDetail` of per-group tensors kept on the device for histograms, the
per-question history and the offending-group lists of a breach. The per-group masks of the rollout
invariants are theirs (:func:`grpo_monitor.invariants.rollout.offending`); this module counts them.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import torch

from ..invariants import GROUP_INVARIANTS
from ..invariants.rollout import offending as group_offenders
from .fields import FieldLayout
from .groups import AdvantageFit, GroupRewardStats, advantage_fit, group_reward_stats
from .scale_fit import CONVENTIONS, stabilizer_range
from .segments import Segments, as_segments
from .staleness import AGE_FIELDS


class GroupTolerances(Protocol):
    """The tolerances the group checks read (those of :class:`grpo_monitor.Tolerances`; not imported: the
    config imports the statistics, not the reverse)."""

    unscorable: float
    zero_group_mean: float
    affine_residual: float
    degenerate_ratio: float


_BASE_FIELDS = (
    ("rows", "sum"), ("scorable_rows", "sum"), ("groups", "sum"), ("scored_groups", "sum"),
    ("degenerate", "sum"), ("live", "sum"), ("reward_sum", "sum"), ("question_std_sum", "sum"),
    ("reward_sq_sum", "sum"), ("adv_rows", "sum"), ("adv_sum", "sum"), ("adv_sq_sum", "sum"),
    ("adv_group_mean_abs_max", "max"),
    ("live_adv_std_sum", "sum"), ("degenerate_abs_max", "max"), ("live_scale_sum", "sum"),
    ("inv_k_sum", "sum"), ("live_std_sum", "sum"), ("typ_abs_adv", "max"), ("nonbinary", "sum"),
    # the degenerate split and truncation (split_fields)
    ("reward_min", "min"), ("reward_max", "max"), ("truncation_rows", "sum"), ("truncated_rows", "sum"),
    ("degenerate_truncated", "sum"), ("len_above_sum", "sum"), ("len_above_rows", "sum"), ("len_below_sum", "sum"),
    ("len_below_rows", "sum"),
)
_CONV_FIELDS = tuple((f"e_{c}_{m}", m) for c in CONVENTIONS for m in ("min", "max"))
_VIOL_FIELDS = tuple((f"viol_{i}", "sum") for i in GROUP_INVARIANTS)
ROLLOUT_FIELDS: tuple[tuple[str, str], ...] = _BASE_FIELDS + _CONV_FIELDS + _VIOL_FIELDS + AGE_FIELDS
ROLLOUT_INDEX = {name: i for i, (name, _) in enumerate(ROLLOUT_FIELDS)}
ROLLOUT_LAYOUT = FieldLayout(ROLLOUT_FIELDS)
#: Slots reduced together (``FieldLayout.pack_blocks``): per-group counts (then the ``viol_`` ones), the advantage sums
#: over finite groups, over live groups, and each convention's stabilizer range (minima, then maxima).
_GROUP_SUMS = ("rows", "scorable_rows", "scored_groups", "degenerate", "live", "reward_sum", "question_std_sum")
_FIT_SUMS = ("adv_rows", "adv_sum", "adv_sq_sum")
_LIVE_SUMS = ("live_adv_std_sum", "live_scale_sum", "inv_k_sum", "live_std_sum")
_CONV_RANGE = tuple(f"e_{c}_min" for c in CONVENTIONS) + tuple(f"e_{c}_max" for c in CONVENTIONS)


@dataclasses.dataclass
class RolloutDetail:
    """Per-group tensors of one rollout call (device-resident until a breach or a step end)."""

    stats: GroupRewardStats
    fit: AdvantageFit | None
    reward_sum: torch.Tensor
    offending: dict[str, torch.Tensor]  # invariant -> bool (groups,)
    truncated: torch.Tensor | None = None  # per group: rows cut at the length limit (None: not given)


def rollout_stats(
    rewards: torch.Tensor,
    gid: torch.Tensor | Segments,
    num_groups: int,
    advantages: torch.Tensor | None,
    tol: GroupTolerances,
    group_size: int | None,
    lengths: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    ages: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, RolloutDetail]:
    """Sufficient statistics of one rollout (see module docstring); no host sync.

    ``lengths`` (tokens per row) and ``truncated`` (1 where a row was cut at the length limit)
    are flat and aligned with ``rewards``; ``ages`` the slots of ``staleness.age_fields``.
    """
    seg = as_segments(gid, num_groups)
    s = group_reward_stats(rewards, seg)
    scored = s.n > 0
    fit = advantage_fit(advantages, s, seg) if advantages is not None else None
    offending = group_offenders(s, fit, tol, group_size)  # the rollout invariants' masks (grpo_monitor.invariants)
    per_group = [s.rows, s.n, scored, s.degenerate, s.live, s.reward_sum, torch.where(scored, s.std, 0.0)]
    blocks = [(_GROUP_SUMS + tuple(f"viol_{name}" for name in offending),
               torch.stack(per_group + list(offending.values())).sum(-1))]  # every per-group count, one reduction
    vals: dict[str, torch.Tensor | float] = dict(groups=float(num_groups), nonbinary=s.nonbinary,
                reward_sq_sum=torch.where(torch.isfinite(rewards), rewards * rewards, 0.0).sum())  # the batch std's
    if fit is not None:
        vals.update(_advantage_fields(s, fit, blocks))
    vals.update(split_fields(rewards, s, seg, lengths, truncated))
    vals.update(ages or {})
    cut = seg.sum(seg.rows(truncated)) if truncated is not None else None
    return ROLLOUT_LAYOUT.pack_blocks(vals, blocks, rewards.device), RolloutDetail(s, fit, s.reward_sum, offending, cut)


def split_fields(rewards: torch.Tensor, s: GroupRewardStats, seg: Segments, lengths: torch.Tensor | None,
                 truncated: torch.Tensor | None) -> dict:
    """The batch's reward range (which degenerate groups are unsolved or solved is decided after the sync,
    from it), truncated rows and degenerate groups all truncated, and the lengths of rows above and below
    their group's mean reward (live groups)."""
    valid = ~torch.isnan(rewards)
    out = dict(reward_min=torch.where(valid, rewards, torch.inf).amin() if rewards.numel() else torch.inf,
               reward_max=torch.where(valid, rewards, -torch.inf).amax() if rewards.numel() else -torch.inf)
    if truncated is not None:
        all_cut = seg.sum(seg.rows(truncated)) >= s.rows
        out.update(truncation_rows=float(len(rewards)), truncated_rows=truncated.sum(),
                   degenerate_truncated=(s.degenerate & all_cut & (s.rows > 0)).sum())
    if lengths is not None and s.centered is not None and s.valid is not None:
        live_rows = s.valid & seg.expand(s.live)
        above, below = live_rows & (s.centered > 0), live_rows & (s.centered < 0)
        ln = seg.rows(lengths)
        out.update(len_above_sum=torch.where(above, ln, 0.0).sum(), len_above_rows=above.sum(),
                   len_below_sum=torch.where(below, ln, 0.0).sum(), len_below_rows=below.sum())
    return out


def _advantage_fields(s: GroupRewardStats, fit: AdvantageFit, blocks: list) -> dict:
    """The advantage slots: the extrema by name, the sums and stabilizer ranges appended to ``blocks``."""
    fin = ~fit.nonfinite
    live = s.live & torch.isfinite(fit.slope) & fin
    blocks.append((_FIT_SUMS, torch.where(fin, torch.stack([s.n, fit.sum, fit.sq_sum]), 0.0).sum(-1)))
    blocks.append((_LIVE_SUMS, torch.where(live, torch.stack([fit.adv_std, fit.slope * s.std, 1.0 / fit.slope, s.std]),
                                           0.0).sum(-1)))
    lo, hi = stabilizer_range(fit.slope, s.std, s.n, live)
    blocks.append((_CONV_RANGE, torch.cat([lo, hi])))
    return dict(
        adv_group_mean_abs_max=_masked_max(fit.intercept.abs(), live),
        degenerate_abs_max=_masked_max(fit.abs_max, s.degenerate & (s.n > 0) & fin),
        typ_abs_adv=fit.typical,
    )


def _masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, -torch.inf).max() if values.numel() else torch.tensor(-torch.inf)
