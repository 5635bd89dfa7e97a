// kernels/norm.h: the RMSNorm kernels (docs/model.md#rmsnorm); the layer is model/rmsnorm.c.
#ifndef MESHMOE_KERNELS_NORM_H
#define MESHMOE_KERNELS_NORM_H
#include <stddef.h>

typedef struct NormKernels {
    // out (T,D) = x * rstd * scale_t; rstd (T) = 1/sqrt(mean(x^2) + eps), kept for the backward.
    // x (T,D); the scale of token t is scale + t*scale_stride: stride 0 reads one (D) vector
    // for every token, stride D reads row t of a (T,D) broadcast.
    // bf16: out = rb(rb(x * rstd) * scale) (docs/precision.md, cast point 3).
    void (*rmsnorm_forward)(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                            int T, int D, float eps, int bf16);
    // dx (T,D) += the input gradient; dout, x (T,D); scale as in the forward; rstd (T).
    void (*rmsnorm_backward_dx)(float *dx, const float *dout, const float *x, const float *scale,
                                size_t scale_stride, const float *rstd, int T, int D, int bf16);
    // dscale (D) += sum over tokens t0..t0+len-1 of dout * n, n = x * rstd (rounded in bf16):
    // one leaf of the scale gradient (the layer adds the leaves in the canonical tree).
    void (*rmsnorm_dscale_leaf)(float *dscale, const float *dout, const float *x, const float *rstd,
                                long t0, long len, int D, int bf16);
    // out (T,D): row t = scale (D), the broadcast the einsum form multiplies by.
    void (*broadcast_rows)(float *out, const float *row, int T, int D);
} NormKernels;

extern const NormKernels norm_cpu;    // kernels/cpu/norm.c

#endif
