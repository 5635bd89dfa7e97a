// model/mlp.h: the dense SwiGLU feed-forward, y = (silu(x wi_0) * (x wi_1)) wo.
#ifndef MESHMOE_MLP_H
#define MESHMOE_MLP_H
#include "model/params.h"
#include "base/config.h"
#include "base/context.h"

typedef struct {
    float *h0;   // (T,F) x @ wi_0 (before silu)
    float *h1;   // (T,F) x @ wi_1
} MlpSaved;

// out (T,D) = SwiGLU(x (T,D)); F is the hidden width (this device's slice of it under
// tensor parallelism; c gives tensor_reduce_chunks). s gets MEM_ACTIVATIONS buffers.
// out == NULL: only what the backward reads (h0, h1), as a remat recomputation needs.
void mlp_forward(const Config *c, const MlpParams *p, MlpSaved *s, float *out, const float *x, int T, int D, int F);
// dx (T,D) += ; g->* += weight gradients (canonical tree over the leaves, base/context.h); frees s.
void mlp_backward(const Config *c, const MlpParams *p, MlpParams *g, MlpSaved *s, float *dx, const float *dout,
                  const float *x, int T, int D, int F, Leaves leaf);
// Free what mlp_forward saved (safe on a cleared struct): a forward without a backward.
void mlp_saved_free(MlpSaved *s);

// SwiGLU's arrays in bf16 mode under bf16_storage (model/precision.h: packed_operands), for the dense MLP
// and the MoE experts alike: 16-bit numbers from where they are made. Its inputs h0, h1 (the
// products' outputs, rounded: cast point 4), kept from the forward to the backward pass,
// are packed as they are rounded (model/precision.h: packed_alloc, packed_round), and the
// packed kernels (kernels/mlp.h) read them so.
// Its results, the activation and the gradients dh0, dh1, which only products read, are
// written as 16-bit numbers, rounded, and the products read them in place (model/matmul.h:
// matmul_packed), where float32 arrays would be rounded and packed again for each product.
// The same numbers either way. A result of either kind is freed by matmul_packed_free.
// act (n of room cap) = silu(h0) * h1 (bf16: rounded, cast point 11), a MEM_TEMP array `name`.
const float *swiglu_activation(const Config *c, const float *h0, const float *h1, size_t n, size_t cap,
                               const char *name);
// dact (n of room cap): the product's output df (floats) rounded in bf16 (the gradient of the
// rounded act): under packed_operands packed into a new 16-bit MEM_TEMP array `name`, df
// freed; else df rounded in place. What swiglu_gradients takes.
float *swiglu_dact(const Config *c, float *df, size_t n, size_t cap, const char *name);
// dh0, dh1 (n of room cap) from dact (n, swiglu_dact's), rounded in bf16, MEM_TEMP arrays
// named names[1], names[2]; and, where act is not NULL, act (names[0]) from the same sigmoids.
// With act, dact is taken over (written over by dh1); without, it is only read.
void swiglu_gradients(const Config *c, const float **act, const float **dh0, const float **dh1, float *dact,
                      const float *h0, const float *h1, size_t n, size_t cap, const char *const names[3]);

#endif
