// kernels/cpu/gemm_plain.c: the GEMM as the in-order triple loop, the definition the
// ordered GEMM (kernels/cpu/gemm.c) keeps: every output element is one chain of fused
// multiply-adds over k in increasing order from 0.0f, then, with accumulate, one add of
// C's old value. fmaf rounds once, as a lane of the tiled kernels' vector FMA does, so the
// two give the same bits (tests/test_gemm.c compares them). matmul_impl=plain runs the
// trainer on this loop (kernels/cpu/matmul.c:matmul_cpu_plain), a student can step through.
#include "kernels/cpu/gemm.h"   // plain_gemm's declaration beside ordered_gemm's
#include "kernels/piece_tree.h"  // tree_left: the canonical tree's split
#include <math.h>               // fmaf
#include <stddef.h>             // size_t

void plain_gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                const float *B, int ldb, int accumulate, float *C, int ldc) {
    #pragma omp parallel for collapse(2) schedule(static)   // elements are independent
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = 0.0f;
            for (int k = 0; k < K; k++) {
                float a = transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];   // op(A)[i][k]
                float b = transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];   // op(B)[k][j]
                c = fmaf(a, b, c);
            }
            float *out = &C[(size_t)i * ldc + j];
            *out = accumulate ? *out + c : c;
        }
}

// Pieces lo .. lo+n-1 of element (i, j) added along the canonical tree (base/treesum.h):
// the left subtree holds the largest power of two of pieces below n; each piece is the
// element's chain over its K/chunks k's, from 0.0f.
static float element_tree(int transB, int i, int j, int kc, int lo, int n, const float *A, int lda, const float *B,
                        int ldb) {
    if (n == 1) {
        float c = 0.0f;
        for (int k = lo * kc; k < (lo + 1) * kc; k++) {
            float b = transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
            c = fmaf(A[(size_t)i * lda + k], b, c);
        }
        return c;
    }
    int h = tree_left(n);
    float left = element_tree(transB, i, j, kc, lo, h, A, lda, B, ldb);
    return left + element_tree(transB, i, j, kc, lo + h, n - h, A, lda, B, ldb);
}

void plain_gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B,
                        int ldb, float *C, int ldc) {
    #pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * ldc + j] = 0.0f + element_tree(transB, i, j, K / chunks, 0, chunks, A, lda, B, ldb);
}

// Leaves lo .. lo+n-1 of element (i, j) of a weight gradient along the canonical tree; leaf
// l is the element's chain over rows off[l] .. off[l+1]-1, from 0.0f.
static float element_leaves(int i, int j, const int *off, int n, const float *A, int lda, const float *B, int ldb) {
    if (n == 1) {
        float c = 0.0f;
        for (int k = off[0]; k < off[1]; k++) c = fmaf(A[(size_t)k * lda + i], B[(size_t)k * ldb + j], c);
        return c;
    }
    int h = tree_left(n);
    float left = element_leaves(i, j, off, h, A, lda, B, ldb);
    return left + element_leaves(i, j, off + h, n - h, A, lda, B, ldb);
}

void plain_gemm_leaves(int M, int N, const int *off, int n, const float *A, int lda, const float *B, int ldb,
                       int accumulate, float *C, int ldc) {
    if (n <= 0) return;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *c = C + (size_t)i * ldc + j;
            *c = (accumulate ? *c : 0.0f) + element_leaves(i, j, off, n, A, lda, B, ldb);
        }
}
