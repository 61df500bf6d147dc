"""The fused token pass in Triton: every slot of the field table, seven inputs included, in one launch.

Imported only where ``triton`` imports (``backends.TritonBackend``); ``token_stats`` launches
it. The work mirrors the C kernel (``native_kernel.c``):

- a fixed grid of ``programs`` programs; program p takes rows p, p + programs, ... and keeps
  one float64 partial vector laid out by the field table (the slot constants ``S_*`` below
  are ``TOKEN_INDEX`` entries: one source for both layouts), merged row by row with each
  slot's reduction; the host reduces the ``(programs, slots)`` partials with
  ``TOKEN_LAYOUT.reduce``. Extra memory is that small table, never a tensor of the batch's size;
- each row is read by short passes (``triton_rows``: mask and advantages, KL, ratio, user KL,
  the mismatch, entropy, non-finite count) in blocks of ``BLOCK`` tokens, reduced per row in
  float32 (as the C kernel and the torch form do) and finished in float64 here; re-reads of a
  row hit cache;
- the |Delta| histogram is read off the float's bits (exponent and two top mantissa bits)
  and counted with ``tl.histogram`` into an int64 vector per program: integer counts, exact;
- both exponentials use the polynomial of ``fast_exp`` (the C kernel's, operation for
  operation), and the extrema propagate NaN explicitly (torch's amax / amin), so no row needs
  the C kernel's exact recount.

Under ``TRITON_INTERPRET=1`` (set before this module is imported) the same kernel runs on CPU
tensors in numpy: that is how the tests check it on a machine without a GPU.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .arguments import TokenInputs
from .table import HIST_BINS, TOKEN_INDEX, TOKEN_LAYOUT
from .triton_rows import (
    INTERPRETED,
    N_HIST,
    device,
    max_nan,
    min_nan,
    row_entropy,
    row_is,
    row_kl,
    row_mask,
    row_mm_exp,
    row_mm_linear,
    row_nonfinite,
    row_ratio,
    row_user,
)

SLOTS = tl.constexpr(len(TOKEN_LAYOUT))
LANES = triton.next_power_of_2(len(TOKEN_LAYOUT))
HIST_LANES = triton.next_power_of_2(HIST_BINS)


def _slot(name: str) -> tl.constexpr:
    return tl.constexpr(TOKEN_INDEX[name])


S_valid, S_rows, S_nonbin = _slot("valid_tokens"), _slot("rows_with_tokens"), _slot("mask_nonbinary")
S_adv_n, S_adv_sum, S_adv_abs = _slot("adv_tokens"), _slot("adv_sum"), _slot("adv_abs_sum")
S_adv_spread, S_adv_live = _slot("adv_row_spread_max"), _slot("adv_live_tokens")
S_lp_n, S_lp_nonfin = _slot("logprob_tokens"), _slot("logprob_nonfinite")
S_kl_n, S_u_sum, S_u_sq, S_u_quad = _slot("kl_tokens"), _slot("kl_u_sum"), _slot("kl_u_sq_sum"), _slot("kl_u_quad_sum")
S_u_pos, S_u_max, S_u_min = _slot("kl_u_pos"), _slot("kl_u_max"), _slot("kl_u_min")
S_k3_sum, S_k3_sq = _slot("kl_k3_sum"), _slot("kl_k3_sq_sum")
S_user_n, S_user_sum, S_user_sq = _slot("user_kl_tokens"), _slot("user_kl_sum"), _slot("user_kl_sq_sum")
S_user_k3_n, S_user_diff = _slot("user_k3_tokens"), _slot("user_k3_absdiff_max")
S_clamp_n, S_clamp_hits = _slot("user_clamp_tokens"), _slot("user_clamp_hits")
S_ratio_n, S_ratio_m1, S_ratio_clip = _slot("ratio_tokens"), _slot("ratio_m1_sum"), _slot("ratio_clipped")
S_lr_absmax, S_ratio_k3 = _slot("on_policy_absdiff_max"), _slot("ratio_k3_sum")
S_seq_n, S_seq_w, S_seq_w2 = _slot("seq_rows"), _slot("seq_w_sum"), _slot("seq_w_sq_sum")
S_seq_min, S_seq_max = _slot("seq_log_min"), _slot("seq_log_max")
S_seq_clip, S_seq_tail = _slot("seq_clipped"), _slot("seq_tail")
S_mm_n, S_mm_d, S_mm_k3, S_mm_abs = _slot("mm_tokens"), _slot("mm_d_sum"), _slot("mm_k3_sum"), _slot("mm_abs_sum")
S_mm_absmax, S_mm_m1, S_mm_m1_sq = _slot("mm_abs_max"), _slot("mm_rho_m1_sum"), _slot("mm_rho_m1_sq_sum")
S_mm_min, S_mm_max, S_mm_out = _slot("mm_d_min"), _slot("mm_d_max"), _slot("mm_outside")
S_mm_mult, S_mm_rows = _slot("mm_mult_m1_sum"), _slot("mm_rows")
S_mm_w, S_mm_w2 = _slot("mm_seq_w_sum"), _slot("mm_seq_w_sq_sum")
S_kept, S_kept_sq = _slot("mm_kept_rho_sum"), _slot("mm_kept_rho_sq_sum")
S_seq_out, S_seq_kw, S_seq_kw2 = _slot("mm_seq_outside"), _slot("mm_seq_kept_w_sum"), _slot("mm_seq_kept_w_sq_sum")
S_hist = _slot("mm_hist_0")  # HIST_BINS consecutive slots (native_build.generated_header checks it)
S_ent_n, S_ent_sum, S_ent_sq, S_ent_low = _slot("ent_tokens"), _slot("ent_sum"), _slot("ent_sq_sum"), _slot("ent_low")
S_nll_n, S_nll_sum = _slot("nll_tokens"), _slot("nll_sum")
S_is_n, S_is_sum, S_is_min, S_is_max = _slot("is_tokens"), _slot("is_sum"), _slot("is_min"), _slot("is_max")


# ---------------------------------------------------------------------------------------------- finishing a row
@device
def _add(acc, lane, slot: tl.constexpr, value):
    return tl.where(lane == slot, acc + value.to(tl.float64), acc)


@device
def _put_max(acc, lane, slot: tl.constexpr, value):
    return tl.where(lane == slot, max_nan(acc, value.to(tl.float64)), acc)


@device
def _put_min(acc, lane, slot: tl.constexpr, value):
    return tl.where(lane == slot, min_nan(acc, value.to(tl.float64)), acc)

# ---------------------------------------------------------------------------------------------- finishing a row
@device
def _finish_seq(acc, lane, lr_sum, cnt, clip_lo, clip_hi, band_lo, band_hi):
    """GSPO's sequence ratio of a row with tokens: w = exp(m), m its mean log ratio in float32, w in float64."""
    has = cnt > 0
    mean = lr_sum / tl.maximum(cnt, 1.0)
    w = tl.where(has, tl.exp(mean.to(tl.float64)), 0.0)
    acc = _add(_add(_add(acc, lane, S_seq_n, has.to(tl.float64)), lane, S_seq_w, w), lane, S_seq_w2, w * w)
    acc = _put_min(acc, lane, S_seq_min, tl.where(has, mean, float("inf")))
    acc = _put_max(acc, lane, S_seq_max, tl.where(has, mean, float("-inf")))
    acc = _add(acc, lane, S_seq_clip, (has & ((mean < clip_lo) | (mean > clip_hi))).to(tl.float64))
    return _add(acc, lane, S_seq_tail, (has & ((mean < band_lo) | (mean > band_hi))).to(tl.float64))


@device
def _finish_mm_rows(acc, lane, d_sum, cnt, band_lo, band_hi):
    """The row weights of the mismatch: w = exp(mean d) (float32 mean, float64 w), and TRL's sequence_mask on
    W = exp(sum d): rows outside the band, W's sums over the rows kept."""
    has = cnt > 0
    w = tl.where(has, tl.exp((d_sum / tl.maximum(cnt, 1.0)).to(tl.float64)), 0.0)
    acc = _add(_add(_add(acc, lane, S_mm_rows, has.to(tl.float64)), lane, S_mm_w, w), lane, S_mm_w2, w * w)
    out = has & ((d_sum < band_lo) | (d_sum > band_hi))
    kw = tl.where(has & ~out, tl.exp(d_sum.to(tl.float64)), 0.0)
    acc = _add(acc, lane, S_seq_out, out.to(tl.float64))
    return _add(_add(acc, lane, S_seq_kw, kw), lane, S_seq_kw2, kw * kw)


@device
def _finish_adv(acc, lane, a_row, cnt, a_sum, a_abs, hi, lo, ADV: tl.constexpr):
    """Advantage mass, the row's spread and whether it carries signal; ``(B,)`` advantages broadcast."""
    has = cnt > 0
    if ADV == 1:
        v = tl.load(a_row).to(tl.float32)
        v = tl.where(has, v, 0.0)
        hi, lo, a_sum, a_abs = v, v, cnt * v, cnt * tl.abs(v)
    acc = _add(_add(_add(acc, lane, S_adv_n, cnt), lane, S_adv_sum, a_sum), lane, S_adv_abs, a_abs)
    acc = _put_max(acc, lane, S_adv_spread, tl.where(has, hi - lo, float("-inf")))
    return _add(acc, lane, S_adv_live, tl.where((hi > 0) | (lo < 0), cnt, 0.0))


@device
def _finish_kl(acc, lane, cnt, s1, s2, s4, pos, mx, mn, k1, k2):
    acc = _add(_add(_add(acc, lane, S_kl_n, cnt), lane, S_u_sum, s1), lane, S_u_sq, s2)
    acc = _add(_add(_add(acc, lane, S_u_quad, s4), lane, S_u_pos, pos), lane, S_k3_sum, k1)
    return _put_min(_put_max(_add(acc, lane, S_k3_sq, k2), lane, S_u_max, mx), lane, S_u_min, mn)


@device
def _finish_mm(acc, lane, cnt, s1, sa, amax, mn, mx, out, k3, m1, m1sq, mult, kept, kept_sq):
    acc = _add(_add(_add(acc, lane, S_mm_n, cnt), lane, S_mm_d, s1), lane, S_mm_abs, sa)
    acc = _put_max(acc, lane, S_mm_absmax, tl.where(cnt > 0, amax, float("-inf")))
    acc = _put_max(_put_min(acc, lane, S_mm_min, mn), lane, S_mm_max, mx)
    acc = _add(_add(_add(acc, lane, S_mm_out, out), lane, S_mm_k3, k3), lane, S_mm_m1, m1)
    acc = _add(_add(_add(acc, lane, S_mm_m1_sq, m1sq), lane, S_mm_mult, mult), lane, S_kept, kept)
    return _add(acc, lane, S_kept_sq, kept_sq)


@device
def _row(acc, hist, lane, m, sm, a, sa, lp, sl, ref, sr, old, so, kl, sk, smp, ss, ent, se, isw, si, T, consts,
         ADV: tl.constexpr, LP: tl.constexpr, REF: tl.constexpr, OLD: tl.constexpr, KL: tl.constexpr,
         SMP: tl.constexpr, ENT: tl.constexpr, ISW: tl.constexpr, CLAMP: tl.constexpr, MASK_BOOL: tl.constexpr,
         BLOCK: tl.constexpr, HIST_LANES: tl.constexpr):
    """Every pass over one row (pointers at its first token, strides per token), merged into ``acc`` and ``hist``."""
    clip_lo, clip_hi, clamp_lo, clamp_hi, band_lo, band_hi, ent_low = consts
    trn, st = (old, so) if OLD else (lp, sl)
    sampled, s_sampled = (smp, ss) if SMP else (old, so)
    n, nonbin, a_sum, a_abs, hi, lo, nll = row_mask(m, sm, a, sa, sampled, s_sampled, T, ADV == 2, SMP or OLD,
                                                     MASK_BOOL, BLOCK)
    cnt = n.to(tl.float32)
    acc = _add(_add(_add(acc, lane, S_valid, cnt), lane, S_rows, (n > 0).to(tl.float64)), lane, S_nonbin, nonbin)
    if ADV:
        acc = _finish_adv(acc, lane, a, cnt, a_sum, a_abs, hi, lo, ADV)
    if LP or REF or OLD or SMP:
        nf = row_nonfinite(m, sm, lp, sl, ref, sr, old, so, smp, ss, T, LP, REF, OLD, SMP, MASK_BOOL, BLOCK)
        acc = _add(_add(acc, lane, S_lp_n, cnt), lane, S_lp_nonfin, nf)
    if LP and REF:
        s1, s2, s4, pos, mx, mn, k1, k2 = row_kl(m, sm, lp, sl, ref, sr, T, MASK_BOOL, BLOCK)
        acc = _finish_kl(acc, lane, cnt, s1, s2, s4, pos, mx, mn, k1, k2)
    if LP and OLD:
        clip, m1, lr_sum, k3, lr_max = row_ratio(m, sm, lp, sl, old, so, T, clip_lo, clip_hi, MASK_BOOL, BLOCK)
        acc = _add(_add(_add(acc, lane, S_ratio_n, cnt), lane, S_ratio_m1, m1), lane, S_ratio_clip, clip)
        acc = _put_max(_add(acc, lane, S_ratio_k3, k3), lane, S_lr_absmax, tl.where(n > 0, lr_max, float("-inf")))
        acc = _finish_seq(acc, lane, lr_sum, cnt, clip_lo, clip_hi, band_lo, band_hi)
    if SMP and (OLD or LP):
        s1, sa_, amax, mn, mx, out, hist = row_mm_linear(m, sm, trn, st, smp, ss, T, band_lo, band_hi, hist,
                                                          MASK_BOOL, BLOCK, HIST_LANES)
        k3, m1, m1sq, mult, kept, kept_sq = row_mm_exp(m, sm, trn, st, smp, ss, T, band_lo, band_hi, MASK_BOOL, BLOCK)
        acc = _finish_mm(acc, lane, cnt, s1, sa_, amax, mn, mx, out, k3, m1, m1sq, mult, kept, kept_sq)
        acc = _finish_mm_rows(acc, lane, s1, cnt, band_lo, band_hi)
    if SMP or OLD:
        acc = _add(_add(acc, lane, S_nll_n, cnt), lane, S_nll_sum, -nll)
    if ENT:
        e1, e2, below = row_entropy(m, sm, ent, se, T, ent_low, MASK_BOOL, BLOCK)
        acc = _add(_add(_add(_add(acc, lane, S_ent_n, cnt), lane, S_ent_sum, e1), lane, S_ent_sq, e2), lane,
                   S_ent_low, below)
    if KL:
        u1, u2, diff, hits = row_user(m, sm, kl, sk, lp, sl, ref, sr, T, clamp_lo, clamp_hi, LP and REF, CLAMP,
                                       MASK_BOOL, BLOCK)
        acc = _add(_add(_add(acc, lane, S_user_n, cnt), lane, S_user_sum, u1), lane, S_user_sq, u2)
        if LP and REF:
            acc = _put_max(_add(acc, lane, S_user_k3_n, cnt), lane, S_user_diff, tl.where(n > 0, diff, float("-inf")))
        if CLAMP:
            acc = _add(_add(acc, lane, S_clamp_n, cnt), lane, S_clamp_hits, hits)
    if ISW:
        w_sum, w_min, w_max = row_is(m, sm, isw, si, T, MASK_BOOL, BLOCK)
        acc = _put_max(_put_min(_add(_add(acc, lane, S_is_n, cnt), lane, S_is_sum, w_sum), lane, S_is_min, w_min),
                       lane, S_is_max, w_max)
    return acc, hist


@triton.jit
def _token_pass(out, ident, m, adv, lp, ref, old, kl, smp, ent, isw, B, T, sm_b, sm_t, sa_b, sa_t, sl_b, sl_t, sr_b,
                sr_t, so_b, so_t, sk_b, sk_t, ss_b, ss_t, se_b, se_t, si_b, si_t, clip_lo, clip_hi, clamp_lo, clamp_hi,
                band_lo, band_hi, ent_low, ADV: tl.constexpr, LP: tl.constexpr, REF: tl.constexpr, OLD: tl.constexpr,
                KL: tl.constexpr, SMP: tl.constexpr, ENT: tl.constexpr, ISW: tl.constexpr, CLAMP: tl.constexpr,
                MASK_BOOL: tl.constexpr, BLOCK: tl.constexpr, LANES: tl.constexpr, HIST_LANES: tl.constexpr):
    """Program p: rows p, p + programs, ...; writes its partial vector to ``out[p]`` (slots of the field table)."""
    pid = tl.program_id(0).to(tl.int64)  # int64 rows: row offsets past 2^31 elements stay exact
    programs = tl.num_programs(0).to(tl.int64)
    lane = tl.arange(0, LANES)
    acc = tl.load(ident + lane, mask=lane < SLOTS, other=0.0)  # each slot's identity: 0, +inf or -inf
    hist = tl.full([HIST_LANES], 0, tl.int64)
    consts = (clip_lo, clip_hi, clamp_lo, clamp_hi, band_lo, band_hi, ent_low)
    for r in range(pid, B, programs):
        acc, hist = _row(acc, hist, lane, m + r * sm_b, sm_t, adv + r * sa_b, sa_t, lp + r * sl_b, sl_t,
                         ref + r * sr_b, sr_t, old + r * so_b, so_t, kl + r * sk_b, sk_t, smp + r * ss_b, ss_t,
                         ent + r * se_b, se_t, isw + r * si_b, si_t, T, consts, ADV, LP, REF, OLD, KL, SMP, ENT, ISW,
                         CLAMP, MASK_BOOL, BLOCK, HIST_LANES)
    base = out + pid * SLOTS
    in_hist = (lane >= S_hist) & (lane < S_hist + N_HIST)
    tl.store(base + lane, acc, mask=(lane < SLOTS) & ~in_hist)
    bins = tl.arange(0, HIST_LANES)
    tl.store(base + S_hist + bins, hist.to(tl.float64), mask=bins < N_HIST)


# ---------------------------------------------------------------------------------------------- the launch
_IDENTITY: dict[torch.device, torch.Tensor] = {}


def default_programs(device: torch.device, rows: int) -> int:
    """Programs in the grid: four per streaming multiprocessor on a GPU (two under the interpreter), at most one
    per row. Fixed by the device, not by the batch: the partials stay ``programs x slots``."""
    if device.type == "cuda" and not INTERPRETED:
        return max(1, min(rows, 4 * torch.cuda.get_device_properties(device).multi_processor_count))
    return max(1, min(rows, 2))


def _strides(t: torch.Tensor | None) -> tuple[int, int]:
    """(per row, per token) element strides; ``(B,)`` advantages have no token stride, absent tensors none."""
    if t is None:
        return 0, 0
    return (t.stride(0), t.stride(1)) if t.dim() == 2 else (t.stride(0), 0)


def token_stats(x: TokenInputs, programs: int | None = None, block: int | None = None) -> torch.Tensor:
    """The float64 statistics vector of ``x`` laid out by ``TOKEN_FIELDS``, on ``x``'s device (no host sync).

    ``x``: what ``backends.TritonBackend`` accepts (float32, float16 or bfloat16 values, any strides)."""
    mask = x.mask
    B, T = mask.shape
    dev = mask.device
    block = block or (4096 if INTERPRETED else 512)  # 512: 128 registers on sm_90, no spills (ptxas -v)
    if dev not in _IDENTITY:
        _IDENTITY[dev] = TOKEN_LAYOUT.empty(dev)
    grid = programs or default_programs(dev, B)
    out = torch.empty(grid, len(TOKEN_LAYOUT), dtype=torch.float64, device=dev)
    values = x.values
    strides = [s for t in values for s in _strides(t)]
    clamp = x.clamp if x.clamp is not None else (0.0, 0.0)
    present = [t is not None for t in values[1:]]
    with _quiet_numpy():
        _token_pass[(grid,)](
            out, _IDENTITY[dev], mask, *(mask if t is None else t for t in values), B, T, *mask.stride(), *strides,
            *x.clip_log, *clamp, *x.band_log, x.entropy_low, 0 if x.advantages is None else x.advantages.dim(),
            *present, x.clamp is not None, mask.dtype == torch.bool, min(block, triton.next_power_of_2(T)), LANES,
            HIST_LANES)
    return TOKEN_LAYOUT.reduce(out)


def _quiet_numpy() -> contextlib.AbstractContextManager:
    """Under the interpreter, numpy's floating-point warnings off (inf - inf is NaN by design here, as on a GPU)."""
    if not INTERPRETED:
        return contextlib.nullcontext()
    import numpy as np
    return np.errstate(all="ignore")
