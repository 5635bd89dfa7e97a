// gpu/matmul_lt.h: the 16-bit products under cuBLAS through cuBLASLt, an algorithm kept per
// class of shapes (gpu/matmul_lt.cu says why). gpu/matmul.cu, which owns the thread's
// workspace and cuBLAS handle, calls these; row-major operands as gpu/matmul_cublas.h.
#ifndef MESHMOE_GPU_MATMUL_LT_H
#define MESHMOE_GPU_MATMUL_LT_H
#include <stddef.h>
#include <stdint.h>

#if GPU_HAVE_CUBLAS
// At start-up, with cuBLAS chosen: cuBLASLt loaded and used, unless MESHMOE_CUBLAS_LT=off or
// the library lacks a function (then one line on stderr says so, and cublasGemmEx does it all).
void lt_start(void);
// C (M,N) = op(A) (M,K) @ op(B) (K,N), A and B bf16 as stored, sums float32; C float32 (+= C
// when accumulate) or, c16, bf16 bits (accumulate 0). ws: the thread's cuBLAS workspace (NULL
// when it has none). 1 when done, 0 when the caller is to call cublasGemmEx.
int lt_gemm16(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
              int accumulate, void *C, int c16, int ldc, void *ws, size_t ws_bytes);
// The calling thread's handle and kept algorithms given back (its workspace changed, or it
// left cuBLAS).
void lt_release(void);
#endif

#endif
