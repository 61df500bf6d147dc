/* The token kernel's roofline on this CPU (compiled after native_kernel.c by benchmarks/roofline_tokens.py).
 *
 *   driver kernel B T reps   the kernel on a dense (B, T) batch of seven inputs, one thread: min CPU ns per token
 *   driver floor  B T reps   one AVX2 sum over each of the seven inputs (the read-once floor): min ns per token
 *   driver fma    n          8 independent chains of 256-bit FMAs: FMAs per ns (the arithmetic peak)
 *   driver exp    n          k3 and expm1 of 8 floats (the kernel's polynomial, no range reduction) over an
 *                            L1-resident block, summed: ns per token (a simple exp loop's throughput)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static float unif(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (rng >> 40) / 16777216.0f; }
static float gauss(void) { float s = 0; for (int i = 0; i < 4; i++) s += unif(); return (s - 2.0f) * 1.732f; }

static float *inputs[8]; /* mask, adv, lp, ref, old, smp, ent, spare */

static void fill(int64_t n) {
    for (int k = 0; k < 7; k++) inputs[k] = aligned_alloc(64, n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float lp = -3 * unif();
        inputs[0][i] = 1.0f; inputs[1][i] = 0.5f; inputs[2][i] = lp; inputs[3][i] = lp + 0.1f * gauss();
        inputs[4][i] = lp + 0.05f * gauss(); inputs[5][i] = inputs[4][i] - 0.02f * gauss(); inputs[6][i] = 2 * unif();
    }
}

__attribute__((noinline)) static double run_kernel(int64_t B, int64_t T) {
    double scratch[NFIELDS], out[NFIELDS];
    double t0 = cpu_s();
    /* the value tensors in TOKEN_INPUTS order: adv, lp, ref, old, kl (absent), smp, ent */
    const float *values[NINPUTS] = {inputs[1], inputs[2], inputs[3], inputs[4], NULL, inputs[5], inputs[6]};
    grpo_token_stats(B, T, inputs[0], MASK_F32, 2, values, -0.2231435513, 0.1823215568, 1, -10.0, 10.0,
                     -0.6931471806, 0.6931471806, 0.01, 1, scratch, out);
    return cpu_s() - t0;
}

static volatile float sink;

__attribute__((noinline)) static double run_floor(int64_t n) {
    double t0 = cpu_s();
    for (int k = 0; k < 7; k++) {
        __m256 a = ZERO, b = ZERO, c = ZERO, d = ZERO;
        const float *p = inputs[k];
        for (int64_t i = 0; i < n; i += 32) {
            a = _mm256_add_ps(a, _mm256_loadu_ps(p + i)); b = _mm256_add_ps(b, _mm256_loadu_ps(p + i + 8));
            c = _mm256_add_ps(c, _mm256_loadu_ps(p + i + 16)); d = _mm256_add_ps(d, _mm256_loadu_ps(p + i + 24));
        }
        sink = hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    }
    return cpu_s() - t0;
}

__attribute__((noinline)) static double run_fma(int64_t n) {
    __m256 acc[8], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
    for (int k = 0; k < 8; k++) acc[k] = _mm256_set1_ps((float)k);
    double t0 = cpu_s();
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 8; k++) acc[k] = _mm256_fmadd_ps(acc[k], x, y);
    double t = cpu_s() - t0;
    for (int k = 1; k < 8; k++) acc[0] = _mm256_add_ps(acc[0], acc[k]);
    sink = hsum(acc[0]);
    return t;
}

__attribute__((noinline)) static double run_exp(int64_t n) {
    float block[1024];
    for (int i = 0; i < 1024; i++) block[i] = 0.3f * (unif() - 0.5f);
    __m256 s1 = ZERO, s2 = ZERO;
    double t0 = cpu_s();
    for (int64_t r = 0; r < n; r++)
        for (int j = 0; j < 1024; j += 8) {
            __m256 d = _mm256_loadu_ps(block + j), k3 = k3_small(d);
            s1 = _mm256_add_ps(s1, k3);
            s2 = _mm256_add_ps(s2, _mm256_add_ps(k3, d));
        }
    double t = cpu_s() - t0;
    sink = hsum(_mm256_add_ps(s1, s2));
    return t;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (!strcmp(argv[1], "fma")) { int64_t n = atoll(argv[2]); printf("%.6f\n", 64.0 * n / (run_fma(n) * 1e9)); return 0; }
    if (!strcmp(argv[1], "exp")) { int64_t n = atoll(argv[2]); printf("%.6f\n", run_exp(n) * 1e9 / (1024.0 * n)); return 0; }
    int64_t B = atoll(argv[2]), T = atoll(argv[3]), reps = atoll(argv[4]);
    fill(B * T);
    double best = 1e30;
    for (int64_t r = 0; r < reps; r++) {
        double t = !strcmp(argv[1], "kernel") ? run_kernel(B, T) : run_floor(B * T);
        best = t < best ? t : best;
    }
    printf("%.6f\n", best * 1e9 / (double)(B * T));
    return 0;
}
