"""Arithmetic-light ``exp`` for the compiled token pass (float32 only); the C kernel mirrors it.

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
