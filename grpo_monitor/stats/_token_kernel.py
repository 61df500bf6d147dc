"""Arithmetic-light ``exp`` pieces for the compiled token pass (float32 only).

Both exponentials of the fused pass, ``exp(u)`` for k3 and ``exp(lr)`` for the importance
ratio, cost most of its time when lowered to the library ``exp`` (a vectorised call of
~30 instructions with special-case handling per 8 tokens, plus register spills around it).
Here ``exp`` is written in tensor ops that the compiler inlines into the same loop:

    x = n ln2 + r,  n = round(x / ln2),  |r| <= ln2 / 2,  exp(r) = 1 + r + q,  q = r^2 P(r)

with ``n`` found by the float "magic number" rounding (adding 1.5 * 2^23) and ``2^n`` built
from its bits. ``P`` is the Taylor polynomial to r^5 / 5040 (relative error of q below 1e-6
on |r| <= ln2 / 2; of exp(r) below 3e-8). The sums are formed so that no digits cancel:

    k3 = exp(x) - 1 - x = s q + (s - 1)(1 + r) - n ln2      (= q exactly when n = 0)
    expm1(x) = k3 + x                                        (= q + r when n = 0)

``s = 2^n`` is clamped to [0, inf] through its exponent bits, and the argument to
[-104, 89] (with the exact correction -104 - x below: exp is 0 there), so k3 is -1 - x for
very negative x and +inf at -inf, exp(x) - 1 is -1 there, and both are +inf above ~88.7
(float32 overflow) and at +inf; NaN stays NaN. Only valid for float32 tensors.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
_MAGIC = 12582912.0  # 1.5 * 2^23: adding it rounds |y| < 2^22 to an integer held in the low mantissa bits
_MAGIC_BITS = 0x4B400000 - 127  # bits of the magic number, less the exponent bias
_LOW, _HIGH = -104.0, 89.0  # float32 exp is 0 below ~-103.3 and inf above ~88.7: the argument's useful range
_TAYLOR = (1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2)  # P(r) = 1/2 + r/6 + ... + r^5/5040, Horner from the top


def _reduce(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(n, r, q, s)`` with x = n ln2 + r, exp(r) = 1 + r + q and s = 2^n (0 or inf out of range)."""
    t = x * _LOG2E + _MAGIC  # rounded to an integer plus the magic number
    n = t - _MAGIC
    r = x - n * _LN2
    p = r * (1 / 5040) + _TAYLOR[0]
    for c in _TAYLOR[1:]:
        p = p * r + c
    q = (r * r) * p
    biased = torch.clamp(t.view(torch.int32) - _MAGIC_BITS, 0, 255)  # exponent of 2^n; 255 encodes inf
    s = torch.bitwise_left_shift(biased, 23).view(torch.float32)
    return n, r, q, s


def _k3_core(x: torch.Tensor) -> torch.Tensor:
    n, r, q, s = _reduce(x)
    return s * q + (s - 1.0) * (1.0 + r) - n * _LN2


def k3_fast(u: torch.Tensor) -> torch.Tensor:
    """exp(u) - 1 - u for float32 ``u``; >= 0 up to rounding, exactly q near 0 (no cancellation).

    Evaluated at u clamped to [LOW, HIGH] plus LOW - min(u, LOW): exact below LOW (exp is 0
    there, k3 = -1 - u, +inf at -inf), +inf above HIGH and at +inf, NaN for NaN.
    """
    return _k3_core(torch.clamp(u, _LOW, _HIGH)) + (_LOW - torch.clamp_max(u, _LOW))


def expm1_fast(x: torch.Tensor) -> torch.Tensor:
    """exp(x) - 1 for float32 ``x``, with full relative precision near 0 (-1 at -inf, +inf at +inf)."""
    xc = torch.clamp(x, _LOW, _HIGH)
    return _k3_core(xc) + xc


#: ``torch.compile`` options of the token pass: keep every intermediate in registers (the
#: default thresholds write the reduced argument r to memory, a full extra pass) and let the
#: C++ compiler fuse multiply-adds (the polynomial and the sums of squares; only more exact).
COMPILE_OPTIONS = {
    "realize_opcount_threshold": 1 << 20, "realize_reads_threshold": 1 << 20, "realize_acc_reads_threshold": 1 << 20,
    "cpp.enable_floating_point_contract_flag": "fast",
}


# ----------------------------------------------------------------------------- the fused pass
def row_partials(spec, mask, adv, lp, ref, old, kl, fast: bool = False) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per-row partials of every statistic in the compute dtype, and the valid-token count per row.

    Inputs are zeroed off the mask once (``torch.where``), which makes padding neutral for
    every sum and for the maxima of absolute values; signed extrema get +-inf fills. ``fast``
    (the compiled path) uses the polynomial exponentials above for float32 compute.
    """
    cd = torch.promote_types(torch.float32, _widest([adv, lp, ref, old, kl]))
    fast = fast and cd == torch.float32
    valid = mask if mask.dtype == torch.bool else mask > 0
    cnt = _count(valid, cd)
    parts = {"valid_tokens": cnt, "rows_with_tokens": (cnt > 0).to(cd)}
    if mask.dtype != torch.bool:
        parts["mask_nonbinary"] = _count((mask != 0) & (mask != 1), cd)
    if adv is not None:
        parts.update(_adv_rows(valid, cnt, adv.to(cd)))
    lp, ref, old, kl = (None if t is None else torch.where(valid, t.to(cd), 0.0) for t in (lp, ref, old, kl))
    u = ref - lp if lp is not None and ref is not None else None  # 0 off the mask
    lr = lp - old if lp is not None and old is not None else None
    k3 = None
    if u is not None:  # k3 >= 0 exactly; the clamp only removes rounding noise
        k3 = k3_fast(u) if fast else torch.clamp_min(torch.expm1(u) - u, 0.0)
        parts.update(_kl_rows(valid, cnt, u, k3))
    if lr is not None:
        parts.update(_ratio_rows(cnt, lr, spec.clip_log, expm1_fast if fast else torch.expm1))
    if kl is not None:
        parts.update(_user_rows(valid, cnt, kl, k3, spec.clamp))
    present = [t for t in (u, lr) if t is not None] or [t for t in (lp, ref, old) if t is not None]
    if present:
        total = sum(present[1:], present[0])  # non-finite wherever any input is (or their difference overflows)
        parts["logprob_tokens"] = cnt
        parts["logprob_nonfinite"] = _count((total - total) != 0, cd)  # NaN (inf - inf too) != 0; cheaper than |x| <= max
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


def _ratio_rows(cnt: torch.Tensor, lr: torch.Tensor, clip_log: tuple[float, float], expm1: Callable) -> dict[str, torch.Tensor]:
    """Importance ratio exp(lr), lr = logprobs - old_logprobs (0 off the mask: ratio 1, never clipped).

    Sums ratio - 1 (expm1): ratios near 1 keep their digits in float32.
    """
    outside = (lr < clip_log[0]) | (lr > clip_log[1])  # ratio < 1 - low or ratio > 1 + high; log(1-low) <= 0 <= log1p(high)
    return {
        "ratio_tokens": cnt, "ratio_m1_sum": expm1(lr).sum(1), "ratio_clipped": _count(outside, lr.dtype),
        "on_policy_absdiff_max": _abs_max(cnt, lr),
    }


def _user_rows(valid, cnt, kl: torch.Tensor, k3: torch.Tensor | None, clamp: tuple[float, float] | None) -> dict:
    """The trainer's own per-token KL (0 off the mask): moments, agreement with k3, share at the clamp bounds."""
    out = {"user_kl_tokens": cnt, "user_kl_sum": kl.sum(1), "user_kl_sq_sum": (kl * kl).sum(1)}
    if k3 is not None:
        out["user_k3_tokens"] = cnt
        out["user_k3_absdiff_max"] = _abs_max(cnt, kl - k3)
    if clamp is not None:
        out["user_clamp_tokens"] = cnt
        out["user_clamp_hits"] = _count(valid & ((kl <= clamp[0]) | (kl >= clamp[1])), kl.dtype)
    return out
