// gpu/matmul_cublas.h: what gpu/matmul.cu, which owns cuBLAS (its loading, the thread's handle
// and workspace, the grouped calls), gives gpu/matmul16.cu: the library's products on bf16
// storage (kernels/matmul16.h). Row-major operands, row strides as stored, as gpu/gemm.h.
#ifndef MESHMOE_GPU_MATMUL_CUBLAS_H
#define MESHMOE_GPU_MATMUL_CUBLAS_H
#include <stdint.h>

// Which products run (gpu_matmul_use_cublas): 0 the ordered GEMM, 1 cuBLAS, 2 cuBLAS with the
// weight products on tensor cores. Always 0 in a HIP build.
int gpu_matmul_mode(void);

#if GPU_HAVE_CUBLAS

// C (M,N) = op(A) (M,K) @ op(B) (K,N), or C += ... when accumulate; A and B bf16 as stored,
// the products on tensor cores (cublasGemmEx, CUDA_R_16BF operands, CUBLAS_COMPUTE_32F: each
// product of two bf16 values exact, the sums float32 in cuBLAS's order). Mode 1 or 2 only.
void gemm16_cublas(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                   int accumulate, float *C, int ldc);
// C (M,N) = bf16(A (M,K) @ op(B) (K,N)), A, B and C bf16 as stored (kernels/matmul16.h's
// *_round16): cublasGemmEx with D as CUDA_R_16BF, the float32 sums converted by cuBLAS, beta 0.
void gemm16_round_cublas(int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         uint16_t *C, int ldc);
// The same on the experts' groups of rows (as rows_grouped16_cublas, accumulate 0) in grouped
// calls with bf16 results; 0 when not done (a cuBLAS without the grouped call or refusing bf16
// results, or MESHMOE_GROUPED=kernel): the caller then rounds float32 sums.
int rows_grouped16_round_cublas(int transB, const int *rows, int G, int N, int K, const uint16_t *A,
                                const uint16_t *B, uint16_t *C);
// The experts' products in grouped calls (cublasGemmGroupedBatchedEx, or the own kernel as
// MESHMOE_GROUPED says) on bf16 storage:
// C_g (n_g,N) = A_g (n_g,K) @ op(B_g) (+= when accumulate) on group g's rows (rows: G+1 host
// ints; A (R,K) and C (R,N) packed; B (G,K,N), or (G,N,K) when transB); and dw_g (C,OC) =
// inp_g^T @ dout_g over group g's rows off[g*n] .. off[g*n+n] (+= when accumulate). 0 when not
// done (a cuBLAS without the grouped call, or none it accepts and not the own kernel): the
// caller then loops.
int rows_grouped16_cublas(int transB, const int *rows, int G, int N, int K, const uint16_t *A, const uint16_t *B,
                          float *C, int accumulate);
int dw_grouped16_cublas(const int *off, int n, int G, int C, int OC, const uint16_t *inp, const uint16_t *dout,
                        float *dw, int accumulate);
#endif

#endif
