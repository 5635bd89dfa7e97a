// model/rope.c: rotary position embedding, half-split layout (docs/model.md#rope).
// Each head's first Dr entries are cut into two halves x1, x2 and
// pair i = (x1[i], x2[i]) is rotated by the angle theta_i = pos / timescale_i:
//     out1 = x1*cos - x2*sin
//     out2 = x2*cos + x1*sin
// A rotation keeps the length of every pair; its backward is the rotation by -theta.
#include "model/rope.h"
#include "model/precision.h"
#include "sharding/memory.h"
#include "common.h"

// sn, cs (S, Dr/2): sin and cos of theta(s, i) for positions pos0 + s, s < S, computed in float32
// step by step as MaxText's RotaryEmbedding does it in JAX, so both sides get the same bits
// (up to the last-ulp differences between XLA's and libm's pow/sin/cos):
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

// Rotate every head of every token by +theta (dir = +1) or by -theta (dir = -1).
static void rope_apply(float *x, int B, int S, int pos0, int H, int stride, int Dr, float min_ts, float max_ts, int dir,
                       int bf16) {
    if (Dr % 2 != 0) die("rope: the rotated width must be even, got %d", Dr);
    if (Dr > stride) die("internal: rope width %d exceeds the head stride %d", Dr, stride);
    int half = Dr / 2;
    float *sn = mem_floats(MEM_TEMP, (size_t)S * half, "rope sin");   // (S, Dr/2)
    float *cs = mem_floats(MEM_TEMP, (size_t)S * half, "rope cos");   // (S, Dr/2)
    if (mem_dry()) B = 0;   // dry run: no table to fill, nothing to rotate
    else rope_table(sn, cs, S, pos0, Dr, min_ts, max_ts, bf16);
    #pragma omp parallel for collapse(2) if ((long)B * S * H * Dr > 65536)
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            const float *sin_s = sn + (size_t)s * half, *cos_s = cs + (size_t)s * half;
            for (int h = 0; h < H; h++) {
                float *x1 = x + (((size_t)b * S + s) * H + h) * stride;   // (Dr/2) first half
                float *x2 = x1 + half;                                     // (Dr/2) second half
                for (int i = 0; i < half; i++) {
                    float c = cos_s[i], sgn_sin = dir > 0 ? sin_s[i] : -sin_s[i];
                    float a = x1[i], bb = x2[i];
                    x1[i] = a * c - bb * sgn_sin;
                    x2[i] = bb * c + a * sgn_sin;
                    if (bf16 && dir > 0) { x1[i] = bf16_round(x1[i]); x2[i] = bf16_round(x2[i]); }   // cast point 6
                }
            }
        }
    mem_free(sn);
    mem_free(cs);
}

void rope_forward(float *x, int B, int S, int pos0, int H, int stride, int Dr, float min_ts, float max_ts, int bf16) {
    rope_apply(x, B, S, pos0, H, stride, Dr, min_ts, max_ts, +1, bf16);
}

// y = R(theta) x, so dx = R(theta)^T dy = R(-theta) dy:
//     dx1 = dy1*cos + dy2*sin,  dx2 = dy2*cos - dy1*sin
void rope_backward(float *dx, int B, int S, int pos0, int H, int stride, int Dr, float min_ts, float max_ts, int bf16) {
    rope_apply(dx, B, S, pos0, H, stride, Dr, min_ts, max_ts, -1, bf16);
}
