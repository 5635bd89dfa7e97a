// gpu/gemm.h: the ordered GEMM on the GPU (gpu/gemm.cu), the twin of kernels/cpu/gemm.h
// with the same contract: every output element is one chain of fused multiply-adds over k,
// in order, from 0.0f,  C[i][j] = fma(A[i][K-1], B[K-1][j], ... fma(A[i][0], B[0][j], 0.0f)),
// and with accumulate the finished chain is added to C's old value (one add). So the GPU
// gives the CPU's bits, and a product does not depend on how its rows were split.
#ifndef MESHMOE_GPU_GEMM_H
#define MESHMOE_GPU_GEMM_H

// C (M,N) = op(A) (M,K) @ op(B) (K,N), or C += ... when accumulate is 1; row-major with row
// strides lda, ldb, ldc as stored; op(X) = X^T when transX. Device pointers.
void ordered_gemm_gpu(int transA, int transB, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, int accumulate, float *C, int ldc);

#endif
