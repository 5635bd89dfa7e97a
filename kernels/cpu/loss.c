// kernels/cpu/loss.c: softmax cross-entropy and z-loss in float32 on the CPU, and the row
// moves of vocabulary tiling (kernels/loss.h).
#include "kernels/loss.h"
#include "kernels/cpu/expf16.h"
#include "kernels/bf16.h"
#include <stddef.h>
#include <string.h>
#include <math.h>

static void loss_row_max(float *m, const float *logits, int T, int V) {
    #pragma omp parallel for if (T * V > 65536)
    for (int t = 0; t < T; t++) {
        const float *z = logits + (size_t)t * V;
        float mx = z[0];
        for (int i = 1; i < V; i++) mx = fmaxf(mx, z[i]);
        m[t] = mx;
    }
}

// e (n) = expf(z[i] - shift), in vector lanes (kernels/cpu/expf16.h: the C library's bits).
static void exp_shifted(float *e, const float *z, float shift, int n) {
    for (int i = 0; i < n; i++) e[i] = z[i] - shift;
    expf_n(e, e, n);
}

// The n logits from element at as floats: zf's own, or zh's widened into e (exact).
static const float *chunk_floats(float *e, const float *zf, const uint16_t *zh, size_t at, int n) {
    if (zf) return zf + at;
    for (int i = 0; i < n; i++) e[i] = bf16_float(zh[at + i]);
    return e;
}

// piece (T) from logits as floats (zf) or as 16-bit numbers (zh).
static void sum_exp_rows(float *piece, const float *zf, const uint16_t *zh, const float *m, int T, int V, int c0,
                         int Vc) {
    enum { CHUNK = 256 };
    #pragma omp parallel for if (T * Vc > 65536)
    for (int t = 0; t < T; t++) {
        size_t row = (size_t)t * V + (size_t)c0;
        float s = 0.0f, e[CHUNK];
        for (int i0 = 0; i0 < Vc; i0 += CHUNK) {   // the exps of a chunk, then their sum in order
            int n = Vc - i0 < CHUNK ? Vc - i0 : CHUNK;
            exp_shifted(e, chunk_floats(e, zf, zh, row + i0, n), m[t], n);
            for (int i = 0; i < n; i++) s += e[i];
        }
        piece[t] = s;
    }
}
static void loss_sum_exp(float *piece, const float *logits, const float *m, int T, int V, int c0, int Vc) {
    sum_exp_rows(piece, logits, NULL, m, T, V, c0, Vc);
}

static void loss_target_logit(float *zt, const float *logits, const int *targets, int T, int V, int v0) {
    for (int t = 0; t < T; t++) {
        int y = targets[t] - v0;
        zt[t] = targets[t] >= 0 && y >= 0 && y < V ? logits[(size_t)t * V + y] : 0.0f;
    }
}

static void loss_lse(float *lse, const float *m, const float *sum, int T) {
    for (int t = 0; t < T; t++) lse[t] = m[t] + logf(sum[t]);
}

// In double and token order, so that the sum does not depend on the thread count.
static void loss_leaf_sum(double *sum, const float *lse, const float *zt, const int *targets, long t0, long len,
                          float zmul) {
    double s = 0.0;
    for (long t = t0; t < t0 + len; t++) {
        if (targets[t] < 0) continue;
        float l = lse[t] - zt[t] + zmul * lse[t] * lse[t];
        s += l;
    }
    *sum = s;
}

// g (len) = scale * dl/dz of one token's columns i0 .. i0+len-1 from their logits z (len):
// softmax * coef - onehot, coef = 1 + 2*zmul*lse, y the target's column; g may be z.
static void dz_piece(float *g, const float *z, int i0, int len, float lse, float coef, float scale, int y) {
    exp_shifted(g, z, lse, len);
    for (int i = 0; i < len; i++) g[i] = scale * (g[i] * coef);
    if (y >= i0 && y < i0 + len) g[y - i0] -= scale;
}

static void loss_backward(float *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                          float scale) {
    #pragma omp parallel for if (T * V > 65536)
    for (int t = 0; t < T; t++) {
        float *z = dz + (size_t)t * V;
        if (targets[t] < 0) { memset(z, 0, sizeof(float) * V); continue; }
        float coef = 1.0f + 2.0f * zmul * lse[t];   // d(lse + zmul*lse^2)/d lse
        dz_piece(z, z, 0, V, lse[t], coef, scale, targets[t] - v0);
    }
}

// The same a piece of BLOCK columns at a time through a buffer, each value then packed
// (bf16_bits rounds): the same element formulas, so the rounded float32 form's bits. The
// logits are floats (zf) or 16-bit numbers (zh, widened exactly; dz may be zh: each piece is
// read before it is written).
enum { BLOCK = 512 };
static void backward_packed_rows(uint16_t *dz, const float *zf, const uint16_t *zh, const float *lse,
                                 const int *targets, int T, int V, int v0, float zmul, float scale) {
    #pragma omp parallel for if (T * V > 65536)
    for (int t = 0; t < T; t++) {
        uint16_t *d = dz + (size_t)t * V;
        if (targets[t] < 0) { memset(d, 0, sizeof(uint16_t) * V); continue; }   // (+0.0)
        float coef = 1.0f + 2.0f * zmul * lse[t];
        for (int i0 = 0; i0 < V; i0 += BLOCK) {
            float g[BLOCK];
            int len = V - i0 < BLOCK ? V - i0 : BLOCK;
            dz_piece(g, chunk_floats(g, zf, zh, (size_t)t * V + i0, len), i0, len, lse[t], coef, scale,
                     targets[t] - v0);
            for (int i = 0; i < len; i++) d[i0 + i] = bf16_bits(g[i]);
        }
    }
}
static void loss_backward_packed(uint16_t *dz, const float *logits, const float *lse, const int *targets, int T, int V,
                                 int v0, float zmul, float scale) {
    backward_packed_rows(dz, logits, NULL, lse, targets, T, V, v0, zmul, scale);
}

// ---- The logits as 16-bit numbers: each widened (exact), then the float32 forms' arithmetic
// on the same values, so their bits.
static void loss_row_max16(float *m, const uint16_t *logits, int T, int V) {
    #pragma omp parallel for if (T * V > 65536)
    for (int t = 0; t < T; t++) {
        const uint16_t *z = logits + (size_t)t * V;
        float mx = bf16_float(z[0]);
        for (int i = 1; i < V; i++) mx = fmaxf(mx, bf16_float(z[i]));
        m[t] = mx;
    }
}

static void loss_sum_exp16(float *piece, const uint16_t *logits, const float *m, int T, int V, int c0, int Vc) {
    sum_exp_rows(piece, NULL, logits, m, T, V, c0, Vc);
}

static void loss_target_logit16(float *zt, const uint16_t *logits, const int *targets, int T, int V, int v0) {
    for (int t = 0; t < T; t++) {
        int y = targets[t] - v0;
        zt[t] = targets[t] >= 0 && y >= 0 && y < V ? bf16_float(logits[(size_t)t * V + y]) : 0.0f;
    }
}

static void loss_backward16(uint16_t *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul,
                            float scale) {
    backward_packed_rows(dz, NULL, dz, lse, targets, T, V, v0, zmul, scale);
}

static void tile_gather_rows(float *dst, const float *src, long t0, int len, int w) {
    for (int r = 0; r < len; r++) memcpy(dst + (size_t)r * w, src + (size_t)(t0 + r) * w, sizeof(float) * w);
}

static void tile_scatter_rows(float *dst, const float *src, long t0, int len, int w) {
    for (int r = 0; r < len; r++) memcpy(dst + (size_t)(t0 + r) * w, src + (size_t)r * w, sizeof(float) * w);
}

static void tile_gather_targets(int *dst, const int *src, long t0, int len) {
    for (int r = 0; r < len; r++) dst[r] = src[t0 + r];
}

const LossKernels loss_cpu = {loss_row_max, loss_sum_exp, loss_target_logit, loss_lse, loss_leaf_sum, loss_backward,
                              loss_backward_packed,
                              tile_gather_rows, tile_scatter_rows, tile_gather_targets,
                              loss_row_max16, loss_sum_exp16, loss_target_logit16, loss_backward16};
