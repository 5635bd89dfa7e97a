// gpu/mlp.cu: SwiGLU on the GPU (kernels/mlp.h), the twin of kernels/cpu/mlp.c: the same
// operations in the same order. The one difference is expf: the CPU's (glibc) is within
// 1 ulp and the GPU's within 2 ulp (CUDA's documented bound without fast math), so a
// result may differ from the CPU's by a few ulp; everything else is IEEE and unfused
// (the Makefile builds gpu/ with --fmad=false).
//
// Launch geometry: one thread per element, GPU_THREADS per block.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__device__ static inline float sigmoid_dev(float z) { return 1.0f / (1.0f + expf(-z)); }

__global__ static void swiglu_forward_kernel(float *act, const float *h0, const float *h1, long n, int bf16) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = h0[i] * sigmoid_dev(h0[i]) * h1[i];
    act[i] = bf16 ? bf16_round_dev(a) : a;   // cast point 11
}

// d silu(z)/dz = sig(z) * (1 + z * (1 - sig(z))); act (where asked) from the same sigmoid.
// dact[i] is read before dh1[i] is written: dh1 may be dact.
__global__ static void swiglu_backward_kernel(float *act, float *dh0, float *dh1, const float *dact, const float *h0,
                                              const float *h1, long n, int bf16) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float z = h0[i], d = dact[i], sg = sigmoid_dev(z), silu = z * sg;
    if (act) {
        float a = silu * h1[i];
        act[i] = bf16 ? bf16_round_dev(a) : a;   // cast point 11
    }
    dh1[i] = d * silu;
    dh0[i] = d * h1[i] * sg * (1.0f + z * (1.0f - sg));
}

// act (n) = silu(h0) * h1; bf16: rounded to bf16.
static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    if (n <= 0) return;
    GPU_LAUNCH(swiglu_forward_kernel, blocks_for((size_t)n, GPU_THREADS), GPU_THREADS, 0)(act, h0, h1, n, bf16);
    GPU_CHECK_LAUNCH();
}

// dh0, dh1 (n) from dact (n), and act where asked.
static void swiglu_backward(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                            long n, int bf16) {
    if (n <= 0) return;
    GPU_LAUNCH(swiglu_backward_kernel, blocks_for((size_t)n, GPU_THREADS), GPU_THREADS, 0)(act, dh0, dh1, dact,
                                                                                                  h0, h1, n, bf16);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const MlpKernels mlp_cuda = {swiglu_forward, swiglu_backward};
#endif
