// kernels/cpu/moe.c: the MoE block's row layout, gather and combine on the CPU (the
// arithmetic of kernels/moe.h).
#include "kernels/moe.h"  // MoeKernels, the table this file fills
#include "kernels/bf16.h" // bf16_round
#include <string.h>       // memcpy, memset

static void sort_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    size_t A = (size_t)T * K;
    int fill[E];
    memset(fill, 0, sizeof fill);
    for (size_t a = 0; a < A; a++) fill[top_idx[a]]++;
    row_start[0] = 0;
    for (int e = 0; e < E; e++) { row_start[e + 1] = row_start[e] + fill[e]; fill[e] = 0; }
    for (size_t a = 0; a < A; a++) {
        int e = top_idx[a], r = row_start[e] + fill[e]++;
        row_token[r] = (int)(a / K);
        assign_row[a] = r;
    }
}

static void dense_rows(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K) {
    size_t A = (size_t)T * K;
    for (int e = 0; e <= E; e++) row_start[e] = e * T;
    for (int e = 0; e < E; e++)
        for (int t = 0; t < T; t++) row_token[e * T + t] = t;
    for (size_t a = 0; a < A; a++) assign_row[a] = top_idx[a] * T + (int)(a / K);
}

static void gather_rows(float *xs, const float *x, const int *row_token, int r0, int n, int D) {
    #pragma omp parallel for if ((long)n * D > 65536)
    for (int i = 0; i < n; i++)
        memcpy(xs + (size_t)i * D, x + (size_t)row_token[r0 + i] * D, sizeof(float) * D);
}

static void gather_rows_packed(uint16_t *xs, const float *x, const int *row_token, int r0, int n, int D) {
    #pragma omp parallel for if ((long)n * D > 65536)
    for (int i = 0; i < n; i++) {
        const float *a = x + (size_t)row_token[r0 + i] * D;
        for (int d = 0; d < D; d++) xs[(size_t)i * D + d] = bf16_bits(a[d]);
    }
}

static void scatter_add_rows(float *dx, const float *dxs, const int *row_token, int r0, int n, int D) {
    #pragma omp parallel for if ((long)n * D > 65536)
    for (int i = 0; i < n; i++) {
        float *o = dx + (size_t)row_token[r0 + i] * D;
        const float *a = dxs + (size_t)(r0 + i) * D;
        #pragma omp simd   // (element by element: vectors change no bits)
        for (int d = 0; d < D; d++) o[d] += a[d];
    }
}

static void scatter_add_tokens(float *dx, const float *dxs, const int *assign_row, int T, int K, int D) {
    #pragma omp parallel for if ((long)T * K * D > 65536)
    for (int t = 0; t < T; t++) {
        int rows[K];
        for (int k = 0; k < K; k++) {   // insertion sort of the token's rows
            int r = assign_row[(size_t)t * K + k], j = k;
            for (; j > 0 && rows[j - 1] > r; j--) rows[j] = rows[j - 1];
            rows[j] = r;
        }
        float *o = dx + (size_t)t * D;
        for (int k = 0; k < K; k++) {
            const float *a = dxs + (size_t)rows[k] * D;
            #pragma omp simd   // (element by element)
            for (int d = 0; d < D; d++) o[d] += a[d];
        }
    }
}

// ord (K) = the token's slots 0 .. K-1 in ascending expert order; idx (K) its experts.
static void slot_order(int *ord, const int *idx, int K) {
    for (int k = 0; k < K; k++) ord[k] = k;
    for (int i = 1; i < K; i++)   // insertion sort of the slots by expert index
        for (int j = i; j > 0 && idx[ord[j]] < idx[ord[j - 1]]; j--) {
            int tmp = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = tmp;
        }
}

// o (D) += wa * ya (D), each product and partial sum rounded to bf16 when bf16_sum.
static void add_slot(float *o, const float *ya, float wa, int D, int bf16_sum) {
    if (bf16_sum) {
        #pragma omp simd   // (element by element)
        for (int d = 0; d < D; d++) o[d] = bf16_round(o[d] + bf16_round(wa * ya[d]));
    } else {
        #pragma omp simd
        for (int d = 0; d < D; d++) o[d] += wa * ya[d];
    }
}

// combine_forward on y's floats (y16 NULL) or on its bits, each slot's row widened first (exact).
static void forward_slots(float *out, const float *y, const uint16_t *y16, const float *w, const int *top_idx,
                          const int *assign_row, int T, int D, int K, int bf16_sum, int bf16) {
    #pragma omp parallel for if ((long)T * D * K > 65536)
    for (int t = 0; t < T; t++) {
        int ord[K];
        float buf[y16 ? D : 1];
        slot_order(ord, top_idx + (size_t)t * K, K);
        float *o = out + (size_t)t * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int k = 0; k < K; k++) {
            size_t a = (size_t)t * K + ord[k], row = (size_t)assign_row[a];
            const float *ya = y ? y + row * D : buf;
            if (y16)
                for (int d = 0; d < D; d++) buf[d] = bf16_float(y16[row * D + d]);
            add_slot(o, ya, w[a], D, bf16_sum);
        }
        if (!bf16_sum && bf16)   // float32_weight_sum: one rounding
            for (int d = 0; d < D; d++) o[d] = bf16_round(o[d]);
    }
}

static void combine_forward(float *out, const float *y, const float *w, const int *top_idx, const int *assign_row,
                            int T, int D, int K, int bf16_sum, int bf16) {
    forward_slots(out, y, NULL, w, top_idx, assign_row, T, D, K, bf16_sum, bf16);
}

static void combine_forward_packed(float *out, const uint16_t *y, const float *w, const int *top_idx,
                                   const int *assign_row, int T, int D, int K, int bf16_sum, int bf16) {
    forward_slots(out, NULL, y, w, top_idx, assign_row, T, D, K, bf16_sum, bf16);
}

enum { CHAINS = 8 };   // assignments whose routing-weight gradients are summed side by side

// ya (CHAINS): the y rows of the assignments a0 + i, i < n <= CHAINS, as floats: y's own
// rows, or (y16) their bits widened into buf (CHAINS rows of D). Spare entries repeat the first.
static void slot_rows(const float **ya, float *buf, const float *y, const uint16_t *y16, const int *assign_row,
                      size_t a0, int n, int D) {
    for (int i = 0; i < CHAINS; i++) {
        size_t row = (size_t)assign_row[a0 + (size_t)(i < n ? i : 0)];
        if (!y16) { ya[i] = y + row * D; continue; }
        float *r = buf + (size_t)i * D;
        for (int d = 0; d < D; d++) r[d] = bf16_float(y16[row * D + d]);
        ya[i] = r;
    }
}

// dot[i] = dout[t] . ya[i] for the assignments a0 + i, i < n (t = a / K): each one chain over
// d in order, a product rounded and then added, as a loop per assignment makes it; the chains
// side by side, so that an add never waits on the one before it (one chain alone waits the
// add's latency at every d).
static void weight_dots(float *dot, const float *dout, const float *const *ya, size_t a0, int n, int D, int K) {
    const float *dt[CHAINS];
    float s[CHAINS];
    for (int i = 0; i < CHAINS; i++) {
        dt[i] = dout + ((a0 + (size_t)(i < n ? i : 0)) / K) * D;
        s[i] = 0.0f;
    }
    for (int d = 0; d < D; d++)
#pragma GCC unroll 8
        for (int i = 0; i < CHAINS; i++) s[i] += dt[i][d] * ya[i][d];
    for (int i = 0; i < n; i++) dot[i] = s[i];
}

// combine_backward on y's floats (y16 NULL) writing dy's, or on y's bits writing dy's bits.
static void backward_slots(float *dy, uint16_t *dy16, float *dw, const float *dout, const float *y, const uint16_t *y16,
                           const float *w, const float *top_w, const int *assign_row, size_t A, int D, int K) {
    size_t groups = (A + CHAINS - 1) / CHAINS;
    #pragma omp parallel for if ((long)A * D > 65536)
    for (size_t q = 0; q < groups; q++) {
        size_t a0 = q * CHAINS;
        int n = (int)(A - a0 < CHAINS ? A - a0 : CHAINS);
        float dot[CHAINS], buf[y16 ? CHAINS * D : 1];
        const float *ya[CHAINS];
        slot_rows(ya, buf, y, y16, assign_row, a0, n, D);
        weight_dots(dot, dout, ya, a0, n, D, K);
        for (int i = 0; i < n; i++) {
            size_t a = a0 + (size_t)i, row = (size_t)assign_row[a];
            const float *dt = dout + (a / K) * D;
            float wa = w[a];
            if (dy16)
                for (int d = 0; d < D; d++) dy16[row * D + d] = bf16_bits(wa * dt[d]);   // (rounded)
            else {
                #pragma omp simd   // (element by element)
                for (int d = 0; d < D; d++) dy[row * D + d] = wa * dt[d];
            }
            // w = top_w * keep: a dropped assignment (keep 0) passes no gradient to top_w
            dw[a] = (wa == 0.0f && top_w[a] != 0.0f) ? 0.0f : dot[i];
        }
    }
}

static void combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
                             const float *top_w, const int *assign_row, size_t A, int D, int K) {
    backward_slots(dy, NULL, dw, dout, y, NULL, w, top_w, assign_row, A, D, K);
}

static void combine_backward_packed(uint16_t *dy, float *dw, const float *dout, const uint16_t *y, const float *w,
                                    const float *top_w, const int *assign_row, size_t A, int D, int K) {
    backward_slots(NULL, dy, dw, dout, NULL, y, w, top_w, assign_row, A, D, K);
}

static void add_shared(float *out, const float *shared, size_t n) {
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] += shared[i];
}

const MoeKernels moe_cpu = {
    sort_rows, dense_rows, gather_rows, gather_rows_packed, scatter_add_rows, scatter_add_tokens,
    combine_forward, combine_backward, combine_forward_packed, combine_backward_packed, add_shared,
};
