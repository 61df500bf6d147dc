"""The device functions of the Triton token pass (``triton_kernel``): the exponentials, the masked loads and the
passes over one row, each returning that row's float32 sums, int32 counts and NaN-propagating extrema.

Each pass reads its inputs in blocks of ``BLOCK`` tokens into block-wide accumulators (registers on a GPU) and
reduces them once per row, as the C kernel's passes do over its 8 lanes. Padding is never loaded (masked loads),
and values off the mask are 0, neutral for every sum and for the maxima of absolute values; signed extrema take
+-inf fills. The exponentials are ``fast_exp``'s polynomial, operation for operation the C kernel's.
"""

from __future__ import annotations

from collections.abc import Callable

import triton
import triton.language as tl

from .table import HIST_BINS, HIST_LOW_EXP

INTERPRETED = bool(triton.knobs.runtime.interpret)  # jit decorates once, at import: fixed for the process
HIST_KEY0 = tl.constexpr((127 + HIST_LOW_EXP) * 4 - 1)  # the bin of |d| is (bits >> 21) - HIST_KEY0, clamped
N_HIST = tl.constexpr(HIST_BINS)
LOW, HIGH = tl.constexpr(-104.0), tl.constexpr(89.0)  # fast_exp's argument range


def _plain(fn: Callable) -> Callable:
    return fn


#: Device functions: ``triton.jit`` (inlined into the kernel by the compiler); under the interpreter plain Python
#: calls, since the interpreter re-patches ``triton.language`` on every call of a jit function (~5 ms each, which
#: made a 9 x 300 batch take 8 s instead of 0.3 s). The kernel itself is interpreted either way.
device = _plain if INTERPRETED else triton.jit


# ---------------------------------------------------------------------------------------------- scalar helpers
@device
def max_nan(a, b):
    """max(a, b), NaN if either is NaN (torch.amax)."""
    return tl.where(b != b, b, tl.where(b > a, b, a))


@device
def min_nan(a, b):
    return tl.where(b != b, b, tl.where(b < a, b, a))


@device
def _k3_core(x):
    """exp(x) - 1 - x on [LOW, HIGH]: fast_exp's scheme, the C kernel's operations (Estrin's P)."""
    t = tl.fma(x, 1.4426950408889634, 12582912.0)
    n = t - 12582912.0
    nln2 = n * 0.6931471805599453
    r = x - nln2
    r2 = r * r
    p01 = tl.fma(r, 1.0 / 6, 0.5)
    p23 = tl.fma(r, 1.0 / 120, 1.0 / 24)
    p45 = tl.fma(r, 1.0 / 5040, 1.0 / 720)
    q = r2 * tl.fma(r2, tl.fma(r2, p45, p23), p01)
    e = t.to(tl.int32, bitcast=True) - (0x4B400000 - 127)
    e = tl.minimum(tl.maximum(e, 0), 255)
    s = (e << 23).to(tl.float32, bitcast=True)
    return tl.fma(s - 1.0, 1.0 + r, s * q) - nln2


@device
def _clamp_arg(x):
    """x clamped to [LOW, HIGH], NaN kept."""
    return tl.where(x < LOW, LOW, tl.where(x > HIGH, HIGH, x))


@device
def _k3(x):
    """exp(x) - 1 - x for any x: exact -1 - x below LOW, +inf at +-inf."""
    return _k3_core(_clamp_arg(x)) + (LOW - tl.where(x < LOW, x, LOW))


@device
def _expm1(x):
    xc = _clamp_arg(x)
    return _k3_core(xc) + xc


@device
def _valid(m_ptr, sm, offs, T, MASK_BOOL: tl.constexpr):
    """Whether each token is valid (mask > 0) and whether its mask is neither 0 nor 1."""
    inb = offs < T
    m = tl.load(m_ptr + offs * sm, mask=inb, other=0)
    if MASK_BOOL:
        return (m != 0) & inb, inb & False
    return (m > 0) & inb, (m != 0) & (m != 1) & inb


@device
def _load(ptr, stride, offs, valid):
    """Values on valid tokens as float32, 0 elsewhere (padding is never read)."""
    return tl.load(ptr + offs * stride, mask=valid, other=0.0).to(tl.float32)




# Reductions over a block, written as ``tl.reduce`` with ``tl.sum``'s / ``tl.max``'s own combine functions (what
# those jit wrappers compile to): the interpreter runs these in numpy without re-patching the language per call.
@device
def _rsum(x):
    return tl.reduce(x, 0, tl.standard._sum_combine)


@device
def _rmax(x):
    """The maximum, NaN if any element is (the built-in reduction leaves NaN to the backend)."""
    nan = tl.reduce((x != x).to(tl.int32), 0, tl.standard._sum_combine) > 0
    return tl.where(nan, float("nan"), tl.reduce(x, 0, tl.standard._elementwise_max))


@device
def _rmin(x):
    nan = tl.reduce((x != x).to(tl.int32), 0, tl.standard._sum_combine) > 0
    return tl.where(nan, float("nan"), tl.reduce(x, 0, tl.standard._elementwise_min))


# ---------------------------------------------------------------------------------------------- passes over a row
@device
def row_mask(m, sm, a, sa, s, ss, T, ADV2: tl.constexpr, SAMPLED: tl.constexpr, MASK_BOOL: tl.constexpr,
              BLOCK: tl.constexpr):
    """Valid and non-binary counts; with per-token advantages their sums and extrema; the sampled log-probs' sum."""
    cnt = tl.full([BLOCK], 0, tl.int32)
    nonbin = tl.full([BLOCK], 0, tl.int32)
    a_sum = tl.full([BLOCK], 0, tl.float32)
    a_abs = tl.full([BLOCK], 0, tl.float32)
    hi = tl.full([BLOCK], float("-inf"), tl.float32)
    lo = tl.full([BLOCK], float("inf"), tl.float32)
    nll = tl.full([BLOCK], 0, tl.float32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, odd = _valid(m, sm, offs, T, MASK_BOOL)
        cnt += valid.to(tl.int32)
        nonbin += odd.to(tl.int32)
        if ADV2:
            a0 = _load(a, sa, offs, valid)
            a_sum += a0
            a_abs += tl.abs(a0)
            hi = max_nan(hi, tl.where(valid, a0, float("-inf")))
            lo = min_nan(lo, tl.where(valid, a0, float("inf")))
        if SAMPLED:
            nll += _load(s, ss, offs, valid)
    return _rsum(cnt), _rsum(nonbin), _rsum(a_sum), _rsum(a_abs), _rmax(hi), _rmin(lo), _rsum(nll)


@device
def row_kl(m, sm, lp, sl, ref, sr, T, MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr):
    """Moments, sign count and extrema of u = ref - logprobs, and the moments of k3(u)."""
    s1 = tl.full([BLOCK], 0, tl.float32)
    s2 = tl.full([BLOCK], 0, tl.float32)
    s4 = tl.full([BLOCK], 0, tl.float32)
    k1 = tl.full([BLOCK], 0, tl.float32)
    k2 = tl.full([BLOCK], 0, tl.float32)
    pos = tl.full([BLOCK], 0, tl.int32)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    mn = tl.full([BLOCK], float("inf"), tl.float32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        u = _load(ref, sr, offs, valid) - _load(lp, sl, offs, valid)
        u2 = u * u
        s1 += u
        s2 += u2
        s4 = tl.fma(u2, u2, s4)
        pos += (u > 0).to(tl.int32)
        mx = max_nan(mx, tl.where(valid, u, float("-inf")))
        mn = min_nan(mn, tl.where(valid, u, float("inf")))
        k3 = _k3(u)
        k1 += k3
        k2 = tl.fma(k3, k3, k2)
    return (_rsum(s1), _rsum(s2), _rsum(s4), _rsum(pos), _rmax(mx), _rmin(mn), _rsum(k1),
            _rsum(k2))


@device
def row_ratio(m, sm, lp, sl, old, so, T, clip_lo, clip_hi, MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr):
    """Importance ratio exp(lr), lr = logprobs - old: clipped count, sum of ratio - 1, of lr, of k3(lr), max |lr|."""
    clip = tl.full([BLOCK], 0, tl.int32)
    m1 = tl.full([BLOCK], 0, tl.float32)
    s1 = tl.full([BLOCK], 0, tl.float32)
    k3 = tl.full([BLOCK], 0, tl.float32)
    mx = tl.full([BLOCK], 0, tl.float32)  # |lr| >= 0, and 0 off the mask
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        lr = _load(lp, sl, offs, valid) - _load(old, so, offs, valid)
        clip += ((lr < clip_lo) | (lr > clip_hi)).to(tl.int32)
        m1 += _expm1(lr)
        s1 += lr
        k3 += _k3(lr)
        mx = max_nan(mx, tl.abs(lr))
    return _rsum(clip), _rsum(m1), _rsum(s1), _rsum(k3), _rmax(mx)


@device
def row_user(m, sm, kl, sk, lp, sl, ref, sr, T, clamp_lo, clamp_hi, HAS_U: tl.constexpr, CLAMP: tl.constexpr,
              MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr):
    """The trainer's per-token KL: moments, max |kl - k3(u)|, hits of the clamp bounds."""
    s1 = tl.full([BLOCK], 0, tl.float32)
    s2 = tl.full([BLOCK], 0, tl.float32)
    diff = tl.full([BLOCK], 0, tl.float32)
    hits = tl.full([BLOCK], 0, tl.int32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        k0 = _load(kl, sk, offs, valid)
        s1 += k0
        s2 = tl.fma(k0, k0, s2)
        if HAS_U:
            u = _load(ref, sr, offs, valid) - _load(lp, sl, offs, valid)
            diff = max_nan(diff, tl.abs(k0 - _k3(u)))
        if CLAMP:
            hits += (valid & ((k0 <= clamp_lo) | (k0 >= clamp_hi))).to(tl.int32)
    return _rsum(s1), _rsum(s2), _rmax(diff), _rsum(hits)


@device
def row_mm_linear(m, sm, trn, st, smp, ss, T, band_lo, band_hi, hist, MASK_BOOL: tl.constexpr,
                   BLOCK: tl.constexpr, HIST_LANES: tl.constexpr):
    """d = trainer - sampler: sums of d and |d|, extrema, tokens outside the band; |d| counted into ``hist``."""
    s1 = tl.full([BLOCK], 0, tl.float32)
    sa = tl.full([BLOCK], 0, tl.float32)
    amax = tl.full([BLOCK], 0, tl.float32)
    mn = tl.full([BLOCK], float("inf"), tl.float32)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    out = tl.full([BLOCK], 0, tl.int32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        d = _load(trn, st, offs, valid) - _load(smp, ss, offs, valid)
        ad = tl.abs(d)
        s1 += d
        sa += ad
        amax = max_nan(amax, ad)
        mn = min_nan(mn, tl.where(valid, d, float("inf")))
        mx = max_nan(mx, tl.where(valid, d, float("-inf")))
        out += (valid & ((d < band_lo) | (d > band_hi))).to(tl.int32)
        key = (ad.to(tl.int32, bitcast=True) >> 21) - HIST_KEY0  # NaN and +inf: past the last bin
        key = tl.minimum(tl.maximum(key, 0), N_HIST - 1)
        hist += tl.histogram(key, HIST_LANES, mask=valid).to(tl.int64)
    return _rsum(s1), _rsum(sa), _rmax(amax), _rmin(mn), _rmax(mx), _rsum(out), hist


@device
def row_mm_exp(m, sm, trn, st, smp, ss, T, band_lo, band_hi, MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr):
    """The exponentials of d: sums of k3(d), rho - 1 and its square, exp|d| - 1, and rho (and its square) kept by
    the band (TRL's token_mask)."""
    k3s = tl.full([BLOCK], 0, tl.float32)
    m1s = tl.full([BLOCK], 0, tl.float32)
    m1sq = tl.full([BLOCK], 0, tl.float32)
    mult = tl.full([BLOCK], 0, tl.float32)
    kept = tl.full([BLOCK], 0, tl.float32)
    kept_sq = tl.full([BLOCK], 0, tl.float32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        d = _load(trn, st, offs, valid) - _load(smp, ss, offs, valid)
        dc = _clamp_arg(d)
        core = _k3_core(dc)
        m1 = core + dc
        k3s += core + (LOW - tl.where(d < LOW, d, LOW))
        m1s += m1
        m1sq = tl.fma(m1, m1, m1sq)
        mult += _expm1(tl.abs(d))
        outside = (d < band_lo) | (d > band_hi)  # NaN is inside: kept, as the torch form keeps it
        rho = tl.where(valid & ~outside, m1 + 1.0, 0.0)
        kept += rho
        kept_sq = tl.fma(rho, rho, kept_sq)
    return _rsum(k3s), _rsum(m1s), _rsum(m1sq), _rsum(mult), _rsum(kept), _rsum(kept_sq)


@device
def row_entropy(m, sm, ent, se, T, low, MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr):
    s1 = tl.full([BLOCK], 0, tl.float32)
    s2 = tl.full([BLOCK], 0, tl.float32)
    below = tl.full([BLOCK], 0, tl.int32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        e = _load(ent, se, offs, valid)
        s1 += e
        s2 = tl.fma(e, e, s2)
        below += (valid & (e < low)).to(tl.int32)
    return _rsum(s1), _rsum(s2), _rsum(below)


@device
def row_is(m, sm, w, sw, T, MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr):
    """The trainer's importance-sampling correction weights on the valid tokens: their sum and NaN-propagating
    extremes."""
    s1 = tl.full([BLOCK], 0, tl.float32)
    mn = tl.full([BLOCK], float("inf"), tl.float32)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        w0 = _load(w, sw, offs, valid)
        s1 += w0
        mn = min_nan(mn, tl.where(valid, w0, float("inf")))
        mx = max_nan(mx, tl.where(valid, w0, float("-inf")))
    return _rsum(s1), _rmin(mn), _rmax(mx)


@device
def row_nonfinite(m, sm, lp, sl, ref, sr, old, so, smp, ss, T, LP: tl.constexpr, REF: tl.constexpr,
                   OLD: tl.constexpr, SMP: tl.constexpr, MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr):
    """Tokens whose sum of the differences formed (u, lr, d; else of the log-probs given) is NaN or inf, in the
    torch form's order."""
    count = tl.full([BLOCK], 0, tl.int32)
    for start in range(0, T, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        valid, _ = _valid(m, sm, offs, T, MASK_BOOL)
        total = tl.full([BLOCK], 0, tl.float32)
        l0 = _load(lp, sl, offs, valid) if LP else total
        r0 = _load(ref, sr, offs, valid) if REF else total
        o0 = _load(old, so, offs, valid) if OLD else total
        s0 = _load(smp, ss, offs, valid) if SMP else total
        if (LP and REF) or (LP and OLD) or (SMP and (OLD or LP)):
            if LP and REF:
                total = r0 - l0
            if LP and OLD:
                total = total + (l0 - o0) if REF else l0 - o0
            if SMP:
                total = total + ((o0 if OLD else l0) - s0) if LP and (REF or OLD) else (o0 if OLD else l0) - s0
        else:
            total = l0 + r0 + o0 + s0
        count += ((total - total) != 0).to(tl.int32)
    return _rsum(count)
