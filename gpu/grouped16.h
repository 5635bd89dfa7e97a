// gpu/grouped16.h: the experts' grouped products in bf16 by the backend's own tensor-core
// kernel (gpu/grouped16.cu), for gpu/matmul.cu where cuBLAS was chosen and its grouped call
// refuses them (MESHMOE_GROUPED, gpu/matmul_cublas.h). The same two forms and arguments as
// gpu/matmul_cublas.h's grouped calls:
//   rows: C_g (n_g,N) = A_g (n_g,K) @ op(B_g) (+= when accumulate) on group g's rows (rows: G+1
//         host ints; A (R,K) and C (R,N) packed; B (G,K,N), or (G,N,K) when transB);
//   dw:   dw_g (C,OC) = inp_g^T @ dout_g over group g's rows off[g*n] .. off[g*n+n] (+= when
//         accumulate); a group without rows is left as it is.
// The operands stored as bf16 (*16*), or as float32 holding bf16 values (*_bf16_*: each
// rounded to bf16 as it is read, which changes none of them). 1 when done; 0 when this build
// has no warp matrix products (HIP) or for a product over K = 0.
#ifndef MESHMOE_GPU_GROUPED16_H
#define MESHMOE_GPU_GROUPED16_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {   // (tests/products_gpu.c, C, times the kernel beside cuBLAS)
#endif

int rows_grouped16_tc(int transB, const int *rows, int G, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                      int accumulate);
int dw_grouped16_tc(const int *off, int n, int G, int C, int OC, const uint16_t *inp, const uint16_t *dout, float *dw,
                    int accumulate);
int rows_grouped_bf16_tc(int transB, const int *rows, int G, int N, int K, const float *A, const float *B, float *C,
                         int accumulate);
int dw_grouped_bf16_tc(const int *off, int n, int G, int C, int OC, const float *inp, const float *dout, float *dw,
                       int accumulate);

#ifdef __cplusplus
}
#endif
#endif
