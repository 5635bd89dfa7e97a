// kernels/moe.h: the MoE block's data movement: the experts' row layout, the gather of
// their input rows, the weighted combine of their outputs and its backward
// (docs/model.md#expert-dispatch); the layer is model/moe.c, the router's kernels are in
// kernels/router.h.
//
// T tokens, D the model width, E experts, K experts per token; an assignment (token t,
// slot k) is numbered a = t*K + k, A = T*K of them. Expert e owns the rows
// [row_start[e], row_start[e+1]) of the R expert rows, each row one token's input to it.
#ifndef MESHMOE_KERNELS_MOE_H
#define MESHMOE_KERNELS_MOE_H
#include <stddef.h>
#include <stdint.h>

typedef struct MoeKernels {
    // The sparse path's rows (R = A): a counting sort of the assignments by expert, keeping
    // (token, slot) order inside each expert. row_start (E+1); row_token (A) the token of
    // each row; assign_row (A) the row of each assignment; top_idx (T,K).
    // The planner has no routing: its twin writes the row starts of a balanced routing
    // (assignment a to expert a mod E) and leaves row_token and assign_row as they are.
    void (*sort_rows)(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K);
    // The dense path's rows (R = E*T): expert e runs on every token, rows [e*T, (e+1)*T).
    // row_start (E+1) = e*T (the planner's twin writes these too); row_token (E*T);
    // assign_row (A) = the row of expert top_idx[a] on token a/K.
    void (*dense_rows)(int *row_start, int *row_token, int *assign_row, const int *top_idx, int T, int E, int K);
    // xs (n,D) = the x (T,D) rows of the tokens of rows [r0, r0+n); row_token (R).
    void (*gather_rows)(float *xs, const float *x, const int *row_token, int r0, int n, int D);
    // The same rows as 16-bit numbers, xs (n,D) their bf16 bits (kernels/bf16.h: rounded; exact
    // for the bf16-valued rows of bf16 mode), for products that read 16-bit operands.
    void (*gather_rows_packed)(uint16_t *xs, const float *x, const int *row_token, int r0, int n, int D);
    // dx (T,D) += dxs rows [r0, r0+n) (R,D), each into the row of its token; the n rows
    // belong to one expert, so their tokens are distinct.
    void (*scatter_add_rows)(float *dx, const float *dxs, const int *row_token, int r0, int n, int D);
    // The sparse path's rows all at once: dx (T,D) += each token's K rows of dxs (R,D), the
    // rows assign_row[t*K .. t*K+K-1] (A), added one after another in ascending row order:
    // the experts' order, so the same sums as scatter_add_rows expert by expert.
    void (*scatter_add_tokens)(float *dx, const float *dxs, const int *assign_row, int T, int K, int D);
    // out (T,D) = sum_k w[t,k] * y[assign_row[t*K+k]], each token's slots added in
    // ascending expert order (the order of the dense path's sum over E); y (R,D),
    // w (T,K), top_idx (T,K), assign_row (A).
    // bf16_sum (cast point 14, float32_weight_sum=false): each product and partial sum
    // rounded to bf16; otherwise a float32 sum, rounded once when bf16.
    void (*combine_forward)(float *out, const float *y, const float *w, const int *top_idx, const int *assign_row,
                            int T, int D, int K, int bf16_sum, int bf16);
    // dy (R,D): row assign_row[a] = w[a] * dout[a/K]; dw (A) = dout[a/K] . y[assign_row[a]],
    // 0 for an assignment dropped at capacity (w 0 where top_w is not); dout (T,D).
    // Rows that no assignment uses are left as they are.
    void (*combine_backward)(float *dy, float *dw, const float *dout, const float *y, const float *w,
                             const float *top_w, const int *assign_row, size_t A, int D, int K);
    // The same two with y as 16-bit numbers (bf16 bits, kernels/bf16.h: the experts' outputs
    // as the layer keeps them when its products read 16-bit operands), and dy written so too,
    // each value rounded (as the layer rounds dy): the same sums and products.
    void (*combine_forward_packed)(float *out, const uint16_t *y, const float *w, const int *top_idx,
                                   const int *assign_row, int T, int D, int K, int bf16_sum, int bf16);
    void (*combine_backward_packed)(uint16_t *dy, float *dw, const float *dout, const uint16_t *y, const float *w,
                                    const float *top_w, const int *assign_row, size_t A, int D, int K);
    // out (n) += shared (n): the shared experts' output added to the routed one.
    void (*add_shared)(float *out, const float *shared, size_t n);
} MoeKernels;

extern const MoeKernels moe_cpu;   // kernels/cpu/moe.c

#endif
