// kernels/matmul16.h: the matrix products of kernels/matmul.h with 16-bit operands: both
// inputs of every product stored as bf16 bits (uint16_t, kernels/bf16.h), the sums and the
// output float32. What bf16 storage is built on (docs/bf16-storage.md): in bf16 mode the
// operands of the layers' products are bf16-valued already (the weights' rounded copy, the
// activations rounded at the cast points, the gradients rounded where the forward rounded),
// so storing them as 16-bit numbers loses nothing, and half the bytes move.
//
// The contract is the float32 table's, kernel by kernel, on the widened operands: a bf16
// value widened to float32 is exact, so each kernel here gives the bits its float32 twin
// gives on float arrays holding the same values (on the CPU, and on the GPU's ordered GEMM;
// cuBLAS keeps its own order either way: tests/conformance_matmul16.c checks both). The
// names, shapes and arguments are those of kernels/matmul.h; `gemm`, the general float32
// product, has no twin: its callers' operands are not bf16-valued (model/matmul.h).
#ifndef MESHMOE_KERNELS_MATMUL16_H
#define MESHMOE_KERNELS_MATMUL16_H
#include <stdint.h>

typedef struct Matmul16Kernels {
    // out (T,OC) = inp (T,C) @ w (C,OC), or out += ... when accumulate is 1.
    void (*matmul_forward)(float *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC, int accumulate);
    // dinp (T,C) += dout (T,OC) @ w^T; w (C,OC).
    void (*matmul_backward_dinp)(float *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC);
    // dw (C,OC) = inp^T @ dout over len tokens, or dw += ... when accumulate is 1.
    void (*matmul_backward_dw)(float *dw, const uint16_t *inp, const uint16_t *dout, int len, int C, int OC,
                               int accumulate);
    // C (M,N) = the contraction of A (M,K) with op(B) cut into `chunks` pieces along the tree;
    // op(B) = B (K,N), or B^T with B (N,K) when transB; lda, ldb, ldc the row strides as stored.
    void (*gemm_chunked)(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda, const uint16_t *B,
                         int ldb, float *C, int ldc);
    // dw (C,OC) += the leaves' products along the tree (off: n+1 host ints), or onto 0.0f.
    void (*matmul_backward_dw_leaves)(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n,
                                      int C, int OC, int accumulate);
    // The experts' grouped products: G groups of rows (rows: G+1 host ints), w (G,C,OC).
    void (*matmul_forward_grouped)(float *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G, int C,
                                   int OC, int accumulate);
    void (*matmul_backward_dinp_grouped)(float *dinp, const uint16_t *dout, const uint16_t *w, const int *rows, int G,
                                         int C, int OC);
    void (*gemm_chunked_grouped)(int transB, const int *rows, int G, int N, int K, int chunks, const uint16_t *A,
                                 const uint16_t *B, float *out);
    void (*matmul_backward_dw_leaves_grouped)(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off,
                                              int n, int G, int C, int OC, int accumulate);

    // The products whose result the layer rounds at once (cast point 4 of model/precision.h)
    // and keeps as 16-bit numbers: the output too is bf16 bits, each the float32 form's sum
    // rounded to nearest even (kernels/bf16.h), with no float32 result in between. On the CPU
    // the bits of the float32 form followed by pack_bf16; on the GPU under cuBLAS the rounding
    // is the product's own output conversion (D as CUDA_R_16BF).
    // out (T,OC) = bf16(inp (T,C) @ w (C,OC)).
    void (*matmul_forward_round16)(uint16_t *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC);
    // dinp (T,C) = bf16(dout (T,OC) @ w^T), written: matmul_backward_dinp onto zeros, rounded.
    void (*matmul_backward_dinp_round16)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC);
    // The same on the experts' groups of rows (rows: G+1 host ints), w (G,C,OC).
    void (*matmul_forward_grouped_round16)(uint16_t *out, const uint16_t *inp, const uint16_t *w, const int *rows,
                                           int G, int C, int OC);
    void (*matmul_backward_dinp_grouped_round16)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w,
                                                 const int *rows, int G, int C, int OC);
} Matmul16Kernels;

// kernels/cpu/matmul16.c: matmul_cpu's products, the ordered GEMM widening the operands into
// its panels (OpenBLAS on widened copies); matmul_cpu_plain's on widened copies (the same bits).
extern const Matmul16Kernels matmul16_cpu;
extern const Matmul16Kernels matmul16_cpu_plain;

#endif
