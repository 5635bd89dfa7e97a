// model/matmul.h: the one matrix multiply every layer uses, with its backward.
// Weights are stored as MaxText kernels: w is (C, OC) row-major and out = inp @ w.
// OpenBLAS does the work when it is linked; otherwise a portable loop (slower, same
// math up to rounding) runs and the trainer says so at start-up.
#ifndef MESHMOE_MATMUL_H
#define MESHMOE_MATMUL_H

// out (T,OC) = inp (T,C) @ w (C,OC), or out += ... when accumulate is 1.
void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate);

// Backward of matmul_forward. Either output may be NULL (not needed).
//   dinp (T,C)  += dout (T,OC) @ w^T
//   dw   (C,OC) += sum over tokens of inp^T dout, summed leaf by leaf (`leaf` tokens each)
//                  along the canonical tree of model/treesum.h.
void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int T, int C, int OC, int leaf);

// The raw GEMM: C (M,N) = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X or X^T.
// lda/ldb/ldc are the row strides of A, B, C as stored.
void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

// Which BLAS runs, for the start-up line (e.g. "OpenBLAS 0.3.21, kernels SkylakeX").
const char *blas_description(void);
void blas_set_threads(int n);
// Re-executes the program with OPENBLAS_CORETYPE=SkylakeX when OpenBLAS picked slower
// AVX2 kernels on a CPU with AVX-512 (see matmul.c). Call first thing in main().
void blas_prefer_fast_kernels(char **argv);

#endif
