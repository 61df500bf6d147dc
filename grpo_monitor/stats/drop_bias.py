"""The selection bias of a staleness drop: reward, pass rate and length of the dropped rows against the kept ones.

``observe_generation(..., dropped=)`` marks the generated rows a trainer drops (too stale)
before training. ``drop_fields`` reduces one call to per-side sums (rows, sums, and the
moments of the per-group sums), slots of the generation ledger, so calls and ranks merge
exactly; ``drop_metrics`` gives the means and the z of each difference (dropped minus kept)
with cluster-robust standard errors (a prompt's rows share its difficulty, and drops often
take whole groups: row-level variances would flag 6.5% of random group drops). A drop that does not
depend on the rows is noise: each |z| is then about standard normal, and ``Z_FLAG`` is set so
that random drops pass (measured false-alarm rate in docs/async_moe.md); a drop whose delay
depends on the reward (slow, hard problems dropped) exceeds it.
"""

from __future__ import annotations

import math

import torch

from .segments import Segments

#: |z| above which a difference counts as selection bias: two-sided 5e-4 per quantity under the normal
#: approximation (about 1.5e-3 per step over three quantities); at least ``MIN_ROWS`` rows on each side.
Z_FLAG, MIN_ROWS = 3.5, 8
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


Side = tuple[float, float, float, float, float, float]


def cluster_z(d: Side, k: Side) -> float:
    """(mean_d - mean_k) / se with each mean's cluster-robust variance C/(C-1) sum_g (s_g - m n_g)^2 / N^2 (groups
    as clusters: rows of one prompt share its difficulty; C the side's groups), from (N, C, sum, sum_g s_g^2,
    sum_g s_g n_g, sum_g n_g^2) per side; 0 when both sides are constant and equal, +-inf when constant and
    different."""
    def mean_var(n: float, c: float, s: float, gsq: float, gsn: float, ngsq: float) -> tuple[float, float]:
        m = s / n
        return m, max(gsq - 2 * m * gsn + m * m * ngsq, 0.0) / (n * n) * c / max(c - 1, 1.0)

    (m1, v1), (m2, v2) = mean_var(*d), mean_var(*k)
    se = math.sqrt(v1 + v2)
    if se > 0:
        return (m1 - m2) / se
    return 0.0 if m1 == m2 else math.copysign(math.inf, m1 - m2)


def drop_metrics(v: dict[str, float]) -> dict[str, float]:
    """``grpo/offpolicy/dropped_*`` of merged ledger slots: present once a call declared its dropped rows."""
    nd, nk = v["drop_rows"], v["keep_rows"]
    out = {"grpo/offpolicy/dropped_frac": nd / (nd + nk)}
    if nd > 0:
        out["grpo/offpolicy/dropped_reward_mean"] = v["drop_reward_sum"] / nd
    if nk > 0:
        out["grpo/offpolicy/kept_reward_mean"] = v["keep_reward_sum"] / nk
    if min(nd, nk) < MIN_ROWS or min(v["drop_groups"], v["keep_groups"]) < 2:
        return out
    zs = {name: cluster_z(_side(v, "drop", q), _side(v, "keep", q)) for name, q in (("reward", "reward"),
                                                                                  ("pass", "pass"))}
    if min(v["drop_len_rows"], v["keep_len_rows"]) >= MIN_ROWS:
        zs["length"] = cluster_z(_side(v, "drop", "len", "len_"), _side(v, "keep", "len", "len_"))
    out.update({f"grpo/offpolicy/drop_{k}_z": z for k, z in zs.items()})
    worst = max(abs(z) for z in zs.values())
    out["grpo/offpolicy/drop_bias_z"] = worst
    out["grpo/offpolicy/drop_biased"] = float(worst > Z_FLAG)
    return out


def _side(v: dict[str, float], side: str, q: str, rows: str = "") -> Side:
    return (v[f"{side}_{rows}rows"], v[f"{side}_groups"], v[f"{side}_{q}_sum"], v[f"{side}_{q}_gsq"],
            v[f"{side}_{q}_gsn"], v[f"{side}_{rows}ngsq"])
