// tests/test_expf16.c: kernels/cpu/expf16.c against the C library's expf on every one of
// the 2^32 float inputs, bit for bit (NaNs: both NaN), and the kernels that call it
// (SwiGLU) against their per-element loops. Prints whether the lanes are vectorised here:
// where the start-up check found a difference they are not, and expf16 is expf itself.
#include "tests/test.h"
#include "kernels/cpu/expf16.h"
#include "kernels/kernels.h"
#include "kernels/bf16.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int same(float a, float b) { return memcmp(&a, &b, 4) == 0 || (a != a && b != b); }

// Every float, 16 at a time, on the OpenMP threads; the count of lanes that differ and
// the first such input.
static void every_float(void) {
    long bad = 0;
    uint32_t first = 0;
    #pragma omp parallel for schedule(static) reduction(+ : bad)
    for (long blk = 0; blk < (1L << 28); blk++) {
        float x[16], y[16];
        for (int i = 0; i < 16; i++) {
            uint32_t u = (uint32_t)(blk * 16 + i);
            memcpy(&x[i], &u, 4);
        }
        expf16(y, x);
        for (int i = 0; i < 16; i++)
            if (!same(y[i], expf(x[i]))) {
                bad++;
                #pragma omp critical
                if (!first) memcpy(&first, &x[i], 4);
            }
    }
    float f[16], g[16];
    memcpy(&f[0], &first, 4);
    for (int i = 1; i < 16; i++) f[i] = f[0];
    expf16(g, f);
    CHECK(bad == 0, "expf16 differs from expf on %ld of 2^32 inputs (first 0x%08x = %a: expf16 %a, expf %a)", bad,
          first, f[0], g[0], expf(f[0]));
    printf("  expf16 = expf on all 2^32 inputs: %s (lanes %s)\n", bad ? "NO" : "yes",
           expf16_vectorised() ? "vectorised" : "expf itself: the start-up check found a difference");
}

// expf_n over a run that is not a multiple of 16, from an address that is not a vector's
// (random bit patterns: every exponent, NaNs, infinities), in place and not: expf's bits.
static void run_of_floats(void) {
    long n = 100003;
    float *x = malloc(4 * (n + 1)), *y = malloc(4 * (n + 1));
    uint32_t state = 99;
    for (long i = 0; i <= n; i++) {
        state = state * 1664525u + 1013904223u;
        memcpy(&x[i], &state, 4);
    }
    expf_n(y + 1, x + 1, n);
    long bad = 0;
    for (long i = 1; i <= n; i++) bad += !same(y[i], expf(x[i]));
    expf_n(x + 1, x + 1, n);
    for (long i = 1; i <= n; i++) bad += !same(x[i], y[i]);
    CHECK(bad == 0, "expf_n differs from expf (or in place from not) on %ld of %ld inputs", bad, 2 * n);
    free(x);
    free(y);
}

// SwiGLU's kernels against the formulas of kernels/mlp.h, element by element with expf.
static void swiglu(void) {
    long n = 1000 + 7;   // not a multiple of 16: the tail runs too
    float *h0 = malloc(4 * n), *h1 = malloc(4 * n), *d = malloc(4 * n), *act = malloc(4 * n);
    float *dh0 = malloc(4 * n), *dh1 = malloc(4 * n);
    srand(7);
    for (long i = 0; i < n; i++) {
        h0[i] = (float)rand() / RAND_MAX * 40.0f - 20.0f;
        h1[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
        d[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    }
    h0[0] = 100.0f, h0[1] = -100.0f, h0[2] = 0.0f;   // exp overflows, underflows
    for (int bf16 = 0; bf16 < 2; bf16++) {
        backend_cpu.mlp->swiglu_forward(act, h0, h1, n, bf16);
        long bad = 0;
        for (long i = 0; i < n; i++) {
            float sg = 1.0f / (1.0f + expf(-h0[i])), want = h0[i] * sg * h1[i];
            if (bf16) want = bf16_round(want);
            bad += !same(act[i], want);
        }
        CHECK(bad == 0, "swiglu_forward bf16=%d: %ld of %ld elements differ from the per-element formula", bf16, bad, n);
    }
    backend_cpu.mlp->swiglu_backward(NULL, dh0, dh1, d, h0, h1, n, 0);
    long bad = 0;
    for (long i = 0; i < n; i++) {
        float sg = 1.0f / (1.0f + expf(-h0[i])), silu = h0[i] * sg;
        bad += !same(dh1[i], d[i] * silu) || !same(dh0[i], d[i] * h1[i] * sg * (1.0f + h0[i] * (1.0f - sg)));
    }
    CHECK(bad == 0, "swiglu_backward: %ld of %ld elements differ from the per-element formula", bad, n);
    // With act asked for, and dh1 written over dact: act as swiglu_forward writes it, the
    // gradients as above.
    float *fwd = malloc(sizeof(float) * n), *dh0b = malloc(sizeof(float) * n), *dd = malloc(sizeof(float) * n);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        memcpy(dd, d, sizeof(float) * n);
        backend_cpu.mlp->swiglu_forward(fwd, h0, h1, n, bf16);
        backend_cpu.mlp->swiglu_backward(act, dh0b, dd, dd, h0, h1, n, bf16);
        bad = 0;
        for (long i = 0; i < n; i++) bad += !same(act[i], fwd[i]) || !same(dh0b[i], dh0[i]) || !same(dd[i], dh1[i]);
        CHECK(bad == 0, "swiglu_backward with act, bf16=%d, dh1 over dact: %ld of %ld elements differ", bf16, bad, n);
    }
    free(fwd); free(dh0b); free(dd);
    free(h0); free(h1); free(d); free(act); free(dh0); free(dh1);
}

int main(void) {
    every_float();
    run_of_floats();
    swiglu();
    TEST_SUMMARY();
}
