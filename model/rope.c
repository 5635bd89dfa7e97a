// model/rope.c: rotary position embedding, half-split layout (docs/model.md#rope).
// Each head's first Dr entries are cut into two halves x1, x2 and
// pair i = (x1[i], x2[i]) is rotated by the angle theta_i = pos / timescale_i:
//     out1 = x1*cos - x2*sin
//     out2 = x2*cos + x1*sin
// A rotation keeps the length of every pair; its backward is the rotation by -theta.
// rope_type=yarn (DeepSeek-V3's context extension, MaxText's YarnRotaryEmbedding): theta_i
// = pos * freq_i with yarn's frequencies (rope_yarn_freqs), the pairs interleaved under
// rope_interleave, sin and cos times 0.1 ln(rope_factor) + 1 under rope_attention_scaling.
// The layer checks the widths and holds the sin/cos tables; the arithmetic is in
// kernels/rope.h.
#include "model/rope.h"
#include "model/precision.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "core/common.h"
#include <math.h>

// The dimension (of Dr) at which a frequency turns `rotations` times over the original
// context (Python doubles in MaxText).
static double correction_dim(double rotations, int Dr, double base, int original) {
    return Dr * log(original / (rotations * 2 * M_PI)) / (2 * log(base));
}

void rope_yarn_freqs(const Config *c, float *freq, int Dr) {
    int half = Dr / 2;
    double base = c->rope_max_timescale;   // yarn's rope_theta
    double lo = correction_dim(c->beta_fast, Dr, base, c->original_max_position_embeddings);
    double hi = correction_dim(c->beta_slow, Dr, base, c->original_max_position_embeddings);
    if (c->rope_truncate) { lo = floor(lo); hi = ceil(hi); }
    lo = MM_MAX(lo, 0.0);
    hi = MM_MIN(hi, Dr - 1.0);
    if (lo == hi) hi += 0.001;   // (no division by zero)
    // float32 from here, as jnp's arrays meet the Python numbers above.
    float span = (float)(hi - lo), factor = c->rope_factor, theta = (float)base;
    for (int i = 0; i < half; i++) {
        float f = 1.0f / powf(theta, 2.0f * (float)i / (float)Dr);
        float ramp = ((float)i - (float)lo) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float smooth = 1.0f - ramp;   // 1: the frequency kept, 0: divided by rope_factor
        freq[i] = f / factor * (1.0f - smooth) + f * smooth;
    }
}

// The sin and cos tables (S, Dr/2) of this config's frequencies.
static void rope_tables(const Config *c, float *sn, float *cs, int S, int pos0, int Dr) {
    if (c->rope_type != ROPE_YARN) {
        kern()->rope->rope_table(sn, cs, S, pos0, Dr, c->rope_min_timescale, c->rope_max_timescale, cfg_bf16(c));
        return;
    }
    int half = Dr / 2;
    float *host = malloc(sizeof(float) * (size_t)half);
    if (!host) die("host out of memory (yarn frequencies)");
    rope_yarn_freqs(c, host, Dr);
    float *freq = mem_floats(MEM_TEMP, (size_t)half, "yarn frequencies");   // (Dr/2)
    mem_upload(freq, host, sizeof(float) * (size_t)half);
    free(host);
    // rope_attention_scaling: MaxText multiplies the rotated output by the factor; here the
    // table carries it (as Hugging Face's does), which rounds the product in another order.
    float scale = c->rope_attention_scaling && c->rope_factor > 1 ? (float)(0.1 * log(c->rope_factor) + 1.0) : 1.0f;
    kern()->rope->rope_table_freq(sn, cs, S, pos0, half, freq, scale);
    mem_free(freq);
}

// Rotate every head of every token by +theta (dir = +1) or by -theta (dir = -1).
static void rope_apply(const Config *c, float *x, int B, int S, int pos0, int H, int stride, int Dr, int dir) {
    if (Dr % 2 != 0) die("rope: the rotated width must be even, got %d", Dr);
    if (Dr > stride) die("internal: rope width %d exceeds the head stride %d", Dr, stride);
    int half = Dr / 2, bf16 = cfg_bf16(c);
    float *sn = mem_floats(MEM_TEMP, (size_t)S * half, "rope sin");   // (S, Dr/2)
    float *cs = mem_floats(MEM_TEMP, (size_t)S * half, "rope cos");   // (S, Dr/2)
    rope_tables(c, sn, cs, S, pos0, Dr);
    if (c->rope_type == ROPE_YARN && c->rope_interleave) {
        // The pairs move between layouts: rotate from a copy of x into x (from x's first
        // entry to the last head's rotated part: x may start inside a row, MLA's q + nope).
        size_t n = (size_t)B * S * H == 0 ? 0 : ((size_t)B * S * H - 1) * stride + Dr;
        float *src = mem_floats(MEM_TEMP, n, "rope input (interleaved pairs)");   // (B,S,H,stride)
        mem_copy(src, x, sizeof(float) * n);
        kern()->rope->rope_rotate_pairs(x, src, sn, cs, B, S, H, stride, Dr, dir, bf16);
        mem_free(src);
    } else {
        kern()->rope->rope_rotate(x, sn, cs, B, S, H, stride, Dr, dir, bf16);
    }
    mem_free(sn);
    mem_free(cs);
}

void rope_forward(const Config *c, float *x, int B, int S, int pos0, int H, int stride, int Dr) {
    rope_apply(c, x, B, S, pos0, H, stride, Dr, +1);
}

// y = R(theta) x, so dx = R(theta)^T dy = R(-theta) dy:
//     dx1 = dy1*cos + dy2*sin,  dx2 = dy2*cos - dy1*sin
void rope_backward(const Config *c, float *dx, int B, int S, int pos0, int H, int stride, int Dr) {
    rope_apply(c, dx, B, S, pos0, H, stride, Dr, -1);
}
