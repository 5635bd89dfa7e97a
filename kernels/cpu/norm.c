// kernels/cpu/norm.c: RMSNorm on the CPU, in float32 (the arithmetic of kernels/norm.h).
#include "kernels/norm.h"
#include "kernels/bf16.h"
#include <math.h>
#include <string.h>

// A row's sum over its D elements is one chain in order, which no vector can split without
// moving its bits; ROWS rows' chains run side by side instead, so that their adds do not
// wait on each other. The rows of a group past the last (n < ROWS) repeat it, unread.
enum { ROWS = 8 };
static int group_rows(const float **rows, const float *x, size_t stride, int t, int T) {
    int n = T - t < ROWS ? T - t : ROWS;
    for (int r = 0; r < ROWS; r++) rows[r] = x + (size_t)(t + (r < n ? r : n - 1)) * stride;
    return n;
}

// ss[r] = the sum of squares of row r, x[r] (D), in order, for the ROWS rows.
static void squares_rows(float *ss, const float *const *x, int D) {
    float a[ROWS] = {0};
    for (int i = 0; i < D; i++)
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) a[r] += x[r][i] * x[r][i];
    memcpy(ss, a, sizeof a);
}

static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                            int T, int D, float eps, int bf16) {
    #pragma omp parallel for if (T * D > 32768)
    for (int t0 = 0; t0 < T; t0 += ROWS) {
        const float *rows[ROWS];
        float ss[ROWS];   // sums of squares, and their mean, in float32 as in MaxText
        int n = group_rows(rows, x, (size_t)D, t0, T);
        squares_rows(ss, rows, D);
        for (int t = t0; t < t0 + n; t++) {
            const float *xt = x + (size_t)t * D;
            const float *sc = scale + (size_t)t * scale_stride;
            float *ot = out + (size_t)t * D;
            float r = 1.0f / sqrtf(ss[t - t0] / D + eps);
            rstd[t] = r;
            if (!bf16) {
                #pragma omp simd   // (element by element: vectors change no bits)
                for (int i = 0; i < D; i++) ot[i] = (xt[i] * r) * sc[i];
            } else {
                #pragma omp simd
                for (int i = 0; i < D; i++) ot[i] = bf16_round(bf16_round(xt[i] * r) * sc[i]);   // cast point 3
            }
        }
    }
}

// dot[r] = sum over i in order of g * (x[r][i] * rs[r]), g = dy[r][i] * sc[r][i] (rounded to
// bf16 when bf16), for the ROWS rows.
static void dots_rows(float *dot, const float *const *dy, const float *const *x, const float *const *sc,
                      const float *rs, int D, int bf16) {
    float a[ROWS] = {0};
    if (!bf16)
        for (int i = 0; i < D; i++)
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++) a[r] += (dy[r][i] * sc[r][i]) * (x[r][i] * rs[r]);
    else
        for (int i = 0; i < D; i++)
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++) a[r] += bf16_round(dy[r][i] * sc[r][i]) * (x[r][i] * rs[r]);
    memcpy(dot, a, sizeof a);
}

// With n = x * r (the normalised value) and y = n * scale:
//   dx = r * (dy*scale - n * mean(dy*scale * n))
// bf16 (the forward rounded n and n*scale): the gradient of n is rounded too, g = rb(dy*scale).
static void rmsnorm_backward_dx(float *dx, const float *dout, const float *x, const float *scale,
                                size_t scale_stride, const float *rstd, int T, int D, int bf16) {
    #pragma omp parallel for if (T * D > 32768)
    for (int t0 = 0; t0 < T; t0 += ROWS) {
        const float *xs[ROWS], *dys[ROWS], *scs[ROWS];
        float rs[ROWS], dot[ROWS];
        int n = group_rows(xs, x, (size_t)D, t0, T);
        group_rows(dys, dout, (size_t)D, t0, T);
        group_rows(scs, scale, scale_stride, t0, T);
        for (int r = 0; r < ROWS; r++) rs[r] = rstd[t0 + (r < n ? r : n - 1)];
        dots_rows(dot, dys, xs, scs, rs, D, bf16);
        for (int t = t0; t < t0 + n; t++) {
            const float *xt = x + (size_t)t * D, *dyt = dout + (size_t)t * D;
            const float *scale_t = scale + (size_t)t * scale_stride;
            float r = rs[t - t0], dt = dot[t - t0] / D;
            float *dxt = dx + (size_t)t * D;
            if (!bf16) {
                #pragma omp simd
                for (int i = 0; i < D; i++) dxt[i] += r * (dyt[i] * scale_t[i] - (xt[i] * r) * dt);
            } else {
                #pragma omp simd
                for (int i = 0; i < D; i++) dxt[i] += r * (bf16_round(dyt[i] * scale_t[i]) - (xt[i] * r) * dt);
            }
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
            #pragma omp simd   // (lanes over columns: each column's chain over tokens is unchanged)
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
