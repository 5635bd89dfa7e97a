// gpu/rope.cu: RoPE's tables and rotation on the GPU (kernels/rope.h), the twin of
// kernels/cpu/rope.c.
//     out1 = x1*cos - x2*sin
//     out2 = x2*cos + x1*sin
// The rotation is plain IEEE arithmetic: the CPU's bits. The table uses the device's powf,
// sinf and cosf (CUDA documents at most 4, 2 and 2 ulp; glibc's are within 1 ulp): an entry
// may differ from the CPU's by a few ulp of its angle.
//
// Launch geometry: the table, one thread per (position s, pair i); the rotation, one thread
// per (sequence b, position s, head h, pair i), i the fastest, so that a warp reads
// consecutive floats of a head.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__global__ static void rope_table_kernel(float *sn, float *cs, int S, int pos0, int Dr, float min_ts, float ratio,
                                         int bf16) {
    int half = Dr / 2;
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= S * half) return;
    int s = k / half, i = k % half;
    float fraction = (float)(2 * i) / (float)Dr;
    float timescale = min_ts * powf(ratio, fraction);
    float theta = (float)(pos0 + s) / timescale;
    sn[k] = bf16 ? bf16_round_dev(sinf(theta)) : sinf(theta);   // cast point 6
    cs[k] = bf16 ? bf16_round_dev(cosf(theta)) : cosf(theta);
}

// Thread k's pair: i of head row bsh = (b*S + s)*H + h, at position s; its angle's cos c and
// sin (by the direction's sign) sg.
struct Pair { int i; size_t bsh; float c, sg; };
__device__ static Pair pair_of(size_t k, const float *sn, const float *cs, int S, int H, int half, int dir) {
    Pair p;
    p.i = (int)(k % half);
    p.bsh = k / half;
    size_t t = (size_t)(p.bsh / H % S) * half + p.i;
    p.c = cs[t];
    p.sg = dir > 0 ? sn[t] : -sn[t];
    return p;
}

// (a, bb) rotated into (*o1, *o2), rounded going forward in bf16 mode (cast point 6).
__device__ static void rotate(float a, float bb, const Pair &p, int dir, int bf16, float *o1, float *o2) {
    float r1 = a * p.c - bb * p.sg, r2 = bb * p.c + a * p.sg;
    if (bf16 && dir > 0) { r1 = bf16_round_dev(r1); r2 = bf16_round_dev(r2); }
    *o1 = r1;
    *o2 = r2;
}

__global__ static void rope_rotate_kernel(float *x, const float *sn, const float *cs, int B, int S, int H, int stride,
                                          int Dr, int dir, int bf16) {
    int half = Dr / 2;
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)B * S * H * half) return;
    Pair p = pair_of(k, sn, cs, S, H, half, dir);
    float *x1 = x + p.bsh * stride, *x2 = x1 + half;
    rotate(x1[p.i], x2[p.i], p, dir, bf16, &x1[p.i], &x2[p.i]);
}

// yarn: theta = (pos0 + s) * freq[i], one thread per (position s, pair i).
__global__ static void rope_table_freq_kernel(float *sn, float *cs, int S, int pos0, int half, const float *freq,
                                              float scale) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= S * half) return;
    float theta = (float)(pos0 + k / half) * freq[k % half];
    sn[k] = scale * sinf(theta);
    cs[k] = scale * cosf(theta);
}

// The interleaved layout, one thread per (sequence b, position s, head h, pair i): pair i
// read from (2i, 2i+1) and written to (i, half + i) going forward, the other way back
// (src and dst separate, so no thread reads what another writes).
__global__ static void rope_rotate_pairs_kernel(float *dst, const float *src, const float *sn, const float *cs, int B,
                                                int S, int H, int stride, int Dr, int dir, int bf16) {
    int half = Dr / 2;
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)B * S * H * half) return;
    Pair p = pair_of(k, sn, cs, S, H, half, dir);
    const float *in = src + p.bsh * stride;
    float *out = dst + p.bsh * stride;
    int i = p.i, pairs = dir > 0;   // pairs: read from (2i, 2i+1), written to the halves; else the other way
    rotate(in[pairs ? 2 * i : i], in[pairs ? 2 * i + 1 : half + i], p, dir, bf16, &out[pairs ? i : 2 * i],
           &out[pairs ? half + i : 2 * i + 1]);
}

// sn, cs (S, Dr/2) = sin and cos of (pos0 + s) / timescale_i.
static void rope_table(float *sn, float *cs, int S, int pos0, int Dr, float min_ts, float max_ts, int bf16) {
    size_t n = (size_t)S * (Dr / 2);
    if (n == 0) return;
    // as on the CPU: a Python float ratio, divided in double and rounded once
    float ratio = (float)((double)max_ts / (double)min_ts);
    GPU_LAUNCH(rope_table_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(sn, cs, S, pos0, Dr, min_ts,
                                                                                    ratio, bf16);
    GPU_CHECK_LAUNCH();
}

// Rotates x (B,S,H,stride)'s first Dr entries of every head, in place, by dir * theta.
static void rope_rotate(float *x, const float *sn, const float *cs, int B, int S, int H, int stride, int Dr,
                        int dir, int bf16) {
    size_t n = (size_t)B * S * H * (Dr / 2);
    if (n == 0) return;
    GPU_LAUNCH(rope_rotate_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(x, sn, cs, B, S, H, stride, Dr,
                                                                                     dir, bf16);
    GPU_CHECK_LAUNCH();
}

static void rope_table_freq(float *sn, float *cs, int S, int pos0, int half, const float *freq, float scale) {
    size_t n = (size_t)S * half;
    if (n == 0) return;
    GPU_LAUNCH(rope_table_freq_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(sn, cs, S, pos0, half, freq,
                                                                                         scale);
    GPU_CHECK_LAUNCH();
}

static void rope_rotate_pairs(float *dst, const float *src, const float *sn, const float *cs, int B, int S, int H,
                              int stride, int Dr, int dir, int bf16) {
    size_t n = (size_t)B * S * H * (Dr / 2);
    if (n == 0) return;
    GPU_LAUNCH(rope_rotate_pairs_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(dst, src, sn, cs, B, S, H,
                                                                                           stride, Dr, dir, bf16);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const RopeKernels rope_cuda = {rope_table, rope_rotate, rope_table_freq, rope_rotate_pairs};
#endif
