// model/rope.c: rotary position embedding, half-split layout (docs/model.md#rope).
// Each head's first Dr entries are cut into two halves x1, x2 and
// pair i = (x1[i], x2[i]) is rotated by the angle theta_i = pos / timescale_i:
//     out1 = x1*cos - x2*sin
//     out2 = x2*cos + x1*sin
// A rotation keeps the length of every pair; its backward is the rotation by -theta.
// The layer checks the widths and holds the sin/cos tables; the arithmetic is in
// kernels/rope.h.
#include "model/rope.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "core/common.h"

// Rotate every head of every token by +theta (dir = +1) or by -theta (dir = -1).
static void rope_apply(float *x, int B, int S, int pos0, int H, int stride, int Dr, float min_ts, float max_ts, int dir,
                       int bf16) {
    if (Dr % 2 != 0) die("rope: the rotated width must be even, got %d", Dr);
    if (Dr > stride) die("internal: rope width %d exceeds the head stride %d", Dr, stride);
    int half = Dr / 2;
    float *sn = mem_floats(MEM_TEMP, (size_t)S * half, "rope sin");   // (S, Dr/2)
    float *cs = mem_floats(MEM_TEMP, (size_t)S * half, "rope cos");   // (S, Dr/2)
    kern()->rope->rope_table(sn, cs, S, pos0, Dr, min_ts, max_ts, bf16);
    kern()->rope->rope_rotate(x, sn, cs, B, S, H, stride, Dr, dir, bf16);
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
