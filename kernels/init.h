// kernels/init.h: the parameters' initial values, drawn from global coordinates
// (model/params.c:init_tensor): element i of a tensor is a function of (seed, the tensor's
// name, i) only, so every device of any mesh draws the same value for it.
#ifndef MESHMOE_KERNELS_INIT_H
#define MESHMOE_KERNELS_INIT_H
#include <stddef.h>
#include <stdint.h>

// The global row-major index of local element i of a tensor of local shape `shape` (ndim
// dims), cut along each dimension d into pieces of shape[d], this device holding piece
// lindex[d], of a global shape gshape.
static inline size_t global_index(const int *shape, const int *lindex, const int *gshape, int ndim, size_t i) {
    size_t g = 0, stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        size_t local = i % (size_t)shape[d];
        i /= (size_t)shape[d];
        g += ((size_t)lindex[d] * (size_t)shape[d] + local) * stride;
        stride *= (size_t)gshape[d];
    }
    return g;
}

typedef struct InitKernels {
    // x (n): local elements i0 .. i0+n-1 of a tensor (shape, lindex, gshape as in
    // global_index). std > 0: std * z, z a standard normal drawn from (name_hash, seed, the
    // element's global index), redrawn from the same stream while |z| > 2 when truncated;
    // std == 0: the constant.
    void (*param_init)(float *x, size_t i0, size_t n, uint64_t name_hash, int seed, float std, float constant,
                       int truncated, const int *shape, const int *lindex, const int *gshape, int ndim);
} InitKernels;

extern const InitKernels init_cpu;    // kernels/cpu/init.c

#endif
