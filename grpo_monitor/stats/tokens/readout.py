"""``grpo/kl/*``, ``grpo/ratio/*`` and ``grpo/tokens/*`` from a merged token statistics vector.

Slots with a ``key`` in the field table are reported from the table alone (a value, or a
mean / fraction over a count slot); the few metrics built from several slots (means and
stds from sums of squares, the k2 / k3 maxima from the extremes of u, the mean ratio,
the mean response length) are derived below, and a family's keys (GSPO's sequence ratio, the
entropy) in the family's own module (:data:`grpo_monitor.catalog.families.FAMILIES`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ...catalog.families import FAMILIES, read_out
from ...catalog.family_offpolicy import seq_ratio_metrics  # noqa: F401 - its old import path
from .table import FIELDS, HIST_BINS, HIST_EDGES, TOKEN_LAYOUT


def token_metrics(stats: torch.Tensor | Sequence[float], mismatch_mask: str | None = None) -> dict[str, float]:
    """The metrics of a merged statistics vector; a group's keys appear only when some valid token carried its inputs.

    ``mismatch_mask`` (``"token"`` or ``"sequence"``): the importance-sampling mask the trainer
    applies with the mismatch band, for ``grpo/mismatch/masked_frac`` and ``masked_ess``.

    Stds come from sums of squares accumulated per row in the input precision: for float32
    inputs whose values are nearly constant they carry noise of up to ~3e-4 x their rms;
    otherwise the relative error is ~1e-6 (mean/std)^2.

    >>> from grpo_monitor.stats.tokens import token_sufficient_stats
    >>> m = token_metrics(token_sufficient_stats(torch.tensor([[1, 1, 0], [0, 0, 0]])))
    >>> m["grpo/tokens/valid"], m["grpo/tokens/response_length_mean"]
    (2.0, 2.0)
    """
    values = stats.tolist() if isinstance(stats, torch.Tensor) else [float(x) for x in stats]
    if len(values) != len(FIELDS):
        raise ValueError(f"stats has {len(values)} entries but TOKEN_FIELDS has {len(FIELDS)}; "
                         f"pass a vector from token_sufficient_stats")
    v = TOKEN_LAYOUT.to_dict(values)
    out = _table_metrics(v)
    if v["rows_with_tokens"] > 0:
        out["grpo/tokens/response_length_mean"] = v["valid_tokens"] / v["rows_with_tokens"]
    if v["kl_tokens"] > 0:
        out.update(_kl_metrics(v))
    if v["user_kl_tokens"] > 0:
        mean, std = _mean_std(v["user_kl_tokens"], v["user_kl_sum"], v["user_kl_sq_sum"])
        out.update({"grpo/kl/user_mean": mean, "grpo/kl/user_std": std})
    if v["ratio_tokens"] > 0:
        out["grpo/ratio/mean"] = 1.0 + v["ratio_m1_sum"] / v["ratio_tokens"]
    if v["mm_tokens"] > 0:
        out.update(mismatch_metrics(v))
        if mismatch_mask is not None:
            out.update(masked_metrics(v, mismatch_mask))
    out.update(read_out(FAMILIES, "tokens", v))  # the families' keys (sequence ratio, entropy)
    return out


def mismatch_metrics(v: dict[str, float]) -> dict[str, float]:
    """``grpo/mismatch/*`` from the slots of d = trainer - sampler log-probs (Delta) and rho = exp(d)."""
    n = v["mm_tokens"]
    dev, _ = _mean_std(n, v["mm_rho_m1_sum"], v["mm_rho_m1_sq_sum"])
    var = max(v["mm_rho_m1_sq_sum"] / n - dev * dev, 0.0)
    rows, w, w2 = v["mm_rows"], v["mm_seq_w_sum"], v["mm_seq_w_sq_sum"]
    return {
        "grpo/mismatch/k1_mean": -v["mm_d_sum"] / n,
        "grpo/mismatch/abs_diff_p99": abs_diff_quantile(v, 0.99),
        "grpo/mismatch/ratio_mean": 1.0 + dev,
        "grpo/mismatch/ratio_min": math.exp(v["mm_d_min"]) if v["mm_d_min"] < 709 else math.inf,
        "grpo/mismatch/ratio_max": math.exp(v["mm_d_max"]) if v["mm_d_max"] < 709 else math.inf,
        "grpo/mismatch/ratio_mean_z": ratio_z(dev, var, n),
        "grpo/mismatch/mult_prob_error": 1.0 + v["mm_mult_m1_sum"] / n,
        "grpo/mismatch/seq_ratio_mean": w / rows if rows > 0 else math.nan,
        "grpo/mismatch/seq_ess": w * w / (rows * w2) if rows > 0 and w2 > 0 else math.nan,
    }


def masked_metrics(v: dict[str, float], level: str) -> dict[str, float]:
    """What TRL's token_mask (rho outside the band zeroed) or sequence_mask (rows whose weight exp(sum of Delta)
    leaves the band zeroed) masks, and the normalised ESS (sum w)^2 / (n sum w^2) of the weights it keeps."""
    if level == "token":
        n, masked, w, w2 = v["mm_tokens"], v["mm_outside"], v["mm_kept_rho_sum"], v["mm_kept_rho_sq_sum"]
    elif level == "sequence":
        n, masked, w, w2 = v["mm_rows"], v["mm_seq_outside"], v["mm_seq_kept_w_sum"], v["mm_seq_kept_w_sq_sum"]
    else:
        raise ValueError(f"mismatch_mask must be 'token', 'sequence' or None, but got {level!r}")
    return {"grpo/mismatch/masked_frac": masked / n, "grpo/mismatch/masked_ess": w * w / (n * w2) if w2 > 0 else 0.0}


def ratio_z(dev: float, var: float, n: float) -> float:
    """(mean rho - 1) in standard errors sqrt(var / n); rho - 1 are martingale differences under a sampler
    that reports its own distribution, so uncorrelated across tokens. 0 below two tokens and for 0 / 0;
    d / 0 is +-inf (identical weights away from 1)."""
    se = math.sqrt(var / n)
    if n < 2:
        return 0.0
    if se > 0:
        return dev / se
    return 0.0 if dev == 0 or math.isnan(dev) else math.copysign(math.inf, dev)


def abs_diff_quantile(v: dict[str, float], q: float) -> float:
    """Upper edge of the ``HIST_EDGES`` bin holding the ``q`` quantile of |Delta|, at most ``mm_abs_max``."""
    need, seen = q * v["mm_tokens"], 0.0
    for i in range(HIST_BINS):
        seen += v[f"mm_hist_{i}"]
        if seen >= need:
            return min(HIST_EDGES[i], v["mm_abs_max"]) if i < len(HIST_EDGES) else v["mm_abs_max"]
    return v["mm_abs_max"]


def _table_metrics(v: dict[str, float]) -> dict[str, float]:
    """Every slot with a ``key``: its value, or its value over the ``per`` count, when the gating slot is positive."""
    out = {}
    for f in FIELDS:
        gate = f.when or f.per
        if f.key is not None and (gate is None or v[gate] > 0):
            out[f.key] = v[f.name] / v[f.per] if f.per else v[f.name]
    return out


def _k3(u: float) -> float:
    """k3 = exp(u) - u - 1 in float64, inf for infinite or overflowing u."""
    if math.isnan(u):
        return math.nan
    if math.isinf(u) or u > 700.0:
        return math.inf
    return max(math.expm1(u) - u, 0.0)


def _mean_std(n: float, s: float, sq: float) -> tuple[float, float]:
    """Population mean and std from a count, a sum and a sum of squares (variance clamped at 0; NaN stays NaN)."""
    mean = s / n
    return mean, math.sqrt(max(sq / n - mean * mean, 0.0))


def _kl_metrics(v: dict[str, float]) -> dict[str, float]:
    """k1 = -u, k2 = u^2 / 2, k3 = exp(u) - u - 1 (Schulman's estimators): mean, std, max; k2, k3 never negative."""
    n, umax, umin = v["kl_tokens"], v["kl_u_max"], v["kl_u_min"]
    k1, k2 = _mean_std(n, -v["kl_u_sum"], v["kl_u_sq_sum"]), _mean_std(n, v["kl_u_sq_sum"] / 2, v["kl_u_quad_sum"] / 4)
    k3 = _mean_std(n, v["kl_k3_sum"], v["kl_k3_sq_sum"])
    out = {"grpo/kl/k1_mean": k1[0], "grpo/kl/k1_std": k1[1], "grpo/kl/k2_mean": k2[0], "grpo/kl/k2_std": k2[1],
           "grpo/kl/k3_mean": k3[0], "grpo/kl/k3_std": k3[1]}
    out.update({"grpo/kl/k1_max": -umin, "grpo/kl/k2_max": max(umax * umax, umin * umin) / 2,
                "grpo/kl/k3_max": max(_k3(umax), _k3(umin)),  # convex: largest at an extreme u
                "grpo/kl/k2_neg_frac": 0.0, "grpo/kl/k3_neg_frac": 0.0})
    return out
