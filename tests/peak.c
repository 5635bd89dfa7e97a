// tests/peak.c (build/peak, run by `make bench`): this machine's limits, measured: the
// cores' peak float32 FLOP/s and the memory bandwidth. For the FLOP/s, Each thread runs chains of fused multiply-adds on vectors held in registers
// (no load, no store), many chains at once so that every FMA unit starts one every cycle
// whatever its latency. No product can beat this figure, so `make bench` states every
// "% of peak" against it (or against a product that measured higher, on a noisy run).
//
// One line per vector width the CPU runs (AVX-512, AVX2), on 1 and 2 threads:
//   fma_peak width=512 threads=2 GFLOP/s 412.3
// then, at the widest width, the same flops as a multiply and a separate add (the
// attention core's arithmetic, which keeps plain C's rounding):
//   mul_add_peak width=512 threads=2 GFLOP/s 170.1
// then the memory bandwidth of a triad a = b + s*c over arrays far larger than the caches
// (3 x 128 MiB), on 1 and 2 threads, counting each array once (STREAM's convention):
//   bandwidth threads=2 GB/s 31.0
// A CPU whose 512-bit instructions go through 256-bit units in two halves (AMD Zen 4)
// gives the same figure at both widths; one with full-width units (Zen 5, Intel server
// cores with two FMA units) gives twice as much at 512.
//   build/peak [seconds per FMA measurement, default 0.2]
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { CHAINS = 12 };   // independent accumulators: 2 units x 4-5 cycles latency < 12

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// acc = acc * a + b, `iters` times on each of CHAINS registers; returns a value that
// depends on every FMA (so the compiler keeps them). 2 x 16 x CHAINS x iters flops.
// With mul_add, the same flops as the attention core does them (kernels/cpu/attn_tiles.c:
// a product rounded, then added, never fused: plain C's bits): x = x * a, acc = acc + x,
// twice the instructions. A core whose multiplies and adds share its two FMA units (Intel's)
// runs that at half the FMA loop's rate; one with adders of their own (AMD Zen 4) need not.
__attribute__((target("avx512f"))) static float chains512(long iters, int mul_add) {
    __m512 acc[CHAINS], x[CHAINS];
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
    for (int c = 0; c < CHAINS; c++) acc[c] = x[c] = _mm512_set1_ps((float)c);
    if (!mul_add)
        for (long i = 0; i < iters; i++)
#pragma GCC unroll 16
            for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    else
        for (long i = 0; i < iters; i++)
#pragma GCC unroll 16
            for (int c = 0; c < CHAINS; c++) {
                x[c] = _mm512_mul_ps(x[c], a);
                acc[c] = _mm512_add_ps(acc[c], x[c]);
            }
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}

// The same with 8 lanes: 2 x 8 x CHAINS x iters flops.
__attribute__((target("avx2,fma"))) static float chains256(long iters, int mul_add) {
    __m256 acc[CHAINS], x[CHAINS];
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
    for (int c = 0; c < CHAINS; c++) acc[c] = x[c] = _mm256_set1_ps((float)c);
    if (!mul_add)
        for (long i = 0; i < iters; i++)
#pragma GCC unroll 16
            for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    else
        for (long i = 0; i < iters; i++)
#pragma GCC unroll 16
            for (int c = 0; c < CHAINS; c++) {
                x[c] = _mm256_mul_ps(x[c], a);
                acc[c] = _mm256_add_ps(acc[c], x[c]);
            }
    __m256 s = acc[0];
    for (int c = 1; c < CHAINS; c++) s = _mm256_add_ps(s, acc[c]);
    float v[8], t = 0;
    _mm256_storeu_ps(v, s);
    for (int l = 0; l < 8; l++) t += v[l];
    return t;
}

// GB/s of a[i] = b[i] + s * c[i] over n floats on `threads` threads; best of 5 (the first,
// which also faults the pages in, not counted).
static double triad(float *a, const float *b, const float *c, long n, int threads) {
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    return 3.0 * sizeof(float) * n / best / 1e9;
}

static volatile float sink;   // where every thread's result goes

// GFLOP/s of `threads` threads each running `iters` iterations at `width` bits, of the FMA
// loop or (mul_add) the multiply-then-add loop; best of 5.
static double measure(int width, int threads, long iters, int mul_add) {
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = now();
#pragma omp parallel num_threads(threads)
        sink = width == 512 ? chains512(iters, mul_add) : chains256(iters, mul_add);
        double t = now() - t0;
        if (r > 0 && t < best) best = t;   // the first warms the units and the clock up
    }
    return 2.0 * (width / 32) * CHAINS * (double)iters * threads / best / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.2;
    if (!(seconds > 0 && seconds < 60)) {
        fprintf(stderr, "peak: seconds must be in (0, 60), got '%s'\n", argv[1]);
        return 1;
    }
    __builtin_cpu_init();
    int widths[2], n = 0;
    if (__builtin_cpu_supports("avx512f")) widths[n++] = 512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) widths[n++] = 256;
    if (!n) printf("fma_peak: this CPU has neither AVX-512 nor AVX2 with FMA; not measured\n");
    for (int w = 0; w < n; w++) {
        // Size the loop to take about `seconds` on one thread, from a short trial.
        long iters = 1 << 16;
        double t0 = now();
        sink = widths[w] == 512 ? chains512(iters, 0) : chains256(iters, 0);
        double t = now() - t0;
        iters = (long)(iters * seconds / (t > 1e-6 ? t : 1e-6));
        for (int th = 1; th <= 2; th++)
            printf("fma_peak width=%d threads=%d GFLOP/s %.1f\n", widths[w], th, measure(widths[w], th, iters, 0));
        if (w == 0)   // the widest only
            for (int th = 1; th <= 2; th++)
                printf("mul_add_peak width=%d threads=%d GFLOP/s %.1f\n", widths[w], th,
                       measure(widths[w], th, iters / 2, 1));
    }
    long len = 32L << 20;   // floats per array: 128 MiB
    float *a = malloc(sizeof(float) * len), *b = malloc(sizeof(float) * len), *c = malloc(sizeof(float) * len);
    if (!a || !b || !c) {
        fprintf(stderr, "peak: out of memory for 3 x 128 MiB\n");
        return 1;
    }
    for (long i = 0; i < len; i++) b[i] = c[i] = (float)(i % 7);
    for (int th = 1; th <= 2; th++) printf("bandwidth threads=%d GB/s %.1f\n", th, triad(a, b, c, len, th));
    free(a); free(b); free(c);
    return 0;
}
