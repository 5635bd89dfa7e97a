// kernels/cpu/norm.c: RMSNorm on the CPU, in float32 (the arithmetic of kernels/norm.h).
#include "kernels/norm.h"
#include "kernels/bf16.h"
#include <math.h>
#include <string.h>

static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                            int T, int D, float eps, int bf16) {
    #pragma omp parallel for if (T * D > 32768)
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * D;
        const float *sc = scale + (size_t)t * scale_stride;
        float *ot = out + (size_t)t * D;
        float ss = 0.0f;                           // mean of squares, float32 as in MaxText
        for (int i = 0; i < D; i++) ss += xt[i] * xt[i];
        float r = 1.0f / sqrtf(ss / D + eps);
        rstd[t] = r;
        if (!bf16) for (int i = 0; i < D; i++) ot[i] = (xt[i] * r) * sc[i];
        else for (int i = 0; i < D; i++) ot[i] = bf16_round(bf16_round(xt[i] * r) * sc[i]);   // cast point 3
    }
}

// With n = x * r (the normalised value) and y = n * scale:
//   dx = r * (dy*scale - n * mean(dy*scale * n))
// bf16 (the forward rounded n and n*scale): the gradient of n is rounded too, g = rb(dy*scale).
static void rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *scale,
                                size_t scale_stride, const float *rstd, int T, int D, int bf16) {
    #pragma omp parallel for if (T * D > 32768)
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * D, *dyt = dout + (size_t)t * D;
        const float *scale_t = scale + (size_t)t * scale_stride;
        float r = rstd[t], dot = 0.0f;
        for (int i = 0; i < D; i++) {
            float g = bf16 ? bf16_round(dyt[i] * scale_t[i]) : dyt[i] * scale_t[i];
            dot += g * (xt[i] * r);
        }
        dot /= D;
        for (int i = 0; i < D; i++) {
            float g = bf16 ? bf16_round(dyt[i] * scale_t[i]) : dyt[i] * scale_t[i];
            dx[(size_t)t * D + i] += r * (g - (xt[i] * r) * dot);
        }
    }
}

// dscale = sum_t dy * n (bf16: dy * rb(n)), over the leaf's tokens in order. Threads take
// blocks of columns, each column still summed over the tokens in order.
static void rmsnorm_dscale_leaf(float *dscale, const float *dout, const float *x, const float *rstd,
                                long t0, long len, int D, int bf16) {
    enum { COLS = 64 };
    #pragma omp parallel for if (len * D > 65536)
    for (int i0 = 0; i0 < D; i0 += COLS) {
        int i1 = i0 + COLS < D ? i0 + COLS : D;
        for (long t = t0; t < t0 + len; t++)
            for (int i = i0; i < i1; i++) {
                float n = x[(size_t)t * D + i] * rstd[t];
                dscale[i] += dout[(size_t)t * D + i] * (bf16 ? bf16_round(n) : n);
            }
    }
}

static void broadcast_rows(float *out, const float *row, int T, int D) {
    for (int t = 0; t < T; t++) memcpy(out + (size_t)t * D, row, sizeof(float) * D);
}

const NormKernels norm_cpu = {rmsnorm_forward, rmsnorm_backward_dx, rmsnorm_dscale_leaf, broadcast_rows};
