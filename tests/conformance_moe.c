// tests/conformance_moe.c: the conformance tests (tests/conformance.h) of the loss, the MoE
// block's row layout and combine, and the router.
#include "tests/conformance.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- loss
// T tokens, this device's V columns v0 .. v0+V-1 of the vocabulary; the sum of exponentials
// over a middle range of them.
static void test_loss_case(int T, int V) {   // T >= 8: the tile moves take rows 3 .. 7
    int v0 = 100, c0 = V / 7, Vc = V / 2;
    float zmul = 1e-4f, scale = 0.25f;
    float *logits = rand_floats((size_t)T * V, -4, 4);
    logits[(size_t)2 * V + V - 1] = 6.0f;   // row 2's max in its last column, row 3's in its first
    logits[(size_t)3 * V] = 5.0f;
    int *targets = rand_ints(T, v0 - 10, v0 + V + 10);   // some on this device's columns, some not
    targets[0] = -1;                        // a token without a target
    targets[1] = v0;
    float *m = malloc(sizeof(float) * T), *piece = malloc(sizeof(float) * T), *zt = malloc(sizeof(float) * T);
    float *sum = rand_floats(T, 1, 40), *lse = malloc(sizeof(float) * T);
    float *dz = copy_of(logits, sizeof(float) * T * V), *tile = malloc(sizeof(float) * 5 * V);
    int *tt = malloc(sizeof(int) * 5);
    double leaf;
    if (ORACLE) {
        ORACLE->loss->loss_row_max(m, logits, T, V);
        ORACLE->loss->loss_sum_exp(piece, logits, m, T, V, c0, Vc);
        ORACLE->loss->loss_target_logit(zt, logits, targets, T, V, v0);
        ORACLE->loss->loss_lse(lse, m, sum, T);
        ORACLE->loss->loss_leaf_sum(&leaf, lse, zt, targets, 2, T - 4, zmul);
        ORACLE->loss->loss_backward(dz, lse, targets, T, V, v0, zmul, scale);
        ORACLE->loss->tile_gather_rows(tile, logits, 3, 5, V);
        ORACLE->loss->tile_gather_targets(tt, targets, 3, 5);
    } else {
        leaf = 0.0;
        for (int t = 0; t < T; t++) {
            const float *z = logits + (size_t)t * V;
            m[t] = z[0];
            for (int i = 1; i < V; i++) m[t] = fmaxf(m[t], z[i]);
            piece[t] = 0.0f;
            for (int i = c0; i < c0 + Vc; i++) piece[t] += expf(z[i] - m[t]);
            int y = targets[t] - v0;
            zt[t] = targets[t] >= 0 && y >= 0 && y < V ? z[y] : 0.0f;
            lse[t] = m[t] + logf(sum[t]);
            if (t >= 2 && t < T - 2 && targets[t] >= 0) { leaf += lse[t] - zt[t] + zmul * lse[t] * lse[t]; }
            float coef = 1.0f + 2.0f * zmul * lse[t];
            for (int i = 0; i < V; i++)
                dz[(size_t)t * V + i] =
                    targets[t] < 0 ? 0.0f : scale * (expf(z[i] - lse[t]) * coef) - (i == y ? scale : 0.0f);
        }
        memcpy(tile, logits + 3 * V, sizeof(float) * 5 * V);
        memcpy(tt, targets + 3, sizeof(int) * 5);
    }
    float *d_logits = dev_copy(logits, sizeof(float) * T * V), *d_m = dev_poisoned(sizeof(float) * T);
    int *d_targets = dev_copy(targets, sizeof(int) * T), *d_tt = dev_poisoned(sizeof(int) * 5);
    float *d_piece = dev_poisoned(sizeof(float) * T), *d_zt = dev_poisoned(sizeof(float) * T);
    float *d_sum = dev_copy(sum, sizeof(float) * T), *d_lse = dev_poisoned(sizeof(float) * T);
    float *d_tile = dev_poisoned(sizeof(float) * 5 * V), *d_back = dev_poisoned(sizeof(float) * T * V);
    char shape[64];
    snprintf(shape, sizeof shape, "T=%d V=%d v0=%d columns %d..%d", T, V, v0, c0, c0 + Vc - 1);
    UNDER_TEST->loss->loss_row_max(d_m, d_logits, T, V);
    check_dev_floats("loss_row_max", shape, m, d_m, T, 0, 0);
    float *d_m_want = dev_copy(m, sizeof(float) * T), *d_lse_want = dev_copy(lse, sizeof(float) * T);
    float *d_zt_want = dev_copy(zt, sizeof(float) * T), *d_dz = dev_copy(logits, sizeof(float) * T * V);
    UNDER_TEST->loss->loss_sum_exp(d_piece, d_logits, d_m_want, T, V, c0, Vc);
    UNDER_TEST->loss->loss_target_logit(d_zt, d_logits, d_targets, T, V, v0);
    UNDER_TEST->loss->loss_lse(d_lse, d_m_want, d_sum, T);
    double got_leaf, *d_leaf = dev_poisoned(sizeof(double));   // the sum is device memory
    UNDER_TEST->loss->loss_leaf_sum(d_leaf, d_lse_want, d_zt_want, d_targets, 2, T - 4, zmul);
    dev_download(&got_leaf, d_leaf, sizeof got_leaf);
    dev_free(d_leaf);
    UNDER_TEST->loss->loss_backward(d_dz, d_lse_want, d_targets, T, V, v0, zmul, scale);
    UNDER_TEST->loss->tile_gather_rows(d_tile, d_logits, 3, 5, V);
    UNDER_TEST->loss->tile_scatter_rows(d_back, d_tile, 3, 5, V);
    UNDER_TEST->loss->tile_gather_targets(d_tt, d_targets, 3, 5);
    check_dev_floats("loss_sum_exp", shape, piece, d_piece, T, tol(EXP_ULPS), 0);
    check_dev_floats("loss_target_logit", shape, zt, d_zt, T, 0, 0);
    // m + log(sum): where the two nearly cancel, an ulp of log(sum) is many ulps of the small
    // result (seen on an H200: 0.0862874985 against 0.0862873793, 16 ulps apart, 2^-23 apart:
    // one ulp of a log(sum) in [1, 2)). So also within two ulps of log(sum) < 4 (sum < 40
    // here), 2 x 2^-22 = 2^-21, logf's bound on each side.
    check_dev_floats("loss_lse", shape, lse, d_lse, T, tol(EXP_ULPS), 0x1p-21f);
    compare_doubles("loss_leaf_sum", shape, &leaf, &got_leaf, 1, 0.0);
    // softmax * coef - onehot: the target column is a difference of two values near scale
    check_dev_floats("loss_backward", shape, dz, d_dz, (size_t)T * V, tol(EXP_ULPS), ORACLE ? ABS_FLOOR : 0);
    // the packed form, the logits left as they are: dz rounded, within a bf16 step (and the
    // float32 check's floor plus one, a step there being under it) of the rounded dz
    uint16_t *d_dz16 = dev_poisoned(sizeof(uint16_t) * T * V);
    UNDER_TEST->loss->loss_backward_packed(d_dz16, d_logits, d_lse_want, d_targets, T, V, v0, zmul, scale);
    uint16_t *dz16 = dev_fetch(d_dz16, sizeof(uint16_t) * T * V);
    float *dzr = malloc(sizeof(float) * T * V), *got16 = malloc(sizeof(float) * T * V);
    for (size_t i = 0; i < (size_t)T * V; i++) {
        dzr[i] = bf16_round(dz[i]);
        got16[i] = bf16_float(dz16[i]);
    }
    compare_floats("loss_backward_packed", shape, dzr, got16, (size_t)T * V, tol(BF16_ULPS), ORACLE ? 2 * ABS_FLOOR : 0);
    check_dev_floats("loss_backward_packed's logits", shape, logits, d_logits, (size_t)T * V, 0, 0);
    free(dz16); free(dzr); free(got16);
    dev_free(d_dz16);
    check_dev_floats("tile_gather_rows", shape, tile, d_tile, (size_t)5 * V, 0, 0);
    check_dev_ints("tile_gather_targets", shape, tt, d_tt, 5);
    float *back = dev_fetch(d_back, sizeof(float) * T * V);   // rows 3..7 back in place, the rest poisoned
    compare_floats("tile_scatter_rows", shape, logits + 3 * V, back + 3 * V, (size_t)5 * V, 0, 0);
    free(back);
    free(logits); free(targets); free(m); free(piece); free(zt); free(sum); free(lse); free(dz); free(tile); free(tt);
    dev_free(d_logits); dev_free(d_m); dev_free(d_targets); dev_free(d_tt); dev_free(d_piece); dev_free(d_zt);
    dev_free(d_sum); dev_free(d_lse); dev_free(d_tile); dev_free(d_back); dev_free(d_m_want); dev_free(d_lse_want);
    dev_free(d_zt_want); dev_free(d_dz);
}

// The 16-bit logits' forms against the float32 forms of the backend under test on the same
// values (logits rounded to bf16, as the head's product writes them): the same arithmetic on
// exactly widened values, so equal bits, for the max, the sum of exponentials, the target's
// logit and the gradient, which is written over its input.
static void test_loss16_case(int T, int V) {
    int v0 = 7, c0 = V / 5, Vc = V / 2;
    float zmul = 1e-3f, scale = 0.5f;
    size_t n = (size_t)T * V;
    float *logits = rand_floats(n, -6, 6);
    uint16_t *h = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) {
        h[i] = bf16_bits(logits[i]);
        logits[i] = bf16_float(h[i]);
    }
    // row 1 all negative, its max (-96) in column 3 (-100 elsewhere)
    for (int i = 0; i < V; i++) logits[V + i] = bf16_float(h[V + i] = i == 3 ? 0xc2c0 : 0xc2c8);
    int *targets = rand_ints(T, v0 - 4, v0 + V + 4);
    targets[0] = -1;
    float *lse = rand_floats(T, 2, 9);
    float *d_f = dev_copy(logits, sizeof(float) * n), *d_lse = dev_copy(lse, sizeof(float) * T);
    uint16_t *d_h = dev_copy(h, sizeof(uint16_t) * n);
    int *d_tg = dev_copy(targets, sizeof(int) * T);
    float *d_m = dev_poisoned(sizeof(float) * T), *d_m16 = dev_poisoned(sizeof(float) * T);
    float *d_p = dev_poisoned(sizeof(float) * T), *d_p16 = dev_poisoned(sizeof(float) * T);
    float *d_zt = dev_poisoned(sizeof(float) * T), *d_zt16 = dev_poisoned(sizeof(float) * T);
    uint16_t *d_dz = dev_poisoned(sizeof(uint16_t) * n);
    const LossKernels *k = UNDER_TEST->loss;
    k->loss_row_max(d_m, d_f, T, V);
    k->loss_row_max16(d_m16, d_h, T, V);
    k->loss_sum_exp(d_p, d_f, d_m, T, V, c0, Vc);
    k->loss_sum_exp16(d_p16, d_h, d_m, T, V, c0, Vc);
    k->loss_target_logit(d_zt, d_f, d_tg, T, V, v0);
    k->loss_target_logit16(d_zt16, d_h, d_tg, T, V, v0);
    k->loss_backward_packed(d_dz, d_f, d_lse, d_tg, T, V, v0, zmul, scale);
    k->loss_backward16(d_h, d_lse, d_tg, T, V, v0, zmul, scale);
    char shape[64];
    snprintf(shape, sizeof shape, "T=%d V=%d v0=%d columns %d..%d (16-bit logits)", T, V, v0, c0, c0 + Vc - 1);
    float *m = dev_fetch(d_m, sizeof(float) * T), *m16 = dev_fetch(d_m16, sizeof(float) * T);
    float *p = dev_fetch(d_p, sizeof(float) * T), *p16 = dev_fetch(d_p16, sizeof(float) * T);
    float *zt = dev_fetch(d_zt, sizeof(float) * T), *zt16 = dev_fetch(d_zt16, sizeof(float) * T);
    uint16_t *dz = dev_fetch(d_dz, sizeof(uint16_t) * n), *dz16 = dev_fetch(d_h, sizeof(uint16_t) * n);
    compare_floats("loss_row_max16", shape, m, m16, T, 0, 0);
    compare_floats("loss_sum_exp16", shape, p, p16, T, 0, 0);
    compare_floats("loss_target_logit16", shape, zt, zt16, T, 0, 0);
    size_t i = 0;
    while (i < n && dz[i] == dz16[i]) i++;
    check(i == n, "loss_backward16 %s: the bits differ from loss_backward_packed's; first at [%zu]: 0x%04x, 0x%04x",
          shape, i, i < n ? dz[i] : 0, i < n ? dz16[i] : 0);
    free(logits); free(h); free(targets); free(lse); free(m); free(m16); free(p); free(p16); free(zt); free(zt16);
    free(dz); free(dz16);
    dev_free(d_f); dev_free(d_lse); dev_free(d_h); dev_free(d_tg); dev_free(d_m); dev_free(d_m16); dev_free(d_p);
    dev_free(d_p16); dev_free(d_zt); dev_free(d_zt16); dev_free(d_dz);
}

void test_loss(void) {
    test_loss16_case(13, 50);
    test_loss16_case(70, 1100);   // rows wider than a block of the packed gradient and of the row max
    test_loss16_case(1030, 3);   // more rows than the backward's grid holds, as test_loss_case
    test_loss_case(13, 50);
    test_loss_case(9, 1000);   // rows wider than a block: the row max's reduction over warps
    test_loss_case(70, 300);   // the sum of exponentials: 3 blocks of 32 tokens (the last partial), 128-column tiles
    test_loss_case(1030, 3);   // more rows than the backward's grid holds (1024, gpu/loss.cu): blocks take a second
}

// ---------------------------------------------------------------- moe
// The plain loops for the gather, the scatter-add of expert 1's rows (r0 .. r0+n-1), the
// combine (slots in ascending expert order) and its backward.
static void ref_moe(float *xs, float *dx, float *out, float *dy, float *dw, const float *x, const float *y,
                    const float *w, const float *top_w, const float *dout, const int *top_idx, const int *row_token,
                    const int *assign_row, int T, int E, int K, int D, int r0, int n, int bf16_sum, int bf16) {
    size_t A = (size_t)T * K, R = A;
    for (size_t i = 0; i < R; i++) memcpy(xs + i * D, x + (size_t)row_token[i] * D, sizeof(float) * D);
    for (int i = r0; i < r0 + n; i++)
        for (int d = 0; d < D; d++) dx[(size_t)row_token[i] * D + d] += y[(size_t)i * D + d];
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
            float o = 0.0f;
            for (int e = 0; e < E; e++)   // slots in ascending expert order
                for (int k = 0; k < K; k++) {
                    size_t a = (size_t)t * K + k;
                    if (top_idx[a] != e) continue;
                    float p = w[a] * y[(size_t)assign_row[a] * D + d];
                    o = bf16_sum ? bf16_round(o + bf16_round(p)) : o + p;
                }
            out[(size_t)t * D + d] = !bf16_sum && bf16 ? bf16_round(o) : o;
        }
    for (size_t a = 0; a < A; a++) {
        float dot = 0.0f;
        for (int d = 0; d < D; d++) {
            dy[(size_t)assign_row[a] * D + d] = w[a] * dout[(a / K) * D + d];
            dot += dout[(a / K) * D + d] * y[(size_t)assign_row[a] * D + d];
        }
        dw[a] = w[a] == 0.0f && top_w[a] != 0.0f ? 0.0f : dot;
    }
}

static int *distinct_experts(int T, int E, int K) {   // K distinct experts per token, in a random order
    int *top_idx = malloc(sizeof(int) * T * K);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            int e, dup;
            do {
                e = rng_int(E);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= top_idx[(size_t)t * K + j] == e;
            } while (dup);
            top_idx[(size_t)t * K + k] = e;
        }
    return top_idx;
}

// combine_forward_packed and combine_backward_packed on y's bits (y rounded here), against the
// float32 forms' results on the rounded y (the oracle's, or the loops'), dy's bits the
// rounded dy's: exact, as the float32 forms are on the GPU.
static void test_combine_packed(const float *y, const float *w, const float *top_w, const float *dout,
                                const int *top_idx, const int *row_token, const int *assign_row, int T, int E, int K,
                                int D, int bf16_sum, int bf16) {
    size_t A = (size_t)T * K, R = A;
    uint16_t *y16 = malloc(sizeof(uint16_t) * R * D);
    float *yr = malloc(sizeof(float) * R * D), *out = malloc(sizeof(float) * T * D);
    float *dy = malloc(sizeof(float) * R * D), *dw = malloc(sizeof(float) * A);
    for (size_t i = 0; i < R * D; i++) {
        y16[i] = bf16_bits(y[i]);
        yr[i] = bf16_float(y16[i]);
    }
    if (ORACLE) {
        ORACLE->moe->combine_forward(out, yr, w, top_idx, assign_row, T, D, K, bf16_sum, bf16);
        ORACLE->moe->combine_backward(dy, dw, dout, yr, w, top_w, assign_row, A, D, K);
    } else {
        float *xs = malloc(sizeof(float) * R * D), *dx = calloc((size_t)T * D, sizeof(float));
        ref_moe(xs, dx, out, dy, dw, dx, yr, w, top_w, dout, top_idx, row_token, assign_row, T, E, K, D, 0, 0,
                bf16_sum, bf16);
        free(xs); free(dx);
    }
    uint16_t *d_y16 = dev_copy(y16, sizeof(uint16_t) * R * D), *d_dy = dev_poisoned(sizeof(uint16_t) * R * D);
    float *d_w = dev_copy(w, sizeof(float) * A), *d_top_w = dev_copy(top_w, sizeof(float) * A);
    float *d_dout = dev_copy(dout, sizeof(float) * T * D), *d_out = dev_poisoned(sizeof(float) * T * D);
    float *d_dw = dev_poisoned(sizeof(float) * A);
    int *d_idx = dev_copy(top_idx, sizeof(int) * A), *d_ar = dev_copy(assign_row, sizeof(int) * A);
    UNDER_TEST->moe->combine_forward_packed(d_out, d_y16, d_w, d_idx, d_ar, T, D, K, bf16_sum, bf16);
    UNDER_TEST->moe->combine_backward_packed(d_dy, d_dw, d_dout, d_y16, d_w, d_top_w, d_ar, A, D, K);
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d E=%d K=%d D=%d bf16_sum=%d bf16=%d", T, E, K, D, bf16_sum, bf16);
    check_dev_floats("combine_forward_packed", shape, out, d_out, (size_t)T * D, 0, 0);
    check_dev_floats("combine_backward_packed dw", shape, dw, d_dw, A, 0, 0);
    uint16_t *got = dev_fetch(d_dy, sizeof(uint16_t) * R * D);
    size_t bad = 0;
    for (size_t i = 0; i < R * D; i++) bad += got[i] != bf16_bits(dy[i]);
    check(bad == 0, "combine_backward_packed dy %s: %zu of %zu values differ", shape, bad, R * D);
    free(got); free(y16); free(yr); free(out); free(dy); free(dw);
    dev_free(d_y16); dev_free(d_dy); dev_free(d_w); dev_free(d_top_w); dev_free(d_dout); dev_free(d_out);
    dev_free(d_dw); dev_free(d_idx); dev_free(d_ar);
}

static void test_moe_case(int T, int E, int K, int D, int bf16_sum, int bf16) {
    size_t A = (size_t)T * K, R = A;
    int *top_idx = distinct_experts(T, E, K);
    int *row_start = malloc(sizeof(int) * (E + 1)), *row_token = malloc(sizeof(int) * R);
    int *assign_row = malloc(sizeof(int) * A);
    float *x = rand_floats((size_t)T * D, -1, 1), *y = rand_floats(R * D, -1, 1), *w = rand_floats(A, 0, 1);
    float *top_w = copy_of(w, sizeof(float) * A), *dout = rand_floats((size_t)T * D, -1, 1);
    w[0] = 0.0f;   // assignment 0 dropped at capacity: no gradient to its weight
    float *xs = malloc(sizeof(float) * R * D), *dx0 = rand_floats((size_t)T * D, -1, 1);
    float *dx = copy_of(dx0, sizeof(float) * T * D), *out = malloc(sizeof(float) * T * D);
    float *dy = malloc(sizeof(float) * R * D), *dw = malloc(sizeof(float) * A);
    if (ORACLE) {
        ORACLE->moe->sort_rows(row_start, row_token, assign_row, top_idx, T, E, K);
    } else {   // counting sort, (token, slot) order inside each expert
        int r = 0;
        for (int e = 0; e < E; e++) {
            row_start[e] = r;
            for (size_t a = 0; a < A; a++)
                if (top_idx[a] == e) { row_token[r] = (int)(a / K); assign_row[a] = r++; }
        }
        row_start[E] = r;
    }
    memset(dy, 0xff, sizeof(float) * R * D);   // every row is some assignment's: all written
    int r0 = row_start[1], n = row_start[2] - row_start[1];   // expert 1's rows
    if (ORACLE) {
        ORACLE->moe->gather_rows(xs, x, row_token, 0, (int)R, D);
        ORACLE->moe->scatter_add_rows(dx, y, row_token, r0, n, D);
        ORACLE->moe->combine_forward(out, y, w, top_idx, assign_row, T, D, K, bf16_sum, bf16);
        ORACLE->moe->combine_backward(dy, dw, dout, y, w, top_w, assign_row, A, D, K);
    } else {
        ref_moe(xs, dx, out, dy, dw, x, y, w, top_w, dout, top_idx, row_token, assign_row, T, E, K, D, r0, n,
                bf16_sum, bf16);
    }
    int *d_idx = dev_copy(top_idx, sizeof(int) * A), *d_rs = dev_poisoned(sizeof(int) * (E + 1));
    int *d_rt = dev_poisoned(sizeof(int) * R), *d_ar = dev_poisoned(sizeof(int) * A);
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d E=%d K=%d D=%d bf16_sum=%d bf16=%d", T, E, K, D, bf16_sum, bf16);
    UNDER_TEST->moe->sort_rows(d_rs, d_rt, d_ar, d_idx, T, E, K);
    check_dev_ints("sort_rows row_start", shape, row_start, d_rs, E + 1);
    check_dev_ints("sort_rows row_token", shape, row_token, d_rt, R);
    check_dev_ints("sort_rows assign_row", shape, assign_row, d_ar, A);
    // the rest from the expected layout
    int *d_rt_want = dev_copy(row_token, sizeof(int) * R), *d_ar_want = dev_copy(assign_row, sizeof(int) * A);
    float *d_x = dev_copy(x, sizeof(float) * T * D), *d_y = dev_copy(y, sizeof(float) * R * D);
    float *d_w = dev_copy(w, sizeof(float) * A), *d_top_w = dev_copy(top_w, sizeof(float) * A);
    float *d_dout = dev_copy(dout, sizeof(float) * T * D), *d_xs = dev_poisoned(sizeof(float) * R * D);
    float *d_dx = dev_copy(dx0, sizeof(float) * T * D), *d_out = dev_poisoned(sizeof(float) * T * D);
    float *d_dy = dev_poisoned(sizeof(float) * R * D), *d_dw = dev_poisoned(sizeof(float) * A);
    UNDER_TEST->moe->gather_rows(d_xs, d_x, d_rt_want, 0, (int)R, D);
    UNDER_TEST->moe->scatter_add_rows(d_dx, d_y, d_rt_want, r0, n, D);
    UNDER_TEST->moe->combine_forward(d_out, d_y, d_w, d_idx, d_ar_want, T, D, K, bf16_sum, bf16);
    UNDER_TEST->moe->combine_backward(d_dy, d_dw, d_dout, d_y, d_w, d_top_w, d_ar_want, A, D, K);
    check_dev_floats("gather_rows", shape, xs, d_xs, R * D, 0, 0);
    // the packed gather of the rows from 1 on, into a poisoned array: each value the bf16 bits
    // of the row's (exact: the rounding is the one of kernels/bf16.h), the first row untouched
    uint16_t *d_xs16 = dev_poisoned(sizeof(uint16_t) * R * D);
    UNDER_TEST->moe->gather_rows_packed(d_xs16 + D, d_x, d_rt_want, 1, (int)R - 1, D);
    uint16_t *xs16 = dev_fetch(d_xs16, sizeof(uint16_t) * R * D);
    size_t bad16 = 0;
    for (size_t i = 0; i < R * D; i++) bad16 += xs16[i] != (i < (size_t)D ? 0xffffu : bf16_bits(xs[i]));
    check(bad16 == 0, "gather_rows_packed %s: %zu of %zu values differ", shape, bad16, R * D);
    free(xs16);
    dev_free(d_xs16);
    check_dev_floats("scatter_add_rows expert 1", shape, dx, d_dx, (size_t)T * D, 0, 0);
    // every expert's rows at once, against the test's loop adding them expert by expert
    float *all = copy_of(dx0, sizeof(float) * T * D), *d_all = dev_copy(dx0, sizeof(float) * T * D);
    for (size_t i = 0; i < R; i++)
        for (int d = 0; d < D; d++) all[(size_t)row_token[i] * D + d] += y[i * D + d];
    UNDER_TEST->moe->scatter_add_tokens(d_all, d_y, d_ar_want, T, K, D);
    check_dev_floats("scatter_add_tokens", shape, all, d_all, (size_t)T * D, 0, 0);
    free(all);
    dev_free(d_all);
    check_dev_floats("combine_forward", shape, out, d_out, (size_t)T * D, 0, 0);
    check_dev_floats("combine_backward dy", shape, dy, d_dy, R * D, 0, 0);
    check_dev_floats("combine_backward dw", shape, dw, d_dw, A, 0, 0);
    test_combine_packed(y, w, top_w, dout, top_idx, row_token, assign_row, T, E, K, D, bf16_sum, bf16);
    free(top_idx); free(row_start); free(row_token); free(assign_row); free(x); free(y); free(w); free(top_w);
    free(dout); free(xs); free(dx0); free(dx); free(out); free(dy); free(dw);
    dev_free(d_idx); dev_free(d_rs); dev_free(d_rt); dev_free(d_ar); dev_free(d_rt_want); dev_free(d_ar_want);
    dev_free(d_x); dev_free(d_y); dev_free(d_w); dev_free(d_top_w); dev_free(d_dout); dev_free(d_xs);
    dev_free(d_dx); dev_free(d_out); dev_free(d_dy); dev_free(d_dw);
}

// The dense path's layout and add_shared.
static void test_moe_dense(void) {
    int T = 9, E = 5, K = 2;
    size_t A = (size_t)T * K;
    int *top_idx = rand_ints(A, 0, E), *rs = malloc(sizeof(int) * (E + 1)), *rt = malloc(sizeof(int) * E * T);
    int *ar = malloc(sizeof(int) * A);
    float *a = rand_floats(100, -1, 1), *b = rand_floats(100, -1, 1), *sum = copy_of(a, sizeof(float) * 100);
    if (ORACLE) {
        ORACLE->moe->dense_rows(rs, rt, ar, top_idx, T, E, K);
        ORACLE->moe->add_shared(sum, b, 100);
    } else {
        for (int e = 0; e <= E; e++) rs[e] = e * T;
        for (int i = 0; i < E * T; i++) rt[i] = i % T;
        for (size_t i = 0; i < A; i++) ar[i] = top_idx[i] * T + (int)(i / K);
        for (int i = 0; i < 100; i++) sum[i] += b[i];
    }
    int *d_idx = dev_copy(top_idx, sizeof(int) * A), *d_rs = dev_poisoned(sizeof(int) * (E + 1));
    int *d_rt = dev_poisoned(sizeof(int) * E * T), *d_ar = dev_poisoned(sizeof(int) * A);
    float *d_a = dev_copy(a, sizeof(float) * 100), *d_b = dev_copy(b, sizeof(float) * 100);
    UNDER_TEST->moe->dense_rows(d_rs, d_rt, d_ar, d_idx, T, E, K);
    UNDER_TEST->moe->add_shared(d_a, d_b, 100);
    check_dev_ints("dense_rows row_start", "T=9 E=5 K=2", rs, d_rs, E + 1);
    check_dev_ints("dense_rows row_token", "T=9 E=5 K=2", rt, d_rt, (size_t)E * T);
    check_dev_ints("dense_rows assign_row", "T=9 E=5 K=2", ar, d_ar, A);
    check_dev_floats("add_shared", "n=100", sum, d_a, 100, 0, 0);
    free(top_idx); free(rs); free(rt); free(ar); free(a); free(b); free(sum);
    dev_free(d_idx); dev_free(d_rs); dev_free(d_rt); dev_free(d_ar); dev_free(d_a); dev_free(d_b);
}

void test_moe(void) {
    test_moe_case(11, 6, 2, 19, 0, 0);
    test_moe_case(11, 6, 3, 19, 1, 1);
    test_moe_case(7, 4, 4, 8, 0, 1);
    test_moe_case(40, 8, 2, 300, 0, 0);   // combine_backward dw: 80 assignments in 3 blocks, 300 columns in 3 tiles
    // the gather and dy four columns a thread (gpu/moe.cu: D a multiple of 4, as 300 and 4 here
    // too), 274 quads a row in two blocks; 19 above one at a time
    test_moe_case(13, 5, 2, 1096, 0, 1);
    // Many assignments: the GPU's sort_rows walks them in tiles of 256 (gpu/moe.cu).
    test_moe_case(1500, 64, 6, 4, 0, 0);
    test_moe_case(3001, 8, 2, 4, 1, 1);
    test_moe_dense();
}

// ---------------------------------------------------------------- router
// idx (k) = the k largest of v (n), largest first, ties to the lower index.
static void ref_topk(const float *v, int n, int k, int *idx) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= idx[q] == i;
            if (!taken && (best < 0 || v[i] > v[best])) best = i;
        }
        idx[j] = best;
    }
}

static void ref_softmax(float *p, const float *l, int E) {
    float m = l[0], z = 0.0f;
    for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
    for (int e = 0; e < E; e++) { p[e] = expf(l[e] - m); z += p[e]; }
    for (int e = 0; e < E; e++) p[e] /= z;
}

// A routing rule as the test runs it: which router, and its switches.
typedef struct { const char *name; int which, scaled, G, keep, gate_round, bf16; } Route;

// masked (E) = sel (E), the experts of the groups outside the keep best (a group ranked by
// the sum of its n_best best entries) set to -inf.
static void ref_keep_groups(float *masked, const float *sel, int E, int G, int keep, int n_best) {
    memcpy(masked, sel, sizeof(float) * E);
    if (G <= 0) return;
    int per = E / G, top[2], best[16];
    float gs[16];
    for (int g = 0; g < G; g++) {
        ref_topk(sel + g * per, per, n_best, top);
        gs[g] = n_best == 1 ? sel[g * per + top[0]] : sel[g * per + top[0]] + sel[g * per + top[1]];
    }
    ref_topk(gs, G, keep, best);
    for (int g = 0; g < G; g++) {
        int kept = 0;
        for (int j = 0; j < keep; j++) kept |= best[j] == g;
        for (int e = g * per; e < (g + 1) * per && !kept; e++) masked[e] = -INFINITY;
    }
}

// The three routers' forward (kernels/router.h's rules) in plain loops.
static void ref_route(const Route *r, int *idx, float *w, float *sc, const float *logits, const float *bias, int T,
                      int E, int K, float rsf) {
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        float *p = sc + (size_t)t * E, *wt = w + (size_t)t * K, s[64], masked[64], sum = 0.0f;
        int *it = idx + (size_t)t * K, gr = r->gate_round;
        if (r->which == 0) {   // mixtral: top-k logits, softmax of those
            memcpy(p, l, sizeof(float) * E);
            ref_topk(l, E, K, it);
            for (int k = 0; k < K; k++) { wt[k] = expf(l[it[k]] - l[it[0]]); sum += wt[k]; }
            for (int k = 0; k < K; k++) wt[k] /= sum;
        } else if (r->which == 1) {   // softmax over all (V2's groups: by their best), the top-k scaled or re-normalised
            ref_softmax(p, l, E);
            ref_keep_groups(masked, p, E, r->G, r->keep, 1);
            ref_topk(masked, E, K, it);
            for (int k = 0; k < K; k++) {
                wt[k] = r->scaled ? p[it[k]] * rsf : expf(p[it[k]] - p[it[0]]);
                sum += wt[k];
            }
            for (int k = 0; k < K && !r->scaled; k++) wt[k] /= sum;
        } else {   // deepseek: sigmoid + bias, the best groups (by their two best), weights from the unbiased s
            for (int e = 0; e < E; e++) {
                s[e] = gr ? bf16_round(ref_sigmoid(l[e])) : ref_sigmoid(l[e]);
                float b = gr ? bf16_round(bias[e]) : bias[e];
                p[e] = gr ? bf16_round(s[e] + b) : s[e] + b;
            }
            ref_keep_groups(masked, p, E, r->G, r->keep, 2);
            ref_topk(masked, E, K, it);
            for (int k = 0; k < K; k++) { wt[k] = s[it[k]]; sum += wt[k]; }
            for (int k = 0; k < K; k++) wt[k] = wt[k] / (sum + 1e-20f) * rsf;
            for (int k = 0; k < K && r->bf16; k++) wt[k] = bf16_round(wt[k]);
        }
    }
}

static void run_route(const RouterKernels *rk, const Route *r, int *idx, float *w, float *sc, const float *logits,
                      const float *bias, int T, int E, int K, float rsf) {
    if (r->which == 0) rk->route_mixtral(idx, w, sc, logits, T, E, K);
    else if (r->which == 1) rk->route_softmax(idx, w, sc, logits, T, E, K, r->G, r->keep, r->scaled, rsf);
    else rk->route_deepseek(idx, w, sc, logits, bias, T, E, K, r->G, r->keep, rsf, r->gate_round, r->bf16);
}

static void test_route(const Route *r) {
    int T = 40, E = 8, K = 2;
    float rsf = 2.5f, *logits = rand_floats((size_t)T * E, -3, 3), *bias = rand_floats(E, -0.1f, 0.1f);
    logits[1] = logits[4] = 5.0f;   // token 0: a tie for the top, which goes to the lower index
    int *idx = malloc(sizeof(int) * T * K);
    float *w = malloc(sizeof(float) * T * K), *sc = malloc(sizeof(float) * T * E);
    if (ORACLE) run_route(ORACLE->router, r, idx, w, sc, logits, bias, T, E, K, rsf);
    else ref_route(r, idx, w, sc, logits, bias, T, E, K, rsf);
    float *d_logits = dev_copy(logits, sizeof(float) * T * E), *d_bias = dev_copy(bias, sizeof(float) * E);
    int *d_idx = dev_poisoned(sizeof(int) * T * K);
    float *d_w = dev_poisoned(sizeof(float) * T * K), *d_sc = dev_poisoned(sizeof(float) * T * E);
    run_route(UNDER_TEST->router, r, d_idx, d_w, d_sc, d_logits, d_bias, T, E, K, rsf);
    // random logits 6/40 apart on average: a few-ulp difference in exp cannot swap a choice
    check_dev_ints(r->name, "T=40 E=8 K=2 top_idx", idx, d_idx, (size_t)T * K);
    check_dev_floats(r->name, "T=40 E=8 K=2 top_w", w, d_w, (size_t)T * K, bf16_tol(r->bf16, EXP_ULPS), 0);
    // DeepSeek's scores s + bias can come near 0: a few ulp of the largest score as well
    check_dev_floats(r->name, "T=40 E=8 K=2 scores", sc, d_sc, (size_t)T * E,
                     bf16_tol(r->gate_round, r->which ? EXP_ULPS : 0), scale_tol(sc, (size_t)T * E, EXP_ULPS));
    free(logits); free(bias); free(idx); free(w); free(sc);
    dev_free(d_logits); dev_free(d_bias); dev_free(d_idx); dev_free(d_w); dev_free(d_sc);
}

// Counting, capacity and dropping: integers, exact.
static void test_router_counts(void) {
    int B = 3, S = 10, E = 5, K = 2, cap = 4;
    size_t A = (size_t)B * S * K;
    int *idx = rand_ints(A, 0, E), *before = rand_ints((size_t)B * E, 0, 3), *counts0 = rand_ints((size_t)B * E, 0, 9);
    int *counts = copy_of(counts0, sizeof(int) * B * E), *keep = malloc(sizeof(int) * A);
    long ecount0[5] = {3, 0, 1, 7, 2}, ecount[5];
    memcpy(ecount, ecount0, sizeof ecount);
    float *w0 = rand_floats(A, 0, 1), *w = copy_of(w0, sizeof(float) * A);
    if (ORACLE) {
        ORACLE->router->count_sequence_assignments(counts, idx, B, S, E, K);
        ORACLE->router->capacity_mask(keep, idx, B, S, E, K, cap, before);
        ORACLE->router->drop_weights(w, keep, A);
        ORACLE->router->count_experts(ecount, idx, A);
    } else {
        for (int b = 0; b < B; b++) {
            int used[5];
            memcpy(used, before + (size_t)b * E, sizeof used);
            for (size_t a = (size_t)b * S * K; a < (size_t)(b + 1) * S * K; a++) {
                counts[b * E + idx[a]]++;
                keep[a] = ++used[idx[a]] <= cap;
                w[a] *= (float)keep[a];
                ecount[idx[a]]++;
            }
        }
    }
    int *d_idx = dev_copy(idx, sizeof(int) * A), *d_before = dev_copy(before, sizeof(int) * B * E);
    int *d_counts = dev_copy(counts0, sizeof(int) * B * E), *d_keep = dev_poisoned(sizeof(int) * A);
    long *d_ecount = dev_copy(ecount0, sizeof ecount0);
    float *d_w = dev_copy(w0, sizeof(float) * A);
    UNDER_TEST->router->count_sequence_assignments(d_counts, d_idx, B, S, E, K);
    UNDER_TEST->router->capacity_mask(d_keep, d_idx, B, S, E, K, cap, d_before);
    UNDER_TEST->router->drop_weights(d_w, d_keep, A);
    UNDER_TEST->router->count_experts(d_ecount, d_idx, A);
    const char *shape = "B=3 S=10 E=5 K=2 capacity=4";
    check_dev_ints("count_sequence_assignments", shape, counts, d_counts, (size_t)B * E);
    check_dev_ints("capacity_mask", shape, keep, d_keep, A);
    check_dev_floats("drop_weights", shape, w, d_w, A, 0, 0);
    long *got = dev_fetch(d_ecount, sizeof ecount);
    int same = !memcmp(got, ecount, sizeof ecount);
    check(same, "count_experts %s: got %ld %ld %ld %ld %ld want %ld %ld %ld %ld %ld", shape, got[0], got[1], got[2],
          got[3], got[4], ecount[0], ecount[1], ecount[2], ecount[3], ecount[4]);
    // capacity from zero (before = NULL): the first `cap` assignments of each expert in a sequence
    int *keep0 = malloc(sizeof(int) * A);
    if (ORACLE) ORACLE->router->capacity_mask(keep0, idx, B, S, E, K, cap, NULL);
    else
        for (int b = 0; b < B; b++) {
            int used[5] = {0};
            for (size_t a = (size_t)b * S * K; a < (size_t)(b + 1) * S * K; a++) keep0[a] = ++used[idx[a]] <= cap;
        }
    UNDER_TEST->router->capacity_mask(d_keep, d_idx, B, S, E, K, cap, NULL);
    check_dev_ints("capacity_mask (from zero)", shape, keep0, d_keep, A);
    free(got); free(idx); free(before); free(counts0); free(counts); free(keep); free(keep0); free(w0); free(w);
    dev_free(d_idx); dev_free(d_before); dev_free(d_counts); dev_free(d_keep); dev_free(d_ecount); dev_free(d_w);
}

// The plain loops for router_probs, lb_chunk_sums, lb_loss, lb_backward (into dl[0]) and the
// three routers' backward (dl[1] mixtral, dl[2] softmax unscaled, dl[3] deepseek).
static void ref_router_grads(float *probs, double *part, float *f, double *lb_seq, float *const dl[4],
                             const float *logits, const int *idx, const float *top_w, const float *dw,
                             const double *tot, int B, int S, int nchunks, int chunk, int E, int K, int Sg,
                             float coef, float rsf) {
    int T = B * S;
    for (int t = 0; t < T; t++) ref_softmax(probs + (size_t)t * E, logits + (size_t)t * E, E);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < nchunks; j++) {
            double *cnt = part + ((size_t)b * nchunks + j) * 2 * E;
            for (int e = 0; e < E; e++)
                for (int t = b * S + j * chunk; t < b * S + (j + 1) * chunk; t++) {
                    for (int k = 0; k < K; k++) cnt[e] += idx[t * K + k] == e;
                    cnt[E + e] += probs[(size_t)t * E + e];
                }
        }
    for (int b = 0; b < B; b++) {
        double acc = 0.0;
        for (int e = 0; e < E; e++) {
            f[b * E + e] = (float)tot[b * 2 * E + e] / (float)Sg;
            acc += (double)f[b * E + e] * (tot[b * 2 * E + E + e] / Sg);
        }
        lb_seq[b] = coef * acc;
    }
    for (int t = 0; t < T; t++) {
        const float *p = probs + (size_t)t * E, *fb = f + (size_t)(t / S) * E, *g = dw + t * K, *w = top_w + t * K;
        const int *it = idx + t * K;
        float dot = 0.0f, wg = 0.0f, dp[8] = {0}, pdp = 0.0f, Z = 0.0f, gs = 0.0f, sg[2];
        for (int e = 0; e < E; e++) dot += p[e] * (coef * fb[e] / Sg);
        for (int e = 0; e < E; e++) dl[0][t * E + e] += p[e] * (coef * fb[e] / Sg - dot);
        for (int k = 0; k < K; k++) wg += w[k] * g[k];
        for (int k = 0; k < K; k++) dl[1][t * E + it[k]] += w[k] * (g[k] - wg);
        for (int k = 0; k < K; k++) dp[it[k]] = w[k] * (g[k] - wg);
        for (int e = 0; e < E; e++) pdp += p[e] * dp[e];
        for (int e = 0; e < E; e++) dl[2][t * E + e] += p[e] * (dp[e] - pdp);
        for (int k = 0; k < K; k++) { sg[k] = ref_sigmoid(logits[t * E + it[k]]); Z += sg[k]; }
        Z += 1e-20f;
        for (int k = 0; k < K; k++) gs += g[k] * sg[k];
        for (int k = 0; k < K; k++)
            dl[3][t * E + it[k]] += rsf * (g[k] / Z - gs / (Z * Z)) * sg[k] * (1.0f - sg[k]);
    }
}

// The load-balance statistics and the three routers' backward.
static void test_router_grads(void) {
    int B = 2, S = 12, E = 6, K = 2, nchunks = 3, chunk = 4, T = B * S, Sg = 24;
    float coef = 0.01f, rsf = 2.0f;
    int *idx = malloc(sizeof(int) * T * K);
    for (int t = 0; t < T; t++) {   // two distinct experts per token
        idx[t * K] = rng_int(E);
        idx[t * K + 1] = (idx[t * K] + 1 + rng_int(E - 1)) % E;
    }
    float *logits = rand_floats((size_t)T * E, -3, 3), *probs = malloc(sizeof(float) * T * E);
    float *top_w = rand_floats((size_t)T * K, 0, 1), *dw = rand_floats((size_t)T * K, -1, 1);
    float *dl0 = rand_floats((size_t)T * E, -1, 1), *f = malloc(sizeof(float) * B * E);
    float *dl[4];
    for (int i = 0; i < 4; i++) dl[i] = copy_of(dl0, sizeof(float) * T * E);
    double *part0 = malloc(sizeof(double) * B * nchunks * 2 * E), *tot = malloc(sizeof(double) * B * 2 * E);
    for (int i = 0; i < B * nchunks * 2 * E; i++) part0[i] = rng_int(5);
    for (int i = 0; i < B * 2 * E; i++) tot[i] = 1 + rng_int(30);
    double *part = copy_of(part0, sizeof(double) * B * nchunks * 2 * E), lb_seq[2];
    if (ORACLE) {
        const RouterKernels *o = ORACLE->router;
        o->router_probs(probs, logits, T, E);
        o->lb_chunk_sums(part, idx, probs, B, S, nchunks, chunk, E, K);
        o->lb_loss(f, lb_seq, tot, B, E, Sg, coef);
        o->lb_backward(dl[0], probs, f, B, S, Sg, E, coef);
        o->router_mixtral_backward(dl[1], dw, idx, top_w, T, E, K);
        o->router_softmax_backward(dl[2], dw, idx, top_w, probs, T, E, K, 0, rsf);
        o->router_deepseek_backward(dl[3], dw, idx, logits, T, E, K, rsf, 0);
    } else {
        ref_router_grads(probs, part, f, lb_seq, dl, logits, idx, top_w, dw, tot, B, S, nchunks, chunk, E, K, Sg, coef,
                         rsf);
    }
    const RouterKernels *u = UNDER_TEST->router;
    int *d_idx = dev_copy(idx, sizeof(int) * T * K);
    float *d_logits = dev_copy(logits, sizeof(float) * T * E), *d_probs = dev_poisoned(sizeof(float) * T * E);
    float *d_probs_want = dev_copy(probs, sizeof(float) * T * E), *d_f = dev_poisoned(sizeof(float) * B * E);
    float *d_f_want = dev_copy(f, sizeof(float) * B * E), *d_top_w = dev_copy(top_w, sizeof(float) * T * K);
    float *d_dw = dev_copy(dw, sizeof(float) * T * K), *d_dl[4];
    for (int i = 0; i < 4; i++) d_dl[i] = dev_copy(dl0, sizeof(float) * T * E);
    double *d_part = dev_copy(part0, sizeof(double) * B * nchunks * 2 * E);
    double *d_tot = dev_copy(tot, sizeof(double) * B * 2 * E);
    double *d_lb = dev_poisoned(sizeof(double) * B);
    u->router_probs(d_probs, d_logits, T, E);
    u->lb_chunk_sums(d_part, d_idx, d_probs_want, B, S, nchunks, chunk, E, K);
    u->lb_loss(d_f, d_lb, d_tot, B, E, Sg, coef);
    u->lb_backward(d_dl[0], d_probs_want, d_f_want, B, S, Sg, E, coef);
    u->router_mixtral_backward(d_dl[1], d_dw, d_idx, d_top_w, T, E, K);
    u->router_softmax_backward(d_dl[2], d_dw, d_idx, d_top_w, d_probs_want, T, E, K, 0, rsf);
    u->router_deepseek_backward(d_dl[3], d_dw, d_idx, d_logits, T, E, K, rsf, 0);
    const char *shape = "B=2 S=12 E=6 K=2 chunks 3x4";
    check_dev_floats("router_probs", shape, probs, d_probs, (size_t)T * E, tol(EXP_ULPS), 0);
    double *got = dev_fetch(d_part, sizeof(double) * B * nchunks * 2 * E);
    compare_doubles("lb_chunk_sums", shape, part, got, (size_t)B * nchunks * 2 * E, 0.0);
    free(got);
    check_dev_floats("lb_loss f", shape, f, d_f, (size_t)B * E, 0, 0);
    got = dev_fetch(d_lb, sizeof(double) * B);
    compare_doubles("lb_loss lb_seq", shape, lb_seq, got, B, 0.0);
    free(got);
    check_dev_floats("lb_backward", shape, dl[0], d_dl[0], (size_t)T * E, 0, 0);
    check_dev_floats("router_mixtral_backward", shape, dl[1], d_dl[1], (size_t)T * E, 0, 0);
    check_dev_floats("router_softmax_backward", shape, dl[2], d_dl[2], (size_t)T * E, 0, 0);
    // through the device's sigmoid: few ulps, and the result is added to dlogits (scale 1)
    check_dev_floats("router_deepseek_backward", shape, dl[3], d_dl[3], (size_t)T * E, tol(EXP_ULPS),
                     scale_tol(dl[3], (size_t)T * E, EXP_ULPS));
    free(idx); free(logits); free(probs); free(top_w); free(dw); free(dl0); free(f); free(part0); free(tot);
    free(part);
    for (int i = 0; i < 4; i++) { free(dl[i]); dev_free(d_dl[i]); }
    dev_free(d_idx); dev_free(d_logits); dev_free(d_probs); dev_free(d_probs_want); dev_free(d_f); dev_free(d_f_want);
    dev_free(d_top_w); dev_free(d_dw); dev_free(d_part); dev_free(d_tot); dev_free(d_lb);
}

void test_router(void) {
    static const Route routes[] = {
        {"route_mixtral", 0, 0, 0, 0, 0, 0},
        {"route_softmax (scaled)", 1, 1, 0, 0, 0, 0},
        {"route_softmax (re-normalised)", 1, 0, 0, 0, 0, 0},
        // (groups ranked by their best: keeping fewer than K decides more than the top k alone)
        {"route_softmax (scaled, 4 groups ranked by their best, keep 1)", 1, 1, 4, 1, 0, 0},
        {"route_deepseek (4 groups, keep 2)", 2, 0, 4, 2, 0, 0},
        {"route_deepseek (no groups, gate rounding, bf16)", 2, 0, 0, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) test_route(&routes[i]);
    test_router_counts();
    test_router_grads();
}

