// tests/conformance_round16.c: the rounded 16-bit products (kernels/matmul16.h, the *_round16
// kernels): bf16 operands, each sum rounded to bf16 and stored as its 16-bit number. Expected:
// the test's own loops on the same values (tests/conformance_dense.c's ref_gemm, the ordered
// GEMM's order; dinp onto zeros), each sum then rounded by kernels/bf16.h, bit for bit; and
// the backend's own 16-bit kernel with a float32 output followed by that rounding, bit for
// bit. On the GPU also under cuBLAS (fp32 and bf16 modes), whose sums come in another order
// and are rounded by the product itself: within a dot product's bound plus one bf16 rounding.
// Widths past 1024 columns cross the CPU twin's blocks of columns (kernels/cpu/matmul16.c).
#include "tests/conformance.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef MESHMOE_CONFORMANCE_GPU
#include "gpu/backend.h"
#endif

enum { R_FORWARD, R_DINP };

// One case: the product (forward: out (T,OC) = x (T,C) @ w; dinp: (T,C) = dy (T,OC) @ w^T),
// dense (G = 0) or over G groups of rows (rows: G+1), each group with its own weight.
typedef struct {
    int kind, T, C, OC, G;
    const int *rows;
    const char *way;   // under cuBLAS: MESHMOE_GROUPED (NULL: the default, cuBLAS's grouped call)
} RCase;

static const char *name_of(const RCase *k) {
    if (k->G) return k->kind == R_FORWARD ? "matmul_forward_grouped_round16" : "matmul_backward_dinp_grouped_round16";
    return k->kind == R_FORWARD ? "matmul_forward_round16" : "matmul_backward_dinp_round16";
}

// The rows of group g (the whole of T when dense).
static int group_rows(const RCase *k, int g, int *r0) {
    *r0 = k->G ? k->rows[g] : 0;
    return k->G ? k->rows[g + 1] - k->rows[g] : k->T;
}

// Z (T, C or OC) = the case's float32 sums by the loops, from X and the weights W, onto zeros.
static void reference(const RCase *k, const float *X, const float *W, float *Z) {
    int C = k->C, OC = k->OC, groups = k->G ? k->G : 1, r0;
    for (int g = 0; g < groups; g++) {
        int n = group_rows(k, g, &r0);
        const float *w = W + (size_t)g * C * OC;
        if (n == 0) continue;
        if (k->kind == R_FORWARD) ref_gemm(0, 0, n, OC, C, X + (size_t)r0 * C, C, w, OC, 0, Z + (size_t)r0 * OC, OC);
        else ref_gemm(0, 1, n, C, OC, X + (size_t)r0 * OC, OC, w, OC, 1, Z + (size_t)r0 * C, C);
    }
}

// The rounded kernel on the device's operands.
static void run_round16(const RCase *k, const uint16_t *dX, const uint16_t *dW, uint16_t *dZ) {
    const Matmul16Kernels *m = UNDER_TEST->matmul16;
    if (k->G && k->kind == R_FORWARD) m->matmul_forward_grouped_round16(dZ, dX, dW, k->rows, k->G, k->C, k->OC);
    if (k->G && k->kind == R_DINP) m->matmul_backward_dinp_grouped_round16(dZ, dX, dW, k->rows, k->G, k->C, k->OC);
    if (!k->G && k->kind == R_FORWARD) m->matmul_forward_round16(dZ, dX, dW, k->T, k->C, k->OC);
    if (!k->G && k->kind == R_DINP) m->matmul_backward_dinp_round16(dZ, dX, dW, k->T, k->C, k->OC);
}

// Its float32-output twin (dZ holding zeros: the dinp forms add onto it).
static void run_float_out(const RCase *k, const uint16_t *dX, const uint16_t *dW, float *dZ) {
    const Matmul16Kernels *m = UNDER_TEST->matmul16;
    if (k->G && k->kind == R_FORWARD) m->matmul_forward_grouped(dZ, dX, dW, k->rows, k->G, k->C, k->OC, 0);
    if (k->G && k->kind == R_DINP) m->matmul_backward_dinp_grouped(dZ, dX, dW, k->rows, k->G, k->C, k->OC);
    if (!k->G && k->kind == R_FORWARD) m->matmul_forward(dZ, dX, dW, k->T, k->C, k->OC, 0);
    if (!k->G && k->kind == R_DINP) m->matmul_backward_dinp(dZ, dX, dW, k->T, k->C, k->OC);
}

// n random bf16 values in [-1, 1): as floats, and their bits in *bits.
static float *bf16_values(size_t n, uint16_t **bits) {
    float *x = rand_floats(n, -1, 1);
    *bits = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        x[i] = bf16_round(x[i]);
        (*bits)[i] = bf16_bits(x[i]);
    }
    return x;
}

// The first of n bits that differ, or n.
static size_t first_difference(const uint16_t *a, const uint16_t *b, size_t n) {
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

// want16 (n) = the bits of the rounded sums want.
static uint16_t *rounded_bits(const float *want, size_t n) {
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = bf16_bits(want[i]);
    return h;
}

// Mode 0: the backend's own products, bit for bit against the loops and against its
// float32-output twin rounded. Modes 1, 2 (GPU): under cuBLAS, each value within
// e + 2^-8 (|s| + e) of the loops' sum s, e = 2 (K + 1) u sum |a b| (u = 2^-24) the sums' bound
// and 2^-8 one bf16 rounding (8 significant bits, to nearest).
static void run_case(const RCase *k, int mode) {
    int K = k->kind == R_FORWARD ? k->C : k->OC, W = k->kind == R_FORWARD ? k->OC : k->C;
    int groups = k->G ? k->G : 1, T = k->G ? k->rows[k->G] : k->T;
    size_t nx = (size_t)T * K, nw = (size_t)groups * k->C * k->OC, nz = (size_t)T * W;
    uint16_t *X16, *W16;
    float *X = bf16_values(nx, &X16), *Wt = bf16_values(nw, &W16), *want = calloc(nz ? nz : 1, sizeof(float));
    reference(k, X, Wt, want);
    uint16_t *want16 = rounded_bits(want, nz), *nan16 = malloc(sizeof(uint16_t) * (nz ? nz : 1));
    for (size_t i = 0; i < nz; i++) nan16[i] = 0x7fc1;   // (a NaN: every element must be written)
    char shape[128];
    snprintf(shape, sizeof shape, "%s%s%s T=%d C=%d OC=%d groups=%d",
             mode == 2 ? "cublas_bf16" : mode == 1 ? "cublas" : "", k->way ? " MESHMOE_GROUPED=" : "",
             k->way ? k->way : "", T, k->C, k->OC, k->G);
#ifdef MESHMOE_CONFORMANCE_GPU
    const char *why = NULL;
    if (k->way) setenv("MESHMOE_GROUPED", k->way, 1);   // read by the start-up call below
    else unsetenv("MESHMOE_GROUPED");
    if (mode && !gpu_matmul_use_cublas(mode, &why)) {
        skipped("%s %s: SKIPPED (%s)", name_of(k), shape, why);
        mode = -1;
    }
#endif
    void *dX = dev_copy(X16, sizeof(uint16_t) * nx), *dW = dev_copy(W16, sizeof(uint16_t) * nw);
    uint16_t *dZ = dev_copy(nan16, sizeof(uint16_t) * nz);
    if (mode >= 0) run_round16(k, dX, dW, dZ);
    uint16_t *got = dev_fetch(dZ, sizeof(uint16_t) * nz);
    if (mode == 0) {
        size_t i = first_difference(want16, got, nz);
        check(i == nz, "%s %s: the bits differ from the loops' rounded sums; first at [%zu]: want 0x%04x got 0x%04x",
              name_of(k), shape, i, i < nz ? want16[i] : 0, i < nz ? got[i] : 0);
        float *zeros = calloc(nz ? nz : 1, sizeof(float)), *dZf = dev_copy(zeros, sizeof(float) * (nz ? nz : 1));
        run_float_out(k, dX, dW, dZf);
        float *twin = dev_fetch(dZf, sizeof(float) * nz);
        uint16_t *twin16 = rounded_bits(twin, nz);
        i = first_difference(twin16, got, nz);
        check(i == nz, "%s %s: the bits differ from the float32 twin's rounded; first at [%zu]: want 0x%04x got 0x%04x",
              name_of(k), shape, i, i < nz ? twin16[i] : 0, i < nz ? got[i] : 0);
        free(zeros); free(twin); free(twin16);
        dev_free(dZf);
    }
#ifdef MESHMOE_CONFORMANCE_GPU
    if (mode > 0) {
        gpu_matmul_use_cublas(0, &why);
        for (size_t i = 0; i < nx; i++) X[i] = fabsf(X[i]);
        for (size_t i = 0; i < nw; i++) Wt[i] = fabsf(Wt[i]);
        float *bound = calloc(nz ? nz : 1, sizeof(float));
        reference(k, X, Wt, bound);   // sum |a b|
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < nz; i++) {
            double e = 2.0 * (K + 1) * 0x1p-24 * bound[i], b = e + 0x1p-8 * (fabs(want[i]) + e);
            if (!(fabs((double)bf16_float(got[i]) - want[i]) <= b) && bad++ == 0) first = i;
        }
        check(bad == 0, "%s %s: %zu differ beyond the bound; first at [%zu]: want %.9g got %.9g", name_of(k), shape,
              bad, first, want[first], bf16_float(got[first]));
        free(bound);
    }
#endif
    free(X); free(Wt); free(X16); free(W16); free(want); free(want16); free(nan16); free(got);
    dev_free(dX); dev_free(dW); dev_free(dZ);
}

void test_matmul16_round(void) {
    static const int rows3[] = {0, 7, 7, 20}, rows4[] = {0, 0, 33, 40, 64};   // an empty group each
    int modes = 1;
#ifdef MESHMOE_CONFORMANCE_GPU
    modes = 3;
#endif
    for (int mode = 0; mode < modes; mode++)
        for (int kind = R_FORWARD; kind <= R_DINP; kind++) {
            run_case(&(RCase){kind, 24, 40, 56, 0, NULL, NULL}, mode);
            run_case(&(RCase){kind, 5, 33, 17, 0, NULL, NULL}, mode);      // shapes tensor cores do not tile
            run_case(&(RCase){kind, 9, 1100, 1100, 0, NULL, NULL}, mode);  // two blocks of columns, a ragged one
            run_case(&(RCase){kind, 0, 16, 16, 3, rows3, NULL}, mode);
            run_case(&(RCase){kind, 0, 48, 1030, 4, rows4, NULL}, mode);
            if (mode)   // the groups' float32 sums, rounded after (the own kernel's way)
                run_case(&(RCase){kind, 0, 48, 1030, 4, rows4, "kernel"}, mode);
        }
#ifdef MESHMOE_CONFORMANCE_GPU
    unsetenv("MESHMOE_GROUPED");
#endif
}
