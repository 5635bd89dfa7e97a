// tests/conformance_attention.c: the conformance test (tests/conformance.h) of the attention
// kernels. The expected values: in the GPU build the CPU backend's; in the CPU build plain
// loops for the dot-product softmax and its backward (below), and for the blocked (flash)
// and ring kernels, whose online merge the loops here do not repeat, the CPU's per-row
// definition attention_cpu_plain (kernels/cpu/attention.c) against the tiled kernels that
// backend_cpu runs.
#include "tests/conformance.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int B, S, q0, N, Nkv, Dqk, Dv, P; AttnRounding rnd; } Shape;

// Tolerances against the CPU in ulps of an array's largest element (tests/conformance.h:
// scale_tol): the output, a sum of p_j v_j, and the gradients, sums of such terms.
enum { ATTN_OUT_ULPS = 16, ATTN_GRAD_ULPS = 32 };

// With the probabilities rounded to bf16, the device's expf (2 ulp from glibc's) can put a p
// on the other side of a rounding midpoint: p moves by one bf16 step (2^-7 p), o by up to
// 2^-7 (p / l) |v_j| <= 2^-7 max |v|, and o's own rounding to bf16 by a step more. Measured
// on an H200 (conformance seed 15029886567844): one o of 432, -0.0151367 for -0.0150146.
static float prob_flip_tol(AttnRounding rnd, const float *v, size_t n) {
    float top = 0.0f;
    for (size_t i = 0; i < n; i++) top = fmaxf(top, fabsf(v[i]));
    return ORACLE && rnd.probs ? 0x1p-6f * top : 0.0f;   // (the CPU build: equal bits)
}
static float rnd_if(int on, float x) { return on ? bf16_round(x) : x; }
static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}
static size_t key_row(const Shape *A, int b, int j) { return ((size_t)(j / A->S) * A->B + b) * A->S + j % A->S; }

// The softmax of each row over its keys 0 .. q0+i (mask NULL), or over those of the keys
// 0 .. q0+S-1 that mask (B,1,S,q0+S) shows it: max, exponentials and their sum in key order,
// o = (sum_j e_j v_j) / l. (A hidden key adds exp(mask value - m) = 0 in a kernel that masks by
// replacement: skipping it gives the same sums.)
static void ref_dot_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                            const unsigned char *mask, const Shape *A) {
    int group = A->N / A->Nkv, W = A->q0 + A->S;
    for (int b = 0; b < A->B; b++)
        for (int h = 0; h < A->N; h++)
            for (int i = 0; i < A->S; i++) {
                int g = h / group, nj = mask ? W : A->q0 + i + 1;
                const unsigned char *seen = mask ? mask + ((size_t)b * A->S + i) * W : NULL;
                const float *qi = q + (((size_t)b * A->S + i) * A->N + h) * A->Dqk;
                float *oi = o + (((size_t)b * A->S + i) * A->N + h) * A->Dv, e[64], m = ATTN_MASK_VALUE, l = 0.0f;
                for (int j = 0; j < nj; j++) {
                    if (seen && !seen[j]) continue;
                    e[j] = rnd_if(A->rnd.scores, dot(qi, k + (key_row(A, b, j) * A->Nkv + g) * A->Dqk, A->Dqk));
                    if (e[j] > m) m = e[j];
                }
                for (int d = 0; d < A->Dv; d++) oi[d] = 0.0f;
                for (int j = 0; j < nj; j++) {
                    if (seen && !seen[j]) continue;
                    e[j] = rnd_if(A->rnd.probs, expf(e[j] - m));
                    l += e[j];
                    for (int d = 0; d < A->Dv; d++) oi[d] += e[j] * v[(key_row(A, b, j) * A->Nkv + g) * A->Dv + d];
                }
                for (int d = 0; d < A->Dv; d++)
                    oi[d] = rnd_if(A->rnd.out, rnd_if(A->rnd.probs, oi[d]) / l);
                stats[(((size_t)b * A->N + h) * A->S + i) * 2] = m;
                stats[(((size_t)b * A->N + h) * A->S + i) * 2 + 1] = l;
            }
}

// Rows r0 .. r1-1, per (sequence, kv head) its heads and rows in order, per row its keys in
// order: dv_j += p dO_i, dq_i += dS k_j, dk_j += dS q_i.
static void ref_dot_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *o, const float *stats, const Shape *A, int r0, int r1) {
    int group = A->N / A->Nkv;
    for (int b = 0; b < A->B; b++)
        for (int g = 0; g < A->Nkv; g++)
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i = r0; i < r1; i++) {
                    size_t row = ((size_t)b * A->S + i) * A->N + h;
                    const float *qi = q + row * A->Dqk, *doi = dout + row * A->Dv;
                    const float *st = stats + (((size_t)b * A->N + h) * A->S + i) * 2;
                    float Di = dot(doi, o + row * A->Dv, A->Dv), *dqi = dq + row * A->Dqk;
                    for (int d = 0; d < A->Dqk; d++) dqi[d] = 0.0f;
                    for (int j = 0; j <= A->q0 + i; j++) {
                        size_t kr = key_row(A, b, j) * A->Nkv + g;
                        float s = rnd_if(A->rnd.scores, dot(qi, k + kr * A->Dqk, A->Dqk));
                        float p = rnd_if(A->rnd.probs, expf(s - st[0])) / st[1];
                        float ds = p * (dot(doi, v + kr * A->Dv, A->Dv) - Di);
                        for (int d = 0; d < A->Dv; d++) dv[kr * A->Dv + d] += p * doi[d];
                        for (int d = 0; d < A->Dqk; d++) dqi[d] += ds * k[kr * A->Dqk + d];
                        for (int d = 0; d < A->Dqk; d++) dk[kr * A->Dqk + d] += ds * qi[d];
                    }
                }
}

// The expected forward: the oracle's, or (CPU build) the plain loops for the dot product
// and attention_cpu_plain for flash.
static void want_forward(int flash, float *o, float *stats, const float *q, const float *k, const float *v,
                         const Shape *A, int bq, int bkv) {
    const AttentionKernels *plain = ORACLE ? ORACLE->attention : &attention_cpu_plain;
    float *scratch = malloc(sizeof(float) * A->B * A->N * (A->q0 + A->S));
    if (flash) plain->flash_forward(o, stats, scratch, q, k, v, NULL, A->B, A->S, A->q0, A->N, A->Nkv, A->Dqk, A->Dv,
                                    A->rnd, bq, bkv);
    else if (ORACLE) ORACLE->attention->dot_forward(o, stats, scratch, q, k, v, NULL, A->B, A->S, A->q0, A->N, A->Nkv,
                                                    A->Dqk, A->Dv, A->rnd);
    else ref_dot_forward(o, stats, q, k, v, NULL, A);
    free(scratch);
}

// dot_forward, dot_backward_rows, flash_forward, flash_backward_rows on one shape.
static void test_attention_case(Shape A, int r0, int r1, int bq, int bkv) {
    size_t nq = (size_t)A.B * A.S * A.N, nk = (size_t)A.P * A.B * A.S * A.Nkv, ns = (size_t)A.B * A.N * A.S * 2;
    float *q = rand_floats(nq * A.Dqk, -1, 1), *k = rand_floats(nk * A.Dqk, -1, 1), *v = rand_floats(nk * A.Dv, -1, 1);
    float *dout = rand_floats(nq * A.Dv, -1, 1), *dk0 = rand_floats(nk * A.Dqk, -1, 1);
    float *dv0 = rand_floats(nk * A.Dv, -1, 1);
    char shape[128];
    snprintf(shape, sizeof shape, "B=%d S=%d q0=%d N=%d Nkv=%d Dqk=%d Dv=%d rounding=%d%d%d rows %d..%d bq=%d bkv=%d",
             A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd.scores, A.rnd.probs, A.rnd.out, r0, r1, bq, bkv);
    float *d_q = dev_copy(q, sizeof(float) * nq * A.Dqk), *d_k = dev_copy(k, sizeof(float) * nk * A.Dqk);
    float *d_v = dev_copy(v, sizeof(float) * nk * A.Dv), *d_dout = dev_copy(dout, sizeof(float) * nq * A.Dv);
    float *d_scratch = dev_alloc(sizeof(float) * A.B * A.N * (A.q0 + A.S) * 2);
    for (int flash = 0; flash < 2; flash++) {
        const char *fwd = flash ? "flash_forward" : "dot_forward";
        const char *bwd = flash ? "flash_backward_rows" : "dot_backward_rows";
        float *o = malloc(sizeof(float) * nq * A.Dv), *stats = malloc(sizeof(float) * ns);
        want_forward(flash, o, stats, q, k, v, &A, bq, bkv);
        float *d_o = dev_poisoned(sizeof(float) * nq * A.Dv), *d_stats = dev_poisoned(sizeof(float) * ns);
        const AttentionKernels *u = UNDER_TEST->attention;
        if (flash)
            u->flash_forward(d_o, d_stats, d_scratch, d_q, d_k, d_v, NULL, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv,
                             A.rnd, bq, bkv);
        else
            u->dot_forward(d_o, d_stats, d_scratch, d_q, d_k, d_v, NULL, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv,
                           A.rnd);
        // exp in l and o: a few ulp; bf16 outputs one bf16 step
        // o = sum_j p_j v_j with v of both signs can be much smaller than its terms: a few ulp
        // of the largest o besides a few of each element (ATTN_OUT_ULPS)
        check_dev_floats(fwd, shape, o, d_o, nq * A.Dv, bf16_tol(A.rnd.out, EXP_ULPS),
                         fmaxf(scale_tol(o, nq * A.Dv, ATTN_OUT_ULPS), prob_flip_tol(A.rnd, v, nk * A.Dv)));
        char stats_name[64];
        snprintf(stats_name, sizeof stats_name, "%s stats (m, l)", fwd);
        check_dev_floats(stats_name, shape, stats, d_stats, ns, tol(EXP_ULPS), 0);
        // The backward from the expected o and stats (rows outside r0 .. r1-1 stay poisoned).
        float *dq = malloc(sizeof(float) * nq * A.Dqk), *dk = copy_of(dk0, sizeof(float) * nk * A.Dqk);
        float *dv = copy_of(dv0, sizeof(float) * nk * A.Dv);
        memset(dq, 0xff, sizeof(float) * nq * A.Dqk);
        float *Dblk = malloc(sizeof(float) * A.B * A.Nkv * bq);   // the CPU's scratch for D_i
        if (ORACLE && flash)
            ORACLE->attention->flash_backward_rows(dq, dk, dv, Dblk, dout, q, k, v, o, stats, NULL, A.B, A.S, A.q0, r0,
                                                   r1, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd, bq, bkv);
        else if (ORACLE) ORACLE->attention->dot_backward_rows(dq, dk, dv, dout, q, k, v, o, stats, NULL, A.B, A.S, A.q0,
                                                              r0, r1, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
        else ref_dot_backward(dq, dk, dv, dout, q, k, v, o, stats, &A, r0, r1);
        float *d_o_want = dev_copy(o, sizeof(float) * nq * A.Dv), *d_st_want = dev_copy(stats, sizeof(float) * ns);
        float *d_dq = dev_poisoned(sizeof(float) * nq * A.Dqk), *d_dk = dev_copy(dk0, sizeof(float) * nk * A.Dqk);
        float *d_dv = dev_copy(dv0, sizeof(float) * nk * A.Dv);
        if (flash)
            u->flash_backward_rows(d_dq, d_dk, d_dv, d_scratch, d_dout, d_q, d_k, d_v, d_o_want, d_st_want, NULL, A.B,
                                   A.S, A.q0, r0, r1, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd, bq, bkv);
        else
            u->dot_backward_rows(d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_o_want, d_st_want, NULL, A.B, A.S, A.q0, r0,
                                 r1, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
        // Each dq, dk, dv element adds up to 13 keys' or 2 x 9 rows' terms p (dO.v - D) x, p
        // through expf (a few ulp apart), and dO.v - D can cancel: ATTN_GRAD_ULPS ulps of the
        // array's largest element bounds the differences that this leaves.
        char name[64];
        snprintf(name, sizeof name, "%s dq", bwd);
        check_dev_floats(name, shape, dq, d_dq, nq * A.Dqk, tol(EXP_ULPS), scale_tol(dq, nq * A.Dqk, ATTN_GRAD_ULPS));
        snprintf(name, sizeof name, "%s dk", bwd);
        check_dev_floats(name, shape, dk, d_dk, nk * A.Dqk, tol(EXP_ULPS), scale_tol(dk, nk * A.Dqk, ATTN_GRAD_ULPS));
        snprintf(name, sizeof name, "%s dv", bwd);
        check_dev_floats(name, shape, dv, d_dv, nk * A.Dv, tol(EXP_ULPS), scale_tol(dv, nk * A.Dv, ATTN_GRAD_ULPS));
        free(o); free(stats); free(dq); free(dk); free(dv); free(Dblk);
        dev_free(d_o); dev_free(d_stats); dev_free(d_o_want); dev_free(d_st_want); dev_free(d_dq); dev_free(d_dk);
        dev_free(d_dv);
    }
    free(q); free(k); free(v); free(dout); free(dk0); free(dv0);
    dev_free(d_q); dev_free(d_k); dev_free(d_v); dev_free(d_dout); dev_free(d_scratch);
}

// max |got - want| / max |want|, over what the call added to base when base is given.
static double rel_diff(const float *want, const float *got, const float *base, size_t n, size_t stride) {
    double top = 0, diff = 0;
    for (size_t i = 0; i < n; i += stride) {
        double w = want[i] - (base ? base[i] : 0.0f), g = got[i] - (base ? base[i] : 0.0f);
        if (fabs(w) > top) top = fabs(w);
        if (!(fabs(g - w) <= diff)) diff = fabs(g - w);
        if (isnan(diff)) break;   // (a NaN makes it NaN, whatever follows)
    }
    return top > 0 ? diff / top : diff;
}

// The expected ring (float32) against this file's own loops over both blocks' keys at once: one
// softmax per row, where the ring merges two (begin, the merges and end are the same functions
// on both sides of the CPU build, so only this sees them). The merge rescales the first
// block's sums once, so the two differ by a few roundings: at most 2.3e-7 of max |o| measured
// (2026-12-07, the shapes here, seeds 1-20); the bound is 1e-6.
static void ring_against_one_softmax(const Shape *A, const float *o, const float *q, float *const kb[2],
                                     float *const vb[2]) {
    size_t nk = (size_t)A->B * A->S * A->Nkv, nq = (size_t)A->B * A->S * A->N;
    Shape W = *A;
    W.q0 = A->S;   // the queries at S .. 2S-1, the keys of both blocks: P = 2 parts of S positions
    W.P = 2;
    float *k = malloc(sizeof(float) * 2 * nk * A->Dqk), *v = malloc(sizeof(float) * 2 * nk * A->Dv);
    for (int blk = 0; blk < 2; blk++) {
        memcpy(k + blk * nk * A->Dqk, kb[blk], sizeof(float) * nk * A->Dqk);
        memcpy(v + blk * nk * A->Dv, vb[blk], sizeof(float) * nk * A->Dv);
    }
    float *want = malloc(sizeof(float) * nq * A->Dv), *stats = malloc(sizeof(float) * nq * 2);
    ref_dot_forward(want, stats, q, k, v, NULL, &W);
    double rel = rel_diff(want, o, NULL, nq * A->Dv, 1);
    check(rel <= 1e-6, "the ring's two blocks against one softmax over their keys: %.3g of max |o| (bound 1e-6)", rel);
    printf("  ring's o against one softmax over both blocks: %.2g of max |o|\n", rel);
    free(k); free(v); free(want); free(stats);
}

// Two ring blocks (keys at 0 .. S-1, then the diagonal block S .. 2S-1) for queries at
// positions S .. 2S-1: begin, merge both, end (each block in one merge, bkv = 0, or in
// ranges of bkv keys as under attention=flash); then each block's backward. The oracle, or
// (CPU build) the per-row definition against the tiles.
static void test_ring(Shape A, int bkv) {
    const AttentionKernels *want_k = ORACLE ? ORACLE->attention : &attention_cpu_plain, *u = UNDER_TEST->attention;
    size_t nq = (size_t)A.B * A.S * A.N, nk = (size_t)A.B * A.S * A.Nkv, ns = (size_t)A.B * A.N * A.S * 2;
    float *q = rand_floats(nq * A.Dqk, -1, 1), *dout = rand_floats(nq * A.Dv, -1, 1);
    float *kb[2], *vb[2], *d_kb[2], *d_vb[2];
    float *o = calloc(nq * A.Dv, sizeof(float)), *stats = malloc(sizeof(float) * ns);
    float *rows = malloc(sizeof(float) * ns), *dq = calloc(nq * A.Dqk, sizeof(float));
    float *dkb = calloc(nk * A.Dqk, sizeof(float)), *dvb = calloc(nk * A.Dv, sizeof(float));
    float *d_q = dev_copy(q, sizeof(float) * nq * A.Dqk), *d_dout = dev_copy(dout, sizeof(float) * nq * A.Dv);
    float *d_o = dev_copy(o, sizeof(float) * nq * A.Dv), *d_stats = dev_poisoned(sizeof(float) * ns);
    float *d_rows = dev_alloc(sizeof(float) * ns), *d_dq = dev_copy(dq, sizeof(float) * nq * A.Dqk);
    float *d_dkb = dev_copy(dkb, sizeof(float) * nk * A.Dqk), *d_dvb = dev_copy(dvb, sizeof(float) * nk * A.Dv);
    int q0 = A.S;
    want_k->ring_begin(stats, A.B, A.S, A.N);
    u->ring_begin(d_stats, A.B, A.S, A.N);
    for (int blk = 0; blk < 2; blk++) {
        kb[blk] = rand_floats(nk * A.Dqk, -1, 1);
        vb[blk] = rand_floats(nk * A.Dv, -1, 1);
        d_kb[blk] = dev_copy(kb[blk], sizeof(float) * nk * A.Dqk);
        d_vb[blk] = dev_copy(vb[blk], sizeof(float) * nk * A.Dv);
        want_k->ring_block_forward(o, stats, rows, q, kb[blk], vb[blk], NULL, A.B, A.S, q0, blk * A.S, A.N, A.Nkv,
                                   A.Dqk, A.Dv, A.rnd, bkv);
        u->ring_block_forward(d_o, d_stats, d_rows, d_q, d_kb[blk], d_vb[blk], NULL, A.B, A.S, q0, blk * A.S, A.N,
                              A.Nkv, A.Dqk, A.Dv, A.rnd, bkv);
    }
    want_k->ring_end(o, stats, A.B, A.S, A.N, A.Dv, A.rnd);
    u->ring_end(d_o, d_stats, A.B, A.S, A.N, A.Dv, A.rnd);
    if (!A.rnd.scores && !A.rnd.probs && !A.rnd.out) ring_against_one_softmax(&A, o, q, kb, vb);
    char shape[80];
    snprintf(shape, sizeof shape, "two blocks of S=6, B=2 N=4 Nkv=2 Dqk=8 Dv=6, bkv=%d", bkv);
    float vflip = fmaxf(prob_flip_tol(A.rnd, vb[0], nk * A.Dv), prob_flip_tol(A.rnd, vb[1], nk * A.Dv));
    check_dev_floats("ring_begin/block_forward/end o", shape, o, d_o, nq * A.Dv, bf16_tol(A.rnd.out, EXP_ULPS),
                     fmaxf(scale_tol(o, nq * A.Dv, ATTN_OUT_ULPS), vflip));
    check_dev_floats("ring_block_forward stats", shape, stats, d_stats, ns, tol(EXP_ULPS), 0);
    float *d_o_want = dev_copy(o, sizeof(float) * nq * A.Dv), *d_st_want = dev_copy(stats, sizeof(float) * ns);
    for (int blk = 0; blk < 2; blk++) {   // dq accumulates over the blocks; each block's dkb, dvb from zero
        memset(dkb, 0, sizeof(float) * nk * A.Dqk);
        memset(dvb, 0, sizeof(float) * nk * A.Dv);
        dev_upload(d_dkb, dkb, sizeof(float) * nk * A.Dqk);
        dev_upload(d_dvb, dvb, sizeof(float) * nk * A.Dv);
        want_k->ring_block_backward(dq, dkb, dvb, dout, q, kb[blk], vb[blk], o, stats, NULL, A.B, A.S, q0, blk * A.S,
                                    A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
        u->ring_block_backward(d_dq, d_dkb, d_dvb, d_dout, d_q, d_kb[blk], d_vb[blk], d_o_want, d_st_want, NULL, A.B,
                               A.S, q0, blk * A.S, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
        check_dev_floats("ring_block_backward dkb", blk ? "diagonal block" : "block 0", dkb, d_dkb, nk * A.Dqk,
                         tol(EXP_ULPS), scale_tol(dkb, nk * A.Dqk, ATTN_GRAD_ULPS));
        check_dev_floats("ring_block_backward dvb", blk ? "diagonal block" : "block 0", dvb, d_dvb, nk * A.Dv,
                         tol(EXP_ULPS), scale_tol(dvb, nk * A.Dv, ATTN_GRAD_ULPS));
    }
    check_dev_floats("ring_block_backward dq", "both blocks", dq, d_dq, nq * A.Dqk, tol(EXP_ULPS),
                     scale_tol(dq, nq * A.Dqk, ATTN_GRAD_ULPS));
    for (int blk = 0; blk < 2; blk++) { free(kb[blk]); free(vb[blk]); dev_free(d_kb[blk]); dev_free(d_vb[blk]); }
    free(q); free(dout); free(o); free(stats); free(rows); free(dq); free(dkb); free(dvb);
    dev_free(d_q); dev_free(d_dout); dev_free(d_o); dev_free(d_stats); dev_free(d_rows); dev_free(d_dq);
    dev_free(d_dkb); dev_free(d_dvb); dev_free(d_o_want); dev_free(d_st_want);
}

// The materialised causal mask, the dot product through it, and the autotuner's fill.
static void test_mask_and_fill(Shape A) {
    const AttentionKernels *want_k = ORACLE ? ORACLE->attention : &attention_cpu_plain, *u = UNDER_TEST->attention;
    int W = A.q0 + A.S;
    size_t nm = (size_t)A.B * A.S * W, nq = (size_t)A.B * A.S * A.N, nk = (size_t)A.P * A.B * A.S * A.Nkv;
    size_t ns = (size_t)A.B * A.N * A.S * 2;
    unsigned char *mask = malloc(nm);
    for (int b = 0; b < A.B; b++)   // the plain definition: key j visible from query position q0 + i
        for (int i = 0; i < A.S; i++)
            for (int j = 0; j < W; j++) mask[((size_t)b * A.S + i) * W + j] = j <= A.q0 + i;
    unsigned char *d_mask = dev_poisoned(nm);
    u->causal_mask(d_mask, A.B, A.S, A.q0);
    unsigned char *got = dev_fetch(d_mask, nm);
    check(!memcmp(got, mask, nm), "causal_mask B=%d S=%d q0=%d: the bytes differ", A.B, A.S, A.q0);
    float *q = rand_floats(nq * A.Dqk, -1, 1), *k = rand_floats(nk * A.Dqk, -1, 1), *v = rand_floats(nk * A.Dv, -1, 1);
    float *o = malloc(sizeof(float) * nq * A.Dv), *stats = malloc(sizeof(float) * ns);
    float *rows = malloc(sizeof(float) * A.B * A.N * W);
    mask[0] = 0;   // a mask decides on its own: hide key 0 from the first row of sequence 0
    dev_upload(d_mask, mask, nm);
    // (the CPU build's expected values from the plain loops above, not from attention_cpu_plain,
    // whose dot_forward is also the code under test here: the tiles hand a masked call to it)
    if (ORACLE) want_k->dot_forward(o, stats, rows, q, k, v, mask, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
    else ref_dot_forward(o, stats, q, k, v, mask, &A);
    float *d_q = dev_copy(q, sizeof(float) * nq * A.Dqk), *d_k = dev_copy(k, sizeof(float) * nk * A.Dqk);
    float *d_v = dev_copy(v, sizeof(float) * nk * A.Dv), *d_o = dev_poisoned(sizeof(float) * nq * A.Dv);
    float *d_stats = dev_poisoned(sizeof(float) * ns), *d_rows = dev_alloc(sizeof(float) * A.B * A.N * W);
    u->dot_forward(d_o, d_stats, d_rows, d_q, d_k, d_v, d_mask, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
    check_dev_floats("dot_forward with a mask", "B=2 S=9 q0=4, key 0 hidden from row 0", o, d_o, nq * A.Dv,
                     tol(EXP_ULPS), scale_tol(o, nq * A.Dv, ATTN_OUT_ULPS));
    float fill[1000], *d_fill = dev_poisoned(sizeof fill);
    uint32_t r = 12345u;
    for (int i = 0; i < 1000; i++) { r = r * 1664525u + 1013904223u; fill[i] = (r >> 8) / 8388608.0f - 1.0f; }
    u->uniform_fill(d_fill, 1000, 12345u);
    check_dev_floats("uniform_fill", "n=1000 seed 12345", fill, d_fill, 1000, 0, 0);
    free(mask); free(got); free(q); free(k); free(v); free(o); free(stats); free(rows);
    dev_free(d_mask); dev_free(d_q); dev_free(d_k); dev_free(d_v); dev_free(d_o); dev_free(d_stats); dev_free(d_rows);
    dev_free(d_fill);
}

#ifdef MESHMOE_CONFORMANCE_GPU
#include "gpu/backend.h"
// The GPU runs each call it can on tiles in shared memory (gpu/attn_tiles.cu, the default)
// and the others with its per-row kernels (gpu_attention=rows). The tiles keep the per-row
// kernels' sums in their order, so on one GPU the two give the same bits: compared here bit
// for bit, forward and backward, each from its own forward's o and stats.
static void tiles_equal_rows(Shape A, int bq, int bkv) {
    size_t nq = (size_t)A.B * A.S * A.N, nk = (size_t)A.P * A.B * A.S * A.Nkv, ns = (size_t)A.B * A.N * A.S * 2;
    size_t n[5] = {nq * A.Dv, ns, nq * A.Dqk, nk * A.Dqk, nk * A.Dv};
    const char *names[5] = {"o", "stats", "dq", "dk", "dv"};
    float *q = rand_floats(nq * A.Dqk, -1, 1), *k = rand_floats(nk * A.Dqk, -1, 1), *v = rand_floats(nk * A.Dv, -1, 1);
    float *dout = rand_floats(nq * A.Dv, -1, 1), *dk0 = rand_floats(n[3], -1, 1), *dv0 = rand_floats(n[4], -1, 1);
    float *d_q = dev_copy(q, sizeof(float) * nq * A.Dqk), *d_k = dev_copy(k, sizeof(float) * nk * A.Dqk);
    float *d_v = dev_copy(v, sizeof(float) * nk * A.Dv), *d_dout = dev_copy(dout, sizeof(float) * nq * A.Dv);
    float *d_scratch = dev_alloc(sizeof(float) * A.B * A.N * (A.q0 + A.S) * 2), *got[2][5];
    const AttentionKernels *u = UNDER_TEST->attention;
    for (int rows = 0; rows < 2; rows++) {
        gpu_attention_use(rows ? GPU_ATTENTION_KIND_ROWS : GPU_ATTENTION_KIND_TILES);
        float *d[5] = {dev_poisoned(sizeof(float) * n[0]), dev_poisoned(sizeof(float) * n[1]),
                       dev_poisoned(sizeof(float) * n[2]), dev_copy(dk0, sizeof(float) * n[3]),
                       dev_copy(dv0, sizeof(float) * n[4])};
        if (bq > 0) {
            u->flash_forward(d[0], d[1], d_scratch, d_q, d_k, d_v, NULL, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv,
                             A.rnd, bq, bkv);
            u->flash_backward_rows(d[2], d[3], d[4], d_scratch, d_dout, d_q, d_k, d_v, d[0], d[1], NULL, A.B, A.S,
                                   A.q0, 0, A.S, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd, bq, bkv);
        } else {
            u->dot_forward(d[0], d[1], d_scratch, d_q, d_k, d_v, NULL, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv,
                           A.rnd);
            u->dot_backward_rows(d[2], d[3], d[4], d_dout, d_q, d_k, d_v, d[0], d[1], NULL, A.B, A.S, A.q0, 0, A.S,
                                 A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
        }
        for (int x = 0; x < 5; x++) {
            got[rows][x] = dev_fetch(d[x], sizeof(float) * n[x]);
            dev_free(d[x]);
        }
    }
    gpu_attention_use(GPU_ATTENTION_KIND_TILES);
    for (int x = 0; x < 5; x++) {
        size_t i = 0;
        while (i < n[x] && !memcmp(got[0][x] + i, got[1][x] + i, sizeof(float))) i++;
        check(i == n[x], "attention tiles = per-row kernels, bit for bit: %s %s, B=%d S=%d q0=%d N=%d Nkv=%d Dqk=%d "
              "Dv=%d rounding=%d%d%d bq=%d bkv=%d: first difference at %zu of %zu (%.9g, %.9g)",
              bq > 0 ? "flash" : "dot product", names[x], A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd.scores,
              A.rnd.probs, A.rnd.out, bq, bkv, i, n[x], i < n[x] ? got[0][x][i] : 0.0, i < n[x] ? got[1][x][i] : 0.0);
        free(got[0][x]);
        free(got[1][x]);
    }
    free(q); free(k); free(v); free(dout); free(dk0); free(dv0);
    dev_free(d_q); dev_free(d_k); dev_free(d_v); dev_free(d_dout); dev_free(d_scratch);
}

// n random bf16 values, uniform in [-scale, scale) before the rounding.
static float *bf16_random(size_t n, float scale) {
    float *x = rand_floats(n, -scale, scale);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
    return x;
}

// gpu_attention=tensor_cores (gpu/attn_mma.cu) against the CPU's bf16 attention on bf16-valued
// q, k, v and dO, as bf16 training gives them: not the same bits (its keys merged 64 at a
// time, p and dS rounded to bf16 for their products, float32 sums in the tensor cores' order),
// within the bounds build/test_gpu_attention states and justifies by what its emulation measured.
// kind GPU_ATTENTION_KIND_CUDNN: cuDNN's fused attention (gpu/attn_cudnn.cu) within the same
// bounds (its scores unrounded, dq, dk and dv rounded to bf16 once: within them by the analysis
// in docs/gpu.md, not yet by a measurement), its stats (LSE, 1) checked as m + log(l).
static void attention_within(Shape A, int kind) {
    size_t nq = (size_t)A.B * A.S * A.N, nk = (size_t)A.P * A.B * A.S * A.Nkv, ns = (size_t)A.B * A.N * A.S * 2;
    float *q = bf16_random(nq * A.Dqk, 1.5f), *k = bf16_random(nk * A.Dqk, 1.5f);
    float *v = bf16_random(nk * A.Dv, 1.0f), *dout = bf16_random(nq * A.Dv, 1.0f);
    float *dk0 = rand_floats(nk * A.Dqk, -1, 1), *dv0 = rand_floats(nk * A.Dv, -1, 1);
    float *scratch = malloc(sizeof(float) * A.B * A.N * (A.q0 + A.S) * 2);
    float *o = malloc(sizeof(float) * nq * A.Dv), *st = malloc(sizeof(float) * ns);
    float *dq = malloc(sizeof(float) * nq * A.Dqk), *dk = copy_of(dk0, sizeof(float) * nk * A.Dqk);
    float *dv = copy_of(dv0, sizeof(float) * nk * A.Dv);
    ORACLE->attention->dot_forward(o, st, scratch, q, k, v, NULL, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
    ORACLE->attention->dot_backward_rows(dq, dk, dv, dout, q, k, v, o, st, NULL, A.B, A.S, A.q0, 0, A.S, A.N, A.Nkv,
                                         A.Dqk, A.Dv, A.rnd);
    float *d_q = dev_copy(q, sizeof(float) * nq * A.Dqk), *d_k = dev_copy(k, sizeof(float) * nk * A.Dqk);
    float *d_v = dev_copy(v, sizeof(float) * nk * A.Dv), *d_dout = dev_copy(dout, sizeof(float) * nq * A.Dv);
    float *d_o = dev_poisoned(sizeof(float) * nq * A.Dv), *d_st = dev_poisoned(sizeof(float) * ns);
    float *d_ow = dev_copy(o, sizeof(float) * nq * A.Dv), *d_stw = dev_copy(st, sizeof(float) * ns);
    float *d_dq = dev_poisoned(sizeof(float) * nq * A.Dqk), *d_dk = dev_copy(dk0, sizeof(float) * nk * A.Dqk);
    float *d_dv = dev_copy(dv0, sizeof(float) * nk * A.Dv), *d_scratch = dev_alloc(sizeof(float) * A.B * A.N * (A.q0 + A.S) * 2);
    gpu_attention_use(kind);
    const AttentionKernels *u = UNDER_TEST->attention;
    u->dot_forward(d_o, d_st, d_scratch, d_q, d_k, d_v, NULL, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
    u->dot_backward_rows(d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_ow, d_stw, NULL, A.B, A.S, A.q0, 0, A.S, A.N,
                         A.Nkv, A.Dqk, A.Dv, A.rnd);
    gpu_attention_use(GPU_ATTENTION_KIND_TILES);
    float *go = dev_fetch(d_o, sizeof(float) * nq * A.Dv), *gst = dev_fetch(d_st, sizeof(float) * ns);
    float *gdq = dev_fetch(d_dq, sizeof(float) * nq * A.Dqk), *gdk = dev_fetch(d_dk, sizeof(float) * nk * A.Dqk);
    float *gdv = dev_fetch(d_dv, sizeof(float) * nk * A.Dv);
    if (kind == GPU_ATTENTION_KIND_CUDNN)   // (m, l) as (m + log(l), 1), both sides
        for (size_t r = 0; r < ns; r += 2) {
            st[r] += logf(st[r + 1]), st[r + 1] = 1.0f;
            gst[r] += logf(gst[r + 1]), gst[r + 1] = 1.0f;
        }
    double e_o = rel_diff(o, go, NULL, nq * A.Dv, 1), e_m = rel_diff(st, gst, NULL, ns, 2);
    double e_l = rel_diff(st + 1, gst + 1, NULL, ns - 1, 2), e_dq = rel_diff(dq, gdq, NULL, nq * A.Dqk, 1);
    double e_dk = rel_diff(dk, gdk, dk0, nk * A.Dqk, 1), e_dv = rel_diff(dv, gdv, dv0, nk * A.Dv, 1);
    check(e_o <= 2e-2 && e_m <= 1e-3 && e_l <= 2e-3 && e_dq <= 8e-3 && e_dk <= 8e-3 && e_dv <= 8e-3,
          "attention on %s within bounds of the CPU's bf16 (relative to each array's largest value): "
          "B=%d S=%d q0=%d N=%d Nkv=%d Dqk=%d Dv=%d rounding=%d%d%d: o %.2e (2e-2), %s %.2e (1e-3), l %.2e (2e-3), "
          "dq %.2e, dk %.2e, dv %.2e (8e-3)", kind == GPU_ATTENTION_KIND_CUDNN ? "cuDNN" : "tensor cores",
          A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd.scores, A.rnd.probs, A.rnd.out, e_o,
          kind == GPU_ATTENTION_KIND_CUDNN ? "m + log(l)" : "m", e_m, e_l, e_dq, e_dk, e_dv);
    free(q); free(k); free(v); free(dout); free(dk0); free(dv0); free(scratch); free(o); free(st); free(dq);
    free(dk); free(dv); free(go); free(gst); free(gdq); free(gdk); free(gdv);
    dev_free(d_q); dev_free(d_k); dev_free(d_v); dev_free(d_dout); dev_free(d_o); dev_free(d_st); dev_free(d_ow);
    dev_free(d_stw); dev_free(d_dq); dev_free(d_dk); dev_free(d_dv); dev_free(d_scratch);
}
#endif

#ifdef MESHMOE_CONFORMANCE_GPU
// The tensor cores' two dq kernels that make S and dP themselves (gpu/attn_mma_bwd.cu: the
// scores in registers and through shared memory, MESHMOE_ATTN_SCORES=smem, both with
// MESHMOE_ATTN_DQ=scores) make the same products and roundings in the same order: dq bit for
// bit the same from both. (The dk and dv kernels make S^T = K Q^T where these make S = Q K^T,
// whose sums the tensor cores may add in another order, and by default dq reads the dS^T that
// the dk, dv kernel wrote: tensor_cores_within checks each way's against the CPU.)
static void dq_kernels_equal(Shape A) {
    size_t nq = (size_t)A.B * A.S * A.N, nk = (size_t)A.P * A.B * A.S * A.Nkv, ns = (size_t)A.B * A.N * A.S * 2;
    float *q = bf16_random(nq * A.Dqk, 1.5f), *k = bf16_random(nk * A.Dqk, 1.5f);
    float *v = bf16_random(nk * A.Dv, 1.0f), *dout = bf16_random(nq * A.Dv, 1.0f);
    float *d_q = dev_copy(q, sizeof(float) * nq * A.Dqk), *d_k = dev_copy(k, sizeof(float) * nk * A.Dqk);
    float *d_v = dev_copy(v, sizeof(float) * nk * A.Dv), *d_dout = dev_copy(dout, sizeof(float) * nq * A.Dv);
    float *d_o = dev_poisoned(sizeof(float) * nq * A.Dv), *d_st = dev_poisoned(sizeof(float) * ns);
    float *d_scratch = dev_alloc(sizeof(float) * A.B * A.N * (A.q0 + A.S) * 2), *dq[2];
    gpu_attention_use(GPU_ATTENTION_KIND_TENSOR_CORES);
    const AttentionKernels *u = UNDER_TEST->attention;
    u->dot_forward(d_o, d_st, d_scratch, d_q, d_k, d_v, NULL, A.B, A.S, A.q0, A.N, A.Nkv, A.Dqk, A.Dv, A.rnd);
    setenv("MESHMOE_ATTN_DQ", "scores", 1);
    for (int way = 0; way < 2; way++) {
        if (way) setenv("MESHMOE_ATTN_SCORES", "smem", 1);
        float *d_dq = dev_poisoned(sizeof(float) * nq * A.Dqk), *d_dk = dev_alloc(sizeof(float) * nk * A.Dqk);
        float *d_dv = dev_alloc(sizeof(float) * nk * A.Dv);
        dev_upload(d_dk, k, sizeof(float) * nk * A.Dqk);   // (any starting values: both ways the same)
        dev_upload(d_dv, v, sizeof(float) * nk * A.Dv);
        u->dot_backward_rows(d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_o, d_st, NULL, A.B, A.S, A.q0, 0, A.S, A.N,
                             A.Nkv, A.Dqk, A.Dv, A.rnd);
        dq[way] = dev_fetch(d_dq, sizeof(float) * nq * A.Dqk);
        dev_free(d_dq); dev_free(d_dk); dev_free(d_dv);
    }
    unsetenv("MESHMOE_ATTN_SCORES");
    unsetenv("MESHMOE_ATTN_DQ");
    gpu_attention_use(GPU_ATTENTION_KIND_TILES);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d S=%d N=%d Nkv=%d Dqk=%d Dv=%d, registers against smem", A.B, A.S, A.N, A.Nkv,
             A.Dqk, A.Dv);
    compare_floats("tensor cores' dq", shape, dq[1], dq[0], nq * A.Dqk, 0, 0);
    free(q); free(k); free(v); free(dout); free(dq[0]); free(dq[1]);
    dev_free(d_q); dev_free(d_k); dev_free(d_v); dev_free(d_dout); dev_free(d_o); dev_free(d_st);
    dev_free(d_scratch);
}
#endif

void test_attention(void) {
    AttnRounding none = {0, 0, 0}, all = {1, 1, 1};
    Shape A = {2, 9, 4, 4, 2, 8, 6, 2, none};   // k, v hold P = 2 parts of S positions, q0 + S = 13 of them
    test_attention_case(A, 2, 7, 4, 5);
    A.rnd = all;
    test_attention_case(A, 0, 9, 3, 4);
    Shape R = {2, 6, 0, 4, 2, 8, 6, 1, none};
    test_ring(R, 0);
    test_ring(R, 4);   // ranges of 4 and 2 keys
    R.rnd = all;
    test_ring(R, 0);
    test_ring(R, 4);
    A.rnd = none;
    test_mask_and_fill(A);
#ifdef MESHMOE_CONFORMANCE_GPU
    gpu_attention_use(GPU_ATTENTION_KIND_ROWS);   // the per-row kernels against the CPU as well
    test_attention_case(A, 2, 7, 4, 5);
    R.rnd = none;
    test_ring(R, 0);
    test_ring(R, 4);
    gpu_attention_use(GPU_ATTENTION_KIND_TILES);
    // the heads of the presets (mixtral-small's 64, the medium presets' 128, MLA's 192 and 128),
    // a ragged one with keys in two parts; flash blocks of a tile and of none
    Shape heads[] = {{2, 40, 0, 4, 2, 64, 64, 1, none}, {1, 50, 0, 4, 4, 128, 128, 1, none},
                     {1, 37, 0, 4, 2, 192, 128, 1, all}, {2, 19, 17, 3, 1, 7, 5, 2, none}};
    for (size_t x = 0; x < sizeof heads / sizeof heads[0]; x++) {
        test_attention_case(heads[x], 0, heads[x].S, 16, 16);   // the tiles against the CPU on these heads too
        tiles_equal_rows(heads[x], 0, 0);
        tiles_equal_rows(heads[x], 16, 16);
        tiles_equal_rows(heads[x], 5, 7);
    }
    // the tensor cores: the medium presets' heads (128, MLA's 192 and 128), bf16 roundings,
    // several query and key tiles; values wider than 128 (the forward's other instantiation)
    AttnRounding bf = {1, 1, 1}, bf_f32 = {0, 0, 1};
    Shape tc[] = {{2, 100, 0, 4, 2, 128, 128, 1, bf}, {1, 70, 0, 4, 4, 192, 128, 1, bf},
                  {1, 70, 0, 4, 4, 192, 128, 1, bf_f32}, {2, 40, 0, 4, 2, 64, 64, 1, bf},
                  {1, 70, 0, 2, 1, 64, 192, 1, bf}};
    if (gpu_attention_tensor_cores()) {
        // the backward's scores in registers (dq from dS in memory, then made again), then through
        // shared memory
        for (int way = 0; way < 3; way++) {
            if (way == 1) setenv("MESHMOE_ATTN_DQ", "scores", 1);
            if (way == 2) setenv("MESHMOE_ATTN_SCORES", "smem", 1);
            for (size_t x = 0; x < sizeof tc / sizeof tc[0]; x++) attention_within(tc[x], GPU_ATTENTION_KIND_TENSOR_CORES);
        }
        unsetenv("MESHMOE_ATTN_SCORES");
        unsetenv("MESHMOE_ATTN_DQ");
        dq_kernels_equal(tc[0]);
        dq_kernels_equal(tc[1]);   // MLA's heads: the 16 tiles of dq a warp
    } else
        skipped("attention on tensor cores: SKIPPED (this build has none)");
    // cuDNN's fused attention on the first four shapes of tc (the last, values wider than the
    // keys, is left to the tensor cores), each call cuDNN's own: two more calls run by it a shape
    const char *why = NULL;
    if (gpu_attention_cudnn(&why)) {
        for (size_t x = 0; x < 4; x++) {
            long before = attn_cudnn_calls();
            attention_within(tc[x], GPU_ATTENTION_KIND_CUDNN);
            check(attn_cudnn_calls() == before + 2, "cuDNN ran the forward and the backward of B=%d S=%d N=%d Nkv=%d "
                  "Dqk=%d Dv=%d (%ld calls of 2; its refusal is on stderr)", tc[x].B, tc[x].S, tc[x].N, tc[x].Nkv,
                  tc[x].Dqk, tc[x].Dv, attn_cudnn_calls() - before);
        }
    } else
        skipped("attention by cuDNN: SKIPPED (%s)", why);
#endif
}
