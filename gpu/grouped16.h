// gpu/grouped16.h: the experts' grouped products in bf16 by the backend's own tensor-core
// kernel (gpu/grouped16.cu), for gpu/matmul.cu where cuBLAS was chosen and its grouped call
// refuses them (MESHMOE_GROUPED, gpu/matmul_cublas.h). The same two forms and arguments as
// gpu/matmul_cublas.h's grouped calls:
//   rows: C_g (n_g,N) = A_g (n_g,K) @ op(B_g) (+= when accumulate) on group g's rows (rows: G+1
//         host ints; A (R,K) and C (R,N) packed; B (G,K,N), or (G,N,K) when transB);
//   dw:   dw_g (C,OC) = inp_g^T @ dout_g over group g's rows off[g*n] .. off[g*n+n] (+= when
//         accumulate); a group without rows is left as it is.
// A and B (inp and dout) stored as bf16 (bf16_stored 1), or as float32 holding bf16 values
// (0: each rounded to bf16 as it is read, which changes none of them). 1 when done; 0 when
// this build has no warp matrix products (HIP) or for a product over K = 0.
#ifndef MESHMOE_GPU_GROUPED16_H
#define MESHMOE_GPU_GROUPED16_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {   // (tests/products_gpu.c, C, times the kernel beside cuBLAS)
#endif

int rows_grouped_tc(int transB, const int *rows, int G, int N, int K, const void *A, const void *B, float *C,
                    int accumulate, int bf16_stored);
int dw_grouped_tc(const int *off, int n, int G, int C, int OC, const void *inp, const void *dout, float *dw,
                  int accumulate, int bf16_stored);

#ifdef __cplusplus
}
#endif
#endif
