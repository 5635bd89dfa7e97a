// kernels/cpu/mlp.c: SwiGLU on the CPU (the arithmetic of kernels/mlp.h). The sigmoid's
// exp runs in vector lanes (kernels/cpu/expf16.h: the C library's expf, bit for bit);
// every other operation is the per-element formula's, in its order, lane by lane.
#include "kernels/mlp.h"
#include "kernels/bf16.h"
#include "kernels/cpu/expf16.h"
#include "kernels/cpu/vec16.h"
#include <math.h>

static inline float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

// Each kernel goes in blocks of BLOCK elements, the blocks shared among the threads. In the
// forward, e = expf(-z) for a block's whole multiple of 16 in one expf_n call, then sigmoid(z)
// = 1 / (1 + e) and the rest lane by lane, so that the divisions of a block overlap (one
// expf16 call per 16 elements, each followed by its division, took 1.5x as long: 4M
// elements, one thread). The backward, with more work per 16 elements around the same call,
// measured no faster that way and keeps the call per 16. A block's tail past its last 16
// takes the scalar formula, which gives the lanes' bits.
enum { BLOCK = 512 };
static long block_len(long i0, long n) { return n - i0 < BLOCK ? n - i0 : BLOCK; }

// e (len) = expf(-z (len)), len a multiple of 16 (apart: inlined, GCC takes e for unwritten).
__attribute__((noinline)) static void exp_neg(float *e, const float *z, long len) {
    for (long i = 0; i < len; i += 16) vst(e + i, -vld(z + i));
    expf_n(e, e, len);
}

// act (len) = silu(h0) * h1 on one block; bf16: rounded (cast point 11).
static void forward_block(float *act, const float *h0, const float *h1, long len, int bf16) {
    float e[BLOCK] __attribute__((aligned(64)));
    long len16 = len / 16 * 16;
    exp_neg(e, h0, len16);
    for (long i = 0; i < len16; i += 16) {
        V16 z = vld(h0 + i), sg = 1.0f / (1.0f + vld(e + i));
        vst(act + i, z * sg * vld(h1 + i));
    }
    for (long i = len16; i < len; i++) act[i] = h0[i] * sigmoidf(h0[i]) * h1[i];
    if (bf16)
        for (long i = 0; i < len; i++) act[i] = bf16_round(act[i]);
}

// dh1 = dact * silu(h0); dh0 = dact * h1 * silu'(h0), silu'(z) = sig(z) * (1 + z * (1 - sig(z)));
// act = silu(h0) * h1 where asked, the forward's formula on the same sigmoid; one block. dact
// is read into a register before dh1 is written, so dh1 may be dact.
static void backward_block(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                           long len, int bf16) {
    long len16 = len / 16 * 16;
    for (long k = 0; k < len16; k += 16) {
        V16 z = vld(h0 + k), d = vld(dact + k), u = vld(h1 + k), e = -z;
        expf16((float *)&e, (const float *)&e);
        V16 sg = 1.0f / (1.0f + e), silu = z * sg;
        if (act) vst(act + k, silu * u);
        vst(dh1 + k, d * silu);
        vst(dh0 + k, d * u * sg * (1.0f + z * (1.0f - sg)));
    }
    for (long i = len16; i < len; i++) {
        float z = h0[i], d = dact[i], sg = sigmoidf(z), silu = z * sg;
        if (act) act[i] = silu * h1[i];
        dh1[i] = d * silu;
        dh0[i] = d * h1[i] * sg * (1.0f + z * (1.0f - sg));
    }
    if (act && bf16)   // cast point 11, as the forward
        for (long i = 0; i < len; i++) act[i] = bf16_round(act[i]);
}

static void swiglu_forward(float *act, const float *h0, const float *h1, long n, int bf16) {
    #pragma omp parallel for if (n > 65536)
    for (long i0 = 0; i0 < n; i0 += BLOCK) forward_block(act + i0, h0 + i0, h1 + i0, block_len(i0, n), bf16);
}

static void swiglu_backward(float *act, float *dh0, float *dh1, const float *dact, const float *h0, const float *h1,
                            long n, int bf16) {
    #pragma omp parallel for if (n > 65536)
    for (long i0 = 0; i0 < n; i0 += BLOCK)
        backward_block(act ? act + i0 : NULL, dh0 + i0, dh1 + i0, dact + i0, h0 + i0, h1 + i0, block_len(i0, n),
                       bf16);
}

// The packed forms: a block's inputs widened and its results made as floats on the stack,
// then packed (bf16_bits rounds: a packed gradient is the rounded one).
static void widen_block(float *x, const uint16_t *h, long len) {
    for (long i = 0; i < len; i++) x[i] = bf16_float(h[i]);
}
static void pack_block(uint16_t *h, const float *x, long len) {
    for (long i = 0; i < len; i++) h[i] = bf16_bits(x[i]);
}

static void swiglu_forward_packed(uint16_t *act, const uint16_t *h0, const uint16_t *h1, long n) {
    #pragma omp parallel for if (n > 65536)
    for (long i0 = 0; i0 < n; i0 += BLOCK) {
        float z[BLOCK] __attribute__((aligned(64))), u[BLOCK] __attribute__((aligned(64)));
        float a[BLOCK] __attribute__((aligned(64)));
        long len = block_len(i0, n);
        widen_block(z, h0 + i0, len);
        widen_block(u, h1 + i0, len);
        forward_block(a, z, u, len, 0);
        pack_block(act + i0, a, len);
    }
}

static void swiglu_backward_packed(uint16_t *act, uint16_t *dh0, uint16_t *dh1, const uint16_t *dact,
                                   const uint16_t *h0, const uint16_t *h1, long n) {
    #pragma omp parallel for if (n > 65536)
    for (long i0 = 0; i0 < n; i0 += BLOCK) {
        float z[BLOCK] __attribute__((aligned(64))), u[BLOCK] __attribute__((aligned(64)));
        float d[BLOCK] __attribute__((aligned(64))), a[BLOCK] __attribute__((aligned(64)));
        float g0[BLOCK] __attribute__((aligned(64))), g1[BLOCK] __attribute__((aligned(64)));
        long len = block_len(i0, n);
        widen_block(z, h0 + i0, len);
        widen_block(u, h1 + i0, len);
        widen_block(d, dact + i0, len);   // (all of the block read before dh1 is written)
        backward_block(act ? a : NULL, g0, g1, d, z, u, len, 0);
        if (act) pack_block(act + i0, a, len);
        pack_block(dh0 + i0, g0, len);
        pack_block(dh1 + i0, g1, len);
    }
}

const MlpKernels mlp_cpu = {swiglu_forward, swiglu_backward, swiglu_forward_packed, swiglu_backward_packed};
