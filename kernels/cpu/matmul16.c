// kernels/cpu/matmul16.c: the CPU's 16-bit products (kernels/matmul16.h). Every result has
// the bits of the float32 kernel on the widened values (a bf16 value is exact in float32):
//   - matmul_impl=ordered (the default): the ordered GEMM widens the operands into the panels
//     it packs (ordered_gemm16 and its chunked and leaves forms, kernels/cpu/gemm_pack16.c),
//     so no operand exists as floats beyond the panels;
//   - matmul_impl=openblas, and the plain loops (matmul_impl=plain): each operand widened
//     whole into a float32 copy, then the float32 kernel of the same backend. The copies are
//     the product's own working memory, freed before it returns (as OpenBLAS's partial sums
//     in kernels/cpu/matmul.c), not the tagged allocator's.
// The rounded forms (*_round16) run the float32-output form into a scratch of their own, a
// block of columns at a time, and pack each block (round_cols).
#include "kernels/matmul16.h"
#include "kernels/matmul.h"        // the float32 kernels, matmul_cpu_uses_openblas
#include "kernels/cpu/gemm.h"      // ordered_gemm16, ordered_gemm_chunked16, ordered_gemm_leaves16
#include "kernels/cast.h"          // cast_cpu.unpack_bf16: the widening
#include "kernels/grouped_loop.h"  // the grouped products, a group at a time
#include "kernels/bf16.h"          // bf16_bits: the rounding of the *_round16 forms
#include "core/common.h"           // die
#include <stdlib.h>
#include <string.h>

// x (n floats) = the bf16 values h (n), in a new buffer the caller frees.
static float *widened(const uint16_t *h, size_t n) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    if (!x) die("out of host memory widening a product's bf16 operand (%zu values)", n);
    cast_cpu.unpack_bf16(x, h, n);
    return x;
}

// The values a strided operand spans: rows of `cols` values `ld` apart (the gaps included,
// whatever they hold: widening them is harmless and nothing reads them).
static size_t span(int rows, int cols, int ld) { return rows > 0 ? (size_t)(rows - 1) * ld + cols : 0; }

// Whether table k's products have 16-bit forms of their own: the ordered GEMM's (matmul_cpu
// without OpenBLAS); else the operands are widened into copies for the float32 product.
static int ordered(const MatmulKernels *k) { return k == &matmul_cpu && !matmul_cpu_uses_openblas(); }

// C (M,N) = op(A) @ op(B) (+ C when accumulate), as table k's gemm on the widened values.
static void gemm16(const MatmulKernels *k, int tA, int tB, int M, int N, int K, const uint16_t *A, int lda,
                   const uint16_t *B, int ldb, int accumulate, float *C, int ldc) {
    if (ordered(k)) {
        ordered_gemm16(tA, tB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
        return;
    }
    if (M == 0 || N == 0) return;
    float *a = widened(A, tA ? span(K, M, lda) : span(M, K, lda));
    float *b = widened(B, tB ? span(N, K, ldb) : span(K, N, ldb));
    k->gemm(tA, tB, M, N, K, a, lda, b, ldb, accumulate, C, ldc);
    free(a); free(b);
}

// The chunked product and a weight gradient's leaves, as table k's on the widened values.
static void chunked16(const MatmulKernels *k, int transB, int M, int N, int K, int chunks, const uint16_t *A,
                      int lda, const uint16_t *B, int ldb, float *C, int ldc) {
    if (ordered(k)) {
        ordered_gemm_chunked16(transB, M, N, K, chunks, A, lda, B, ldb, C, ldc);
        return;
    }
    if (M == 0 || N == 0) return;
    float *a = widened(A, span(M, K, lda)), *b = widened(B, transB ? span(N, K, ldb) : span(K, N, ldb));
    k->gemm_chunked(transB, M, N, K, chunks, a, lda, b, ldb, C, ldc);
    free(a); free(b);
}

static void dw_leaves16(const MatmulKernels *k, float *dw, const uint16_t *inp, const uint16_t *dout, const int *off,
                        int n, int C, int OC, int accumulate) {
    if (ordered(k)) {
        ordered_gemm_leaves16(C, OC, off, n, inp, C, dout, OC, accumulate, dw, OC);
        return;
    }
    if (C == 0 || OC == 0 || n <= 0) return;
    float *x = widened(inp, (size_t)off[n] * C), *d = widened(dout, (size_t)off[n] * OC);
    k->matmul_backward_dw_leaves(dw, x, d, off, n, C, OC, accumulate);
    free(x); free(d);
}

// ---- The rounded forms: C (M,N) = bf16(A (M,K) @ op(B)), op(B) = B (K,N) or B^T with B
// (N,K) when transB, as table k's gemm16 gives it (onto zeros when onto_zeros: the dinp
// form's one add of the chain to 0.0f), each sum then rounded to its 16-bit number. The
// float32 sums go through a scratch of ROUND_COLS columns (the ordered GEMM's column block,
// so no panel is packed more often than in one call over all of N; its bits do not depend on
// the block, nor the plain loops'), or of all N for OpenBLAS, whose blocking follows the
// shape: the bits of one float32 call and then pack_bf16. The scratch is the product's own
// working memory, as the widened copies above.
enum { ROUND_COLS = 1024 };
static void round_cols(const MatmulKernels *k, int transB, int M, int N, int K, const uint16_t *A,
                       const uint16_t *B, int onto_zeros, uint16_t *C) {
    if (M == 0 || N == 0) return;
    int step = k == &matmul_cpu && matmul_cpu_uses_openblas() ? N : ROUND_COLS;
    int width = N < step ? N : step;
    float *s = malloc(sizeof(float) * (size_t)M * width);
    if (!s) die("out of host memory for a rounded product's sums (%d x %d)", M, width);
    for (int j0 = 0; j0 < N; j0 += step) {
        int nc = N - j0 < step ? N - j0 : step;
        if (onto_zeros) memset(s, 0, sizeof(float) * (size_t)M * nc);
        const uint16_t *b = transB ? B + (size_t)j0 * K : B + j0;   // op(B)'s columns j0 ..
        gemm16(k, 0, transB, M, nc, K, A, K, b, transB ? K : N, onto_zeros, s, nc);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < nc; j++) C[(size_t)i * N + j0 + j] = bf16_bits(s[(size_t)i * nc + j]);
    }
    free(s);
}

// ---- matmul16_cpu: the products of kernels/cpu/matmul.c in their 16-bit forms; the grouped
// products a group at a time, as matmul_cpu's.
static void forward(float *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC, int accumulate) {
    gemm16(&matmul_cpu, 0, 0, T, OC, C, inp, C, w, OC, accumulate, out, OC);   // (T,C) @ (C,OC)
}
static void dinp(float *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {
    gemm16(&matmul_cpu, 0, 1, T, C, OC, dout, OC, w, OC, 1, dinp, C);   // (T,OC) @ (OC,C)
}
static void dw(float *dw, const uint16_t *inp, const uint16_t *dout, int len, int C, int OC, int accumulate) {
    gemm16(&matmul_cpu, 1, 0, C, OC, len, inp, C, dout, OC, accumulate, dw, OC);   // (C,len) @ (len,OC)
}
static void chunked(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda, const uint16_t *B,
                    int ldb, float *C, int ldc) {
    chunked16(&matmul_cpu, transB, M, N, K, chunks, A, lda, B, ldb, C, ldc);
}
static void dw_leaves(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n, int C, int OC,
                      int accumulate) {
    dw_leaves16(&matmul_cpu, dw, inp, dout, off, n, C, OC, accumulate);
}
static void forward_grouped(float *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G, int C, int OC,
                            int accumulate) {
    forward_grouped_loop16(&matmul16_cpu, out, inp, w, rows, G, C, OC, accumulate);
}
static void dinp_grouped(float *dinp, const uint16_t *dout, const uint16_t *w, const int *rows, int G, int C, int OC) {
    dinp_grouped_loop16(&matmul16_cpu, dinp, dout, w, rows, G, C, OC);
}
static void chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const uint16_t *A,
                            const uint16_t *B, float *out) {
    chunked_grouped_loop16(&matmul16_cpu, transB, rows, G, N, K, chunks, A, B, out);
}
static void dw_leaves_grouped(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n, int G,
                              int C, int OC, int accumulate) {
    dw_leaves_grouped_loop16(&matmul16_cpu, dw, inp, dout, off, n, G, C, OC, accumulate);
}

static void forward_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC) {
    round_cols(&matmul_cpu, 0, T, OC, C, inp, w, 0, out);
}
static void dinp_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {
    round_cols(&matmul_cpu, 1, T, C, OC, dout, w, 1, dinp);
}
static void forward_grouped_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G,
                                    int C, int OC) {
    forward_grouped_loop_round16(&matmul16_cpu, out, inp, w, rows, G, C, OC);
}
static void dinp_grouped_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, const int *rows, int G,
                                 int C, int OC) {
    dinp_grouped_loop_round16(&matmul16_cpu, dinp, dout, w, rows, G, C, OC);
}

const Matmul16Kernels matmul16_cpu = {forward,         dinp,         dw,
                                      chunked,         dw_leaves,    forward_grouped,
                                      dinp_grouped,    chunked_grouped, dw_leaves_grouped,
                                      forward_round16, dinp_round16, forward_grouped_round16,
                                      dinp_grouped_round16};

// ---- matmul16_cpu_plain: the same through matmul_cpu_plain (matmul_impl=plain).
static void plain_forward(float *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC, int accumulate) {
    gemm16(&matmul_cpu_plain, 0, 0, T, OC, C, inp, C, w, OC, accumulate, out, OC);
}
static void plain_dinp(float *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {
    gemm16(&matmul_cpu_plain, 0, 1, T, C, OC, dout, OC, w, OC, 1, dinp, C);
}
static void plain_dw(float *dw, const uint16_t *inp, const uint16_t *dout, int len, int C, int OC, int accumulate) {
    gemm16(&matmul_cpu_plain, 1, 0, C, OC, len, inp, C, dout, OC, accumulate, dw, OC);
}
static void plain_chunked(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda, const uint16_t *B,
                          int ldb, float *C, int ldc) {
    chunked16(&matmul_cpu_plain, transB, M, N, K, chunks, A, lda, B, ldb, C, ldc);
}
static void plain_dw_leaves(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n, int C, int OC,
                            int accumulate) {
    dw_leaves16(&matmul_cpu_plain, dw, inp, dout, off, n, C, OC, accumulate);
}
static void plain_forward_grouped(float *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G, int C,
                                  int OC, int accumulate) {
    forward_grouped_loop16(&matmul16_cpu_plain, out, inp, w, rows, G, C, OC, accumulate);
}
static void plain_dinp_grouped(float *dinp, const uint16_t *dout, const uint16_t *w, const int *rows, int G, int C,
                               int OC) {
    dinp_grouped_loop16(&matmul16_cpu_plain, dinp, dout, w, rows, G, C, OC);
}
static void plain_chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const uint16_t *A,
                                  const uint16_t *B, float *out) {
    chunked_grouped_loop16(&matmul16_cpu_plain, transB, rows, G, N, K, chunks, A, B, out);
}
static void plain_dw_leaves_grouped(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n, int G,
                                    int C, int OC, int accumulate) {
    dw_leaves_grouped_loop16(&matmul16_cpu_plain, dw, inp, dout, off, n, G, C, OC, accumulate);
}

static void plain_forward_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC) {
    round_cols(&matmul_cpu_plain, 0, T, OC, C, inp, w, 0, out);
}
static void plain_dinp_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {
    round_cols(&matmul_cpu_plain, 1, T, C, OC, dout, w, 1, dinp);
}
static void plain_forward_grouped_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, const int *rows,
                                          int G, int C, int OC) {
    forward_grouped_loop_round16(&matmul16_cpu_plain, out, inp, w, rows, G, C, OC);
}
static void plain_dinp_grouped_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, const int *rows,
                                       int G, int C, int OC) {
    dinp_grouped_loop_round16(&matmul16_cpu_plain, dinp, dout, w, rows, G, C, OC);
}

const Matmul16Kernels matmul16_cpu_plain = {plain_forward,         plain_dinp,           plain_dw,
                                            plain_chunked,         plain_dw_leaves,      plain_forward_grouped,
                                            plain_dinp_grouped,    plain_chunked_grouped, plain_dw_leaves_grouped,
                                            plain_forward_round16, plain_dinp_round16,   plain_forward_grouped_round16,
                                            plain_dinp_grouped_round16};
