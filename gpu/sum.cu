// gpu/sum.cu: adds of whole arrays on the GPU (kernels/sum.h), the twin of kernels/cpu/sum.c.
// Element by element, one add each: the CPU's bits.
//
// Launch geometry: one thread per element, GPU_THREADS per block, enough blocks to cover n.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__global__ static void add_kernel(float *acc, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += x[i];
}

static void add_arrays(float *acc, const float *x, size_t n) {
    if (n == 0) return;
    GPU_LAUNCH(add_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(acc, x, n);
    GPU_CHECK_LAUNCH();
}

// left (n) += right (n): one merge of the canonical tree.
static void tree_add(float *left, const float *right, size_t n) { add_arrays(left, right, n); }
// h (n) += x (n): a residual connection.
static void residual_add(float *h, const float *x, size_t n) { add_arrays(h, x, n); }

#if GPU_HOST_PASS
extern "C" const SumKernels sum_cuda = {tree_add, residual_add};
#endif
