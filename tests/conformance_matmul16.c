// tests/conformance_matmul16.c: the 16-bit products (kernels/matmul16.h) against their
// float32 contract. Every operand is bf16-valued and handed to the kernel as bf16 bits; the
// expected result is the test's own loops on the same values as floats (tests/conformance_dense.c's
// references, the ordered GEMM's order), compared bit for bit, and then the backend's
// float32 twin on the float operands, also bit for bit: widening a bf16 value is exact, so
// the 16-bit kernel computes what the float32 one does. On the GPU also under cuBLAS (fp32 and
// bf16 modes: the 16-bit operands go to the tensor cores as they are), within the bound of a
// dot product's sums in another order. The grouped twins: tests/conformance_grouped.c; the
// rounded forms (*_round16): tests/conformance_round16.c.
#include "tests/conformance.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef MESHMOE_CONFORMANCE_GPU
#include "gpu/backend.h"
#endif

enum { P_FORWARD, P_DINP, P_DW, P_CHUNKED, P_LEAVES, P_KINDS };
static const char *const names[P_KINDS] = {"matmul_forward", "matmul_backward_dinp", "matmul_backward_dw",
                                           "gemm_chunked", "matmul_backward_dw_leaves"};

// One case: the kind, the layer's widths (T rows, C in, OC out; the chunked product's M = T,
// K = C, N = OC; the leaves' rows come from lens), and its options.
typedef struct {
    int kind, T, C, OC, acc, tb, chunks, n;
    const int *lens;
} Prod;

// The case as the general product C (M,N) = op(A) (M,K) @ op(B) (K,N) with its layouts.
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    size_t na, nb, nc;
    int off[17];
} Layout;

// l's product: op(A) (M,K) @ op(B) (K,N) into C, row strides lda, ldb, ldc.
static void product(Layout *l, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc) {
    l->ta = ta, l->tb = tb, l->M = M, l->N = N, l->K = K, l->lda = lda, l->ldb = ldb, l->ldc = ldc;
}

static Layout layout(const Prod *p) {
    Layout l;
    memset(&l, 0, sizeof l);
    int T = p->T, C = p->C, OC = p->OC;
    if (p->kind == P_LEAVES)
        for (int i = 0; i < p->n; i++) l.off[i + 1] = l.off[i] + p->lens[i];
    if (p->kind == P_FORWARD) product(&l, 0, 0, T, OC, C, C, OC, OC);
    if (p->kind == P_DINP) product(&l, 0, 1, T, C, OC, OC, OC, C);
    if (p->kind == P_DW) product(&l, 1, 0, C, OC, T, C, OC, OC);
    if (p->kind == P_CHUNKED) product(&l, 0, p->tb, T, OC, C, C + 3, (p->tb ? C : OC) + 1, OC + 2);
    if (p->kind == P_LEAVES) product(&l, 1, 0, C, OC, l.off[p->n], C, OC, OC);
    l.na = (size_t)(l.ta ? l.K : l.M) * l.lda;
    l.nb = (size_t)(l.tb ? l.N : l.K) * l.ldb;
    l.nc = (size_t)l.M * l.ldc;
    return l;
}

// Z = the case's result by the test's loops from A and B (Z holds the old values).
static void reference(const Prod *p, const Layout *l, const float *A, const float *B, int acc, float *Z) {
    if (p->kind == P_CHUNKED) ref_gemm_chunked(l->tb, l->M, l->N, l->K, p->chunks, A, l->lda, B, l->ldb, Z, l->ldc);
    else if (p->kind == P_LEAVES) ref_dw_leaves(p->C, p->OC, l->off, p->n, A, B, acc, Z);
    else ref_gemm(l->ta, l->tb, l->M, l->N, l->K, A, l->lda, B, l->ldb, acc, Z, l->ldc);
}

// The 16-bit kernel under test on A16, B16, or (float32 1) its float32 twin on A, B.
static void run(const Prod *p, const Layout *l, const void *A, const void *B, float *Z, int float32) {
    const MatmulKernels *f = UNDER_TEST->matmul;
    const Matmul16Kernels *h = UNDER_TEST->matmul16;
    int T = p->T, C = p->C, OC = p->OC;
    switch (p->kind) {
    case P_FORWARD:
        if (float32) f->matmul_forward(Z, A, B, T, C, OC, p->acc);
        else h->matmul_forward(Z, A, B, T, C, OC, p->acc);
        break;
    case P_DINP:
        if (float32) f->matmul_backward_dinp(Z, A, B, T, C, OC);
        else h->matmul_backward_dinp(Z, A, B, T, C, OC);
        break;
    case P_DW:
        if (float32) f->matmul_backward_dw(Z, A, B, T, C, OC, p->acc);
        else h->matmul_backward_dw(Z, A, B, T, C, OC, p->acc);
        break;
    case P_CHUNKED:
        if (float32) f->gemm_chunked(l->tb, l->M, l->N, l->K, p->chunks, A, l->lda, B, l->ldb, Z, l->ldc);
        else h->gemm_chunked(l->tb, l->M, l->N, l->K, p->chunks, A, l->lda, B, l->ldb, Z, l->ldc);
        break;
    case P_LEAVES:
        if (float32) f->matmul_backward_dw_leaves(Z, A, B, l->off, p->n, C, OC, p->acc);
        else h->matmul_backward_dw_leaves(Z, A, B, l->off, p->n, C, OC, p->acc);
        break;
    }
}

// n random bf16-valued floats in [-1, 1), and their bits.
static float *bf16_floats(size_t n, uint16_t **bits) {
    float *x = rand_floats(n, -1, 1);
    *bits = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        x[i] = bf16_round(x[i]);
        (*bits)[i] = bf16_bits(x[i]);
    }
    return x;
}

// One case, mode 0 on the backend's own products (bit for bit, against the loops and the
// float32 twin), 1 and 2 under cuBLAS (GPU only): each result within 2 (K + m) u (|old| + sum
// |a b|) of the loops', K the contraction, m the roundings after it (the add onto the old
// value, the pieces' or leaves' merges), u = 2^-24.
static void run_prod(const Prod *p, int mode) {
    Layout l = layout(p);
    uint16_t *A16, *B16;
    float *A = bf16_floats(l.na, &A16), *B = bf16_floats(l.nb, &B16), *Z0 = rand_floats(l.nc, -1, 1);
    int writes = (p->kind != P_DINP && !p->acc) || p->kind == P_CHUNKED;
    if (writes && p->kind != P_CHUNKED)   // (the chunked product's padding between rows must stay)
        for (size_t i = 0; i < l.nc; i++) Z0[i] = NAN;
    float *want = copy_of(Z0, sizeof(float) * l.nc);
    reference(p, &l, A, B, p->acc, want);
    char shape[128];
    snprintf(shape, sizeof shape, "16-bit operands%s T=%d C=%d OC=%d acc=%d transB=%d chunks=%d leaves=%d",
             mode == 2 ? " cublas_bf16" : mode == 1 ? " cublas" : "", p->T, p->C, p->OC, p->acc, p->tb, p->chunks,
             p->n);
#ifdef MESHMOE_CONFORMANCE_GPU
    const char *why = NULL;
    if (mode && !gpu_matmul_use_cublas(mode, &why)) {
        skipped("%s %s: SKIPPED (%s)", names[p->kind], shape, why);
        free(A); free(B); free(A16); free(B16); free(Z0); free(want);
        return;
    }
#endif
    void *dA16 = dev_copy(A16, sizeof(uint16_t) * l.na), *dB16 = dev_copy(B16, sizeof(uint16_t) * l.nb);
    float *dZ = dev_copy(Z0, sizeof(float) * l.nc);
    run(p, &l, dA16, dB16, dZ, 0);
    float *got = dev_fetch(dZ, sizeof(float) * l.nc);
    if (mode == 0) {
        compare_floats(names[p->kind], shape, want, got, l.nc, 0, 0);
        float *dA = dev_copy(A, sizeof(float) * l.na), *dB = dev_copy(B, sizeof(float) * l.nb);
        float *dZf = dev_copy(Z0, sizeof(float) * l.nc);
        run(p, &l, dA, dB, dZf, 1);
        char twin[160];
        snprintf(twin, sizeof twin, "%s against the float32 twin", shape);
        check_dev_floats(names[p->kind], twin, got, dZf, l.nc, 0, 0);
        dev_free(dA); dev_free(dB); dev_free(dZf);
    }
#ifdef MESHMOE_CONFORMANCE_GPU
    if (mode > 0) {
        gpu_matmul_use_cublas(0, &why);
        for (size_t i = 0; i < l.na; i++) A[i] = fabsf(A[i]);
        for (size_t i = 0; i < l.nb; i++) B[i] = fabsf(B[i]);
        float *bound = calloc(l.nc, sizeof(float));
        reference(p, &l, A, B, 0, bound);   // sum |a b| (the leaves' and pieces' trees of them)
        int m = 1 + (p->kind == P_CHUNKED ? p->chunks : 0) + (p->kind == P_LEAVES ? p->n : 0);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < l.nc; i++) {
            float old = isnan(Z0[i]) || !p->acc ? 0.0f : fabsf(Z0[i]);
            float b = (float)(2.0 * (l.K + m) * 0x1p-24 * (bound[i] + old));
            if (!(fabsf(got[i] - want[i]) <= b) && bad++ == 0) first = i;
        }
        check(bad == 0, "%s %s: %zu differ beyond the bound; first at [%zu]: want %.9g got %.9g", names[p->kind], shape,
              bad, first, want[first], got[first]);
        free(bound);
    }
#endif
    free(A); free(B); free(A16); free(B16); free(Z0); free(want); free(got);
    dev_free(dA16); dev_free(dB16); dev_free(dZ);
}

void test_matmul16(void) {
    static const int one[] = {9}, four[] = {16, 3, 0, 21}, seven[] = {40, 0, 33, 57, 8, 61, 30};
    int modes = 1;
#ifdef MESHMOE_CONFORMANCE_GPU
    modes = 3;
#endif
    for (int mode = 0; mode < modes; mode++) {
        for (int acc = 0; acc < 2; acc++) {
            run_prod(&(Prod){P_FORWARD, 24, 40, 56, acc, 0, 0, 0, NULL}, mode);
            run_prod(&(Prod){P_FORWARD, 5, 33, 17, acc, 0, 0, 0, NULL}, mode);   // shapes tensor cores do not tile
            run_prod(&(Prod){P_DW, 70, 200, 96, acc, 0, 0, 0, NULL}, mode);
            run_prod(&(Prod){P_LEAVES, 0, 37, 45, acc, 0, 0, 4, four}, mode);   // an empty leaf
            run_prod(&(Prod){P_LEAVES, 0, 100, 70, acc, 0, 0, 7, seven}, mode);   // a tree that is not complete
        }
        run_prod(&(Prod){P_LEAVES, 0, 24, 40, 1, 0, 0, 1, one}, mode);
        run_prod(&(Prod){P_DINP, 24, 40, 56, 1, 0, 0, 0, NULL}, mode);
        run_prod(&(Prod){P_DINP, 5, 33, 17, 1, 0, 0, 0, NULL}, mode);
        for (int tb = 0; tb < 2; tb++) {
            run_prod(&(Prod){P_CHUNKED, 37, 120, 45, 0, tb, 4, 0, NULL}, mode);
            run_prod(&(Prod){P_CHUNKED, 13, 60, 70, 0, tb, 3, 0, NULL}, mode);   // a tree that is not complete
            run_prod(&(Prod){P_CHUNKED, 40, 16, 33, 0, tb, 1, 0, NULL}, mode);
        }
    }
    test_grouped16();        // the experts' grouped twins, the same family
    test_matmul16_round();   // the rounded forms
}
