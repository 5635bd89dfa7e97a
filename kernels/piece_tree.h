// kernels/piece_tree.h: the chunked product (kernels/matmul.h:gemm_chunked) and a weight
// gradient's leaves (matmul_backward_dw_leaves) as separate products and passes of adds, for the backends whose products are a library's or a
// kernel's of their own (OpenBLAS on the CPU, the GPU): the ordered CPU GEMM does the same
// merges tile by tile instead (kernels/cpu/gemm_tree.c:ordered_gemm_chunked); all three, and the
// plain loop's per-element form (kernels/cpu/gemm_plain.c), split the tree with tree_left.
#ifndef MESHMOE_KERNELS_PIECE_TREE_H
#define MESHMOE_KERNELS_PIECE_TREE_H
#include <stddef.h>

// The canonical tree over n > 1 pieces (base/treesum.h) splits them into a left subtree of
// the largest power of two below n and a right one of the rest: that power.
static inline int tree_left(int n) {
    int h = 1;
    while (2 * h < n) h *= 2;
    return h;
}

typedef void (*PieceGemm)(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
                          int ldb, int accumulate, float *C, int ldc);
typedef void (*PieceAdd)(float *left, const float *right, size_t n);

// C (M,N, row stride N) = the tree over pieces lo .. lo+n-1 of A (M, chunks*kc) @ op(B), each
// piece a product of its own (gemm), each merge left += right (add) with the left subtree
// the largest power of two of pieces below n; S holds the right subtrees (M x N per level,
// as many levels as the tree is deep).
static inline void piece_tree(PieceGemm gemm, PieceAdd add, int transB, int M, int N, int kc, int lo, int n,
                              const float *A, int lda, const float *B, int ldb, float *C, float *S) {
    if (n == 1) {
        gemm(0, transB, M, N, kc, A + (size_t)lo * kc, lda, B + (size_t)lo * kc * (transB ? 1 : (size_t)ldb), ldb, 0,
             C, N);
        return;
    }
    int h = tree_left(n);
    piece_tree(gemm, add, transB, M, N, kc, lo, h, A, lda, B, ldb, C, S);
    piece_tree(gemm, add, transB, M, N, kc, lo + h, n - h, A, lda, B, ldb, S, S + (size_t)M * N);
    add(C, S, (size_t)M * N);
}

// The leaves of a weight gradient (kernels/matmul.h:matmul_backward_dw_leaves) as separate
// products: C (M,N, row stride N) = the tree over the n leaves, leaf l the product
// op(A) @ B over rows off[l] .. off[l+1]-1 of A (.,M; op(A) = A^T) and B (.,N), each
// merge left += right; S holds the right subtrees (M x N per level).
static inline void leaf_tree(PieceGemm gemm, PieceAdd add, int M, int N, const int *off, int n, const float *A,
                             int lda, const float *B, int ldb, float *C, float *S) {
    if (n == 1) {
        gemm(1, 0, M, N, off[1] - off[0], A + (size_t)off[0] * lda, lda, B + (size_t)off[0] * ldb, ldb, 0, C, N);
        return;
    }
    int h = tree_left(n);
    leaf_tree(gemm, add, M, N, off, h, A, lda, B, ldb, C, S);
    leaf_tree(gemm, add, M, N, off + h, n - h, A, lda, B, ldb, S, S + (size_t)M * N);
    add(C, S, (size_t)M * N);
}

// The levels of the tree over n pieces: the buffers of M x N that piece_tree needs, C's
// included.
static inline int piece_tree_levels(int n) {
    int depth = 1;
    for (; n > 1; n = (n + 1) / 2) depth++;
    return depth;
}

#endif
