// kernels/rope.h: rotary position embedding, half-split layout (docs/model.md#rope); the
// layer, which checks the widths and allocates the tables, is model/rope.c.
#ifndef MESHMOE_KERNELS_ROPE_H
#define MESHMOE_KERNELS_ROPE_H

typedef struct RopeKernels {
    // sn, cs (S, Dr/2) = sin and cos of theta(s, i) = (pos0 + s) / timescale_i, with
    // timescale_i = min_ts * (max_ts/min_ts)^(2i/Dr), step by step in float32 as MaxText's
    // RotaryEmbedding computes it. bf16: sin and cos rounded to bf16 (cast point 6).
    void (*rope_table)(float *sn, float *cs, int S, int pos0, int Dr, float min_ts, float max_ts, int bf16);
    // Rotates, in place, pair i = (x1[i], x2[i]) of the first Dr entries of every head by
    // +theta (dir = +1) or -theta (dir = -1): x (B,S,H,stride), x1 = x[b,s,h,0:Dr/2],
    // x2 = x[b,s,h,Dr/2:Dr]; sn, cs (S, Dr/2) from rope_table.
    // bf16 and dir = +1: the rotated output rounded to bf16 (cast point 6).
    void (*rope_rotate)(float *x, const float *sn, const float *cs, int B, int S, int H, int stride, int Dr,
                        int dir, int bf16);
    // rope_type=yarn: sn, cs (S, half) = scale * sin and cos of theta = (pos0 + s) * freq[i],
    // theta a float32 product as MaxText's YarnRotaryEmbedding forms it (the outer product
    // of the positions and the frequencies); freq (half) from model/rope.c. Never rounded to
    // bf16: yarn keeps its table in float32.
    void (*rope_table_freq)(float *sn, float *cs, int S, int pos0, int half, const float *freq, float scale);
    // The interleaved layout (rope_interleave): dir = +1 rotates pair i = (src[2i], src[2i+1])
    // of the first Dr entries of every head by +theta into the halves (dst[i], dst[Dr/2 + i]);
    // dir = -1 rotates pair i = (src[i], src[Dr/2 + i]) by -theta into (dst[2i], dst[2i+1]),
    // the backward of +1. src and dst (B,S,H,stride) are separate arrays; dst's entries past
    // Dr in a head are not written. bf16 and dir = +1: the output rounded (cast point 6).
    void (*rope_rotate_pairs)(float *dst, const float *src, const float *sn, const float *cs, int B, int S, int H,
                              int stride, int Dr, int dir, int bf16);
} RopeKernels;

extern const RopeKernels rope_cpu;   // kernels/cpu/rope.c

#endif
