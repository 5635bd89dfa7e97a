// kernels/cpu/mlp.c: SwiGLU on the CPU (the arithmetic of kernels/mlp.h). The sigmoid's
// exp runs 16 elements at a time (kernels/cpu/expf16.h: the C library's expf, bit for bit);
// every other operation is the per-element formula's, in its order, lane by lane.
#include "kernels/mlp.h"
#include "kernels/bf16.h"
#include "kernels/cpu/expf16.h"
#include "kernels/cpu/vec16.h"
#include <math.h>

static inline float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

// sg = sigmoid(z) on 16 lanes (a macro: see kernels/cpu/vec16.h on vectors by value).
#define SIGMOID16(sg, z)                                        \
    do {                                                        \
        V16 e_ = -(z);                                          \
        expf16((float *)&e_, (const float *)&e_);               \
        (sg) = 1.0f / (1.0f + e_);                              \
    } while (0)

// act (n) = silu(h0) * h1 = h0 * sigmoid(h0) * h1, elementwise.
static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    long n16 = n / 16 * 16;
    #pragma omp parallel for if (n > 65536)
    for (long i = 0; i < n16; i += 16) {
        V16 z = vld(h0 + i), sg;
        SIGMOID16(sg, z);
        vst(act + i, z * sg * vld(h1 + i));
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
        V16 z = vld(h0 + i), d = vld(dact + i), sg;
        SIGMOID16(sg, z);
        vst(dh1 + i, d * (z * sg));
        vst(dh0 + i, d * vld(h1 + i) * sg * (1.0f + z * (1.0f - sg)));
    }
    for (long i = n16; i < n; i++) {
        float sg = sigmoidf(h0[i]), silu = h0[i] * sg;
        dh1[i] = dact[i] * silu;
        dh0[i] = dact[i] * h1[i] * sg * (1.0f + h0[i] * (1.0f - sg));
    }
}

const MlpKernels mlp_cpu = {swiglu_forward, swiglu_backward};
