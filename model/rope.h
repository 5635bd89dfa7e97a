// model/rope.h: rotary position embedding, half-split layout (docs/model.md#rope), with
// MaxText's default frequencies or yarn's (rope_type), and yarn's interleaved pairs.
#ifndef MESHMOE_ROPE_H
#define MESHMOE_ROPE_H
#include "base/config.h"

// Rotates, in place, the first Dr entries of each of H heads of every token:
// x (B,S,H,stride), the rotated part is x[b,s,h,0:Dr]; position of token (b,s) is pos0 + s
// (pos0 > 0: this device's part of the sequence under context parallelism).
// bf16 mode: the output rounded (model/precision.h, cast point 6), and under the default
// frequencies sin and cos too. rope_type=yarn with rope_interleave: the pairs are read as
// (x[2i], x[2i+1]) and written back as the halves (x[i], x[Dr/2 + i]), as MaxText's
// YarnRotaryEmbedding writes its output.
void rope_forward(const Config *c, float *x, int B, int S, int pos0, int H, int stride, int Dr);
// The backward of a rotation is the rotation by -theta, applied in place to the gradient
// (bf16: by the same sin and cos); interleaved, the halves go back to their pairs.
void rope_backward(const Config *c, float *dx, int B, int S, int pos0, int H, int stride, int Dr);

// yarn's frequencies (Dr/2 of them) for a rotated width Dr, as MaxText computes them in
// float32: the default 1 / theta^(2i/Dr), divided by rope_factor below the correction range
// [beta_fast, beta_slow] rotations over original_max_position_embeddings, kept above it,
// mixed linearly inside it.
void rope_yarn_freqs(const Config *c, float *freq, int Dr);
#endif
