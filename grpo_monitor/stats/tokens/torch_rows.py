"""The token pass in torch ops: the row function of the eager and the compiled backend.

``row_partials`` reduces every statistic per row in the compute dtype (float32 for float32
inputs, float64 if any input is float64), keyed by slot name; ``token_vector`` merges the
rows in float64 into the vector laid out by the field table (slots a variant does not
compute stay at their identity). Inputs are zeroed off the mask once (``torch.where``,
never a multiplication), which makes padding neutral for every sum and for the maxima of
absolute values; signed extrema get +-inf fills. No host sync, no data-dependent shapes.
``fast`` (the compiled backend) evaluates both exponentials with the polynomial of
``fast_exp`` for float32 compute, which keeps the whole pass in one vectorised loop.
"""

from __future__ import annotations

import math

import torch

from .arguments import TokenInputs
from .fast_exp import expm1_fast, k3_fast
from .table import FIELDS, HIST_BINS, HIST_EDGES

_IDENTITY = {"sum": 0.0, "min": math.inf, "max": -math.inf}


def token_vector(x: TokenInputs, fast: bool = False) -> torch.Tensor:
    """Every statistic of one row block as the float64 vector of the field table."""
    parts, cnt = row_partials(x, fast=fast)
    merged: dict[str, torch.Tensor] = {}
    for op in ("sum", "min", "max"):
        names = [f.name for f in FIELDS if f.reduction == op and f.name in parts]
        if names:
            stacked = torch.stack([parts[n] for n in names]).to(torch.float64)
            red = stacked.sum(1) if op == "sum" else stacked.amin(1) if op == "min" else stacked.amax(1)
            merged.update({n: red[i] for i, n in enumerate(names)})
    fill = {op: torch.full((), v, dtype=torch.float64, device=cnt.device) for op, v in _IDENTITY.items()}
    return torch.stack([merged[f.name] if f.name in merged else fill[f.reduction] for f in FIELDS])


def row_partials(x: TokenInputs, fast: bool = False) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per-row partials of every statistic the inputs allow, by slot name, and the valid count per row."""
    mask = x.mask
    cd = torch.promote_types(torch.float32, _widest(list(x.values)))
    fast = fast and cd == torch.float32
    valid = mask if mask.dtype == torch.bool else mask > 0
    cnt = _count(valid, cd)
    parts = {"valid_tokens": cnt, "rows_with_tokens": (cnt > 0).to(cd)}
    if mask.dtype != torch.bool:
        parts["mask_nonbinary"] = _count((mask != 0) & (mask != 1), cd)
    adv = x.get("advantages")
    if adv is not None:
        parts.update(_adv_rows(valid, cnt, adv.to(cd)))
    lp, ref, old, kl = (None if t is None else torch.where(valid, t.to(cd), 0.0)
                        for t in (x.get(n) for n in ("logprobs", "ref_logprobs", "old_logprobs", "kl")))
    u = ref - lp if lp is not None and ref is not None else None  # 0 off the mask
    lr = lp - old if lp is not None and old is not None else None
    k3 = None
    if u is not None:  # k3 >= 0 exactly; the clamp only removes rounding noise
        k3 = k3_fast(u) if fast else torch.clamp_min(torch.expm1(u) - u, 0.0)
        parts.update(_kl_rows(valid, cnt, u, k3))
    if lr is not None:
        parts.update(_ratio_rows(cnt, lr, x.clip_log, fast))
        parts.update(_seq_ratio_rows(cnt, lr, x.clip_log, x.band_log))
    if kl is not None:
        parts.update(_user_rows(valid, cnt, kl, k3, x.clamp))
    smp, ent = x.get("sampler_logprobs"), x.get("entropy")
    sampler = None if smp is None else torch.where(valid, smp.to(cd), 0.0)
    trainer = old if old is not None else lp
    d = trainer - sampler if trainer is not None and sampler is not None else None
    if d is not None:
        parts.update(_mismatch_rows(valid, cnt, d, x.band_log, fast))
    sampled = sampler if sampler is not None else old
    if sampled is not None:
        parts.update({"nll_tokens": cnt, "nll_sum": -sampled.sum(1)})
    if ent is not None:
        parts.update(_entropy_rows(valid, cnt, torch.where(valid, ent.to(cd), 0.0), x.entropy_low))
    isw = x.get("is_weights")
    if isw is not None:
        parts.update(_is_rows(valid, cnt, isw.to(cd)))
    present = [t for t in (u, lr, d) if t is not None] or [t for t in (lp, ref, old, sampler) if t is not None]
    if present:
        total = sum(present[1:], present[0])  # non-finite wherever any input is (or their difference overflows)
        parts["logprob_tokens"] = cnt
        parts["logprob_nonfinite"] = _count((total - total) != 0, cd)  # NaN (inf - inf too) != 0; cheaper than |x|
    return parts, cnt


def _count(flags: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Row counts of true flags (as a select, which compiles to one masked AND per vector)."""
    return torch.where(flags, 1.0, 0.0).to(dtype).sum(1)


def _widest(tensors: list) -> torch.dtype:
    floats = [t.dtype for t in tensors if t is not None and t.is_floating_point()]
    return torch.float64 if torch.float64 in floats else torch.float32


def _abs_max(cnt: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Row maxima of |x| for x zeroed off the mask (0 is neutral there); -inf for rows without tokens."""
    return torch.where(cnt > 0, x.abs().amax(1), -math.inf)


def _adv_rows(valid: torch.Tensor, cnt: torch.Tensor, adv: torch.Tensor) -> dict[str, torch.Tensor]:
    """|advantage| mass, within-row spread (constant-advantage check) and rows with signal."""
    has = cnt > 0
    if adv.dim() == 1:  # one advantage per row, broadcast over its valid tokens
        a = torch.where(has, adv, 0.0)
        hi = lo = a
        abs_sum, total = cnt * a.abs(), cnt * a
    else:
        hi = torch.where(valid, adv, -math.inf).amax(1)
        lo = torch.where(valid, adv, math.inf).amin(1)
        a0 = torch.where(valid, adv, 0.0)
        abs_sum, total = a0.abs().sum(1), a0.sum(1)
    live = (hi > 0) | (lo < 0)
    return {
        "adv_tokens": cnt, "adv_sum": total, "adv_abs_sum": abs_sum,
        "adv_row_spread_max": torch.where(has, hi - lo, -math.inf),
        "adv_live_tokens": torch.where(live, cnt, 0.0),
    }


def _kl_rows(valid: torch.Tensor, cnt: torch.Tensor, u: torch.Tensor, k3: torch.Tensor) -> dict[str, torch.Tensor]:
    """Moments of u = ref - logprobs (k1 and k2 follow from them) and of k3; u and k3 are 0 off the mask."""
    u2 = u * u
    return {
        "kl_tokens": cnt, "kl_u_sum": u.sum(1), "kl_u_sq_sum": u2.sum(1), "kl_u_quad_sum": (u2 * u2).sum(1),
        "kl_u_pos": _count(u > 0, u.dtype), "kl_u_max": torch.where(valid, u, -math.inf).amax(1),
        "kl_u_min": torch.where(valid, u, math.inf).amin(1), "kl_k3_sum": k3.sum(1), "kl_k3_sq_sum": (k3 * k3).sum(1),
    }


def _k3_and_expm1(x: torch.Tensor, fast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """exp(x) - 1 - x (>= 0, no cancellation near 0 on the fast path) and exp(x) - 1."""
    if fast:
        return k3_fast(x), expm1_fast(x)
    e = torch.expm1(x)
    return torch.clamp_min(e - x, 0.0), e


def _ratio_rows(cnt: torch.Tensor, lr: torch.Tensor, clip_log: tuple[float, float],
                fast: bool) -> dict[str, torch.Tensor]:
    """Importance ratio exp(lr), lr = logprobs - old_logprobs (0 off the mask: ratio 1, never clipped).

    Sums ratio - 1 (expm1): ratios near 1 keep their digits in float32; and k3(lr), the on_policy rule.
    """
    outside = (lr < clip_log[0]) | (lr > clip_log[1])  # ratio < 1 - low or > 1 + high; log(1-low) <= 0 <= log1p(high)
    k3, m1 = _k3_and_expm1(lr, fast)
    return {
        "ratio_tokens": cnt, "ratio_m1_sum": m1.sum(1), "ratio_clipped": _count(outside, lr.dtype),
        "on_policy_absdiff_max": _abs_max(cnt, lr), "ratio_k3_sum": k3.sum(1),
    }


def _seq_ratio_rows(cnt: torch.Tensor, lr: torch.Tensor, clip_log: tuple[float, float],
                    band_log: tuple[float, float]) -> dict[str, torch.Tensor]:
    """GSPO's sequence ratio w = exp(m), m the row's mean lr (in the compute dtype; w in float64), for rows with tokens:
    sums of w and w^2, extremes of m, and rows with w outside the clip range and outside the importance-weight band."""
    has = cnt > 0
    m = lr.sum(1) / cnt.clamp_min(1.0)
    w = torch.where(has, torch.exp(m.to(torch.float64)), 0.0)
    return {
        "seq_rows": has.to(lr.dtype), "seq_w_sum": w, "seq_w_sq_sum": w * w,
        "seq_log_min": torch.where(has, m, math.inf), "seq_log_max": torch.where(has, m, -math.inf),
        "seq_clipped": torch.where(has & ((m < clip_log[0]) | (m > clip_log[1])), 1.0, 0.0).to(lr.dtype),
        "seq_tail": torch.where(has & ((m < band_log[0]) | (m > band_log[1])), 1.0, 0.0).to(lr.dtype),
    }


def _mismatch_rows(valid: torch.Tensor, cnt: torch.Tensor, d: torch.Tensor, band_log: tuple[float, float],
                   fast: bool) -> dict[str, torch.Tensor]:
    """d = trainer - sampler log-probs (0 off the mask): k1/k3 sums, |d|, rho = exp(d), the band, per-row weights."""
    k3, m1 = _k3_and_expm1(d, fast)
    ad = d.abs()
    mult = expm1_fast(ad) if fast else torch.expm1(ad)
    row_mean = d.sum(1) / cnt.clamp_min(1.0)
    w = torch.where(cnt > 0, torch.exp(row_mean.to(torch.float64)), 0.0)
    outside = (d < band_log[0]) | (d > band_log[1])
    kept = torch.where(valid & ~outside, m1 + 1.0, 0.0)
    return {
        **_masked_rows(cnt, d.sum(1), band_log),
        "mm_kept_rho_sum": kept.sum(1), "mm_kept_rho_sq_sum": (kept * kept).sum(1),
        "mm_tokens": cnt, "mm_d_sum": d.sum(1), "mm_k3_sum": k3.sum(1), "mm_abs_sum": ad.sum(1),
        "mm_abs_max": _abs_max(cnt, d), "mm_rho_m1_sum": m1.sum(1), "mm_rho_m1_sq_sum": (m1 * m1).sum(1),
        "mm_d_min": torch.where(valid, d, math.inf).amin(1), "mm_d_max": torch.where(valid, d, -math.inf).amax(1),
        "mm_outside": _count(valid & outside, d.dtype),
        "mm_mult_m1_sum": mult.sum(1), "mm_rows": (cnt > 0).to(d.dtype), "mm_seq_w_sum": w, "mm_seq_w_sq_sum": w * w,
        **_abs_histogram(valid, ad),
    }


def _masked_rows(cnt: torch.Tensor, total: torch.Tensor, band_log: tuple[float, float]) -> dict[str, torch.Tensor]:
    """TRL's sequence_mask: rows whose weight W = exp(sum of d) leaves the band, and W's sums over the rows it keeps."""
    has = cnt > 0
    out = has & ((total < band_log[0]) | (total > band_log[1]))
    w = torch.where(has & ~out, torch.exp(total.to(torch.float64)), 0.0)
    return {"mm_seq_outside": torch.where(out, 1.0, 0.0).to(total.dtype), "mm_seq_kept_w_sum": w,
            "mm_seq_kept_w_sq_sum": w * w}


def _abs_histogram(valid: torch.Tensor, ad: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-row counts of |d| in the bins of ``HIST_EDGES`` (bin i holds edges[i-1] <= |d| < edges[i])."""
    edges = torch.tensor(HIST_EDGES, dtype=ad.dtype, device=ad.device)
    idx = torch.bucketize(ad, edges, right=True)
    ones = torch.where(valid, 1.0, 0.0).to(ad.dtype)
    hist = torch.zeros(ad.shape[0], HIST_BINS, dtype=ad.dtype, device=ad.device).scatter_add_(1, idx, ones)
    return {f"mm_hist_{i}": hist[:, i] for i in range(HIST_BINS)}


def _entropy_rows(valid: torch.Tensor, cnt: torch.Tensor, ent: torch.Tensor, low: float) -> dict[str, torch.Tensor]:
    """The trainer's per-token entropies (0 off the mask): moments and the share below ``low``."""
    return {"ent_tokens": cnt, "ent_sum": ent.sum(1), "ent_sq_sum": (ent * ent).sum(1),
            "ent_low": _count(valid & (ent < low), ent.dtype)}


def _is_rows(valid: torch.Tensor, cnt: torch.Tensor, w: torch.Tensor) -> dict[str, torch.Tensor]:
    """The trainer's importance-sampling correction weights on the valid tokens: their sum and extremes (NaN kept)."""
    return {"is_tokens": cnt, "is_sum": torch.where(valid, w, 0.0).sum(1),
            "is_min": torch.where(valid, w, math.inf).amin(1), "is_max": torch.where(valid, w, -math.inf).amax(1)}


def _user_rows(valid: torch.Tensor, cnt: torch.Tensor, kl: torch.Tensor, k3: torch.Tensor | None,
               clamp: tuple[float, float] | None) -> dict[str, torch.Tensor]:
    """The trainer's own per-token KL (0 off the mask): moments, agreement with k3, share at the clamp bounds."""
    out = {"user_kl_tokens": cnt, "user_kl_sum": kl.sum(1), "user_kl_sq_sum": (kl * kl).sum(1)}
    if k3 is not None:
        out["user_k3_tokens"] = cnt
        out["user_k3_absdiff_max"] = _abs_max(cnt, kl - k3)
    if clamp is not None:
        out["user_clamp_tokens"] = cnt
        out["user_clamp_hits"] = _count(valid & ((kl <= clamp[0]) | (kl >= clamp[1])), kl.dtype)
    return out
