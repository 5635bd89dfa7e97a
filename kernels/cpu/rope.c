// kernels/cpu/rope.c: RoPE's tables and rotation on the CPU (kernels/rope.h).
//     out1 = x1*cos - x2*sin
//     out2 = x2*cos + x1*sin
#include "kernels/rope.h"
#include "kernels/bf16.h"
#include <stddef.h>
#include <math.h>

// As MaxText's RotaryEmbedding does it in JAX, so both sides get the same bits (up to the
// last-ulp differences between XLA's and libm's pow/sin/cos):
//     fraction  = 2 * jnp.arange(0, Dr // 2) / Dr                      # int32 / int -> float32
//     timescale = min_ts * (max_ts / min_ts) ** fraction               # float32
//     sinusoid  = position / timescale                                 # int32 / float32 -> float32
//     sin, cos  = jnp.sin(sinusoid), jnp.cos(sinusoid)
static void rope_table(float *sn, float *cs, int S, int pos0, int Dr, float min_ts, float max_ts, int bf16) {
    int half = Dr / 2;
    // max_ts / min_ts are Python floats in MaxText: divided in double, then rounded once to
    // float32 when they meet the float32 array (a weakly typed scalar).
    float ratio = (float)((double)max_ts / (double)min_ts);
    for (int i = 0; i < half; i++) {
        float fraction = (float)(2 * i) / (float)Dr;
        float timescale = min_ts * powf(ratio, fraction);
        for (int s = 0; s < S; s++) {
            float theta = (float)(pos0 + s) / timescale;
            // bf16 mode (cast point 6): sin and cos are rounded to bf16
            sn[(size_t)s * half + i] = bf16 ? bf16_round(sinf(theta)) : sinf(theta);
            cs[(size_t)s * half + i] = bf16 ? bf16_round(cosf(theta)) : cosf(theta);
        }
    }
}

static void rope_rotate(float *x, const float *sn, const float *cs, int B, int S, int H, int stride, int Dr,
                        int dir, int bf16) {
    int half = Dr / 2;
    #pragma omp parallel for collapse(2) if ((long)B * S * H * Dr > 65536)
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            const float *sin_s = sn + (size_t)s * half, *cos_s = cs + (size_t)s * half;
            for (int h = 0; h < H; h++) {
                float *x1 = x + (((size_t)b * S + s) * H + h) * stride;   // (Dr/2) first half
                float *x2 = x1 + half;                                     // (Dr/2) second half
                #pragma omp simd   // (element by element: the halves do not overlap)
                for (int i = 0; i < half; i++) {
                    float c = cos_s[i], sgn_sin = dir > 0 ? sin_s[i] : -sin_s[i];
                    float a = x1[i], bb = x2[i];
                    x1[i] = a * c - bb * sgn_sin;
                    x2[i] = bb * c + a * sgn_sin;
                    if (bf16 && dir > 0) { x1[i] = bf16_round(x1[i]); x2[i] = bf16_round(x2[i]); }   // cast point 6
                }
            }
        }
}

static void rope_table_freq(float *sn, float *cs, int S, int pos0, int half, const float *freq, float scale) {
    for (int s = 0; s < S; s++)
        for (int i = 0; i < half; i++) {
            float theta = (float)(pos0 + s) * freq[i];
            sn[(size_t)s * half + i] = scale * sinf(theta);
            cs[(size_t)s * half + i] = scale * cosf(theta);
        }
}

// Pair i of a head: read from (2i, 2i+1) and written to (i, half + i) going forward, the
// other way back. One head row (b, s, h) at a time, rows in parallel.
static void rope_rotate_pairs(float *dst, const float *src, const float *sn, const float *cs, int B, int S, int H,
                              int stride, int Dr, int dir, int bf16) {
    int half = Dr / 2, pairs = dir > 0;
    long rows = (long)B * S * H;
    #pragma omp parallel for if (rows * Dr > 65536)
    for (long row = 0; row < rows; row++) {
        size_t t0 = (size_t)(row / H % S) * half;   // this position's angles
        const float *in = src + (size_t)row * stride;
        float *out = dst + (size_t)row * stride;
        for (int i = 0; i < half; i++) {
            float c = cs[t0 + i], sg = dir > 0 ? sn[t0 + i] : -sn[t0 + i];
            float a = in[pairs ? 2 * i : i], bb = in[pairs ? 2 * i + 1 : half + i];
            float o1 = a * c - bb * sg, o2 = bb * c + a * sg;
            if (bf16 && dir > 0) { o1 = bf16_round(o1); o2 = bf16_round(o2); }   // cast point 6
            out[pairs ? i : 2 * i] = o1;
            out[pairs ? half + i : 2 * i + 1] = o2;
        }
    }
}

const RopeKernels rope_cpu = {rope_table, rope_rotate, rope_table_freq, rope_rotate_pairs};
