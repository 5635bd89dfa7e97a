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

static void combine_forward(float *out, const float *y, const float *w, const int *top_idx, const int *assign_row,
                            int T, int D, int K, int bf16_sum, int bf16) {
    #pragma omp parallel for if ((long)T * D * K > 65536)
    for (int t = 0; t < T; t++) {
        int ord[K];
        for (int k = 0; k < K; k++) ord[k] = k;
        for (int i = 1; i < K; i++)   // insertion sort of the slots by expert index
            for (int j = i; j > 0 && top_idx[(size_t)t * K + ord[j]] < top_idx[(size_t)t * K + ord[j - 1]]; j--) {
                int tmp = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = tmp;
            }
        float *o = out + (size_t)t * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int k = 0; k < K; k++) {
            size_t a = (size_t)t * K + ord[k];
            const float *ya = y + (size_t)assign_row[a] * D;
            float wa = w[a];
            if (bf16_sum) {
                #pragma omp simd   // (element by element)
                for (int d = 0; d < D; d++) o[d] = bf16_round(o[d] + bf16_round(wa * ya[d]));
            } else {
                #pragma omp simd
                for (int d = 0; d < D; d++) o[d] += wa * ya[d];
            }
        }
        if (!bf16_sum && bf16)   // float32_weight_sum: one rounding
            for (int d = 0; d < D; d++) o[d] = bf16_round(o[d]);
    }
}

enum { CHAINS = 8 };   // assignments whose routing-weight gradients are summed side by side

// dot[i] = dout[t] . y[row] for the assignments a0 + i, i < n <= CHAINS (t = a / K, row =
// assign_row[a]): each one chain over d in order, a product rounded and then added, as a loop
// per assignment makes it; the chains side by side, so that an add never waits on the one
// before it (one chain alone waits the add's latency at every d).
static void weight_dots(float *dot, const float *dout, const float *y, const int *assign_row, size_t a0, int n,
                        int D, int K) {
    const float *dt[CHAINS], *ya[CHAINS];
    float s[CHAINS];
    for (int i = 0; i < CHAINS; i++) {
        size_t a = a0 + (size_t)(i < n ? i : 0);   // spare chains repeat the first
        dt[i] = dout + (a / K) * D;
        ya[i] = y + (size_t)assign_row[a] * D;
        s[i] = 0.0f;
    }
    for (int d = 0; d < D; d++)
#pragma GCC unroll 8
        for (int i = 0; i < CHAINS; i++) s[i] += dt[i][d] * ya[i][d];
    for (int i = 0; i < n; i++) dot[i] = s[i];
}

static void combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
                             const float *top_w, const int *assign_row, size_t A, int D, int K) {
    size_t groups = (A + CHAINS - 1) / CHAINS;
    #pragma omp parallel for if ((long)A * D > 65536)
    for (size_t q = 0; q < groups; q++) {
        size_t a0 = q * CHAINS;
        int n = (int)(A - a0 < CHAINS ? A - a0 : CHAINS);
        float dot[CHAINS];
        weight_dots(dot, dout, y, assign_row, a0, n, D, K);
        for (int i = 0; i < n; i++) {
            size_t a = a0 + (size_t)i;
            const float *dt = dout + (a / K) * D;
            float *dyr = dy + (size_t)assign_row[a] * D, wa = w[a];
            #pragma omp simd   // (element by element)
            for (int d = 0; d < D; d++) dyr[d] = wa * dt[d];
            // w = top_w * keep: a dropped assignment (keep 0) passes no gradient to top_w
            dw[a] = (wa == 0.0f && top_w[a] != 0.0f) ? 0.0f : dot[i];
        }
    }
}

static void add_shared(float *out, const float *shared, size_t n) {
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] += shared[i];
}

const MoeKernels moe_cpu = {
    sort_rows, dense_rows, gather_rows, gather_rows_packed, scatter_add_rows, scatter_add_tokens,
    combine_forward, combine_backward, add_shared,
};
