// gpu/mla.cu: MLA's splits, concatenations and scale on the GPU (kernels/mla.h), the twin
// of kernels/cpu/mla.c. Copies, one multiply per element, and the k_rope gradient's sum
// over heads in head order: the CPU's bits.
//
// Launch geometry: one thread per element written; for the k_rope gradient one thread per
// (token t, column d), which adds the heads h0 .. h1-1 in order.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__global__ static void scale_kernel(float *x, size_t n, float s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

__global__ static void copy_cols_kernel(float *dst, size_t dst_stride, const float *src, size_t src_stride, int T,
                                        int W) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (size_t)T * W) return;
    size_t t = k / W, i = k % W;
    dst[t * dst_stride + i] = src[t * src_stride + i];
}

// One thread per element of one head's k (Dn+Dr), then of its v (Dv): element e of (t, h).
__global__ static void assemble_kv_kernel(float *k, float *v, const float *kv, const float *ckv, int T, int N, int Dn,
                                          int Dr, int Dv, int R) {
    int Qk = Dn + Dr, W = Qk + Dv;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)T * N * W) return;
    size_t th = id / W;                 // t*N + h
    int e = (int)(id % W);
    size_t t = th / N;
    const float *kvh = kv + th * (Dn + Dv);
    if (e < Dn) k[th * Qk + e] = kvh[e];
    else if (e < Qk) k[th * Qk + e] = ckv[t * (R + Dr) + R + (e - Dn)];   // the shared k_rope
    else v[th * Dv + (e - Qk)] = kvh[Dn + (e - Qk)];
}

__global__ static void split_dkv_kernel(float *dkv, const float *dk, const float *dv, int T, int N, int Dn, int Dr,
                                        int Dv) {
    int Qk = Dn + Dr, W = Dn + Dv;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)T * N * W) return;
    size_t th = id / W;
    int e = (int)(id % W);
    dkv[id] = e < Dn ? dk[th * Qk + e] : dv[th * Dv + (e - Dn)];
}

__global__ static void k_rope_grad_leaf_kernel(float *piece, const float *dk, int T, int N, int Dn, int Dr, int h0,
                                               int h1) {
    int Qk = Dn + Dr;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)T * Dr) return;
    size_t t = id / Dr;
    int d = (int)(id % Dr);
    float acc = piece[id];
    for (int h = h0; h < h1; h++) acc += dk[(t * N + h) * Qk + Dn + d];
    piece[id] = acc;
}

// x (n) *= s.
static void mla_apply_scale(float *x, size_t n, float s) {
    if (n == 0) return;
    GPU_LAUNCH(scale_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(x, n, s);
    GPU_CHECK_LAUNCH();
}

// dst (T,W) = src (T,W), rows at their own strides.
static void mla_copy_cols(float *dst, size_t dst_stride, const float *src, size_t src_stride, int T, int W) {
    size_t n = (size_t)T * W;
    if (n == 0) return;
    GPU_LAUNCH(copy_cols_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(dst, dst_stride, src, src_stride,
                                                                                   T, W);
    GPU_CHECK_LAUNCH();
}

// k (T,N,Dn+Dr), v (T,N,Dv) from kv (T,N,Dn+Dv) and k_rope at column R of ckv (T,R+Dr).
static void mla_assemble_kv(float *k, float *v, const float *kv, const float *ckv, int T, int N, int Dn, int Dr,
                            int Dv, int R) {
    size_t n = (size_t)T * N * (Dn + Dr + Dv);
    if (n == 0) return;
    GPU_LAUNCH(assemble_kv_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(
        k, v, kv, ckv, T, N, Dn, Dr, Dv, R);
    GPU_CHECK_LAUNCH();
}

// dkv (T,N,Dn+Dv) = per head [dk_nope, dv].
static void mla_split_dkv(float *dkv, const float *dk, const float *dv, int T, int N, int Dn, int Dr, int Dv) {
    size_t n = (size_t)T * N * (Dn + Dv);
    if (n == 0) return;
    GPU_LAUNCH(split_dkv_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(dkv, dk, dv, T, N, Dn, Dr, Dv);
    GPU_CHECK_LAUNCH();
}

// piece (T,Dr) += sum over heads h0 .. h1-1, in order, of dk[:, h, Dn:].
static void mla_k_rope_grad_leaf(float *piece, const float *dk, int T, int N, int Dn, int Dr, int h0, int h1) {
    size_t n = (size_t)T * Dr;
    if (n == 0) return;
    GPU_LAUNCH(k_rope_grad_leaf_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(piece, dk, T, N, Dn, Dr,
                                                                                          h0, h1);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const MlaKernels mla_cuda = {mla_apply_scale, mla_copy_cols, mla_assemble_kv, mla_split_dkv,
                                        mla_k_rope_grad_leaf};
#endif
