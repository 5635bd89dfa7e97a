// kernels/cpu/mlp.c: SwiGLU on the CPU (the arithmetic of kernels/mlp.h). The sigmoid's
// exp runs in vector lanes (kernels/cpu/expf16.h: the C library's expf, bit for bit);
// every other operation is the per-element formula's, in its order, lane by lane.
#include "kernels/mlp.h"
#include "kernels/bf16.h"
#include "kernels/cpu/expf16.h"
#include "kernels/cpu/vec16.h"
#include <math.h>

static inline float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

// The forward goes in blocks of BLOCK elements: e = expf(-z) for the block in one expf_n
// call (kernels/cpu/expf16.h), then sigmoid(z) = 1 / (1 + e) and the rest lane by lane, so
// that the divisions of a block overlap (one expf16 call per 16 elements, each followed by
// its division, took 1.5x as long: 4M elements, one thread). The backward, with more work
// per 16 elements around the same call, measured no faster in blocks and keeps the call
// per 16. The tail past the last 16 takes the scalar formula.
enum { BLOCK = 512 };
static long block_len(long i0, long n16) { return n16 - i0 < BLOCK ? n16 - i0 : BLOCK; }
static void exp_neg(float *e, const float *z, long len) {
    for (long i = 0; i < len; i += 16) vst(e + i, -vld(z + i));
    expf_n(e, e, len);
}

// act (n) = silu(h0) * h1 = h0 * sigmoid(h0) * h1, elementwise.
static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    long n16 = n / 16 * 16;
    #pragma omp parallel for if (n > 65536)
    for (long i0 = 0; i0 < n16; i0 += BLOCK) {
        float e[BLOCK] __attribute__((aligned(64)));
        long len = block_len(i0, n16);
        exp_neg(e, h0 + i0, len);
        for (long i = 0; i < len; i += 16) {
            V16 z = vld(h0 + i0 + i), sg = 1.0f / (1.0f + vld(e + i));
            vst(act + i0 + i, z * sg * vld(h1 + i0 + i));
        }
    }
    for (long i = n16; i < n; i++) act[i] = h0[i] * sigmoidf(h0[i]) * h1[i];
    if (bf16) {   // cast point 11
        #pragma omp parallel for if (n > 65536)
        for (long i = 0; i < n; i++) act[i] = bf16_round(act[i]);
    }
}

// dh1 = dact * silu(h0); dh0 = dact * h1 * silu'(h0), silu'(z) = sig(z) * (1 + z * (1 - sig(z)));
// act = silu(h0) * h1 where asked, the forward's formula on the same sigmoid. dact is read
// into a register before dh1 is written, so dh1 may be dact.
static void swiglu_backward(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                            long n, int bf16) {
    long n16 = n / 16 * 16;
    #pragma omp parallel for if (n > 65536)
    for (long k = 0; k < n16; k += 16) {
        V16 z = vld(h0 + k), d = vld(dact + k), u = vld(h1 + k), e = -z;
        expf16((float *)&e, (const float *)&e);
        V16 sg = 1.0f / (1.0f + e), silu = z * sg;
        if (act) vst(act + k, silu * u);
        vst(dh1 + k, d * silu);
        vst(dh0 + k, d * u * sg * (1.0f + z * (1.0f - sg)));
    }
    for (long i = n16; i < n; i++) {
        float z = h0[i], d = dact[i], sg = sigmoidf(z), silu = z * sg;
        if (act) act[i] = silu * h1[i];
        dh1[i] = d * silu;
        dh0[i] = d * h1[i] * sg * (1.0f + z * (1.0f - sg));
    }
    if (act && bf16) {   // cast point 11, as swiglu_forward
        #pragma omp parallel for if (n > 65536)
        for (long i = 0; i < n; i++) act[i] = bf16_round(act[i]);
    }
}

const MlpKernels mlp_cpu = {swiglu_forward, swiglu_backward};
