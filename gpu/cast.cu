// gpu/cast.cu: bf16 rounding and 16-bit packing on the GPU (kernels/cast.h), the twin of
// kernels/cpu/cast.c; the rounding is gpu/gpu.h:bf16_round_dev, the same bits as kernels/bf16.h.
//
// Launch geometry: one thread per element, GPU_THREADS per block.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__global__ static void round_kernel(float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = bf16_round_dev(x[i]);
}

__global__ static void pack_kernel(uint16_t *h, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = bf16_bits_dev(x[i]);
}

__global__ static void unpack_kernel(float *x, const uint16_t *h, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __uint_as_float((uint32_t)h[i] << 16);
}

// x (n) = rb(x), in place.
static void round_to_bf16(float *x, size_t n) {
    if (n == 0) return;
    GPU_LAUNCH(round_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(x, n);
    GPU_CHECK_LAUNCH();
}

// h (n) = the bf16 bits of x (n).
static void pack_bf16(uint16_t *h, const float *x, size_t n) {
    if (n == 0) return;
    GPU_LAUNCH(pack_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(h, x, n);
    GPU_CHECK_LAUNCH();
}

// x (n) = the floats of the bf16 bits h (n).
static void unpack_bf16(float *x, const uint16_t *h, size_t n) {
    if (n == 0) return;
    GPU_LAUNCH(unpack_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(x, h, n);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const CastKernels cast_cuda = {round_to_bf16, pack_bf16, unpack_bf16};
#endif
