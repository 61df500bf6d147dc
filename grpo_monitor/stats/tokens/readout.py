"""``grpo/kl/*``, ``grpo/ratio/*`` and ``grpo/tokens/*`` from a merged token statistics vector.

Slots with a ``key`` in the field table are reported from the table alone (a value, or a
mean / fraction over a count slot); the few metrics built from several slots (means and
stds from sums of squares, the k2 / k3 maxima from the extremes of u, the mean ratio,
the mean response length) are derived below, and a family's keys (the mismatch, GSPO's sequence
ratio, the entropy) in the family's own module (:data:`grpo_monitor.catalog.families.FAMILIES`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ...catalog.families import IN_ORDER, read_out
from ...catalog.family_mismatch import mismatch_metrics  # noqa: F401 - its old import path
from ...catalog.family_offpolicy import seq_ratio_metrics  # noqa: F401 - its old import path
from .table import FIELDS, TOKEN_LAYOUT


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
    # the families' keys (the mismatch, masked under the trainer's mismatch_mask; the sequence ratio; the entropy)
    out.update(read_out(IN_ORDER, "tokens", v, {"mismatch_mask": mismatch_mask}))
    return out


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
