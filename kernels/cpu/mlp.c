// kernels/cpu/mlp.c: SwiGLU on the CPU (the arithmetic of kernels/mlp.h). The sigmoid's
// exp runs 16 elements at a time (kernels/cpu/expf16.h: the C library's expf, bit for bit);
// every other operation is the per-element formula's, in its order, lane by lane.
#include "kernels/mlp.h"
#include "kernels/bf16.h"
#include "kernels/cpu/expf16.h"
#include <math.h>

static inline float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

// 16 floats in vector lanes (unaligned loads and stores through memcpy).
typedef float F16 __attribute__((vector_size(64)));
#define load16(p) (*(const F16u *)(p))
#define store16(p, v) (*(F16u *)(p) = (v))
typedef float F16u __attribute__((vector_size(64), aligned(4), may_alias));
// Macros, not functions: a 64-byte vector passed by value has another calling convention
// on a build without AVX-512.
#define SIGMOID16(sg, z)                                        \
    do {                                                        \
        F16 e_ = -(z);                                          \
        expf16((float *)&e_, (const float *)&e_);               \
        (sg) = 1.0f / (1.0f + e_);                              \
    } while (0)

// act (n) = silu(h0) * h1 = h0 * sigmoid(h0) * h1, elementwise.
static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    long n16 = n / 16 * 16;
    #pragma omp parallel for if (n > 65536)
    for (long i = 0; i < n16; i += 16) {
        F16 z = load16(h0 + i), sg;
        SIGMOID16(sg, z);
        store16(act + i, z * sg * load16(h1 + i));
    }
    for (long i = n16; i < n; i++) act[i] = h0[i] * sigmoidf(h0[i]) * h1[i];
    if (bf16) {   // cast point 11
        #pragma omp parallel for if (n > 65536)
        for (long i = 0; i < n; i++) act[i] = bf16_round(act[i]);
    }
}

// dh1 = dact * silu(h0); dh0 = dact * h1 * silu'(h0), silu'(z) = sig(z) * (1 + z * (1 - sig(z))).
static void swiglu_backward(float *dh0, float *dh1, const float *dact, const float *h0, const float *h1, long n) {
    long n16 = n / 16 * 16;
    #pragma omp parallel for if (n > 65536)
    for (long i = 0; i < n16; i += 16) {
        F16 z = load16(h0 + i), d = load16(dact + i), sg;
        SIGMOID16(sg, z);
        store16(dh1 + i, d * (z * sg));
        store16(dh0 + i, d * load16(h1 + i) * sg * (1.0f + z * (1.0f - sg)));
    }
    for (long i = n16; i < n; i++) {
        float sg = sigmoidf(h0[i]), silu = h0[i] * sg;
        dh1[i] = dact[i] * silu;
        dh0[i] = dact[i] * h1[i] * sg * (1.0f + h0[i] * (1.0f - sg));
    }
}

const MlpKernels mlp_cpu = {swiglu_forward, swiglu_backward};
