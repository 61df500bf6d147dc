"""The selection bias of a staleness drop: reward, pass rate and length of the dropped rows against the kept ones.

``observe_generation(..., dropped=)`` marks the generated rows a trainer drops (too stale)
before training. ``drop_fields`` reduces one call to per-side sums (rows, sums, and the
moments of the per-group sums), slots of the generation ledger, so calls and ranks merge
exactly; ``drop_metrics`` (the off-policy family's readout, in
:mod:`grpo_monitor.catalog.family_offpolicy`) gives the means and the z of each difference
(dropped minus kept) with cluster-robust standard errors (a prompt's rows share its difficulty, and drops often
take whole groups: row-level variances would flag 6.5% of random group drops). A drop that does not
depend on the rows is noise: each |z| is then about standard normal, and ``Z_FLAG`` is set so
that random drops pass (measured false-alarm rate in docs/async_moe.md); a drop whose delay
depends on the reward (slow, hard problems dropped) exceeds it.
"""

from __future__ import annotations

import torch

from ..catalog.family_offpolicy import MIN_ROWS, Z_FLAG, Side, cluster_z, drop_metrics  # noqa: F401 - old paths
from .segments import Segments

_SIDES = ("drop", "keep")
#: Per side: rows and, per quantity, its sum, and over groups (the clusters) sum_g s_g^2, sum_g s_g n_g, sum_g n_g^2
#: (s_g, n_g: a group's sum and rows on that side), from which the cluster-robust variance of a mean follows.
_QUANTITIES = ("rows", "groups", "ngsq", "reward_sum", "reward_gsq", "reward_gsn", "pass_sum", "pass_gsq", "pass_gsn",
               "len_rows", "len_ngsq", "len_sum", "len_gsq", "len_gsn")
DROP_FIELDS: tuple[tuple[str, str], ...] = tuple((f"{s}_{q}", "sum") for s in _SIDES for q in _QUANTITIES)


def drop_fields(rewards: torch.Tensor, dropped: torch.Tensor, lengths: torch.Tensor | None,
                seg: Segments) -> dict[str, torch.Tensor]:
    """Per-side sums over the scorable rows (finite reward), and their per-group sums' moments (``seg``: the groups;
    rows flat). A pass is a reward > 0 (0/1 rewards: the reward itself)."""
    scored = torch.isfinite(rewards)
    r = torch.where(scored, rewards, 0.0)
    out = {}
    for side, on in zip(_SIDES, (dropped, ~dropped), strict=True):
        w = (on & scored).to(torch.float64)
        n_g = seg.sum(seg.rows(w))
        out.update({f"{side}_rows": w.sum(), f"{side}_groups": (n_g > 0).sum().to(torch.float64),
                    f"{side}_ngsq": (n_g * n_g).sum()})
        named = {"reward": r, "pass": (r > 0).to(torch.float64)}
        if lengths is not None:
            named["len"] = lengths.to(torch.float64)
            out.update({f"{side}_len_rows": w.sum(), f"{side}_len_ngsq": (n_g * n_g).sum()})
        for q, x in named.items():
            s_g = seg.sum(seg.rows(w * x))
            out.update({f"{side}_{q}_sum": s_g.sum(), f"{side}_{q}_gsq": (s_g * s_g).sum(),
                        f"{side}_{q}_gsn": (s_g * n_g).sum()})
    return out
