// model/rmsnorm.h: y = x * rsqrt(mean(x^2) + eps) * scale (docs/model.md#rmsnorm).
#ifndef MESHMOE_RMSNORM_H
#define MESHMOE_RMSNORM_H
#include "base/context.h"
#include "base/config.h"

// out (T,D), rstd (T) saved for the backward pass; x (T,D); scale (D).
// bf16: out = rb(rb(x * rstd) * scale) (model/precision.h, cast point 3).
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, int T, int D, float eps, int bf16);
// dx (T,D) += ; dscale (D) += sum over tokens (canonical tree over the leaves, base/context.h).
void rmsnorm_backward(float *dx, float *dscale, const float *dout, const float *x, const float *scale,
                      const float *rstd, int T, int D, Leaves leaf, int bf16);
// The same with eps and bf16 from c, in the form rmsnorm_fused_scale picks (model/rmsnorm.c):
// returns NULL (fused), or the broadcast (T,D) scale the einsum form multiplied by, which
// the backward reads (MEM_ACTIVATIONS; pass it to rmsnorm_backward_cfg, then mem_free it).
float *rmsnorm_forward_cfg(const Config *c, float *out, float *rstd, const float *x, const float *scale, int T, int D);
// The same with another epsilon (MLA's latent norms: mla_norm_epsilon, model/mla.c).
float *rmsnorm_forward_eps(const Config *c, float eps, float *out, float *rstd, const float *x, const float *scale,
                           int T, int D);
void rmsnorm_backward_cfg(const Config *c, float *dx, float *dscale, const float *dout, const float *x,
                          const float *scale, const float *bcast, const float *rstd, int T, int D, Leaves leaf);
#endif
