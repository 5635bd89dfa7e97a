// gpu/init.cu: the parameters' initial values on the GPU (kernels/init.h), the twin of
// kernels/cpu/init.c: element i of a tensor is a function of (seed, name, global index)
// only. The hashes are integer arithmetic (the CPU's bits); the normal draw is Box-Muller
// in double with the device's log and cos (CUDA: within 1 and 2 ulp of double, glibc's
// within 1), so after the rounding to float a value may, rarely, differ by 1 ulp.
//
// Launch geometry: one thread per element.
#include "gpu/gpu.h"
#include "gpu/backend.h"
#include <math.h>
#include <string.h>

// A local and global shape passed by value (the header's arrays are host arrays): up to 4 dims.
typedef struct { int shape[4], lindex[4], gshape[4], ndim; } TensorPlace;

__host__ __device__ static uint64_t mix64(uint64_t z) {   // splitmix64 finaliser
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// kernels/init.h:global_index on the device.
__device__ static size_t global_index_dev(const TensorPlace *tp, size_t i) {
    size_t g = 0, stride = 1;
    for (int d = tp->ndim - 1; d >= 0; d--) {
        size_t local = i % (size_t)tp->shape[d];
        i /= (size_t)tp->shape[d];
        g += ((size_t)tp->lindex[d] * (size_t)tp->shape[d] + local) * stride;
        stride *= (size_t)tp->gshape[d];
    }
    return g;
}

// Standard normal from a counter (Box-Muller on two hashed uniforms), draw `draw` of element i.
__device__ static float normal_at(uint64_t key, uint64_t i, uint64_t draw) {
    uint64_t a = mix64(key ^ mix64(i * 0x9E3779B97F4A7C15ull + draw * 2));
    uint64_t b = mix64(key ^ mix64(i * 0x9E3779B97F4A7C15ull + draw * 2 + 1));
    double u1 = ((a >> 11) + 1.0) / 9007199254740993.0;   // (0, 1]
    double u2 = (b >> 11) / 9007199254740992.0;           // [0, 1)
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

__global__ static void param_init_kernel(float *x, size_t i0, size_t n, uint64_t key, float std, float constant,
                                         int truncated, TensorPlace tp) {
    size_t at = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= n) return;
    if (std == 0.0f) { x[at] = constant; return; }
    size_t i = global_index_dev(&tp, i0 + at);
    float z = normal_at(key, i, 0);
    for (uint64_t d = 1; truncated && fabsf(z) > 2.0f; d++) z = normal_at(key, i, d);
    x[at] = std * z;
}

// x (n): local elements i0 .. i0+n-1 of the tensor placed by shape, lindex, gshape (host arrays).
static void param_init(float *x, size_t i0, size_t n, uint64_t name_hash, int seed, float std, float constant,
                       int truncated, const int *shape, const int *lindex, const int *gshape, int ndim) {
    if (n == 0) return;
    if (ndim < 1 || ndim > 4) {
        fprintf(stderr, "meshmoe: the GPU's param_init takes 1 to 4 dims, not %d\n", ndim);
        exit(1);
    }
    TensorPlace tp;
    memset(&tp, 0, sizeof tp);
    for (int d = 0; d < ndim; d++) { tp.shape[d] = shape[d]; tp.lindex[d] = lindex[d]; tp.gshape[d] = gshape[d]; }
    tp.ndim = ndim;
    uint64_t key = mix64(name_hash ^ mix64((uint64_t)seed + 0x1234567ull));
    GPU_LAUNCH(param_init_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(x, i0, n, key, std, constant,
                                                                                    truncated, tp);
    GPU_CHECK_LAUNCH();
}

#if GPU_HOST_PASS
extern "C" const InitKernels init_cuda = {param_init};
#endif
