// kernels/mlp.h: the SwiGLU nonlinearity (docs/model.md#swiglu), used by the dense MLP
// (model/mlp.c) and by every MoE expert (model/moe.c).
#ifndef MESHMOE_KERNELS_MLP_H
#define MESHMOE_KERNELS_MLP_H
#include <stdint.h>

typedef struct MlpKernels {
    // act (n) = silu(h0) * h1, silu(z) = z * sigmoid(z); h0, h1 (n).
    // bf16: act rounded to bf16 (cast point 11).
    void (*swiglu_forward)(float *act, const float *h0, const float *h1, long n, int bf16);
    // dh0, dh1 (n) = the gradients of h0, h1 given dact (n); dh1 may be dact itself (each
    // element is read before it is written). act (n), where not NULL, receives silu(h0) * h1
    // as swiglu_forward writes it (bf16: rounded), from the same sigmoid: a backward that
    // recomputes the activation takes each exponential once.
    void (*swiglu_backward)(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                            long n, int bf16);
    // The same in bf16 mode on 16-bit numbers (bf16 bits, kernels/bf16.h), the arrays as
    // stored under bf16_storage, whose products read 16-bit operands
    // (kernels/matmul16.h): h0, h1 and dact as the layers keep them; act rounded (cast point
    // 11) and dh0, dh1 rounded as the layers round the float32 forms' (a rounding and a
    // packing in one pass). dh1 may be dact (each element read before it is written).
    void (*swiglu_forward_packed)(uint16_t *act, const uint16_t *h0, const uint16_t *h1, long n);
    void (*swiglu_backward_packed)(uint16_t *act, uint16_t *dh0, uint16_t *dh1, const uint16_t *dact,
                                   const uint16_t *h0, const uint16_t *h1, long n);
} MlpKernels;

extern const MlpKernels mlp_cpu;   // kernels/cpu/mlp.c

#endif
