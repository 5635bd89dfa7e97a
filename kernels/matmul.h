// kernels/matmul.h: the matrix products (docs/model.md#summation-order); the layer, which
// counts the flops and adds the weight gradient's leaves along the canonical tree, is
// model/matmul.c. Weights are stored as MaxText kernels: w is (C,OC) row-major and
// out = inp @ w. All arrays are row-major float32.
//
// On the CPU every product is the ordered GEMM (kernels/cpu/gemm.h): each output element
// is one chain of fused multiply-adds over the contraction in order, whatever rows and
// columns share the call, so sharding never changes a bit. With matmul_impl=openblas the
// CPU backend calls OpenBLAS instead (faster, not row-stable); with matmul_impl=plain the
// plain backend runs the same chains as the in-order triple loop (kernels/cpu/gemm_plain.c).
#ifndef MESHMOE_KERNELS_MATMUL_H
#define MESHMOE_KERNELS_MATMUL_H

typedef struct MatmulKernels {
    // out (T,OC) = inp (T,C) @ w (C,OC), or out += ... when accumulate is 1.
    void (*matmul_forward)(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate);
    // dinp (T,C) += dout (T,OC) @ w^T; w (C,OC).
    void (*matmul_backward_dinp)(float *dinp, const float *dout, const float *w, int T, int C, int OC);
    // dw (C,OC) = inp^T @ dout over len tokens: inp (len,C), dout (len,OC); dw += ... when
    // accumulate is 1. One leaf of the weight gradient, written or added onto the leaf
    // before it (model/matmul.h:matmul_dw_leaf).
    void (*matmul_backward_dw)(float *dw, const float *inp, const float *dout, int len, int C, int OC, int accumulate);
    // The general product for strided operands (a piece of a contraction, one expert's rows):
    // C (M,N) = op(A) (M,K) @ op(B) (K,N), or C += ... when accumulate is 1; op(X) = X^T
    // when transX; lda, ldb, ldc are the row strides of A, B, C as stored.
    void (*gemm)(int transA, int transB, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, int accumulate, float *C, int ldc);
    // A contraction cut into pieces (model/matmul.h, the tensor-parallel sums): C (M,N) =
    // the products A[:, r*Kc..(r+1)*Kc) @ op(B)[r*Kc..(r+1)*Kc, :] of the pieces r = 0 ..
    // chunks-1 (Kc = K/chunks, each its own product), added along the canonical tree
    // (base/treesum.h: left + right, the left subtree the largest power of two of pieces
    // below chunks), then onto 0.0f; C is overwritten. A (M,K) row-major; op(B) = B (K,N),
    // or B^T with B (N,K) when transB; lda, ldb, ldc the row strides as stored.
    void (*gemm_chunked)(int transB, int M, int N, int K, int chunks, const float *A, int lda,
                         const float *B, int ldb, float *C, int ldc);
    // A weight gradient's leaves (model/matmul.c, model/moe.c): dw (C,OC) += the products
    // inp[off[l]:off[l+1]]^T @ dout[off[l]:off[l+1]] of the leaves l = 0 .. n-1 (n >= 1), each
    // as matmul_backward_dw computes it, added along the canonical tree (base/treesum.h), the
    // root then added onto dw; with accumulate 0, onto 0.0f instead, dw written and not read
    // (the caller knows it holds zeros: the same bits). inp (.,C), dout (.,OC); off (n+1,
    // host memory) starts at 0 and never decreases; an empty leaf's product is 0.0f.
    void (*matmul_backward_dw_leaves)(float *dw, const float *inp, const float *dout, const int *off, int n, int C,
                                      int OC, int accumulate);

    // The experts' products, all of a layer's experts in one call (megablox=true,
    // model/moe_experts.c). G groups of consecutive rows, group g the rows [rows[g],
    // rows[g+1]) (rows: G+1 host ints from 0, never decreasing; R = rows[G]), each with its
    // own weight, the G weights stacked. Each group's result is the one the kernel named
    // without _grouped makes on that group's rows alone, so a backend may loop over it; a
    // group without rows writes nothing.
    // out (R,OC) = inp (R,C) @ w_g (C,OC) on group g's rows, or += when accumulate; w (G,C,OC).
    void (*matmul_forward_grouped)(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC,
                                   int accumulate);
    // dinp (R,C) += dout (R,OC) @ w_g^T on group g's rows; w (G,C,OC).
    void (*matmul_backward_dinp_grouped)(float *dinp, const float *dout, const float *w, const int *rows, int G, int C,
                                         int OC);
    // out (R,N) = gemm_chunked of A (R,K) and B_g on group g's rows, rows packed (lda K, ldc N);
    // B (G,K,N), or (G,N,K) with B_g^T when transB.
    void (*gemm_chunked_grouped)(int transB, const int *rows, int G, int N, int K, int chunks, const float *A,
                                 const float *B, float *out);
    // dw_g (C,OC) of dw (G,C,OC) = matmul_backward_dw_leaves of group g's n leaves, leaf l over
    // the rows off[g*n+l] .. off[g*n+l+1] of inp (R,C) and dout (R,OC) (off: G*n+1 host ints
    // from 0, never decreasing, group g's leaves covering its rows); a group without rows
    // leaves dw_g as it is, whatever accumulate says.
    void (*matmul_backward_dw_leaves_grouped)(float *dw, const float *inp, const float *dout, const int *off, int n,
                                              int G, int C, int OC, int accumulate);
} MatmulKernels;

extern const MatmulKernels matmul_cpu;         // kernels/cpu/matmul.c: the ordered GEMM (or OpenBLAS)
extern const MatmulKernels matmul_cpu_plain;   // the same products as the plain triple loop (same bits)

// The CPU backend's choice of library (config key matmul_impl), made once at start-up:
// 0 the ordered GEMM (the default), 1 OpenBLAS (dies in a build without it).
void matmul_cpu_use_openblas(int on);
int matmul_cpu_uses_openblas(void);   // 1 after matmul_cpu_use_openblas(1)

// OpenBLAS, as the CPU backend sets it up (kernels/cpu/matmul.c).
// Which BLAS runs, for the start-up line (e.g. "OpenBLAS 0.3.21, kernels SkylakeX").
const char *blas_description(void);
void blas_set_threads(int n);
// Re-executes the program with OPENBLAS_CORETYPE=SkylakeX (or Haswell) when OpenBLAS picked
// kernels narrower than the CPU's widest vectors (Haswell's on AMD Zen 4, Prescott's on an
// Intel Xeon it does not know). Call first thing in main().
void blas_prefer_fast_kernels(char **argv);

#endif
