// kernels/cpu/init.c: the parameters' initial values on the CPU (kernels/init.h).
#include "kernels/init.h"
#include <math.h>

static uint64_t mix64(uint64_t z) {   // splitmix64 finaliser
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Standard normal from a counter (Box-Muller on two hashed uniforms). `draw` lets the
// truncated normal redraw without leaving the element's own stream.
static float normal_at(uint64_t key, uint64_t i, uint64_t draw) {
    uint64_t a = mix64(key ^ mix64(i * 0x9E3779B97F4A7C15ull + draw * 2));
    uint64_t b = mix64(key ^ mix64(i * 0x9E3779B97F4A7C15ull + draw * 2 + 1));
    double u1 = ((a >> 11) + 1.0) / 9007199254740993.0;   // (0, 1]
    double u2 = (b >> 11) / 9007199254740992.0;           // [0, 1)
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

// Each element is a function of (key, its global index) alone, so the threads may split the
// elements any way: the same values on any thread count.
static void param_init(float *x, size_t i0, size_t n, uint64_t name_hash, int seed, float std, float constant,
                       int truncated, const int *shape, const int *lindex, const int *gshape, int ndim) {
    uint64_t key = mix64(name_hash ^ mix64((uint64_t)seed + 0x1234567ull));
    int whole = 1;   // the device holds the whole tensor: an element's global index is its own
    for (int d = 0; d < ndim; d++) whole &= shape[d] == gshape[d];
    #pragma omp parallel for schedule(static) if (n >= 65536)
    for (size_t li = i0; li < i0 + n; li++) {
        size_t i = whole ? li : global_index(shape, lindex, gshape, ndim, li), at = li - i0;
        if (std == 0.0f) { x[at] = constant; continue; }
        float z = normal_at(key, i, 0);
        for (uint64_t d = 1; truncated && fabsf(z) > 2.0f; d++) z = normal_at(key, i, d);
        x[at] = std * z;
    }
}

const InitKernels init_cpu = {param_init};
