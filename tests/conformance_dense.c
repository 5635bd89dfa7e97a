// tests/conformance_dense.c: the conformance tests (tests/conformance.h) of the matrix
// products, RMSNorm, RoPE, the embedding, MLA's data movement, SwiGLU, the bf16 casts and
// the array sums.
#include "tests/conformance.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef MESHMOE_CONFORMANCE_GPU
#include "gpu/backend.h"
#endif

// ---------------------------------------------------------------- matmul
// The contract (kernels/cpu/gemm.h): each element one in-order FMA chain over k from 0,
// then + C's old value when accumulating.
void ref_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int acc, float *C,
              int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = 0.0f;
            for (int k = 0; k < K; k++)
                c = fmaf(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k],
                         tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j], c);
            C[(size_t)i * ldc + j] = acc ? C[(size_t)i * ldc + j] + c : c;
        }
}

// C (M,N) with padded strides, every transposition, with and without accumulate; then the
// same product split in two row blocks must give the same bits (the row-split contract).
static void test_gemm_case(int ta, int tb, int M, int N, int K, int acc) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    size_t nA = (size_t)(ta ? K : M) * lda, nB = (size_t)(tb ? N : K) * ldb, nC = (size_t)M * ldc;
    float *A = rand_floats(nA, -1, 1), *B = rand_floats(nB, -1, 1), *C0 = rand_floats(nC, -1, 1);
    if (!acc) memset(C0, 0xff, sizeof(float) * nC);   // poisoned: every element must be written
    float *want = copy_of(C0, sizeof(float) * nC);
    if (ORACLE) ORACLE->matmul->gemm(ta, tb, M, N, K, A, lda, B, ldb, acc, want, ldc);
    else ref_gemm(ta, tb, M, N, K, A, lda, B, ldb, acc, want, ldc);
    float *dA = dev_copy(A, sizeof(float) * nA), *dB = dev_copy(B, sizeof(float) * nB);
    float *dC = dev_copy(C0, sizeof(float) * nC), *dC2 = dev_copy(C0, sizeof(float) * nC);
    UNDER_TEST->matmul->gemm(ta, tb, M, N, K, dA, lda, dB, ldb, acc, dC, ldc);
    char shape[96];
    snprintf(shape, sizeof shape, "transA=%d transB=%d M=%d N=%d K=%d acc=%d", ta, tb, M, N, K, acc);
    check_dev_floats("gemm", shape, want, dC, nC, 0, 0);
    int m1 = M / 3;   // rows [0, m1) and [m1, M) in two calls
    UNDER_TEST->matmul->gemm(ta, tb, m1, N, K, dA, lda, dB, ldb, acc, dC2, ldc);
    UNDER_TEST->matmul->gemm(ta, tb, M - m1, N, K, ta ? dA + m1 : dA + (size_t)m1 * lda, lda, dB, ldb, acc,
                             dC2 + (size_t)m1 * ldc, ldc);
    check_dev_floats("gemm split rows", shape, want, dC2, nC, 0, 0);
    free(A); free(B); free(C0); free(want);
    dev_free(dA); dev_free(dB); dev_free(dC); dev_free(dC2);
}

// The chunked product (kernels/matmul.h:gemm_chunked): each piece's chain (ref_gemm over its
// k's), the pieces added along the canonical tree (left + right, the left subtree the
// largest power of two of pieces below n), onto 0.0f; C overwritten, its padding not.
static float piece_sum(const float *p, int n) {
    if (n == 1) return p[0];
    int h = 1;
    while (2 * h < n) h *= 2;
    return piece_sum(p, h) + piece_sum(p + h, n - h);
}
void ref_gemm_chunked(int tb, int M, int N, int K, int chunks, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc) {
    int kc = K / chunks;
    float piece[16];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            for (int r = 0; r < chunks; r++)
                ref_gemm(0, tb, 1, 1, kc, A + (size_t)i * lda + (size_t)r * kc, lda,
                         B + (tb ? (size_t)j * ldb + (size_t)r * kc : (size_t)r * kc * ldb + j), ldb, 0, &piece[r], 1);
            C[(size_t)i * ldc + j] = 0.0f + piece_sum(piece, chunks);
        }
}
static void test_gemm_chunked_case(int tb, int M, int N, int K, int chunks) {
    int lda = K + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    size_t nA = (size_t)M * lda, nB = (size_t)(tb ? N : K) * ldb, nC = (size_t)M * ldc;
    float *A = rand_floats(nA, -1, 1), *B = rand_floats(nB, -1, 1), *want = rand_floats(nC, -1, 1);
    float *C0 = copy_of(want, sizeof(float) * nC);
    ref_gemm_chunked(tb, M, N, K, chunks, A, lda, B, ldb, want, ldc);
    float *dA = dev_copy(A, sizeof(float) * nA), *dB = dev_copy(B, sizeof(float) * nB);
    float *dC = dev_copy(C0, sizeof(float) * nC);
    UNDER_TEST->matmul->gemm_chunked(tb, M, N, K, chunks, dA, lda, dB, ldb, dC, ldc);
    char shape[96];
    snprintf(shape, sizeof shape, "transB=%d M=%d N=%d K=%d chunks=%d", tb, M, N, K, chunks);
    check_dev_floats("gemm_chunked", shape, want, dC, nC, 0, 0);
    free(A); free(B); free(want); free(C0);
    dev_free(dA); dev_free(dB); dev_free(dC);
}

// A weight gradient's leaves (kernels/matmul.h:matmul_backward_dw_leaves): leaf l's chains
// over its rows (ref_gemm), the leaves along the canonical tree (piece_sum), the root added
// onto dw's old values, or with accumulate 0 onto 0.0f (dw's old values NaN, never read);
// lens: the leaves' row counts (0: an empty leaf, 0.0f).
void ref_dw_leaves(int C, int OC, const int *off, int n, const float *inp, const float *dout, int accumulate,
                   float *dw) {
    float leaf[16];
    for (int i = 0; i < C; i++)
        for (int j = 0; j < OC; j++) {
            for (int l = 0; l < n; l++)
                ref_gemm(1, 0, 1, 1, off[l + 1] - off[l], inp + (size_t)off[l] * C + i, C,
                         dout + (size_t)off[l] * OC + j, OC, 0, &leaf[l], 1);
            float *w = dw + (size_t)i * OC + j;
            *w = (accumulate ? *w : 0.0f) + piece_sum(leaf, n);
        }
}
static void test_dw_leaves_case(int C, int OC, const int *lens, int n, int accumulate) {
    int off[17] = {0};
    for (int l = 0; l < n; l++) off[l + 1] = off[l] + lens[l];
    int K = off[n];
    float *inp = rand_floats((size_t)K * C + 1, -1, 1), *dout = rand_floats((size_t)K * OC + 1, -1, 1);
    float *dw0 = rand_floats((size_t)C * OC, -1, 1);
    if (!accumulate)
        for (size_t i = 0; i < (size_t)C * OC; i++) dw0[i] = NAN;
    float *want = copy_of(dw0, sizeof(float) * C * OC);
    ref_dw_leaves(C, OC, off, n, inp, dout, accumulate, want);
    float *d_inp = dev_copy(inp, sizeof(float) * ((size_t)K * C + 1));
    float *d_dout = dev_copy(dout, sizeof(float) * ((size_t)K * OC + 1));
    float *d_dw = dev_copy(dw0, sizeof(float) * C * OC);
    UNDER_TEST->matmul->matmul_backward_dw_leaves(d_dw, d_inp, d_dout, off, n, C, OC, accumulate);
    char shape[96];
    snprintf(shape, sizeof shape, "C=%d OC=%d leaves=%d rows=%d accumulate=%d", C, OC, n, K, accumulate);
    check_dev_floats("matmul_backward_dw_leaves", shape, want, d_dw, (size_t)C * OC, 0, 0);
    free(inp); free(dout); free(dw0); free(want);
    dev_free(d_inp); dev_free(d_dout); dev_free(d_dw);
}

// The three layer-facing products against the same contract.
static void test_matmul_wrappers(int T, int C, int OC) {
    float *inp = rand_floats((size_t)T * C, -1, 1), *w = rand_floats((size_t)C * OC, -1, 1);
    float *dout = rand_floats((size_t)T * OC, -1, 1), *dinp0 = rand_floats((size_t)T * C, -1, 1);
    float *out = malloc(sizeof(float) * T * OC), *dinp = copy_of(dinp0, sizeof(float) * T * C);
    float *dw = malloc(sizeof(float) * C * OC);
    ref_gemm(0, 0, T, OC, C, inp, C, w, OC, 0, out, OC);
    ref_gemm(0, 1, T, C, OC, dout, OC, w, OC, 1, dinp, C);
    ref_gemm(1, 0, C, OC, T, inp, C, dout, OC, 0, dw, OC);
    float *d_inp = dev_copy(inp, sizeof(float) * T * C), *d_w = dev_copy(w, sizeof(float) * C * OC);
    float *d_dout = dev_copy(dout, sizeof(float) * T * OC), *d_out = dev_poisoned(sizeof(float) * T * OC);
    float *d_dinp = dev_copy(dinp0, sizeof(float) * T * C), *d_dw = dev_poisoned(sizeof(float) * C * OC);
    UNDER_TEST->matmul->matmul_forward(d_out, d_inp, d_w, T, C, OC, 0);
    UNDER_TEST->matmul->matmul_backward_dinp(d_dinp, d_dout, d_w, T, C, OC);
    UNDER_TEST->matmul->matmul_backward_dw(d_dw, d_inp, d_dout, T, C, OC, 0);
    char shape[64];
    snprintf(shape, sizeof shape, "T=%d C=%d OC=%d", T, C, OC);
    check_dev_floats("matmul_forward", shape, out, d_out, (size_t)T * OC, 0, 0);
    check_dev_floats("matmul_backward_dinp", shape, dinp, d_dinp, (size_t)T * C, 0, 0);
    check_dev_floats("matmul_backward_dw", shape, dw, d_dw, (size_t)C * OC, 0, 0);
    ref_gemm(1, 0, C, OC, T, inp, C, dout, OC, 1, dw, OC);   // a leaf added onto the one before
    UNDER_TEST->matmul->matmul_backward_dw(d_dw, d_inp, d_dout, T, C, OC, 1);
    check_dev_floats("matmul_backward_dw onto a leaf", shape, dw, d_dw, (size_t)C * OC, 0, 0);
    free(inp); free(w); free(dout); free(dinp0); free(out); free(dinp); free(dw);
    dev_free(d_inp); dev_free(d_w); dev_free(d_dout); dev_free(d_out); dev_free(d_dinp); dev_free(d_dw);
}

#ifdef MESHMOE_CONFORMANCE_GPU
// One check that every got[i] is within bound[i] of want[i] (NaN fails), naming the case
// (`what`, the product and its shape) and the first element beyond its bound.
static void check_within_bounds(const char *what, const float *want, const float *got, const float *bound, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= bound[i]) && bad++ == 0) first = i;
    check(bad == 0, "%s: %zu differ beyond the bound; first at [%zu]: want %.9g got %.9g bound %.3g", what, bad, first,
          want[first], got[first], bound[first]);
}

#ifdef MESHMOE_CONFORMANCE_GPU
// A cublas_bf16 case's end: the device result fetched, the products back on the ordered GEMM,
// the result within its bounds; `what` names the case, and the conversion when it was ours.
static void cublas_bf16_result(const char *what, const float *want, const float *dev, const float *bound, size_t n) {
    float *got = dev_fetch(dev, sizeof(float) * n);
    const char *why;
    gpu_matmul_use_cublas(0, &why);
    char name[160];
    snprintf(name, sizeof name, "%s%s", what, getenv("MESHMOE_CUBLAS_BF16") ? " (convert)" : "");
    check_within_bounds(name, want, got, bound, n);
    free(got);
}
#endif

// cuBLAS (gpu_matmul_use_cublas) keeps no order: against the ordered product it is checked
// with the classic error bound of a dot product of K terms, |got - want| <= 2 K u sum_k
// |a_ik b_kj| (u = 2^-24: each of the two results within K u of the exact sum).
// With own_workspace, cuBLAS works in a workspace given to it, as a device thread's (the
// trainer's comes from the allocator, tag workspace: base/mesh.c), else in its own.
static void test_gemm_cublas(int ta, int tb, int M, int N, int K, int own_workspace) {
    const char *why;
    if (!gpu_matmul_use_cublas(1, &why)) { skipped("gemm cublas: SKIPPED (%s)", why); return; }
    size_t ws_bytes = own_workspace ? gpu_matmul_workspace_bytes() : 0;
    void *ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    if (own_workspace)
        check(ws_bytes == (4u << 20) || ws_bytes == (32u << 20), "gemm cublas: workspace of %zu bytes, "
              "expected 4 MiB or 32 MiB (cuBLAS's recommendation)", ws_bytes);
    if (ws) gpu_matmul_set_workspace(ws, ws_bytes);
    int lda = ta ? M : K, ldb = tb ? K : N;
    float *A = rand_floats((size_t)M * K, -1, 1), *B = rand_floats((size_t)K * N, -1, 1);
    float *want = malloc(sizeof(float) * M * N), *bound = malloc(sizeof(float) * M * N);
    ref_gemm(ta, tb, M, N, K, A, lda, B, ldb, 0, want, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += fabs((double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                          (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]));
            bound[(size_t)i * N + j] = (float)(2.0 * K * 0x1p-24 * s);
        }
    float *dA = dev_copy(A, sizeof(float) * M * K), *dB = dev_copy(B, sizeof(float) * K * N);
    float *dC = dev_poisoned(sizeof(float) * M * N);
    UNDER_TEST->matmul->gemm(ta, tb, M, N, K, dA, lda, dB, ldb, 0, dC, N);
    float *got = dev_fetch(dC, sizeof(float) * M * N);
    if (ws) gpu_matmul_set_workspace(NULL, 0);   // (the copy above waited for the product)
    gpu_matmul_use_cublas(0, &why);   // back to the ordered GEMM (and cuBLAS's handle freed)
    if (ws) dev_free(ws);
    char what[96];
    snprintf(what, sizeof what, "gemm cublas transA=%d transB=%d M=%d N=%d K=%d", ta, tb, M, N, K);
    check_within_bounds(what, want, got, bound, (size_t)M * N);
    free(A); free(B); free(want); free(bound); free(got);
    dev_free(dA); dev_free(dB); dev_free(dC);
}
#endif

#ifdef MESHMOE_CONFORMANCE_GPU
// gpu_matmul=cublas_bf16: the weight products on tensor cores (bf16 operands, float32 sums),
// on bf16-valued operands as the layers give them in bf16 mode: matmul_forward and
// matmul_backward_dinp accumulating onto their output, matmul_backward_dw writing and adding
// onto a leaf. Each product of two bf16 values is exact in float32, so only the sums' order
// and rounding differ from the ordered product: the bound of test_gemm_cublas, with the old
// value of C as one more term, |got - want| <= 2 (K+1) u (|C| + sum_k |a_ik b_kj|).
enum { BF16_FORWARD, BF16_DINP, BF16_DW };
static void test_weight_product_bf16(int which, int accumulate, int T, int C, int OC) {
    static const char *names[] = {"matmul_forward", "matmul_backward_dinp", "matmul_backward_dw"};
    const char *why;
    if (!gpu_matmul_use_cublas(2, &why)) { skipped("%s cublas_bf16: SKIPPED (%s)", names[which], why); return; }
    // The product as C (M,N) = op(A) (M,K) @ op(B) (K,N) with its operands' layouts.
    int ta = which == BF16_DW, tb = which == BF16_DINP;
    int M = which == BF16_DW ? C : T, N = which == BF16_DINP ? C : OC, K = which == BF16_FORWARD ? C : which == BF16_DINP ? OC : T;
    int lda = which == BF16_DINP ? OC : C, ldb = OC;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * N;
    float *A = rand_floats(na, -1, 1), *B = rand_floats(nb, -1, 1), *C0 = rand_floats(nc, -1, 1);
    for (size_t i = 0; i < na; i++) A[i] = bf16_round(A[i]);
    for (size_t i = 0; i < nb; i++) B[i] = bf16_round(B[i]);
    float *want = copy_of(C0, sizeof(float) * nc), *bound = malloc(sizeof(float) * nc);
    ref_gemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate, want, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = accumulate ? fabs(C0[(size_t)i * N + j]) : 0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += fabs((double)a * b);
            }
            bound[(size_t)i * N + j] = (float)(2.0 * (K + 1) * 0x1p-24 * s);
        }
    float *d_A = dev_copy(A, sizeof(float) * na), *d_B = dev_copy(B, sizeof(float) * nb);
    float *d_C = accumulate ? dev_copy(C0, sizeof(float) * nc) : dev_poisoned(sizeof(float) * nc);
    if (which == BF16_FORWARD) UNDER_TEST->matmul->matmul_forward(d_C, d_A, d_B, T, C, OC, accumulate);
    if (which == BF16_DINP) UNDER_TEST->matmul->matmul_backward_dinp(d_C, d_A, d_B, T, C, OC);
    if (which == BF16_DW) UNDER_TEST->matmul->matmul_backward_dw(d_C, d_A, d_B, T, C, OC, accumulate);
    char what[96];
    snprintf(what, sizeof what, "%s cublas_bf16 accumulate=%d T=%d C=%d OC=%d", names[which], accumulate, T, C, OC);
    cublas_bf16_result(what, want, d_C, bound, nc);
    free(A); free(B); free(C0); free(want); free(bound);
    dev_free(d_A); dev_free(d_B); dev_free(d_C);
}
#endif

#ifdef MESHMOE_CONFORMANCE_GPU
// gpu_matmul=cublas_bf16's chunked product (the tensor-parallel sums: a row-parallel forward, a
// column-parallel input gradient): each piece on tensor cores, the pieces merged along the tree
// in float32. Against the ordered pieces: each piece's sum within 2 Kc u of its own sum of
// |a b|, and each of the merges one more rounding of a partial sum, so |got - want| <=
// 2 (K + chunks) u sum_k |a_ik b_kj| over the whole contraction.
static void test_gemm_chunked_bf16(int tb, int M, int N, int K, int chunks) {
    const char *why;
    if (!gpu_matmul_use_cublas(2, &why)) { skipped("gemm_chunked cublas_bf16: SKIPPED (%s)", why); return; }
    int lda = K + 8, ldb = (tb ? K : N) + 8, ldc = N + 8, kc = K / chunks;
    size_t nA = (size_t)M * lda, nB = (size_t)(tb ? N : K) * ldb, nC = (size_t)M * ldc;
    float *A = rand_floats(nA, -1, 1), *B = rand_floats(nB, -1, 1), *want = rand_floats(nC, -1, 1);
    float *bound = calloc(nC, sizeof(float)), piece[16];
    for (size_t i = 0; i < nA; i++) A[i] = bf16_round(A[i]);
    for (size_t i = 0; i < nB; i++) B[i] = bf16_round(B[i]);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int r = 0; r < chunks; r++)
                ref_gemm(0, tb, 1, 1, kc, A + (size_t)i * lda + (size_t)r * kc, lda,
                         B + (tb ? (size_t)j * ldb + (size_t)r * kc : (size_t)r * kc * ldb + j), ldb, 0, &piece[r], 1);
            for (int k = 0; k < K; k++)
                s += fabs((double)A[(size_t)i * lda + k] * (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]));
            want[(size_t)i * ldc + j] = 0.0f + piece_sum(piece, chunks);
            bound[(size_t)i * ldc + j] = (float)(2.0 * (K + chunks) * 0x1p-24 * s);
        }
    float *dA = dev_copy(A, sizeof(float) * nA), *dB = dev_copy(B, sizeof(float) * nB);
    float *dC = dev_copy(want, sizeof(float) * nC);   // (the padding between rows must stay as it was)
    UNDER_TEST->matmul->gemm_chunked(tb, M, N, K, chunks, dA, lda, dB, ldb, dC, ldc);
    char what[96];
    snprintf(what, sizeof what, "gemm_chunked cublas_bf16 transB=%d M=%d N=%d K=%d chunks=%d", tb, M, N, K, chunks);
    cublas_bf16_result(what, want, dC, bound, nC);
    free(A); free(B); free(want); free(bound);
    dev_free(dA); dev_free(dB); dev_free(dC);
}
#endif

#ifdef MESHMOE_CONFORMANCE_GPU
// gpu_matmul=cublas_bf16's weight-gradient leaves: one product over all the leaves' rows on
// tensor cores, added onto dw (or written). Against the ordered leaves and their tree: each
// leaf's sum within 2 len u of its sum of |a b|, each merge and the add onto dw one more
// rounding, so |got - want| <= 2 (K + n + 1) u (|dw| + sum_k |a_ik b_kj|) over all K rows.
static void test_dw_leaves_bf16(int C, int OC, const int *lens, int n, int accumulate) {
    const char *why;
    if (!gpu_matmul_use_cublas(2, &why)) { skipped("matmul_backward_dw_leaves cublas_bf16: SKIPPED (%s)", why); return; }
    int off[17] = {0};
    for (int l = 0; l < n; l++) off[l + 1] = off[l] + lens[l];
    int K = off[n];
    size_t ni = (size_t)K * C + 1, nd = (size_t)K * OC + 1, nw = (size_t)C * OC;
    float *inp = rand_floats(ni, -1, 1), *dout = rand_floats(nd, -1, 1), *dw0 = rand_floats(nw, -1, 1), leaf[16];
    for (size_t i = 0; i < ni; i++) inp[i] = bf16_round(inp[i]);
    for (size_t i = 0; i < nd; i++) dout[i] = bf16_round(dout[i]);
    float *want = copy_of(dw0, sizeof(float) * nw), *bound = malloc(sizeof(float) * nw);
    for (int i = 0; i < C; i++)
        for (int j = 0; j < OC; j++) {
            double sum = accumulate ? fabs(dw0[(size_t)i * OC + j]) : 0;
            for (int l = 0; l < n; l++)
                ref_gemm(1, 0, 1, 1, lens[l], inp + (size_t)off[l] * C + i, C, dout + (size_t)off[l] * OC + j, OC, 0,
                         &leaf[l], 1);
            for (int k = 0; k < K; k++) sum += fabs((double)inp[(size_t)k * C + i] * dout[(size_t)k * OC + j]);
            float *w = want + (size_t)i * OC + j;
            *w = (accumulate ? *w : 0.0f) + piece_sum(leaf, n);
            bound[(size_t)i * OC + j] = (float)(2.0 * (K + n + 1) * 0x1p-24 * sum);
        }
    float *d_inp = dev_copy(inp, sizeof(float) * ni), *d_dout = dev_copy(dout, sizeof(float) * nd);
    float *d_dw = accumulate ? dev_copy(dw0, sizeof(float) * nw) : dev_poisoned(sizeof(float) * nw);
    UNDER_TEST->matmul->matmul_backward_dw_leaves(d_dw, d_inp, d_dout, off, n, C, OC, accumulate);
    char what[112];
    snprintf(what, sizeof what, "matmul_backward_dw_leaves cublas_bf16 C=%d OC=%d leaves=%d rows=%d accumulate=%d", C,
             OC, n, K, accumulate);
    cublas_bf16_result(what, want, d_dw, bound, nw);
    free(inp); free(dout); free(dw0); free(want); free(bound);
    dev_free(d_inp); dev_free(d_dout); dev_free(d_dw);
}
#endif

void test_matmul(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            test_gemm_case(ta, tb, 37, 45, 70, 0);
            test_gemm_case(ta, tb, 16, 16, 16, 1);
        }
    test_gemm_case(0, 0, 100, 33, 1, 1);   // K = 1: one fma
    test_gemm_case(0, 1, 5, 130, 300, 1);
    test_matmul_wrappers(24, 40, 56);
    for (int tb = 0; tb < 2; tb++) {
        test_gemm_chunked_case(tb, 37, 45, 120, 4);
        test_gemm_chunked_case(tb, 13, 70, 60, 3);   // a tree that is not complete
        test_gemm_chunked_case(tb, 40, 33, 16, 1);
    }
    static const int one[] = {9}, four[] = {16, 3, 0, 21}, seven[] = {40, 0, 33, 57, 8, 61, 30};
    for (int acc = 1; acc >= 0; acc--) {
        test_dw_leaves_case(24, 40, one, 1, acc);
        test_dw_leaves_case(37, 45, four, 4, acc);     // an empty leaf
        test_dw_leaves_case(100, 70, seven, 7, acc);   // a tree that is not complete, enough work for the threads
    }
#ifdef MESHMOE_CONFORMANCE_GPU
    test_gemm_cublas(0, 0, 64, 96, 200, 1);
    test_gemm_cublas(1, 1, 33, 17, 75, 0);
    // cuBLAS converting the operands inside its kernels (the default), then gpu/matmul.cu's
    // conversion kernel (MESHMOE_CUBLAS_BF16=convert, read when cublas_bf16 is chosen)
    for (int convert = 0; convert < 2; convert++) {
        if (convert) setenv("MESHMOE_CUBLAS_BF16", "convert", 1);
        for (int which = BF16_FORWARD; which <= BF16_DW; which++) {
            test_weight_product_bf16(which, 1, 70, 200, 96);
            test_weight_product_bf16(which, 1, 5, 33, 17);   // shapes tensor cores do not tile
        }
        test_weight_product_bf16(BF16_DW, 0, 70, 200, 96);   // a first leaf: written, not added onto
        for (int tb = 0; tb < 2; tb++) {
            test_gemm_chunked_bf16(tb, 64, 96, 256, 4);   // pieces of 64: tensor-core tiles
            test_gemm_chunked_bf16(tb, 13, 70, 60, 3);    // ragged pieces, a tree that is not complete
        }
        test_dw_leaves_bf16(64, 96, four, 4, 1);   // an empty leaf
        test_dw_leaves_bf16(37, 45, seven, 7, 0);  // written, a tree that is not complete
    }
    unsetenv("MESHMOE_CUBLAS_BF16");
#endif
    test_grouped();   // the experts' grouped products, the same family
}

// ---------------------------------------------------------------- norm
static void ref_rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, size_t ss, int T, int D,
                                float eps, int bf16) {
    for (int t = 0; t < T; t++) {
        float sum = 0.0f;
        for (int i = 0; i < D; i++) sum += x[(size_t)t * D + i] * x[(size_t)t * D + i];
        float r = 1.0f / sqrtf(sum / D + eps);
        rstd[t] = r;
        for (int i = 0; i < D; i++) {
            float n = x[(size_t)t * D + i] * r, sc = scale[t * ss + i];
            out[(size_t)t * D + i] = bf16 ? bf16_round(bf16_round(n) * sc) : n * sc;
        }
    }
}

static void ref_rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *scale, size_t ss,
                                    const float *rstd, int T, int D, int bf16) {
    for (int t = 0; t < T; t++) {
        float r = rstd[t], dot = 0.0f;
        for (int i = 0; i < D; i++) {
            float g = dout[(size_t)t * D + i] * scale[t * ss + i];
            dot += (bf16 ? bf16_round(g) : g) * (x[(size_t)t * D + i] * r);
        }
        dot /= D;
        for (int i = 0; i < D; i++) {
            float g = dout[(size_t)t * D + i] * scale[t * ss + i];
            g = bf16 ? bf16_round(g) : g;
            dx[(size_t)t * D + i] += r * (g - (x[(size_t)t * D + i] * r) * dot);
        }
    }
}

// A device copy of h (n floats; NULL: poisoned) that begins `shift` floats into its allocation
// (free it at p - shift): shift 1 puts every row of a 4-multiple width off 16 bytes.
static float *dev_shifted(const float *h, size_t n, int shift) {
    float *d = (float *)dev_poisoned(sizeof(float) * (n + shift)) + shift;
    if (h) dev_upload(d, h, sizeof(float) * n);
    return d;
}

// shift: the device's x, scale, dout, out and dx that many floats off their allocations.
static void test_norm_case(int T, int D, int per_token_scale, int bf16, int shift) {
    size_t n = (size_t)T * D, ss = per_token_scale ? (size_t)D : 0;
    float *x = rand_floats(n, -2, 2), *scale = rand_floats(per_token_scale ? n : (size_t)D, 0.5f, 1.5f);
    float *dout = rand_floats(n, -1, 1), *dx0 = rand_floats(n, -1, 1), *ds0 = rand_floats(D, -1, 1);
    float *out = malloc(sizeof(float) * n), *rstd = malloc(sizeof(float) * T);
    float *dx = copy_of(dx0, sizeof(float) * n), *ds = copy_of(ds0, sizeof(float) * D), *bc = malloc(sizeof(float) * n);
    long t0 = T / 4, len = T / 2;
    if (ORACLE) {
        ORACLE->norm->rmsnorm_forward(out, rstd, x, scale, ss, T, D, 1e-6f, bf16);
        ORACLE->norm->rmsnorm_backward_dx(dx, dout, x, scale, ss, rstd, T, D, bf16);
        ORACLE->norm->rmsnorm_dscale_leaf(ds, dout, x, rstd, t0, len, D, bf16);
        ORACLE->norm->broadcast_rows(bc, scale, T, D);
    } else {
        ref_rmsnorm_forward(out, rstd, x, scale, ss, T, D, 1e-6f, bf16);
        ref_rmsnorm_backward_dx(dx, dout, x, scale, ss, rstd, T, D, bf16);
        for (long t = t0; t < t0 + len; t++)
            for (int i = 0; i < D; i++) {
                float nv = x[(size_t)t * D + i] * rstd[t];
                ds[i] += dout[(size_t)t * D + i] * (bf16 ? bf16_round(nv) : nv);
            }
        for (size_t k = 0; k < n; k++) bc[k] = scale[k % D];
    }
    float *d_x = dev_shifted(x, n, shift), *d_scale = dev_shifted(scale, ss ? n : (size_t)D, shift);
    float *d_dout = dev_shifted(dout, n, shift), *d_out = dev_shifted(NULL, n, shift);
    float *d_rstd = dev_poisoned(sizeof(float) * T), *d_dx = dev_shifted(dx0, n, shift);
    float *d_ds = dev_copy(ds0, sizeof(float) * D), *d_bc = dev_poisoned(sizeof(float) * n);
    UNDER_TEST->norm->rmsnorm_forward(d_out, d_rstd, d_x, d_scale, ss, T, D, 1e-6f, bf16);
    char shape[64];
    snprintf(shape, sizeof shape, "T=%d D=%d scale_stride=%zu bf16=%d shift=%d", T, D, ss, bf16, shift);
    check_dev_floats("rmsnorm_forward out", shape, out, d_out, n, 0, 0);
    check_dev_floats("rmsnorm_forward rstd", shape, rstd, d_rstd, T, 0, 0);
    float *d_rstd_cpu = dev_copy(rstd, sizeof(float) * T);   // the backward from the same rstd
    UNDER_TEST->norm->rmsnorm_backward_dx(d_dx, d_dout, d_x, d_scale, ss, d_rstd_cpu, T, D, bf16);
    UNDER_TEST->norm->rmsnorm_dscale_leaf(d_ds, d_dout, d_x, d_rstd_cpu, t0, len, D, bf16);
    UNDER_TEST->norm->broadcast_rows(d_bc, d_scale, T, D);
    check_dev_floats("rmsnorm_backward_dx", shape, dx, d_dx, n, 0, 0);
    check_dev_floats("rmsnorm_dscale_leaf", shape, ds, d_ds, D, 0, 0);
    check_dev_floats("broadcast_rows", shape, bc, d_bc, n, 0, 0);
    free(x); free(scale); free(dout); free(dx0); free(ds0); free(out); free(rstd); free(dx); free(ds); free(bc);
    dev_free(d_x - shift); dev_free(d_scale - shift); dev_free(d_dout - shift); dev_free(d_out - shift);
    dev_free(d_rstd); dev_free(d_dx - shift); dev_free(d_ds); dev_free(d_bc); dev_free(d_rstd_cpu);
}

void test_norm(void) {
    // (widths of 4-multiples: gpu/norm.cu's rows four elements at a time; 37 and shift 1: one)
    test_norm_case(9, 300, 0, 0, 0);
    test_norm_case(9, 300, 0, 1, 0);
    test_norm_case(9, 300, 1, 1, 1);
    test_norm_case(5, 64, 1, 0, 0);
    test_norm_case(5, 64, 1, 1, 0);
    test_norm_case(3, 12300, 0, 1, 0);   // wider than gpu/norm.cu's terms in shared memory
    test_norm_case(600, 37, 0, 1, 0);    // dscale: a leaf of 300 tokens, over gpu/norm.cu's tiles of 128,
    test_norm_case(600, 300, 1, 0, 0);   // and columns not a multiple of its 16
}

// ---------------------------------------------------------------- rope
static void test_rope_case(int B, int S, int H, int stride, int Dr, int pos0, int bf16) {
    int half = Dr / 2;
    size_t nt = (size_t)S * half, nx = (size_t)B * S * H * stride;
    float *sn = malloc(sizeof(float) * nt), *cs = malloc(sizeof(float) * nt);
    float *x0 = rand_floats(nx, -1, 1), *x = copy_of(x0, sizeof(float) * nx);
    if (ORACLE) {
        ORACLE->rope->rope_table(sn, cs, S, pos0, Dr, 1.0f, 10000.0f, bf16);
        ORACLE->rope->rope_rotate(x, sn, cs, B, S, H, stride, Dr, +1, bf16);
        ORACLE->rope->rope_rotate(x, sn, cs, B, S, H, stride, Dr, -1, 0);
    } else {
        float ratio = (float)(10000.0 / 1.0);
        for (int i = 0; i < half; i++) {
            float ts = 1.0f * powf(ratio, (float)(2 * i) / (float)Dr);
            for (int s = 0; s < S; s++) {
                float th = (float)(pos0 + s) / ts;
                sn[(size_t)s * half + i] = bf16 ? bf16_round(sinf(th)) : sinf(th);
                cs[(size_t)s * half + i] = bf16 ? bf16_round(cosf(th)) : cosf(th);
            }
        }
        for (int dir = 1; dir >= -1; dir -= 2)
            for (size_t bsh = 0; bsh < (size_t)B * S * H; bsh++) {
                int s = (int)(bsh / H % S);
                float *x1 = x + bsh * stride, *x2 = x1 + half;
                for (int i = 0; i < half; i++) {
                    float c = cs[(size_t)s * half + i], sn_i = sn[(size_t)s * half + i], sg = dir > 0 ? sn_i : -sn_i;
                    float a = x1[i], b = x2[i];
                    x1[i] = a * c - b * sg;
                    x2[i] = b * c + a * sg;
                    if (bf16 && dir > 0) { x1[i] = bf16_round(x1[i]); x2[i] = bf16_round(x2[i]); }
                }
            }
    }
    float *d_sn = dev_poisoned(sizeof(float) * nt), *d_cs = dev_poisoned(sizeof(float) * nt);
    UNDER_TEST->rope->rope_table(d_sn, d_cs, S, pos0, Dr, 1.0f, 10000.0f, bf16);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d S=%d H=%d stride=%d Dr=%d pos0=%d bf16=%d", B, S, H, stride, Dr, pos0, bf16);
    // sin and cos of angles up to pos0 + S: the device's powf and sinf err by a few ulp of
    // the angle, an absolute error of about (pos0 + S) * 2^-24 per ulp.
    float angle_abs = ORACLE ? 8 * (pos0 + S) * FLT_EPSILON : 0;
    check_dev_floats("rope_table sin", shape, sn, d_sn, nt, bf16_tol(bf16, EXP_ULPS), angle_abs);
    check_dev_floats("rope_table cos", shape, cs, d_cs, nt, bf16_tol(bf16, EXP_ULPS), angle_abs);
    // The rotation from the expected tables (plain arithmetic: equal bits).
    float *d_sn2 = dev_copy(sn, sizeof(float) * nt), *d_cs2 = dev_copy(cs, sizeof(float) * nt);
    float *d_x = dev_copy(x0, sizeof(float) * nx);
    UNDER_TEST->rope->rope_rotate(d_x, d_sn2, d_cs2, B, S, H, stride, Dr, +1, bf16);
    UNDER_TEST->rope->rope_rotate(d_x, d_sn2, d_cs2, B, S, H, stride, Dr, -1, 0);
    check_dev_floats("rope_rotate +1 then -1", shape, x, d_x, nx, 0, 0);
    free(sn); free(cs); free(x0); free(x);
    dev_free(d_sn); dev_free(d_cs); dev_free(d_sn2); dev_free(d_cs2); dev_free(d_x);
}

// rope_type=yarn: the table of given frequencies (times a scale), and the interleaved
// rotation +1 then -1 between separate arrays (x0 -> y -> z), against the loops below.
static void test_rope_pairs_case(int B, int S, int H, int stride, int Dr, int pos0, float scale, int bf16) {
    int half = Dr / 2;
    size_t nt = (size_t)S * half, nx = (size_t)B * S * H * stride;
    float *freq = rand_floats((size_t)half, 0.001f, 1.0f);
    float *sn = malloc(sizeof(float) * nt), *cs = malloc(sizeof(float) * nt);
    float *x0 = rand_floats(nx, -1, 1), *y = rand_floats(nx, -1, 1), *z = rand_floats(nx, -1, 1);
    float *y0 = copy_of(y, sizeof(float) * nx), *z0 = copy_of(z, sizeof(float) * nx);   // (past Dr: kept)
    if (ORACLE) {
        ORACLE->rope->rope_table_freq(sn, cs, S, pos0, half, freq, scale);
        ORACLE->rope->rope_rotate_pairs(y, x0, sn, cs, B, S, H, stride, Dr, +1, bf16);
        ORACLE->rope->rope_rotate_pairs(z, y, sn, cs, B, S, H, stride, Dr, -1, 0);
    } else {
        for (int s = 0; s < S; s++)
            for (int i = 0; i < half; i++) {
                float th = (float)(pos0 + s) * freq[i];
                sn[(size_t)s * half + i] = scale * sinf(th);
                cs[(size_t)s * half + i] = scale * cosf(th);
            }
        for (size_t bsh = 0; bsh < (size_t)B * S * H; bsh++) {
            int s = (int)(bsh / H % S);
            const float *in = x0 + bsh * stride;
            float *out = y + bsh * stride, *back = z + bsh * stride;
            for (int i = 0; i < half; i++) {   // forward: pairs (2i, 2i+1) into the halves
                float c = cs[(size_t)s * half + i], sg = sn[(size_t)s * half + i];
                float o1 = in[2 * i] * c - in[2 * i + 1] * sg, o2 = in[2 * i + 1] * c + in[2 * i] * sg;
                out[i] = bf16 ? bf16_round(o1) : o1;
                out[half + i] = bf16 ? bf16_round(o2) : o2;
            }
            for (int i = 0; i < half; i++) {   // backward: the halves by -theta into the pairs
                float c = cs[(size_t)s * half + i], sg = -sn[(size_t)s * half + i];
                back[2 * i] = out[i] * c - out[half + i] * sg;
                back[2 * i + 1] = out[half + i] * c + out[i] * sg;
            }
        }
    }
    char shape[112];
    snprintf(shape, sizeof shape, "B=%d S=%d H=%d stride=%d Dr=%d pos0=%d scale=%g bf16=%d", B, S, H, stride, Dr, pos0,
             scale, bf16);
    float *d_freq = dev_copy(freq, sizeof(float) * half);
    float *d_sn = dev_poisoned(sizeof(float) * nt), *d_cs = dev_poisoned(sizeof(float) * nt);
    UNDER_TEST->rope->rope_table_freq(d_sn, d_cs, S, pos0, half, d_freq, scale);
    float angle_abs = ORACLE ? 8 * (pos0 + S) * FLT_EPSILON : 0;   // the device's sinf, cosf (as above)
    check_dev_floats("rope_table_freq sin", shape, sn, d_sn, nt, tol(EXP_ULPS), angle_abs);
    check_dev_floats("rope_table_freq cos", shape, cs, d_cs, nt, tol(EXP_ULPS), angle_abs);
    float *d_sn2 = dev_copy(sn, sizeof(float) * nt), *d_cs2 = dev_copy(cs, sizeof(float) * nt);
    float *d_x = dev_copy(x0, sizeof(float) * nx), *d_y = dev_copy(y0, sizeof(float) * nx);
    float *d_z = dev_copy(z0, sizeof(float) * nx);
    UNDER_TEST->rope->rope_rotate_pairs(d_y, d_x, d_sn2, d_cs2, B, S, H, stride, Dr, +1, bf16);
    check_dev_floats("rope_rotate_pairs +1", shape, y, d_y, nx, 0, 0);
    UNDER_TEST->rope->rope_rotate_pairs(d_z, d_y, d_sn2, d_cs2, B, S, H, stride, Dr, -1, 0);
    check_dev_floats("rope_rotate_pairs -1", shape, z, d_z, nx, 0, 0);
    free(freq); free(sn); free(cs); free(x0); free(y); free(z); free(y0); free(z0);
    dev_free(d_freq); dev_free(d_sn); dev_free(d_cs); dev_free(d_sn2); dev_free(d_cs2);
    dev_free(d_x); dev_free(d_y); dev_free(d_z);
}

void test_rope(void) {
    test_rope_case(2, 7, 3, 10, 8, 5, 0);
    test_rope_case(1, 33, 2, 16, 16, 100, 1);
    test_rope_pairs_case(2, 7, 3, 10, 8, 5, 1.0f, 0);     // entries 8, 9 of each head not rotated
    test_rope_pairs_case(1, 33, 2, 16, 16, 100, 1.3f, 1);
}

// ---------------------------------------------------------------- embedding
// T tokens with ids drawn from 0 .. idmax (some outside this device's rows v0 .. v0+V-1),
// two of them the same row (rep, rep2): its gradient rows add in token order.
static void test_embedding_case(int T, int D, int V, int v0, int idmax, int rep, int rep2) {
    int *ids = rand_ints(T, 0, idmax);
    ids[rep] = ids[rep2] = v0 + 3;
    float *table = rand_floats((size_t)V * D, -1, 1), *dout = rand_floats((size_t)T * D, -1, 1);
    float *dt0 = rand_floats((size_t)V * D, -1, 1), *out = malloc(sizeof(float) * T * D);
    float *dt = copy_of(dt0, sizeof(float) * V * D), *oh = calloc((size_t)T * V, sizeof(float));
    long t0 = 1, len = T - 3;
    if (ORACLE) {
        ORACLE->embedding->embedding_forward(out, ids, table, T, D, V, v0);
        ORACLE->embedding->embedding_backward_leaf(dt, dout, ids, t0, len, D, V, v0);
        ORACLE->embedding->embedding_onehot(oh, ids, T, V, v0);
    } else {
        for (int t = 0; t < T; t++) {
            int mine = ids[t] >= v0 && ids[t] < v0 + V;
            for (int i = 0; i < D; i++) out[(size_t)t * D + i] = mine ? table[(size_t)(ids[t] - v0) * D + i] : 0.0f;
            if (mine) oh[(size_t)t * V + ids[t] - v0] = 1.0f;
            if (mine && t >= t0 && t < t0 + len)
                for (int i = 0; i < D; i++) dt[(size_t)(ids[t] - v0) * D + i] += dout[(size_t)t * D + i];
        }
    }
    int *d_ids = dev_copy(ids, sizeof(int) * T);
    float *d_table = dev_copy(table, sizeof(float) * V * D), *d_dout = dev_copy(dout, sizeof(float) * T * D);
    float *d_out = dev_poisoned(sizeof(float) * T * D), *d_dt = dev_copy(dt0, sizeof(float) * V * D);
    float *zeros = calloc((size_t)T * V, sizeof(float)), *d_oh = dev_copy(zeros, sizeof(float) * T * V);
    UNDER_TEST->embedding->embedding_forward(d_out, d_ids, d_table, T, D, V, v0);
    UNDER_TEST->embedding->embedding_backward_leaf(d_dt, d_dout, d_ids, t0, len, D, V, v0);
    UNDER_TEST->embedding->embedding_onehot(d_oh, d_ids, T, V, v0);
    char shape[64];
    snprintf(shape, sizeof shape, "T=%d D=%d V=%d v0=%d", T, D, V, v0);
    check_dev_floats("embedding_forward", shape, out, d_out, (size_t)T * D, 0, 0);
    check_dev_floats("embedding_backward_leaf", shape, dt, d_dt, (size_t)V * D, 0, 0);
    check_dev_floats("embedding_onehot", shape, oh, d_oh, (size_t)T * V, 0, 0);
    free(ids); free(table); free(dout); free(dt0); free(out); free(dt); free(oh); free(zeros);
    dev_free(d_ids); dev_free(d_table); dev_free(d_dout); dev_free(d_out); dev_free(d_dt); dev_free(d_oh);
}

void test_embedding(void) {
    test_embedding_case(23, 17, 11, 5, 20, 1, 2);      // few rows: most runs of 8 tokens repeat one
    test_embedding_case(61, 300, 400, 7, 420, 10, 13);  // many rows: most runs distinct, one not; 2 blocks
    test_embedding_case(4110, 5, 40, 3, 50, 9, 4000);   // a leaf of 4107 tokens: gpu/embedding.cu by columns
}

// ---------------------------------------------------------------- mla
void test_mla(void) {
    int T = 6, N = 3, Dn = 5, Dr = 4, Dv = 7, R = 9, Qk = Dn + Dr, h0 = 1, h1 = 3;
    size_t nkv = (size_t)T * N * (Dn + Dv), nk = (size_t)T * N * Qk, nv = (size_t)T * N * Dv;
    float *kv = rand_floats(nkv, -1, 1), *ckv = rand_floats((size_t)T * (R + Dr), -1, 1);
    float *x0 = rand_floats(nk, -1, 1), *dv = rand_floats(nv, -1, 1), *piece0 = rand_floats((size_t)T * Dr, -1, 1);
    float *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nv), *dkv = malloc(sizeof(float) * nkv);
    float *x = copy_of(x0, sizeof(float) * nk), *piece = copy_of(piece0, sizeof(float) * T * Dr);
    float *cols = malloc(sizeof(float) * T * Dr);
    if (ORACLE) {
        ORACLE->mla->mla_assemble_kv(k, v, kv, ckv, T, N, Dn, Dr, Dv, R);
        ORACLE->mla->mla_split_dkv(dkv, x0, dv, T, N, Dn, Dr, Dv);
        ORACLE->mla->mla_k_rope_grad_leaf(piece, x0, T, N, Dn, Dr, h0, h1);
        ORACLE->mla->mla_apply_scale(x, nk, 0.37f);
        ORACLE->mla->mla_copy_cols(cols, Dr, ckv + R, R + Dr, T, Dr);
    } else {
        for (int t = 0; t < T; t++)
            for (int h = 0; h < N; h++) {
                size_t th = (size_t)t * N + h;
                for (int e = 0; e < Dn; e++) k[th * Qk + e] = kv[th * (Dn + Dv) + e];
                for (int e = 0; e < Dr; e++) k[th * Qk + Dn + e] = ckv[(size_t)t * (R + Dr) + R + e];
                for (int e = 0; e < Dv; e++) v[th * Dv + e] = kv[th * (Dn + Dv) + Dn + e];
                for (int e = 0; e < Dn; e++) dkv[th * (Dn + Dv) + e] = x0[th * Qk + e];
                for (int e = 0; e < Dv; e++) dkv[th * (Dn + Dv) + Dn + e] = dv[th * Dv + e];
                if (h >= h0 && h < h1)
                    for (int e = 0; e < Dr; e++) piece[(size_t)t * Dr + e] += x0[th * Qk + Dn + e];
            }
        for (size_t i = 0; i < nk; i++) x[i] *= 0.37f;
        for (int t = 0; t < T; t++)
            for (int e = 0; e < Dr; e++) cols[(size_t)t * Dr + e] = ckv[(size_t)t * (R + Dr) + R + e];
    }
    float *d_kv = dev_copy(kv, sizeof(float) * nkv), *d_ckv = dev_copy(ckv, sizeof(float) * T * (R + Dr));
    float *d_x = dev_copy(x0, sizeof(float) * nk), *d_dk = dev_copy(x0, sizeof(float) * nk);
    float *d_dv = dev_copy(dv, sizeof(float) * nv), *d_piece = dev_copy(piece0, sizeof(float) * T * Dr);
    float *d_k = dev_poisoned(sizeof(float) * nk), *d_v = dev_poisoned(sizeof(float) * nv);
    float *d_dkv = dev_poisoned(sizeof(float) * nkv), *d_cols = dev_poisoned(sizeof(float) * T * Dr);
    UNDER_TEST->mla->mla_assemble_kv(d_k, d_v, d_kv, d_ckv, T, N, Dn, Dr, Dv, R);
    UNDER_TEST->mla->mla_split_dkv(d_dkv, d_dk, d_dv, T, N, Dn, Dr, Dv);
    UNDER_TEST->mla->mla_k_rope_grad_leaf(d_piece, d_dk, T, N, Dn, Dr, h0, h1);
    UNDER_TEST->mla->mla_apply_scale(d_x, nk, 0.37f);
    UNDER_TEST->mla->mla_copy_cols(d_cols, Dr, d_ckv + R, R + Dr, T, Dr);
    const char *shape = "T=6 N=3 Dn=5 Dr=4 Dv=7 R=9";
    check_dev_floats("mla_assemble_kv k", shape, k, d_k, nk, 0, 0);
    check_dev_floats("mla_assemble_kv v", shape, v, d_v, nv, 0, 0);
    check_dev_floats("mla_split_dkv", shape, dkv, d_dkv, nkv, 0, 0);
    check_dev_floats("mla_k_rope_grad_leaf heads 1..2", shape, piece, d_piece, (size_t)T * Dr, 0, 0);
    check_dev_floats("mla_apply_scale", shape, x, d_x, nk, 0, 0);
    check_dev_floats("mla_copy_cols", shape, cols, d_cols, (size_t)T * Dr, 0, 0);
    free(kv); free(ckv); free(x0); free(dv); free(piece0); free(k); free(v); free(dkv); free(x); free(piece);
    free(cols);
    dev_free(d_kv); dev_free(d_ckv); dev_free(d_x); dev_free(d_dk); dev_free(d_dv); dev_free(d_piece);
    dev_free(d_k); dev_free(d_v); dev_free(d_dkv); dev_free(d_cols);
}

// ---------------------------------------------------------------- mlp, cast, sum

// The part first .. first+len-1 of the device array got (n): want's values there (`inside`),
// `around`'s elsewhere (NULL: the poison, 0xff bytes, never written).
static void check_part(const char *kernel, const char *shape, const float *around, const float *inside,
                       const float *got, long n, long first, long len, int ulps, float abs) {
    float *want = malloc(sizeof(float) * n);
    if (around) memcpy(want, around, sizeof(float) * n);
    else memset(want, 0xff, sizeof(float) * n);
    memcpy(want + first, inside + first, sizeof(float) * len);
    char what[96];
    snprintf(what, sizeof what, "%s of %ld elements from %ld", kernel, len, first);
    check_dev_floats(what, shape, want, got, n, ulps, abs);
    free(want);
}

// The bits at d_bits (n): want's values, rounded, in first .. first+len-1 (within ulps or
// abs), 0xffff (the poison) elsewhere.
static void check_packed_part(const char *kernel, const char *shape, const float *want, const uint16_t *d_bits, long n,
                              long first, long len, int ulps, float abs) {
    uint16_t *got = dev_fetch(d_bits, sizeof(uint16_t) * n);
    size_t outside = 0;
    for (long i = 0; i < n; i++) outside += (i < first || i >= first + len) && got[i] != 0xffffu;
    check(outside == 0, "%s of %ld elements from %ld %s: %zu values outside the part written", kernel, len, first,
          shape, outside);
    float *d_f = dev_poisoned(sizeof(float) * n);
    UNDER_TEST->cast->unpack_bf16(d_f + first, d_bits + first, (size_t)len);   // (exact: checked above)
    check_part(kernel, shape, NULL, want, d_f, n, first, len, ulps, abs);
    free(got);
    dev_free(d_f);
}

// SwiGLU's packed forms on h0, h1 and dact as 16-bit numbers (rounded here), against the
// per-element formulas on those values rounded as the layers round (the CPU's bits: its
// float32 forms meet the same loops with a tolerance of 0 above), from element 0 of each
// array (on a GPU four at a time, then the rest) and from element 1 (one at a time); the
// backward also with dh1 written over dact. dh0's bound: the float32 check's absolute floor
// plus a bf16 step, which is under ABS_FLOOR wherever the floor is what passes.
static void test_swiglu_packed(const float *h0, const float *h1, const float *dact, long n) {
    uint16_t *b0 = malloc(sizeof(uint16_t) * n), *b1 = malloc(sizeof(uint16_t) * n), *bd = malloc(sizeof(uint16_t) * n);
    float *act = malloc(sizeof(float) * n), *g0 = malloc(sizeof(float) * n), *g1 = malloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) {
        b0[i] = bf16_bits(h0[i]);
        b1[i] = bf16_bits(h1[i]);
        bd[i] = bf16_bits(dact[i]);
        float z = bf16_float(b0[i]), u = bf16_float(b1[i]), d = bf16_float(bd[i]), sg = ref_sigmoid(z);
        act[i] = bf16_round(z * sg * u);
        g1[i] = bf16_round(d * (z * sg));
        g0[i] = bf16_round(d * u * sg * (1.0f + z * (1.0f - sg)));
    }
    uint16_t *d_h0 = dev_copy(b0, sizeof(uint16_t) * n), *d_h1 = dev_copy(b1, sizeof(uint16_t) * n);
    uint16_t *d_dact = dev_copy(bd, sizeof(uint16_t) * n);
    const char *shape = "n=5000";
    for (long first = 0; first <= 1; first++) {
        long len = n - first - 3;
        uint16_t *d_a = dev_poisoned(sizeof(uint16_t) * n), *d_b = dev_poisoned(sizeof(uint16_t) * n);
        uint16_t *d_g0 = dev_poisoned(sizeof(uint16_t) * n), *d_g1 = dev_poisoned(sizeof(uint16_t) * n);
        uint16_t *d_g0b = dev_poisoned(sizeof(uint16_t) * n), *d_over = dev_poisoned(sizeof(uint16_t) * n);
        const uint16_t *z = d_h0 + first, *u = d_h1 + first, *d = d_dact + first;
        UNDER_TEST->mlp->swiglu_forward_packed(d_a + first, z, u, len);
        UNDER_TEST->mlp->swiglu_backward_packed(d_b + first, d_g0 + first, d_g1 + first, d, z, u, len);
        dev_upload(d_over + first, bd + first, sizeof(uint16_t) * len);   // dact's copy, then dh1 over it
        UNDER_TEST->mlp->swiglu_backward_packed(NULL, d_g0b + first, d_over + first, d_over + first, z, u, len);
        float abs0 = ORACLE ? 2 * ABS_FLOOR : 0;
        check_packed_part("swiglu_forward_packed", shape, act, d_a, n, first, len, tol(BF16_ULPS), 0);
        check_packed_part("swiglu_backward_packed act", shape, act, d_b, n, first, len, tol(BF16_ULPS), 0);
        check_packed_part("swiglu_backward_packed dh0", shape, g0, d_g0, n, first, len, tol(BF16_ULPS), abs0);
        check_packed_part("swiglu_backward_packed dh1", shape, g1, d_g1, n, first, len, tol(BF16_ULPS), 0);
        check_packed_part("swiglu_backward_packed dh0, no act", shape, g0, d_g0b, n, first, len, tol(BF16_ULPS), abs0);
        check_packed_part("swiglu_backward_packed dh1 over dact", shape, g1, d_over, n, first, len, tol(BF16_ULPS), 0);
        dev_free(d_a); dev_free(d_b); dev_free(d_g0); dev_free(d_g1); dev_free(d_g0b); dev_free(d_over);
    }
    free(b0); free(b1); free(bd); free(act); free(g0); free(g1);
    dev_free(d_h0); dev_free(d_h1); dev_free(d_dact);
}

void test_elementwise(void) {
    long n = 5000;
    float *h0 = rand_floats(n, -6, 6), *h1 = rand_floats(n, -2, 2), *dact = rand_floats(n, -1, 1);
    float *act = malloc(sizeof(float) * n), *actb = malloc(sizeof(float) * n);
    float *dh0 = malloc(sizeof(float) * n), *dh1 = malloc(sizeof(float) * n), *actbw = malloc(sizeof(float) * n);
    float *r = copy_of(h1, sizeof(float) * n), *sum = copy_of(h0, sizeof(float) * n);
    uint16_t *bits = malloc(sizeof(uint16_t) * n);
    float *unpacked = malloc(sizeof(float) * n);
    if (ORACLE) {
        ORACLE->mlp->swiglu_forward(act, h0, h1, n, 0);
        ORACLE->mlp->swiglu_forward(actb, h0, h1, n, 1);
        ORACLE->mlp->swiglu_backward(actbw, dh0, dh1, dact, h0, h1, n, 1);
        ORACLE->cast->round_to_bf16(r, n);
        ORACLE->cast->pack_bf16(bits, h1, n);
        ORACLE->cast->unpack_bf16(unpacked, bits, n);
        ORACLE->sum->tree_add(sum, h1, n);
    } else {
        for (long i = 0; i < n; i++) {
            float sg = ref_sigmoid(h0[i]);
            act[i] = h0[i] * sg * h1[i];
            actb[i] = bf16_round(act[i]);
            actbw[i] = actb[i];
            dh1[i] = dact[i] * (h0[i] * sg);
            dh0[i] = dact[i] * h1[i] * sg * (1.0f + h0[i] * (1.0f - sg));
            r[i] = bf16_round(h1[i]);
            bits[i] = bf16_bits(h1[i]);
            unpacked[i] = bf16_float(bits[i]);
            sum[i] += h1[i];
        }
    }
    float *d_h0 = dev_copy(h0, sizeof(float) * n), *d_h1 = dev_copy(h1, sizeof(float) * n);
    float *d_dact = dev_copy(dact, sizeof(float) * n), *d_act = dev_poisoned(sizeof(float) * n);
    float *d_actb = dev_poisoned(sizeof(float) * n), *d_dh0 = dev_poisoned(sizeof(float) * n);
    float *d_dh1 = dev_poisoned(sizeof(float) * n), *d_r = dev_copy(h1, sizeof(float) * n);
    float *d_sum = dev_copy(h0, sizeof(float) * n), *d_res = dev_copy(h0, sizeof(float) * n);
    uint16_t *d_bits = dev_poisoned(sizeof(uint16_t) * n);
    float *d_unpacked = dev_poisoned(sizeof(float) * n);
    UNDER_TEST->mlp->swiglu_forward(d_act, d_h0, d_h1, n, 0);
    UNDER_TEST->mlp->swiglu_forward(d_actb, d_h0, d_h1, n, 1);
    // the backward with act (bf16), and again without it, dh1 over a copy of dact
    float *d_actbw = dev_poisoned(sizeof(float) * n), *d_dh0b = dev_poisoned(sizeof(float) * n);
    float *d_dd = dev_copy(dact, sizeof(float) * n);
    UNDER_TEST->mlp->swiglu_backward(d_actbw, d_dh0, d_dh1, d_dact, d_h0, d_h1, n, 1);
    UNDER_TEST->mlp->swiglu_backward(NULL, d_dh0b, d_dd, d_dd, d_h0, d_h1, n, 0);
    UNDER_TEST->cast->round_to_bf16(d_r, n);
    UNDER_TEST->cast->pack_bf16(d_bits, d_h1, n);
    UNDER_TEST->cast->unpack_bf16(d_unpacked, d_bits, n);
    UNDER_TEST->sum->tree_add(d_sum, d_h1, n);
    UNDER_TEST->sum->residual_add(d_res, d_h1, n);
    const char *shape = "n=5000";
    // sigmoid through the device's expf; dh0 ends in 1 + z(1 - sg): a near-cancellation
    check_dev_floats("swiglu_forward", shape, act, d_act, n, tol(EXP_ULPS), 0);
    check_dev_floats("swiglu_forward bf16", shape, actb, d_actb, n, tol(BF16_ULPS), 0);
    check_dev_floats("swiglu_backward dh0", shape, dh0, d_dh0, n, tol(EXP_ULPS), ORACLE ? ABS_FLOOR : 0);
    check_dev_floats("swiglu_backward dh1", shape, dh1, d_dh1, n, tol(EXP_ULPS), 0);
    check_dev_floats("swiglu_backward act bf16", shape, actbw, d_actbw, n, tol(BF16_ULPS), 0);
    check_dev_floats("swiglu_backward dh0, no act", shape, dh0, d_dh0b, n, tol(EXP_ULPS), ORACLE ? ABS_FLOOR : 0);
    check_dev_floats("swiglu_backward dh1 over dact", shape, dh1, d_dd, n, tol(EXP_ULPS), 0);
    check_dev_floats("round_to_bf16", shape, r, d_r, n, 0, 0);
    // the rounded copy, whole (16-byte aligned: four at a time) and from element 1 of each
    // array (not aligned: one at a time) into a poisoned array, its source untouched
    for (long first = 0; first <= 1; first++) {
        float *d_src = dev_copy(h1, sizeof(float) * n), *d_out = dev_poisoned(sizeof(float) * n);
        UNDER_TEST->cast->round_copy_bf16(d_out + first, d_src + first, (size_t)(n - first));
        check_part("round_copy_bf16", shape, NULL, r, d_out, n, first, n - first, 0, 0);
        check_dev_floats("round_copy_bf16's source", shape, h1, d_src, n, 0, 0);
        dev_free(d_src); dev_free(d_out);
    }
    // The kernels that go four elements a thread where their arrays are 16-byte aligned, on
    // parts of a length not a multiple of 4: from element 1 (off a 16-byte boundary: one at a
    // time) and from element 4 (on one: four at a time, then the rest); the elements around
    // a part untouched (or still poisoned). SwiGLU's backward in place over dact, as the
    // layers call it.
    for (long first = 1; first <= 4; first += 3) {
        long len = n - first - 3;
        float *d_part = dev_copy(h1, sizeof(float) * n), *d_acc = dev_copy(h0, sizeof(float) * n);
        UNDER_TEST->cast->round_to_bf16(d_part + first, (size_t)len);
        UNDER_TEST->sum->residual_add(d_acc + first, d_h1 + first, (size_t)len);
        check_part("round_to_bf16", shape, h1, r, d_part, n, first, len, 0, 0);
        check_part("residual_add", shape, h0, sum, d_acc, n, first, len, 0, 0);
        float *d_a = dev_poisoned(sizeof(float) * n), *d_g0 = dev_poisoned(sizeof(float) * n);
        float *d_g1 = dev_copy(dact, sizeof(float) * n), *d_f = dev_poisoned(sizeof(float) * n);
        UNDER_TEST->mlp->swiglu_forward(d_f + first, d_h0 + first, d_h1 + first, len, 1);
        UNDER_TEST->mlp->swiglu_backward(d_a + first, d_g0 + first, d_g1 + first, d_g1 + first, d_h0 + first,
                                         d_h1 + first, len, 1);
        check_part("swiglu_forward bf16", shape, NULL, actb, d_f, n, first, len, tol(BF16_ULPS), 0);
        check_part("swiglu_backward act", shape, NULL, actbw, d_a, n, first, len, tol(BF16_ULPS), 0);
        check_part("swiglu_backward dh0", shape, NULL, dh0, d_g0, n, first, len, tol(EXP_ULPS), ORACLE ? ABS_FLOOR : 0);
        check_part("swiglu_backward dh1 over dact", shape, dact, dh1, d_g1, n, first, len, tol(EXP_ULPS), 0);
        // the packing into a poisoned array (its bits around the part stay 0xffff), then back
        uint16_t *d_b = dev_poisoned(sizeof(uint16_t) * n);
        float *d_u = dev_poisoned(sizeof(float) * n);
        UNDER_TEST->cast->pack_bf16(d_b + first, d_h1 + first, (size_t)len);
        UNDER_TEST->cast->unpack_bf16(d_u + first, d_b + first, (size_t)len);
        uint16_t *got = dev_fetch(d_b, sizeof(uint16_t) * n);
        size_t wrong = 0;
        for (long i = 0; i < n; i++) wrong += got[i] != (i >= first && i < first + len ? bits[i] : 0xffffu);
        check(wrong == 0, "pack_bf16 of %ld elements from %ld %s: %zu of %ld differ", len, first, shape, wrong, n);
        check_part("unpack_bf16", shape, NULL, unpacked, d_u, n, first, len, 0, 0);
        free(got);
        dev_free(d_part); dev_free(d_acc); dev_free(d_a); dev_free(d_g0); dev_free(d_g1); dev_free(d_f);
        dev_free(d_b); dev_free(d_u);
    }
    uint16_t *got_bits = dev_fetch(d_bits, sizeof(uint16_t) * n);
    size_t bad = 0;
    for (long i = 0; i < n; i++) bad += got_bits[i] != bits[i];
    check(bad == 0, "pack_bf16 %s: %zu of %ld differ", shape, bad, n);
    check_dev_floats("unpack_bf16", shape, unpacked, d_unpacked, n, 0, 0);
    check_dev_floats("tree_add", shape, sum, d_sum, n, 0, 0);
    check_dev_floats("residual_add", shape, sum, d_res, n, 0, 0);
    test_swiglu_packed(h0, h1, dact, n);
    free(h0); free(h1); free(dact); free(act); free(actb); free(dh0); free(dh1); free(r); free(sum); free(bits);
    free(unpacked); free(got_bits);
    dev_free(d_h0); dev_free(d_h1); dev_free(d_dact); dev_free(d_act); dev_free(d_actb); dev_free(d_dh0);
    dev_free(d_dh1); dev_free(d_r); dev_free(d_sum); dev_free(d_res); dev_free(d_bits); dev_free(d_unpacked);
    free(actbw);
    dev_free(d_actbw); dev_free(d_dh0b); dev_free(d_dd);
}

