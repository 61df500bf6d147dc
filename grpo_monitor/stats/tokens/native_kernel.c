/* The fused token pass for float32 CPU tensors, in AVX2 + FMA (built and loaded by native_build.py).
 *
 * It computes what torch_rows.row_partials computes on its compiled path: the same
 * masking, the same polynomial exponentials, float32 accumulation within a row and rows
 * merged in double. The work is organised for 16 vector registers:
 *
 * - each row is cut into segments that stay in cache, and each segment is read by a few
 *   short passes (mask and advantages; KL; ratio; user KL; the mismatch's linear part and
 *   histogram; its exponentials; entropy) whose accumulators all fit in registers (one loop
 *   with all ~30 of them spills on every token);
 * - while a pass computes a segment, it requests the next segment of the inputs it reads, so
 *   the memory reads overlap the arithmetic instead of adding to it;
 * - the |Delta| histogram (HIST_EDGES: four bins per octave) is read off the float's bits:
 *   exponent and two top mantissa bits are the bin, so one shift, one clamp and one
 *   increment per token; the linear pass stores the segment's bins and the exponential pass
 *   counts them beside its polynomials, into four copies of the row's counts that take
 *   alternate tokens, so repeated bins do not serialise on one memory cell;
 * - a segment without a valid token (right padding) is read by the mask pass alone, and one
 *   whose mask is 1 on every token (dense rows) by pass variants without mask reads, ANDs or blends;
 * - token counts are integer lanes (a compare result subtracted as -1), which run on the
 *   integer units beside the floating-point work;
 * - both exponentials skip the range reduction when a whole vector of arguments is below
 *   0.34 in magnitude (log-probability differences nearly always are), bit for bit the same;
 * - the extrema take no NaN bookkeeping: a non-finite value on a valid token makes one of
 *   that row's sums (or its max |log ratio|) non-finite, and such a row is recomputed by
 *   scalar code with NaN-propagating extrema (torch's amax / amin semantics) and the exact
 *   count of non-finite tokens; on the other rows that count is 0 by construction.
 *
 * Compiled with -O2 -mavx2 -mfma, never -ffast-math: NaN must compare as NaN.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The slots come from a header generated from TOKEN_FIELDS and compiled in front of this
 * file (native_build.generated_header): an enum S_<name> per slot, NFIELDS, field_op[] (each
 * slot's reduction) and the exported order string grpo_token_fields, checked at load. This
 * file writes slots by name in finish_row, its row function, and never lists them. */

enum { MASK_F32 = 0, MASK_U8 = 1, MASK_I32 = 2, MASK_I64 = 3 };

#define SEG 128 /* tokens per segment: its inputs and the next segment's, requested ahead, stay in L1 between passes
                   * (2 x 4 KiB for eight inputs); with the requests ahead, 128 ran 2.33 ns a token on dense rows, 64 2.63,
                   * 192 2.64, 256 2.88, 512 3.21, 1024 3.48 (roofline_tokens.py's driver, min of 8 interleaved rounds) */

/* The token inputs come from the generated TOKEN_INPUTS(X) (the token-input table, in its order):
 * each is a named pointer (in->lp, S->smp) and, through the union, an element of input[]. */
#define INPUT_MEMBER(name) const float *name;
#define INPUT_POINTERS union { struct { TOKEN_INPUTS(INPUT_MEMBER) }; const float *input[NINPUTS]; }

typedef struct {
    const void *mask;
    INPUT_POINTERS;
    int64_t T, mask_kind, adv_ndim, has_clamp;
    float clip_lo, clip_hi, clamp_lo, clamp_hi, band_lo, band_hi, ent_low;
} Inputs;

/* The bin of |d| is (bits(|d|) >> 21) - HIST_KEY0, clamped to [0, HIST_BINS - 1]: the key
 * (biased exponent, two top mantissa bits) of edge 2^HIST_LOW_EXP is (127 + HIST_LOW_EXP) * 4,
 * and a value at that edge belongs to bin 1. NaN and +inf land in the last bin, as torch.bucketize
 * puts them. HIST_BINS is the trash bin of the counts of padding lanes. */
#define HIST_KEY0 ((127 + HIST_LOW_EXP) * 4 - 1)
_Static_assert(HIST_BINS == (HIST_HIGH_EXP - HIST_LOW_EXP) * 4 + 2, "four bins per octave, one below, one above");
#define HIST_COPIES 4

/* One row's accumulators: float sums and extrema, int32 counts (per lane). */
typedef struct {
    __m256i cnt, nonbin, u_pos, clip, hits, nonfin;
    __m256 adv_sum, adv_abs, adv_hi, adv_lo;
    __m256 u_sum, u_sq, u_quad, u_max, u_min, k3_sum, k3_sq;
    __m256 m1_sum, lr_sum, lr_max, lr_k3, user_sum, user_sq, diff_max, nll_sum;
    __m256i mm_out, ent_low;
    __m256 mm_d_sum, mm_abs_sum, mm_abs_max, mm_d_min, mm_d_max, mm_k3, mm_m1, mm_m1_sq, mm_mult;
    __m256 ent_sum, ent_sq, kept, kept_sq, is_sum, is_min, is_max;
    int32_t hist[HIST_COPIES][HIST_BINS + 1];
    int32_t bins[SEG]; /* the segment's bins of |d|, counted by pass_mm_exp */
} Acc;

/* 8 tokens of one segment: the mask as float (0 in padding lanes) and the present inputs. */
typedef struct { const float *m; INPUT_POINTERS; } Seg;

/* The trainer's side of the mismatch (old log-probs, else the current ones) and the sampled
 * log-probs of sampled_nll_mean (the sampler's, else old). */
static inline const float *trainer_of(const Seg *S) { return S->old ? S->old : S->lp; }
static inline const float *sampled_of(const Seg *S) { return S->smp ? S->smp : S->old; }

#define ZERO _mm256_setzero_ps()
#define ONE _mm256_set1_ps(1.0f)

static inline __m256 vabs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
static inline __m256i tally(__m256i acc, __m256 flags) { return _mm256_sub_epi32(acc, _mm256_castps_si256(flags)); }
static inline __m256 masked(__m256 valid, const float *p, int64_t j) { return _mm256_and_ps(valid, _mm256_loadu_ps(p + j)); }
static inline __m256 valid_at(const Seg *S, int64_t j) { return _mm256_cmp_ps(_mm256_loadu_ps(S->m + j), ZERO, _CMP_GT_OQ); }

/* A segment whose mask is exactly 1 on every token (dense rows) is read by the passes' dense variants: no mask
 * loads, compares, ANDs or blends, the same results bit for bit (an AND with an all-true mask and a blend that keeps
 * every lane are the identity). Each pass takes `dense` as a constant: `passes` is inlined once per value. */
#define PASS static inline __attribute__((always_inline))
#define ALL_TRUE _mm256_castsi256_ps(_mm256_set1_epi32(-1))
PASS __m256 valid_in(const Seg *S, int64_t j, int dense) { return dense ? ALL_TRUE : valid_at(S, j); }
PASS __m256 load_in(__m256 valid, const float *p, int64_t j, int dense) {
    return dense ? _mm256_loadu_ps(p + j) : masked(valid, p, j);
}
PASS __m256 or_fill(__m256 fill, __m256 x, __m256 valid, int dense) {
    return dense ? x : _mm256_blendv_ps(fill, x, valid);
}
PASS __m256 on_valid(__m256 valid, __m256 flags, int dense) { return dense ? flags : _mm256_and_ps(valid, flags); }

/* The same tokens of the next segment, requested while this one is computed (every vector: a line is asked for twice,
 * cheaper than testing which): the first pass that reads an input asks for its next segment, so the requests are
 * spread over the segment's arithmetic and the memory reads overlap it (a burst of them at the segment's start stalled
 * as long as the reads themselves; without them the reads and the arithmetic added up). A prefetch never faults:
 * past the last row it is dropped. */
PASS void ahead(const float *p, int64_t j) { _mm_prefetch((const char *)(p + j + SEG), _MM_HINT_T0); }

static int all_ones(const float *m, int64_t n) {
    for (int64_t j = 0; j < n; j += 8)
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(m + j), ONE, _CMP_EQ_OQ)) != 0xFF) return 0;
    return 1;
}

/* exp(x) - 1 - x on [LOW, HIGH], the scheme of fast_exp.py: x = n ln2 + r, exp(r) = 1 + r + q. */
#define LOW -104.0f
#define HIGH 89.0f
static inline __m256 k3_core(__m256 x) {
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.4426950408889634f), magic);
    __m256 n = _mm256_sub_ps(t, magic);
    __m256 nln2 = _mm256_mul_ps(n, _mm256_set1_ps(0.6931471805599453f));
    __m256 r = _mm256_sub_ps(x, nln2);
    __m256 r2 = _mm256_mul_ps(r, r); /* P(r) = 1/2 + r/6 + ... + r^5/5040 by Estrin: shorter chains than Horner */
    __m256 p01 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 6), _mm256_set1_ps(0.5f));
    __m256 p23 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 120), _mm256_set1_ps(1.0f / 24));
    __m256 p45 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 5040), _mm256_set1_ps(1.0f / 720));
    __m256 q = _mm256_mul_ps(r2, _mm256_fmadd_ps(r2, _mm256_fmadd_ps(r2, p45, p23), p01));
    __m256i e = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127));
    e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_setzero_si256()), _mm256_set1_epi32(255));
    __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
    __m256 k = _mm256_fmadd_ps(_mm256_sub_ps(s, ONE), _mm256_add_ps(ONE, r), _mm256_mul_ps(s, q));
    return _mm256_sub_ps(k, nln2);
}

/* k3_fast for |x| < SMALL, where the reduction gives n = 0, s = 1, r = x and so k3 = q:
 * bit-for-bit the same result without the reduction (log-probability differences are
 * nearly always this small, so the passes test a whole vector and take this branch). */
#define SMALL 0.34f
static inline __m256 k3_small(__m256 x) {
    __m256 r2 = _mm256_mul_ps(x, x);
    __m256 p01 = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6), _mm256_set1_ps(0.5f));
    __m256 p23 = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 120), _mm256_set1_ps(1.0f / 24));
    __m256 p45 = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 5040), _mm256_set1_ps(1.0f / 720));
    return _mm256_mul_ps(r2, _mm256_fmadd_ps(r2, _mm256_fmadd_ps(r2, p45, p23), p01));
}

static inline int all_small(__m256 absx) {
    return _mm256_movemask_ps(_mm256_cmp_ps(absx, _mm256_set1_ps(SMALL), _CMP_LT_OQ)) == 0xFF;
}

/* x clamped to [LOW, HIGH], NaN kept (max/min return their second operand when one is NaN). */
static inline __m256 clamp_arg(__m256 x) {
    return _mm256_min_ps(_mm256_set1_ps(HIGH), _mm256_max_ps(_mm256_set1_ps(LOW), x));
}

/* exp(x) - 1 - x for any x (fast_exp.k3_fast): exact -1 - x below LOW, +inf at +-inf. */
static inline __m256 k3_fast(__m256 x) {
    __m256 below = _mm256_sub_ps(_mm256_set1_ps(LOW), _mm256_min_ps(x, _mm256_set1_ps(LOW)));
    return _mm256_add_ps(k3_core(clamp_arg(x)), below);
}

/* exp(x) - 1 for any x (fast_exp.expm1_fast): -1 at -inf, +inf at +inf. */
static inline __m256 expm1_fast(__m256 x) {
    __m256 xc = clamp_arg(x);
    return _mm256_add_ps(k3_core(xc), xc);
}

/* k3_any(x) and expm1_any(x) from one polynomial: the same operations, bit for bit. */
PASS void k3_and_expm1(__m256 x, __m256 *k3, __m256 *m1) {
    if (all_small(vabs(x))) {
        *k3 = k3_small(x);
        *m1 = _mm256_add_ps(*k3, x);
    } else {
        __m256 xc = clamp_arg(x), core = k3_core(xc);
        *k3 = _mm256_add_ps(core, _mm256_sub_ps(_mm256_set1_ps(LOW), _mm256_min_ps(x, _mm256_set1_ps(LOW))));
        *m1 = _mm256_add_ps(core, xc);
    }
}

static inline __m256 k3_any(__m256 x) { return all_small(vabs(x)) ? k3_small(x) : k3_fast(x); }
static inline __m256 expm1_any(__m256 x) {
    return all_small(vabs(x)) ? _mm256_add_ps(k3_small(x), x) : expm1_fast(x);
}

/* The same function on one float, operation for operation (the exact-row path). */
static float k3_scalar(float x) {
    float below = LOW - (x < LOW ? x : LOW);
    x = isnan(x) ? x : x < LOW ? LOW : x > HIGH ? HIGH : x;
    const float magic = 12582912.0f;
    float t = fmaf(x, 1.4426950408889634f, magic), n = t - magic, nln2 = n * 0.6931471805599453f;
    float r = x - nln2;
    float p = fmaf(r, 1.0f / 5040, 1.0f / 720);
    p = fmaf(p, r, 1.0f / 120);
    p = fmaf(p, r, 1.0f / 24);
    p = fmaf(p, r, 1.0f / 6);
    p = fmaf(p, r, 0.5f);
    float q = (r * r) * p;
    int32_t bits;
    memcpy(&bits, &t, 4);
    int32_t e = bits - (0x4B400000 - 127);
    e = e < 0 ? 0 : e > 255 ? 255 : e;
    uint32_t sbits = (uint32_t)e << 23;
    float s;
    memcpy(&s, &sbits, 4);
    return (fmaf(s - 1.0f, 1.0f + r, s * q) - nln2) + below;
}

/* ---------------------------------------------------------------- the passes over a segment */
/* Returns whether the segment holds a valid token: the other passes add nothing on padding (every
 * input is zeroed there, a neutral element of every sum and of the maxima of absolute values; signed
 * extrema take +-inf fills, the histogram's padding lanes its trash bin), so they skip such segments. */
PASS int pass_mask_adv(const Seg *S, int64_t n, int adv2, Acc *A, int dense) {
    __m256i cnt = A->cnt, nonbin = A->nonbin;
    __m256 any = ZERO;
    __m256 sum = A->adv_sum, abs_sum = A->adv_abs, hi = A->adv_hi, lo = A->adv_lo, nll_sum = A->nll_sum;
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    const float *sampled = sampled_of(S);
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = ALL_TRUE;
        ahead(S->m, j);
        if (sampled) ahead(sampled, j);
        if (adv2) ahead(S->adv, j);
        if (!dense) { /* dense: every token valid, none non-binary; counted after the loop */
            __m256 m = _mm256_loadu_ps(S->m + j);
            valid = _mm256_cmp_ps(m, ZERO, _CMP_GT_OQ);
            cnt = tally(cnt, valid);
            any = _mm256_or_ps(any, valid);
            nonbin = tally(nonbin, _mm256_cmp_ps(m, _mm256_and_ps(valid, ONE), _CMP_NEQ_UQ)); /* m != (m > 0) */
        }
        if (sampled) nll_sum = _mm256_add_ps(nll_sum, load_in(valid, sampled, j, dense)); /* sampled_nll_mean */
        if (adv2) {
            __m256 a = _mm256_loadu_ps(S->adv + j), a0 = on_valid(valid, a, dense);
            sum = _mm256_add_ps(sum, a0);
            abs_sum = _mm256_add_ps(abs_sum, vabs(a0));
            hi = _mm256_max_ps(hi, or_fill(ninf, a, valid, dense));
            lo = _mm256_min_ps(lo, or_fill(pinf, a, valid, dense));
        }
    }
    if (dense) {
        cnt = _mm256_add_epi32(cnt, _mm256_set1_epi32((int32_t)(n / 8)));
        any = ALL_TRUE;
    }
    A->cnt = cnt; A->nonbin = nonbin; A->adv_sum = sum; A->adv_abs = abs_sum; A->adv_hi = hi; A->adv_lo = lo;
    A->nll_sum = nll_sum;
    return _mm256_movemask_ps(any) != 0;
}

PASS void pass_kl(const Seg *S, int64_t n, Acc *A, int dense) {
    __m256i pos = A->u_pos;
    __m256 s1 = A->u_sum, s2 = A->u_sq, s4 = A->u_quad, mx = A->u_max, mn = A->u_min, k1 = A->k3_sum, k2 = A->k3_sq;
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = valid_in(S, j, dense);
        ahead(S->ref, j);
        ahead(S->lp, j);
        __m256 u = _mm256_sub_ps(load_in(valid, S->ref, j, dense), load_in(valid, S->lp, j, dense));
        __m256 u2 = _mm256_mul_ps(u, u);
        s1 = _mm256_add_ps(s1, u);
        s2 = _mm256_add_ps(s2, u2);
        s4 = _mm256_fmadd_ps(u2, u2, s4);
        pos = tally(pos, _mm256_cmp_ps(u, ZERO, _CMP_GT_OQ));
        mx = _mm256_max_ps(mx, or_fill(ninf, u, valid, dense));
        mn = _mm256_min_ps(mn, or_fill(pinf, u, valid, dense));
        __m256 k3 = k3_any(u);
        k1 = _mm256_add_ps(k1, k3);
        k2 = _mm256_fmadd_ps(k3, k3, k2);
    }
    A->u_pos = pos; A->u_sum = s1; A->u_sq = s2; A->u_quad = s4; A->u_max = mx; A->u_min = mn;
    A->k3_sum = k1; A->k3_sq = k2;
}

PASS void pass_ratio(const Seg *S, int64_t n, float lo, float hi, Acc *A, int dense) {
    __m256i clip = A->clip;
    __m256 m1 = A->m1_sum, s1 = A->lr_sum, mx = A->lr_max, k3 = A->lr_k3;
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = valid_in(S, j, dense), k3_lr, m1_lr;
        if (!S->ref) ahead(S->lp, j); /* else pass_kl requested it */
        ahead(S->old, j);
        __m256 lr = _mm256_sub_ps(load_in(valid, S->lp, j, dense), load_in(valid, S->old, j, dense));
        clip = tally(clip, _mm256_or_ps(_mm256_cmp_ps(lr, vlo, _CMP_LT_OQ), _mm256_cmp_ps(lr, vhi, _CMP_GT_OQ)));
        k3_and_expm1(lr, &k3_lr, &m1_lr);
        m1 = _mm256_add_ps(m1, m1_lr);
        s1 = _mm256_add_ps(s1, lr); /* the row's mean: GSPO's sequence ratio */
        k3 = _mm256_add_ps(k3, k3_lr);
        mx = _mm256_max_ps(mx, vabs(lr));
    }
    A->clip = clip; A->m1_sum = m1; A->lr_sum = s1; A->lr_max = mx; A->lr_k3 = k3;
}

PASS void pass_user(const Seg *S, int64_t n, const Inputs *in, Acc *A, int dense) {
    __m256i hits = A->hits;
    __m256 s1 = A->user_sum, s2 = A->user_sq, dmax = A->diff_max;
    const __m256 clo = _mm256_set1_ps(in->clamp_lo), chi = _mm256_set1_ps(in->clamp_hi);
    int has_u = S->lp && S->ref;
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = valid_in(S, j, dense), k0 = load_in(valid, S->kl, j, dense);
        ahead(S->kl, j);
        s1 = _mm256_add_ps(s1, k0);
        s2 = _mm256_fmadd_ps(k0, k0, s2);
        if (has_u) {
            __m256 u = _mm256_sub_ps(load_in(valid, S->ref, j, dense), load_in(valid, S->lp, j, dense));
            dmax = _mm256_max_ps(dmax, vabs(_mm256_sub_ps(k0, k3_any(u))));
        }
        if (in->has_clamp) {
            __m256 hit = _mm256_or_ps(_mm256_cmp_ps(k0, clo, _CMP_LE_OQ), _mm256_cmp_ps(k0, chi, _CMP_GE_OQ));
            hits = tally(hits, on_valid(valid, hit, dense));
        }
    }
    A->hits = hits; A->user_sum = s1; A->user_sq = s2; A->diff_max = dmax;
}

/* d = trainer - sampler: its sums, extrema, the importance-weight band and the |d| histogram. */
PASS void pass_mm_linear(const Seg *S, int64_t n, const Inputs *in, Acc *A, int dense) {
    __m256i out = A->mm_out;
    __m256 s1 = A->mm_d_sum, sa = A->mm_abs_sum, amax = A->mm_abs_max, mn = A->mm_d_min, mx = A->mm_d_max;
    const __m256 lo = _mm256_set1_ps(in->band_lo), hi = _mm256_set1_ps(in->band_hi);
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    const __m256i key0 = _mm256_set1_epi32(HIST_KEY0), last = _mm256_set1_epi32(HIST_BINS - 1);
    const __m256i trash = _mm256_set1_epi32(HIST_BINS);
    const float *trn = trainer_of(S);
    int32_t *bins = A->bins;
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = valid_in(S, j, dense);
        if (S->old ? !S->lp : !S->ref) ahead(trn, j); /* else pass_ratio or pass_kl requested it; smp: pass_mask_adv */
        __m256 d = _mm256_sub_ps(load_in(valid, trn, j, dense), load_in(valid, S->smp, j, dense)), ad = vabs(d);
        s1 = _mm256_add_ps(s1, d);
        sa = _mm256_add_ps(sa, ad);
        amax = _mm256_max_ps(amax, ad);
        mn = _mm256_min_ps(mn, or_fill(pinf, d, valid, dense));
        mx = _mm256_max_ps(mx, or_fill(ninf, d, valid, dense));
        __m256 outside = _mm256_or_ps(_mm256_cmp_ps(d, lo, _CMP_LT_OQ), _mm256_cmp_ps(d, hi, _CMP_GT_OQ));
        out = tally(out, on_valid(valid, outside, dense));
        __m256i bin = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(ad), 21), key0);
        bin = _mm256_min_epi32(_mm256_max_epi32(bin, _mm256_setzero_si256()), last);
        if (!dense) bin = _mm256_blendv_epi8(trash, bin, _mm256_castps_si256(valid));
        _mm256_storeu_si256((__m256i *)(bins + j), bin);
    }
    A->mm_out = out; A->mm_d_sum = s1; A->mm_abs_sum = sa; A->mm_abs_max = amax; A->mm_d_min = mn; A->mm_d_max = mx;
}

/* The exponentials of d: k3(d), rho - 1 = exp(d) - 1 (one polynomial: k3 + d) and exp|d| - 1. */
PASS void pass_mm_exp(const Seg *S, int64_t n, const Inputs *in, Acc *A, int dense) {
    __m256 k3s = A->mm_k3, m1s = A->mm_m1, m1sq = A->mm_m1_sq, mult = A->mm_mult, kept = A->kept, kept_sq = A->kept_sq;
    const __m256 lo = _mm256_set1_ps(in->band_lo), hi = _mm256_set1_ps(in->band_hi);
    const float *trn = trainer_of(S);
    /* The histogram's increments (the bins pass_mm_linear stored), unrolled by hand over the four copies: a load and
     * an increment per token on the integer and load-store units, which this pass's polynomials leave idle (in the
     * linear pass's own loop after it they took 0.3 ns a token; GCC's loop over k recomputed hist[k]'s address per
     * token: 9 instructions a token; benchmarks/roofline_tokens.py). */
    int32_t *h0 = A->hist[0], *h1 = A->hist[1], *h2 = A->hist[2], *h3 = A->hist[3];
    const int32_t *bins = A->bins;
    _Static_assert(HIST_COPIES == 4, "one pointer per copy");
    for (int64_t j = 0; j < n; j += 8) {
        h0[bins[j]]++; h1[bins[j + 1]]++; h2[bins[j + 2]]++; h3[bins[j + 3]]++;
        h0[bins[j + 4]]++; h1[bins[j + 5]]++; h2[bins[j + 6]]++; h3[bins[j + 7]]++;
        __m256 valid = valid_in(S, j, dense);
        __m256 d = _mm256_sub_ps(load_in(valid, trn, j, dense), load_in(valid, S->smp, j, dense)), ad = vabs(d);
        __m256 k3, m1, mult_d; /* expm1_any(|d|) takes the small branch exactly when d's k3 and expm1 do */
        if (all_small(ad)) {
            k3 = k3_small(d);
            m1 = _mm256_add_ps(k3, d);
            mult_d = _mm256_add_ps(k3_small(ad), ad);
        } else {
            __m256 dc = clamp_arg(d), core = k3_core(dc);
            k3 = _mm256_add_ps(core, _mm256_sub_ps(_mm256_set1_ps(LOW), _mm256_min_ps(d, _mm256_set1_ps(LOW))));
            m1 = _mm256_add_ps(core, dc);
            mult_d = expm1_fast(ad);
        }
        k3s = _mm256_add_ps(k3s, k3);
        m1s = _mm256_add_ps(m1s, m1);
        m1sq = _mm256_fmadd_ps(m1, m1, m1sq);
        mult = _mm256_add_ps(mult, mult_d);
        __m256 outside = _mm256_or_ps(_mm256_cmp_ps(d, lo, _CMP_LT_OQ), _mm256_cmp_ps(d, hi, _CMP_GT_OQ));
        __m256 rho = _mm256_andnot_ps(outside, on_valid(valid, _mm256_add_ps(m1, ONE), dense)); /* token_mask keeps */
        kept = _mm256_add_ps(kept, rho);
        kept_sq = _mm256_fmadd_ps(rho, rho, kept_sq);
    }
    A->mm_k3 = k3s; A->mm_m1 = m1s; A->mm_m1_sq = m1sq; A->mm_mult = mult; A->kept = kept; A->kept_sq = kept_sq;
}

PASS void pass_entropy(const Seg *S, int64_t n, float low, Acc *A, int dense) {
    __m256i below = A->ent_low;
    __m256 s1 = A->ent_sum, s2 = A->ent_sq;
    const __m256 vlow = _mm256_set1_ps(low);
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = valid_in(S, j, dense), e = load_in(valid, S->ent, j, dense);
        ahead(S->ent, j);
        s1 = _mm256_add_ps(s1, e);
        s2 = _mm256_fmadd_ps(e, e, s2);
        below = tally(below, on_valid(valid, _mm256_cmp_ps(e, vlow, _CMP_LT_OQ), dense));
    }
    A->ent_low = below; A->ent_sum = s1; A->ent_sq = s2;
}

/* The trainer's importance-sampling correction weights: their sum and extremes on valid tokens (a non-finite
 * weight makes the sum non-finite, and finish_row then takes the extremes from exact_row, NaN-exact). */
PASS void pass_is(const Seg *S, int64_t n, Acc *A, int dense) {
    __m256 s1 = A->is_sum, mn = A->is_min, mx = A->is_max;
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = valid_in(S, j, dense), w = _mm256_loadu_ps(S->isw + j);
        ahead(S->isw, j);
        s1 = _mm256_add_ps(s1, on_valid(valid, w, dense));
        mn = _mm256_min_ps(mn, or_fill(pinf, w, valid, dense));
        mx = _mm256_max_ps(mx, or_fill(ninf, w, valid, dense));
    }
    A->is_sum = s1; A->is_min = mn; A->is_max = mx;
}

/* Non-finite tokens when no difference of log-probabilities is formed (one input alone, or
 * ref, old and sampler without logprobs and old): NaN or inf in their sum. With a difference, a non-finite
 * token makes a row sum non-finite and the row is recounted exactly (finish_row). */
PASS void pass_nonfinite(const Seg *S, int64_t n, Acc *A, int dense) {
    __m256i nf = A->nonfin;
    for (int64_t j = 0; j < n; j += 8) {
        __m256 valid = valid_in(S, j, dense), total = ZERO;
        if (S->lp) total = _mm256_add_ps(total, load_in(valid, S->lp, j, dense));
        if (S->ref) total = _mm256_add_ps(total, load_in(valid, S->ref, j, dense));
        if (S->old) total = _mm256_add_ps(total, load_in(valid, S->old, j, dense));
        if (S->smp) total = _mm256_add_ps(total, load_in(valid, S->smp, j, dense));
        nf = tally(nf, _mm256_cmp_ps(_mm256_sub_ps(total, total), ZERO, _CMP_NEQ_UQ));
    }
    A->nonfin = nf;
}

PASS void passes(const Inputs *in, const Seg *S, int64_t n, Acc *A, int dense) {
    if (!pass_mask_adv(S, n, in->adv_ndim == 2, A, dense)) return;
    int kl = S->lp && S->ref, ratio = S->lp && S->old, mm = S->smp && trainer_of(S);
    if (kl) pass_kl(S, n, A, dense);
    if (ratio) pass_ratio(S, n, in->clip_lo, in->clip_hi, A, dense);
    if (mm) {
        pass_mm_linear(S, n, in, A, dense);
        pass_mm_exp(S, n, in, A, dense);
    }
    if (!kl && !ratio && !mm && (S->lp || S->ref || S->old || S->smp)) pass_nonfinite(S, n, A, dense);
    if (S->kl) pass_user(S, n, in, A, dense);
    if (S->ent) pass_entropy(S, n, in->ent_low, A, dense);
    if (S->isw) pass_is(S, n, A, dense);
}

static void segment(const Inputs *in, const Seg *S, int64_t n, Acc *A) {
    if (all_ones(S->m, n)) passes(in, S, n, A, 1);
    else passes(in, S, n, A, 0);
}

/* ---------------------------------------------------------------- rows */
static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline double hcount(__m256i v) {
    int32_t x[8];
    double s = 0;
    _mm256_storeu_si256((__m256i *)x, v);
    for (int i = 0; i < 8; i++) s += x[i];
    return s;
}

static inline float hmax(__m256 v) {
    float x[8], m = -INFINITY;
    _mm256_storeu_ps(x, v);
    for (int i = 0; i < 8; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static inline float hmin(__m256 v) {
    float x[8], m = INFINITY;
    _mm256_storeu_ps(x, v);
    for (int i = 0; i < 8; i++) m = x[i] < m ? x[i] : m;
    return m;
}

/* Running extrema with NaN propagation (torch's amax / amin). */
static inline void put_max(double *o, double v) { if (!isnan(*o) && (isnan(v) || v > *o)) *o = v; }
static inline void put_min(double *o, double v) { if (!isnan(*o) && (isnan(v) || v < *o)) *o = v; }
static inline float fmax_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : (b > a ? b : a); }
static inline float fmin_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : (b < a ? b : a); }

static inline float mask_at(const Inputs *in, int64_t i) {
    if (in->mask_kind == MASK_F32) return ((const float *)in->mask)[i];
    if (in->mask_kind == MASK_U8) return (float)((const uint8_t *)in->mask)[i];
    if (in->mask_kind == MASK_I32) return (float)((const int32_t *)in->mask)[i];
    return (float)((const int64_t *)in->mask)[i];
}

/* Extrema and non-finite count of one row by scalar code, NaN-exact. */
typedef struct {
    float adv_hi, adv_lo, u_max, u_min, lr_max, diff_max, d_max, d_min, d_abs_max, nonfin, is_max, is_min;
} Exact;

/* The sum whose finiteness marks a non-finite token, in the torch form's order: u, lr, d where
 * formed, else the log-probabilities given (absent ones are 0 here). */
static inline float token_total(int has_u, int has_lr, int has_d, float u, float lr, float d, float l, float r,
                                float o, float s) {
    if (!has_u && !has_lr && !has_d) return l + r + o + s;
    float total = has_u ? u : has_lr ? lr : d;
    if (has_u && has_lr) total += lr;
    if (has_d && (has_u || has_lr)) total += d;
    return total;
}

static Exact exact_row(const Inputs *in, int64_t row) {
    Exact x = {-INFINITY, INFINITY, -INFINITY, INFINITY, 0.0f, 0.0f, -INFINITY, INFINITY, 0.0f, 0.0f, -INFINITY,
               INFINITY};
    const float *trn = in->old ? in->old : in->lp;
    int has_u = in->lp && in->ref, has_lr = in->lp && in->old, has_d = in->smp && trn;
    for (int64_t i = row * in->T; i < (row + 1) * in->T; i++) {
        if (!(mask_at(in, i) > 0)) continue;
        float l = in->lp ? in->lp[i] : 0.0f, r = in->ref ? in->ref[i] : 0.0f, o = in->old ? in->old[i] : 0.0f;
        float s = in->smp ? in->smp[i] : 0.0f, u = r - l, lr = l - o, d = has_d ? trn[i] - s : 0.0f;
        if (in->adv_ndim == 2) { x.adv_hi = fmax_nan(x.adv_hi, in->adv[i]); x.adv_lo = fmin_nan(x.adv_lo, in->adv[i]); }
        if (has_u) { x.u_max = fmax_nan(x.u_max, u); x.u_min = fmin_nan(x.u_min, u); }
        if (has_lr) x.lr_max = fmax_nan(x.lr_max, fabsf(lr));
        if (in->isw) { x.is_max = fmax_nan(x.is_max, in->isw[i]); x.is_min = fmin_nan(x.is_min, in->isw[i]); }
        if (has_u && in->kl) x.diff_max = fmax_nan(x.diff_max, fabsf(in->kl[i] - k3_scalar(u)));
        if (has_d) {
            x.d_max = fmax_nan(x.d_max, d); x.d_min = fmin_nan(x.d_min, d); x.d_abs_max = fmax_nan(x.d_abs_max, fabsf(d));
        }
        float total = token_total(has_u, has_lr, has_d, u, lr, d, l, r, o, s);
        x.nonfin += (total - total) != 0.0f;
    }
    return x;
}

/* Indices of the row sums in finish_row's sums[]. */
enum { ADV, ADV_ABS, U, U_SQ, U_QUAD, K3, K3_SQ, M1, USER, USER_SQ, LR_K3, NLL, MM_D, MM_K3, MM_ABS, MM_M1, MM_M1_SQ,
       MM_MULT, LR, KEPT, KEPT_SQ, IS, NSUMS };

/* The mismatch slots of one row: sums of d, k3(d), |d|, rho - 1, exp|d| - 1, the band, the row's weight
 * w = exp(mean d) (in double from the float mean, as the torch form) and the histogram. */
static void finish_mismatch(const Inputs *in, const Acc *a, const Exact *x, const float *sums, float cnt,
                            double *o) {
    int has = cnt > 0;
    o[S_mm_tokens] += cnt; o[S_mm_d_sum] += sums[MM_D]; o[S_mm_k3_sum] += sums[MM_K3];
    o[S_mm_abs_sum] += sums[MM_ABS]; o[S_mm_rho_m1_sum] += sums[MM_M1]; o[S_mm_rho_m1_sq_sum] += sums[MM_M1_SQ];
    o[S_mm_mult_m1_sum] += sums[MM_MULT]; o[S_mm_outside] += hcount(a->mm_out); o[S_mm_rows] += has;
    if (has) put_max(&o[S_mm_abs_max], x->d_abs_max);
    put_min(&o[S_mm_d_min], x->d_min); put_max(&o[S_mm_d_max], x->d_max);
    double w = has ? exp((double)(sums[MM_D] / (cnt > 1.0f ? cnt : 1.0f))) : 0.0;
    o[S_mm_seq_w_sum] += w; o[S_mm_seq_w_sq_sum] += w * w;
    o[S_mm_kept_rho_sum] += sums[KEPT]; o[S_mm_kept_rho_sq_sum] += sums[KEPT_SQ];
    int out = has && (sums[MM_D] < in->band_lo || sums[MM_D] > in->band_hi); /* sequence_mask: W = exp(sum d) */
    double kw = has && !out ? exp((double)sums[MM_D]) : 0.0;
    o[S_mm_seq_outside] += out; o[S_mm_seq_kept_w_sum] += kw; o[S_mm_seq_kept_w_sq_sum] += kw * kw;
    for (int b = 0; b < HIST_BINS; b++) {
        int32_t c = 0;
        for (int k = 0; k < HIST_COPIES; k++) c += a->hist[k][b];
        o[S_mm_hist_0 + b] += c;
    }
}

/* GSPO's sequence ratio of one row with tokens: w = exp(m), m its mean log ratio (float, as the torch form);
 * w in double, the extremes of m, rows outside the clip range and outside the importance-weight band. */
static void finish_seq_ratio(const Inputs *in, float m, double *o) {
    double w = exp((double)m);
    o[S_seq_rows] += 1; o[S_seq_w_sum] += w; o[S_seq_w_sq_sum] += w * w;
    put_min(&o[S_seq_log_min], m); put_max(&o[S_seq_log_max], m);
    o[S_seq_clipped] += (m < in->clip_lo) || (m > in->clip_hi);
    o[S_seq_tail] += (m < in->band_lo) || (m > in->band_hi);
}

static void finish_row(const Inputs *in, const Acc *a, int64_t row, double *o) {
    float cnt = (float)hcount(a->cnt);
    int has = cnt > 0, has_u = in->lp && in->ref, has_lr = in->lp && in->old;
    int has_d = in->smp && (in->old || in->lp);
    float sums[NSUMS] = {hsum(a->adv_sum), hsum(a->adv_abs), hsum(a->u_sum), hsum(a->u_sq), hsum(a->u_quad),
                         hsum(a->k3_sum), hsum(a->k3_sq), hsum(a->m1_sum), hsum(a->user_sum), hsum(a->user_sq),
                         hsum(a->lr_k3), hsum(a->nll_sum), hsum(a->mm_d_sum), hsum(a->mm_k3), hsum(a->mm_abs_sum),
                         hsum(a->mm_m1), hsum(a->mm_m1_sq), hsum(a->mm_mult), hsum(a->lr_sum),
                         hsum(a->kept), hsum(a->kept_sq), hsum(a->is_sum)};
    Exact x = {hmax(a->adv_hi), hmin(a->adv_lo), hmax(a->u_max), hmin(a->u_min), hmax(a->lr_max), hmax(a->diff_max),
               hmax(a->mm_d_max), hmin(a->mm_d_min), hmax(a->mm_abs_max), 0, hmax(a->is_max), hmin(a->is_min)};
    int finite = isfinite(x.lr_max); /* lr = -inf leaves exp(lr) - 1 = -1 finite, but not |lr| */
    for (int k = 0; k < NSUMS; k++) finite &= isfinite(sums[k]);
    if (!finite) x = exact_row(in, row);
    else if (!has_u && !has_lr && !has_d) x.nonfin = (float)hcount(a->nonfin);
    o[S_valid_tokens] += cnt; o[S_rows_with_tokens] += has; o[S_mask_nonbinary] += hcount(a->nonbin);
    if (in->adv_ndim) {
        float hi = x.adv_hi, lo = x.adv_lo, sum = sums[ADV], abs_sum = sums[ADV_ABS];
        if (in->adv_ndim == 1) {
            float v = has ? in->adv[row] : 0.0f;
            hi = lo = v; sum = cnt * v; abs_sum = cnt * fabsf(v);
        }
        o[S_adv_tokens] += cnt; o[S_adv_sum] += sum; o[S_adv_abs_sum] += abs_sum;
        put_max(&o[S_adv_row_spread_max], has ? hi - lo : -INFINITY);
        o[S_adv_live_tokens] += (hi > 0 || lo < 0) ? cnt : 0.0f;
    }
    if (in->lp || in->ref || in->old || in->smp) { o[S_logprob_tokens] += cnt; o[S_logprob_nonfinite] += x.nonfin; }
    if (has_u) {
        o[S_kl_tokens] += cnt; o[S_kl_u_sum] += sums[U]; o[S_kl_u_sq_sum] += sums[U_SQ];
        o[S_kl_u_quad_sum] += sums[U_QUAD];
        o[S_kl_u_pos] += hcount(a->u_pos); o[S_kl_k3_sum] += sums[K3]; o[S_kl_k3_sq_sum] += sums[K3_SQ];
        put_max(&o[S_kl_u_max], x.u_max); put_min(&o[S_kl_u_min], x.u_min);
    }
    if (has_lr) {
        o[S_ratio_tokens] += cnt; o[S_ratio_m1_sum] += sums[M1]; o[S_ratio_clipped] += hcount(a->clip);
        o[S_ratio_k3_sum] += sums[LR_K3];
        if (has) put_max(&o[S_on_policy_absdiff_max], x.lr_max);
        if (has) finish_seq_ratio(in, sums[LR] / cnt, o);
    }
    if (has_d) finish_mismatch(in, a, &x, sums, cnt, o);
    if (in->smp || in->old) { o[S_nll_tokens] += cnt; o[S_nll_sum] -= sums[NLL]; }
    if (in->ent) {
        o[S_ent_tokens] += cnt; o[S_ent_sum] += hsum(a->ent_sum); o[S_ent_sq_sum] += hsum(a->ent_sq);
        o[S_ent_low] += hcount(a->ent_low);
    }
    if (in->kl) {
        o[S_user_kl_tokens] += cnt; o[S_user_kl_sum] += sums[USER]; o[S_user_kl_sq_sum] += sums[USER_SQ];
        if (has_u) { o[S_user_k3_tokens] += cnt; if (has) put_max(&o[S_user_k3_absdiff_max], x.diff_max); }
        if (in->has_clamp) { o[S_user_clamp_tokens] += cnt; o[S_user_clamp_hits] += hcount(a->hits); }
    }
    if (in->isw) {
        o[S_is_tokens] += cnt; o[S_is_sum] += sums[IS];
        put_min(&o[S_is_min], x.is_min); put_max(&o[S_is_max], x.is_max);
    }
}

static void init_acc(Acc *a) {
    memset(a, 0, sizeof *a);
    a->adv_hi = a->u_max = a->mm_d_max = a->is_max = _mm256_set1_ps(-INFINITY);
    a->adv_lo = a->u_min = a->mm_d_min = a->is_min = _mm256_set1_ps(INFINITY);
}

/* The mask of tokens [off, off + n) as float, zero-padded to `padded` (a multiple of 8);
 * one loop per dtype so that the compiler vectorises the conversion. */
static const float *mask_floats(const Inputs *in, int64_t off, int64_t n, int64_t padded, float *buf) {
    const void *m = in->mask;
    switch (in->mask_kind) {
    case MASK_F32:
        if (n == padded) return (const float *)m + off;
        for (int64_t i = 0; i < n; i++) buf[i] = ((const float *)m)[off + i];
        break;
    case MASK_U8: for (int64_t i = 0; i < n; i++) buf[i] = (float)((const uint8_t *)m)[off + i]; break;
    case MASK_I32: for (int64_t i = 0; i < n; i++) buf[i] = (float)((const int32_t *)m)[off + i]; break;
    default: for (int64_t i = 0; i < n; i++) buf[i] = (float)((const int64_t *)m)[off + i]; break;
    }
    for (int64_t i = n; i < padded; i++) buf[i] = 0.0f;
    return buf;
}

static const float *tail(const float *p, int64_t off, int64_t n, float *buf) {
    if (!p) return NULL;
    for (int64_t i = 0; i < 8; i++) buf[i] = i < n ? p[off + i] : 0.0f;
    return buf;
}

static inline const float *at(const float *p, int64_t off) { return p ? p + off : NULL; }

static void merge(double *o, const double *x) {
    for (int k = 0; k < NFIELDS; k++) {
        if (field_op[k] == OP_MAX) put_max(&o[k], x[k]);
        else if (field_op[k] == OP_MIN) put_min(&o[k], x[k]);
        else o[k] += x[k];
    }
}

static void empty(double *o) {
    for (int k = 0; k < NFIELDS; k++) o[k] = field_op[k] == OP_MAX ? -INFINITY : field_op[k] == OP_MIN ? INFINITY : 0.0;
}

static void rows(const Inputs *in, int64_t r0, int64_t r1, double *out) {
    const float *src[NINPUTS]; /* per-token inputs; (B,) advantages are read per row, not here */
    for (int k = 0; k < NINPUTS; k++) src[k] = in->input[k];
    if (in->adv_ndim != 2) src[IN_adv] = NULL;
    int64_t T = in->T;
    float mbuf[SEG], bufs[NINPUTS][8];
    for (int64_t row = r0; row < r1; row++) {
        Acc a;
        init_acc(&a);
        for (int64_t s = 0; s < T; s += SEG) {
            int64_t off = row * T + s, n = T - s < SEG ? T - s : SEG, full = n - n % 8;
            if (full) {
                Seg S = {.m = mask_floats(in, off, full, full, mbuf)};
                for (int k = 0; k < NINPUTS; k++) S.input[k] = at(src[k], off);
                segment(in, &S, full, &a);
            }
            if (full < n) {
                int64_t t = off + full, k = n - full;
                Seg S = {.m = mask_floats(in, t, k, 8, mbuf)};
                for (int i = 0; i < NINPUTS; i++) S.input[i] = tail(src[i], t, k, bufs[i]);
                segment(in, &S, 8, &a);
            }
        }
        finish_row(in, &a, row, out);
    }
}

/* Every row of contiguous (B, T) inputs, `inputs` holding NINPUTS pointers in TOKEN_INPUTS order
 * (absent ones NULL; smp the sampler's log-probs, ent the trainer's entropies; adv_ndim 1 when the
 * advantages are one per row; band_lo / band_hi the log bounds of the importance-weight band, ent_low the
 * low-entropy threshold) on up to `threads` OpenMP threads
 * (torch's own pool when loaded into a torch process), with `scratch` holding threads x
 * NFIELDS doubles. Writes the statistics vector into out; the parts merge in thread order,
 * so a result does not depend on timing. Returns the number of slots. */
int64_t grpo_token_stats(int64_t B, int64_t T, const void *mask, int64_t mask_kind, int64_t adv_ndim,
                         const float *const *inputs, double clip_lo, double clip_hi, int64_t has_clamp,
                         double clamp_lo, double clamp_hi, double band_lo, double band_hi, double ent_low,
                         int64_t threads, double *scratch, double *out) {
    Inputs in = {.mask = mask, .T = T, .mask_kind = mask_kind, .adv_ndim = adv_ndim, .has_clamp = has_clamp,
                 .clip_lo = (float)clip_lo, .clip_hi = (float)clip_hi, .clamp_lo = (float)clamp_lo,
                 .clamp_hi = (float)clamp_hi, .band_lo = (float)band_lo, .band_hi = (float)band_hi,
                 .ent_low = (float)ent_low};
    for (int k = 0; k < NINPUTS; k++) in.input[k] = inputs[k];
    double (*parts)[NFIELDS] = (double (*)[NFIELDS])scratch; /* threads x NFIELDS, from the caller */
    int nt = (int)(threads < 1 ? 1 : threads);
    if (nt > B) nt = (int)(B > 0 ? B : 1);
    #pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; t++) {
        empty(parts[t]);
        rows(&in, B * t / nt, B * (t + 1) / nt, parts[t]);
    }
    empty(out);
    for (int t = 0; t < nt; t++) merge(out, parts[t]);
    return NFIELDS;
}
