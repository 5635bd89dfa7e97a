// gpu/mlp.cu: SwiGLU on the GPU (kernels/mlp.h), the twin of kernels/cpu/mlp.c: the same
// operations in the same order. The one difference is expf: the CPU's (glibc) is within
// 1 ulp and the GPU's within 2 ulp (CUDA's documented bound without fast math), so a
// result may differ from the CPU's by a few ulp; everything else is IEEE and unfused
// (the Makefile builds gpu/ with --fmad=false).
//
// Launch geometry: four elements a thread (16-byte accesses) where the arrays are 16-byte
// aligned, else one, GPU_THREADS per block.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__device__ static inline float sigmoid_dev(float z) { return 1.0f / (1.0f + expf(-z)); }

// One element: silu(z) * u, rounded to bf16 when bf16 (cast point 11).
__device__ static inline float swiglu_dev(float z, float u, int bf16) {
    float a = z * sigmoid_dev(z) * u;
    return bf16 ? bf16_round_dev(a) : a;
}

// One element's gradients from d = dact: d silu(z)/dz = sig(z) * (1 + z * (1 - sig(z))); the
// activation (where a is not NULL) from the same sigmoid.
__device__ static inline void swiglu_grad_dev(float z, float u, float d, int bf16, float *a, float *g0, float *g1) {
    float sg = sigmoid_dev(z), silu = z * sg;
    if (a) {
        float v = silu * u;
        *a = bf16 ? bf16_round_dev(v) : v;   // cast point 11
    }
    *g1 = d * silu;
    *g0 = d * u * sg * (1.0f + z * (1.0f - sg));
}

__global__ static void swiglu_forward_kernel(float *act, const float *h0, const float *h1, size_t n, int bf16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act[i] = swiglu_dev(h0[i], h1[i], bf16);
}

// dact[i] is read before dh1[i] is written: dh1 may be dact.
__global__ static void swiglu_backward_kernel(float *act, float *dh0, float *dh1, const float *dact, const float *h0,
                                              const float *h1, size_t n, int bf16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a, g0, g1;
    swiglu_grad_dev(h0[i], h1[i], dact[i], bf16, act ? &a : NULL, &g0, &g1);
    if (act) act[i] = a;
    dh1[i] = g1;
    dh0[i] = g0;
}

// The same four elements a thread, 16-byte accesses (one element a thread, the forward ran at
// 2.3 TB/s on an H200).
__global__ static void swiglu_forward4_kernel(float4 *act, const float4 *h0, const float4 *h1, size_t n4, int bf16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 z = h0[i], u = h1[i];
    act[i] = make_float4(swiglu_dev(z.x, u.x, bf16), swiglu_dev(z.y, u.y, bf16), swiglu_dev(z.z, u.z, bf16),
                         swiglu_dev(z.w, u.w, bf16));
}

__global__ static void swiglu_backward4_kernel(float4 *act, float4 *dh0, float4 *dh1, const float4 *dact,
                                               const float4 *h0, const float4 *h1, size_t n4, int bf16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 z = h0[i], u = h1[i], d = dact[i], a, g0, g1;   // (dact read whole before dh1 is written)
    int keep = act != NULL;
    swiglu_grad_dev(z.x, u.x, d.x, bf16, keep ? &a.x : NULL, &g0.x, &g1.x);
    swiglu_grad_dev(z.y, u.y, d.y, bf16, keep ? &a.y : NULL, &g0.y, &g1.y);
    swiglu_grad_dev(z.z, u.z, d.z, bf16, keep ? &a.z : NULL, &g0.z, &g1.z);
    swiglu_grad_dev(z.w, u.w, d.w, bf16, keep ? &a.w : NULL, &g0.w, &g1.w);
    if (keep) act[i] = a;
    dh1[i] = g1;
    dh0[i] = g0;
}

// act (n) = silu(h0) * h1; bf16: rounded to bf16.
static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    if (n <= 0) return;
    size_t q = quads_of((size_t)n, (uintptr_t)act | (uintptr_t)h0 | (uintptr_t)h1), done = 4 * q;
    size_t rest = (size_t)n - done;
    if (q) {
        GPU_LAUNCH(swiglu_forward4_kernel, blocks_for(q, GPU_THREADS), GPU_THREADS, 0)(
            (float4 *)act, (const float4 *)h0, (const float4 *)h1, q, bf16);
        GPU_CHECK_LAUNCH();
    }
    if (rest) {
        GPU_LAUNCH(swiglu_forward_kernel, blocks_for(rest, GPU_THREADS), GPU_THREADS, 0)(act + done, h0 + done,
                                                                                     h1 + done, rest, bf16);
        GPU_CHECK_LAUNCH();
    }
}

// dh0, dh1 (n) from dact (n), and act where asked.
static void swiglu_backward(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                            long n, int bf16) {
    if (n <= 0) return;
    uintptr_t all = (uintptr_t)act | (uintptr_t)dh0 | (uintptr_t)dh1 | (uintptr_t)dact | (uintptr_t)h0 | (uintptr_t)h1;
    size_t q = quads_of((size_t)n, all), done = 4 * q, rest = (size_t)n - done;
    if (q) {
        GPU_LAUNCH(swiglu_backward4_kernel, blocks_for(q, GPU_THREADS), GPU_THREADS, 0)(
            (float4 *)act, (float4 *)dh0, (float4 *)dh1, (const float4 *)dact, (const float4 *)h0, (const float4 *)h1,
            q, bf16);
        GPU_CHECK_LAUNCH();
    }
    if (rest) {
        GPU_LAUNCH(swiglu_backward_kernel, blocks_for(rest, GPU_THREADS), GPU_THREADS, 0)(
            act ? act + done : NULL, dh0 + done, dh1 + done, dact + done, h0 + done, h1 + done, rest, bf16);
        GPU_CHECK_LAUNCH();
    }
}

// The packed forms (kernels/mlp.h): the same elements' formulas on h0, h1 as bf16 bits,
// their results written as bf16 bits (bf16_bits_dev rounds, so a packed gradient is the
// rounded one; the activation, rounded first as cast point 11 asks, has the same bits).
__global__ static void swiglu_forward_packed_kernel(uint16_t *act, const uint16_t *h0, const uint16_t *h1, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) act[i] = bf16_bits_dev(swiglu_dev(bf16_float_dev(h0[i]), bf16_float_dev(h1[i]), 1));
}

// dact[i] is read before dh1[i] is written: dh1 may be dact.
__global__ static void swiglu_backward_packed_kernel(uint16_t *act, uint16_t *dh0, uint16_t *dh1,
                                                     const uint16_t *dact, const uint16_t *h0, const uint16_t *h1,
                                                     size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a, g0, g1;
    swiglu_grad_dev(bf16_float_dev(h0[i]), bf16_float_dev(h1[i]), bf16_float_dev(dact[i]), 1, act ? &a : NULL, &g0,
                    &g1);
    if (act) act[i] = bf16_bits_dev(a);
    dh1[i] = bf16_bits_dev(g1);
    dh0[i] = bf16_bits_dev(g0);
}

// Four elements a thread: 8-byte accesses to the bits.
__global__ static void swiglu_forward_packed4_kernel(uint2 *act, const uint2 *h0, const uint2 *h1, size_t n4) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 z = bf16_float4_dev(h0[i]), u = bf16_float4_dev(h1[i]);
    act[i] = bf16_bits4_dev(make_float4(swiglu_dev(z.x, u.x, 1), swiglu_dev(z.y, u.y, 1), swiglu_dev(z.z, u.z, 1),
                                        swiglu_dev(z.w, u.w, 1)));
}

__global__ static void swiglu_backward_packed4_kernel(uint2 *act, uint2 *dh0, uint2 *dh1, const uint2 *dact,
                                                      const uint2 *h0, const uint2 *h1, size_t n4) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 z = bf16_float4_dev(h0[i]), u = bf16_float4_dev(h1[i]), d = bf16_float4_dev(dact[i]), a, g0, g1;
    int keep = act != NULL;
    swiglu_grad_dev(z.x, u.x, d.x, 1, keep ? &a.x : NULL, &g0.x, &g1.x);
    swiglu_grad_dev(z.y, u.y, d.y, 1, keep ? &a.y : NULL, &g0.y, &g1.y);
    swiglu_grad_dev(z.z, u.z, d.z, 1, keep ? &a.z : NULL, &g0.z, &g1.z);
    swiglu_grad_dev(z.w, u.w, d.w, 1, keep ? &a.w : NULL, &g0.w, &g1.w);
    if (keep) act[i] = bf16_bits4_dev(a);
    dh1[i] = bf16_bits4_dev(g1);
    dh0[i] = bf16_bits4_dev(g0);
}

// act (n) = the bits of rb(silu(h0) * h1). Four at a time where the bits are 8-byte aligned
// (asked as their addresses * 2), the rest one at a time.
static void swiglu_forward_packed(uint16_t *act, const uint16_t *h0, const uint16_t *h1, long n) {
    if (n <= 0) return;
    size_t q = quads_of((size_t)n, ((uintptr_t)act | (uintptr_t)h0 | (uintptr_t)h1) * 2), done = 4 * q;
    size_t rest = (size_t)n - done;
    if (q) {
        GPU_LAUNCH(swiglu_forward_packed4_kernel, blocks_for(q, GPU_THREADS), GPU_THREADS, 0)(
            (uint2 *)act, (const uint2 *)h0, (const uint2 *)h1, q);
        GPU_CHECK_LAUNCH();
    }
    if (rest) {
        GPU_LAUNCH(swiglu_forward_packed_kernel, blocks_for(rest, GPU_THREADS), GPU_THREADS, 0)(act + done, h0 + done,
                                                                                            h1 + done, rest);
        GPU_CHECK_LAUNCH();
    }
}

// dh0, dh1 (n) as bits from dact (n), and act where asked.
static void swiglu_backward_packed(uint16_t *act, uint16_t *dh0, uint16_t *dh1, const uint16_t *dact,
                                   const uint16_t *h0, const uint16_t *h1, long n) {
    if (n <= 0) return;
    uintptr_t bits = (uintptr_t)act | (uintptr_t)dh0 | (uintptr_t)dh1 | (uintptr_t)dact | (uintptr_t)h0 | (uintptr_t)h1;
    size_t q = quads_of((size_t)n, bits * 2), done = 4 * q, rest = (size_t)n - done;
    if (q) {
        GPU_LAUNCH(swiglu_backward_packed4_kernel, blocks_for(q, GPU_THREADS), GPU_THREADS, 0)(
            (uint2 *)act, (uint2 *)dh0, (uint2 *)dh1, (const uint2 *)dact, (const uint2 *)h0, (const uint2 *)h1, q);
        GPU_CHECK_LAUNCH();
    }
    if (rest) {
        GPU_LAUNCH(swiglu_backward_packed_kernel, blocks_for(rest, GPU_THREADS), GPU_THREADS, 0)(
            act ? act + done : NULL, dh0 + done, dh1 + done, dact + done, h0 + done, h1 + done, rest);
        GPU_CHECK_LAUNCH();
    }
}

#if GPU_HOST_PASS
extern "C" const MlpKernels mlp_cuda = {swiglu_forward, swiglu_backward, swiglu_forward_packed,
                                        swiglu_backward_packed};
#endif
