// model/rmsnorm.h: y = x * rsqrt(mean(x^2) + eps) * scale (MODEL_SPEC.md "RMSNorm").
#ifndef MESHMOE_RMSNORM_H
#define MESHMOE_RMSNORM_H
#include "sharding/context.h"

// out (T,D), rstd (T) saved for the backward pass; x (T,D); scale (D).
// bf16: out = rb(rb(x * rstd) * scale) (model/precision.h, cast point 3).
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, int T, int D, float eps, int bf16);
// dx (T,D) += ; dscale (D) += sum over tokens (canonical tree over the leaves, sharding/context.h).
void rmsnorm_backward(float *dx, float *dscale, const float *dout, const float *x, const float *scale,
                      const float *rstd, int T, int D, Leaves leaf, int bf16);
#endif
