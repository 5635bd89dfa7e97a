// kernels/cpu/mlp.c: SwiGLU on the CPU (the arithmetic of kernels/mlp.h).
#include "kernels/mlp.h"
#include "kernels/bf16.h"
#include <math.h>

static inline float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    #pragma omp parallel for if (n > 65536)
    for (long i = 0; i < n; i++) act[i] = h0[i] * sigmoidf(h0[i]) * h1[i];
    if (bf16) {   // cast point 11
        #pragma omp parallel for if (n > 65536)
        for (long i = 0; i < n; i++) act[i] = bf16_round(act[i]);
    }
}

// d silu(z)/dz = sig(z) * (1 + z * (1 - sig(z)))
static void swiglu_backward(float *dh0, float *dh1, const float *dact, const float *h0, const float *h1, long n) {
    #pragma omp parallel for if (n > 65536)
    for (long i = 0; i < n; i++) {
        float sg = sigmoidf(h0[i]), silu = h0[i] * sg;
        dh1[i] = dact[i] * silu;
        dh0[i] = dact[i] * h1[i] * sg * (1.0f + h0[i] * (1.0f - sg));
    }
}

const MlpKernels mlp_cpu = {swiglu_forward, swiglu_backward};
