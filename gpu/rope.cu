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

__global__ static void rope_rotate_kernel(float *x, const float *sn, const float *cs, int B, int S, int H, int stride,
                                          int Dr, int dir, int bf16) {
    int half = Dr / 2;
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)B * S * H * half) return;
    int i = (int)(k % half);
    size_t bsh = k / half;              // (b*S + s)*H + h
    int s = (int)(bsh / H % S);
    float *x1 = x + bsh * stride, *x2 = x1 + half;
    float c = cs[(size_t)s * half + i], sgn_sin = dir > 0 ? sn[(size_t)s * half + i] : -sn[(size_t)s * half + i];
    float a = x1[i], bb = x2[i];
    float o1 = a * c - bb * sgn_sin, o2 = bb * c + a * sgn_sin;
    if (bf16 && dir > 0) { o1 = bf16_round_dev(o1); o2 = bf16_round_dev(o2); }   // cast point 6
    x1[i] = o1;
    x2[i] = o2;
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

#if GPU_HOST_PASS
extern "C" const RopeKernels rope_cuda = {rope_table, rope_rotate};
#endif
