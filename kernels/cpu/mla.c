// kernels/cpu/mla.c: MLA's splits, concatenations and scale on the CPU (kernels/mla.h).
// Each is a pass over the tokens' rows, split over the threads by token (every element is
// written by one thread, and a sum over heads keeps its head order): the same bits on any
// number of threads. A pass of fewer than PAR_FLOATS floats stays on one thread.
#include "kernels/mla.h"
#include <string.h>

enum { PAR_FLOATS = 65536 };

static void mla_apply_scale(float *x, size_t n, float s) {
    #pragma omp parallel for simd if (n > PAR_FLOATS)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void mla_copy_cols(float *dst, size_t dst_stride, const float *src, size_t src_stride, int T, int W) {
    #pragma omp parallel for schedule(static) if ((size_t)T * W > PAR_FLOATS)
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * dst_stride, src + (size_t)t * src_stride, sizeof(float) * W);
}

static void mla_assemble_kv(float *k, float *v, const float *kv, const float *ckv, int T, int N, int Dn, int Dr,
                            int Dv, int R) {
    int Qk = Dn + Dr;
    #pragma omp parallel for schedule(static) if ((size_t)T * N * (Qk + Dv) > PAR_FLOATS)
    for (int t = 0; t < T; t++) {
        const float *k_rope = ckv + (size_t)t * (R + Dr) + R;   // (Dr) shared by all heads
        for (int h = 0; h < N; h++) {
            const float *kvh = kv + ((size_t)t * N + h) * (Dn + Dv);   // (Dn+Dv)
            float *kh = k + ((size_t)t * N + h) * Qk;                  // (Qk)
            memcpy(kh, kvh, sizeof(float) * Dn);
            memcpy(kh + Dn, k_rope, sizeof(float) * Dr);
            memcpy(v + ((size_t)t * N + h) * Dv, kvh + Dn, sizeof(float) * Dv);
        }
    }
}

static void mla_split_dkv(float *dkv, const float *dk, const float *dv, int T, int N, int Dn, int Dr, int Dv) {
    int Qk = Dn + Dr;
    #pragma omp parallel for schedule(static) if ((size_t)T * N * (Dn + Dv) > PAR_FLOATS)
    for (int t = 0; t < T; t++)
        for (int h = 0; h < N; h++) {
            float *dkvh = dkv + ((size_t)t * N + h) * (Dn + Dv);
            memcpy(dkvh, dk + ((size_t)t * N + h) * Qk, sizeof(float) * Dn);
            memcpy(dkvh + Dn, dv + ((size_t)t * N + h) * Dv, sizeof(float) * Dv);
        }
}

static void mla_k_rope_grad_leaf(float *piece, const float *dk, int T, int N, int Dn, int Dr, int h0, int h1) {
    int Qk = Dn + Dr;
    #pragma omp parallel for schedule(static) if ((size_t)T * (h1 - h0) * Dr > PAR_FLOATS)
    for (int t = 0; t < T; t++)
        for (int h = h0; h < h1; h++)
            for (int d = 0; d < Dr; d++) piece[(size_t)t * Dr + d] += dk[((size_t)t * N + h) * Qk + Dn + d];
}

const MlaKernels mla_cpu = {mla_apply_scale, mla_copy_cols, mla_assemble_kv, mla_split_dkv, mla_k_rope_grad_leaf};
