// kernels/grouped_loop.h: the experts' grouped products (kernels/matmul.h, the *_grouped
// kernels) as one call of the plain kernel per group with rows, for the backends whose
// grouped twin is that loop: the CPU's (whose products are row-stable, so one call over all
// the groups would buy nothing), the GPU's ordered GEMM and its HIP build.
#ifndef MESHMOE_KERNELS_GROUPED_LOOP_H
#define MESHMOE_KERNELS_GROUPED_LOOP_H
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/matmul.h"
#include "kernels/matmul16.h"

// out (R,OC) = inp (R,C) @ w_g on group g's rows (+= when accumulate); w (G,C,OC).
static inline void forward_grouped_loop(const MatmulKernels *k, float *out, const float *inp, const float *w,
                                        const int *rows, int G, int C, int OC, int accumulate) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->matmul_forward(out + (size_t)r0 * OC, inp + (size_t)r0 * C, w + (size_t)g * C * OC, n, C, OC,
                              accumulate);
    }
}

// dinp (R,C) += dout (R,OC) @ w_g^T on group g's rows.
static inline void dinp_grouped_loop(const MatmulKernels *k, float *dinp, const float *dout, const float *w,
                                     const int *rows, int G, int C, int OC) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->matmul_backward_dinp(dinp + (size_t)r0 * C, dout + (size_t)r0 * OC, w + (size_t)g * C * OC, n, C, OC);
    }
}

// out (R,N) = the chunked product of A (R,K) and op(B_g) on group g's rows.
static inline void chunked_grouped_loop(const MatmulKernels *k, int transB, const int *rows, int G, int N, int K,
                                        int chunks, const float *A, const float *B, float *out) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->gemm_chunked(transB, n, N, K, chunks, A + (size_t)r0 * K, K, B + (size_t)g * K * N, transB ? K : N,
                            out + (size_t)r0 * N, N);
    }
}

// dw_g (C,OC) = group g's leaves (off: G*n+1 rows), each group's offsets made to start at 0
// for the plain kernel, which takes its rows from there.
static inline int *leaf_offsets_buffer(int n) {   // n+1 ints, for group_leaves
    int *local = (int *)malloc(sizeof(int) * ((size_t)n + 1));
    if (!local) {
        fprintf(stderr, "meshmoe: out of host memory for a grouped weight gradient's %d leaves\n", n);
        exit(1);
    }
    return local;
}
// Group g's n leaves as offsets from its first row into local (n+1), that row returned in
// *r0; 0 when the group has no rows.
static inline int group_leaves(const int *off, int n, int g, int *local, int *r0) {
    const int *o = off + (size_t)g * n;
    *r0 = o[0];
    for (int l = 0; l <= n; l++) local[l] = o[l] - o[0];
    return o[n] > o[0];
}

static inline void dw_leaves_grouped_loop(const MatmulKernels *k, float *dw, const float *inp, const float *dout,
                                          const int *off, int n, int G, int C, int OC, int accumulate) {
    int *local = leaf_offsets_buffer(n), r0;
    for (int g = 0; g < G; g++)
        if (group_leaves(off, n, g, local, &r0))
            k->matmul_backward_dw_leaves(dw + (size_t)g * C * OC, inp + (size_t)r0 * C, dout + (size_t)r0 * OC, local,
                                         n, C, OC, accumulate);
    free(local);
}

// The same four loops over the 16-bit products (kernels/matmul16.h): bf16 operands, float32 results.
static inline void forward_grouped_loop16(const Matmul16Kernels *k, float *out, const uint16_t *inp,
                                          const uint16_t *w, const int *rows, int G, int C, int OC, int accumulate) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->matmul_forward(out + (size_t)r0 * OC, inp + (size_t)r0 * C, w + (size_t)g * C * OC, n, C, OC,
                              accumulate);
    }
}

static inline void dinp_grouped_loop16(const Matmul16Kernels *k, float *dinp, const uint16_t *dout,
                                       const uint16_t *w, const int *rows, int G, int C, int OC) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->matmul_backward_dinp(dinp + (size_t)r0 * C, dout + (size_t)r0 * OC, w + (size_t)g * C * OC, n, C, OC);
    }
}

static inline void chunked_grouped_loop16(const Matmul16Kernels *k, int transB, const int *rows, int G, int N, int K,
                                          int chunks, const uint16_t *A, const uint16_t *B, float *out) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->gemm_chunked(transB, n, N, K, chunks, A + (size_t)r0 * K, K, B + (size_t)g * K * N, transB ? K : N,
                            out + (size_t)r0 * N, N);
    }
}

static inline void dw_leaves_grouped_loop16(const Matmul16Kernels *k, float *dw, const uint16_t *inp,
                                            const uint16_t *dout, const int *off, int n, int G, int C, int OC,
                                            int accumulate) {
    int *local = leaf_offsets_buffer(n), r0;
    for (int g = 0; g < G; g++)
        if (group_leaves(off, n, g, local, &r0))
            k->matmul_backward_dw_leaves(dw + (size_t)g * C * OC, inp + (size_t)r0 * C, dout + (size_t)r0 * OC, local,
                                         n, C, OC, accumulate);
    free(local);
}

// The rounded forms (kernels/matmul16.h: *_round16) a group at a time.
static inline void forward_grouped_loop_round16(const Matmul16Kernels *k, uint16_t *out, const uint16_t *inp,
                                                const uint16_t *w, const int *rows, int G, int C, int OC) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->matmul_forward_round16(out + (size_t)r0 * OC, inp + (size_t)r0 * C, w + (size_t)g * C * OC, n, C, OC);
    }
}
static inline void dinp_grouped_loop_round16(const Matmul16Kernels *k, uint16_t *dinp, const uint16_t *dout,
                                             const uint16_t *w, const int *rows, int G, int C, int OC) {
    for (int g = 0; g < G; g++) {
        int r0 = rows[g], n = rows[g + 1] - r0;
        if (n > 0)
            k->matmul_backward_dinp_round16(dinp + (size_t)r0 * C, dout + (size_t)r0 * OC, w + (size_t)g * C * OC, n,
                                            C, OC);
    }
}

#endif
