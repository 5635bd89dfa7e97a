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

#endif
