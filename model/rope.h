// model/rope.h: rotary position embedding, half-split layout (docs/model.md#rope).
#ifndef MESHMOE_ROPE_H
#define MESHMOE_ROPE_H

// Rotates, in place, the first Dr entries of each of H heads of every token:
// x (B,S,H,stride), the rotated part is x[b,s,h,0:Dr]; position of token (b,s) is pos0 + s
// (pos0 > 0: this device's part of the sequence under context parallelism).
// bf16: sin and cos rounded to bf16, and the output (model/precision.h, cast point 6).
void rope_forward(float *x, int B, int S, int pos0, int H, int stride, int Dr, float min_ts, float max_ts, int bf16);
// The backward of a rotation is the rotation by -theta, applied in place to the gradient.
// (bf16: the rotation by the same rounded sin and cos.)
void rope_backward(float *dx, int B, int S, int pos0, int H, int stride, int Dr, float min_ts, float max_ts, int bf16);
#endif
