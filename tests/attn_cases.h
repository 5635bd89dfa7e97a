// tests/attn_cases.h: the attention test cases that tests/test_attn_tiles.c (the CPU's tiles)
// and tests/test_gpu_attention.cpp (the GPU's kernels, emulated on the CPU) share: ragged
// shapes, the bf16 roundings, and attn_compare, which runs every kernel of
// kernels/attention.h once per way of running it (dot-product forward and backward over
// query chunks, flash at several block sizes, ring blocks at every offset) on the same random
// inputs and compares the ways' outputs bit for bit. dk and dv start from random values, so
// the accumulation into them is compared too. Written in the common part of C and C++.
#ifndef MESHMOE_TESTS_ATTN_CASES_H
#define MESHMOE_TESTS_ATTN_CASES_H
#include "kernels/attention.h"
#include "tests/test.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; int B, S, N, Nkv, Dqk, Dv, P, part, chunk; } AttnShape;

static const AttnShape attn_shapes[] = {
    // name                           B  S   N Nkv Dqk Dv P part chunk
    {"mixtral-small head (64, 64)",   2, 40, 4, 2, 64, 64, 1, 0, 40},
    {"MLA-like (96, 64)",             1, 37, 2, 2, 96, 64, 1, 0, 37},
    {"ragged widths (7, 5)",          2, 19, 3, 1, 7, 5, 1, 0, 19},
    {"widths 1 and 17",               1, 21, 2, 2, 1, 17, 1, 0, 7},
    {"widths 33 and 80, 3 chunks",    1, 45, 3, 3, 33, 80, 1, 0, 15},
    {"one row",                       2, 1, 2, 1, 16, 16, 1, 0, 1},
    {"q0 = 2S (part 3 of 3)",         2, 17, 4, 2, 24, 40, 3, 2, 17},
    {"q0 = S, group of 3",            1, 33, 6, 2, 48, 48, 2, 1, 11},
};
static const AttnRounding attn_roundings[] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {0, 1, 0}};
enum { ATTN_SHAPES = sizeof attn_shapes / sizeof attn_shapes[0], ATTN_ROUNDINGS = 4, ATTN_MAX_WAYS = 4 };

// The ways compared: way w's table (use(w) also sets up whatever else way w means), its name,
// and the pairs of ways whose outputs must be equal.
typedef struct {
    int ways;
    const AttentionKernels *(*use)(int way);
    const char *const *names;
    int npairs;
    const int (*pairs)[2];
} AttnWays;

static uint32_t attn_rng = 7;
static float attn_urand(void) {
    attn_rng = attn_rng * 1664525u + 1013904223u;
    return (attn_rng >> 8) / 8388608.0f - 1.0f;
}
static float *attn_random(size_t n, float scale) {
    float *p = (float *)malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = scale * attn_urand();
    return p;
}
static float *attn_copy(const float *x, size_t n) {
    float *p = (float *)malloc(n * sizeof(float) + 1);
    memcpy(p, x, n * sizeof(float));
    return p;
}
// The first differing float, for the message.
static size_t attn_first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float))) return i;
    return n;
}
// FNV-1a over the bytes of every output way 0 wrote: printed by the tests, so that builds for
// different instruction sets can be compared on one machine.
static uint64_t attn_digest = 0xcbf29ce484222325ull;
static void attn_hash(const float *x, size_t n) {
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++) attn_digest = (attn_digest ^ p[i]) * 0x100000001b3ull;
}

// Every kernel once per way on one shape and rounding; the pairs of ways compared bit for bit.
// mask: NULL or (B,1,S,W).
static void attn_compare(const AttnShape *s, AttnRounding rnd, const unsigned char *mask, const char *tag,
                         const AttnWays *w) {
    int B = s->B, S = s->S, N = s->N, Nkv = s->Nkv, Dqk = s->Dqk, Dv = s->Dv, P = s->P, q0 = s->part * S;
    int W = q0 + S, nw = w->ways;
    size_t nq = (size_t)B * S * N, nk = (size_t)P * B * S * Nkv, nst = (size_t)B * N * S * 2;
    size_t pk = (size_t)B * S * Nkv * Dqk, pv = (size_t)B * S * Nkv * Dv;   // one part of k, of v
    float *q = attn_random(nq * Dqk, 1.5f), *k = attn_random(nk * Dqk, 1.5f), *v = attn_random(nk * Dv, 1.0f);
    float *dout = attn_random(nq * Dv, 1.0f), *dk0 = attn_random(nk * Dqk, 0.5f), *dv0 = attn_random(nk * Dv, 0.5f);
    float *scratch = attn_random((size_t)B * N * (W > Nkv * S ? W : Nkv * S), 1.0f);
    float *o[ATTN_MAX_WAYS], *st[ATTN_MAX_WAYS], *dq[ATTN_MAX_WAYS], *dk[ATTN_MAX_WAYS], *dv[ATTN_MAX_WAYS];
    for (int t = 0; t < nw; t++) {
        o[t] = attn_random(nq * Dv, 1.0f); st[t] = attn_random(nst, 1.0f); dq[t] = attn_random(nq * Dqk, 1.0f);
        dk[t] = attn_copy(dk0, nk * Dqk); dv[t] = attn_copy(dv0, nk * Dv);
    }
    // call once each way (K_), writing that way's outputs (o[t_], st[t_], dq[t_], dk[t_], dv[t_])
#define EACH(call) for (int t_ = 0; t_ < nw; t_++) { const AttentionKernels *K_ = w->use(t_); call; }
    // way 0's outputs so far into the digest
#define HASH() do { attn_hash(o[0], nq * Dv); attn_hash(st[0], nst); attn_hash(dq[0], nq * Dqk);                    \
                    attn_hash(dk[0], nk * Dqk); attn_hash(dv[0], nk * Dv); } while (0)
#define SAME(x, n, label) do { for (int p_ = 0; p_ < w->npairs; p_++) {                                         \
        int a_ = w->pairs[p_][0], b_ = w->pairs[p_][1];                                                         \
        size_t i_ = attn_first_diff(x[a_], x[b_], n);                                                           \
        CHECK(i_ == (size_t)(n), "%s %s rnd=%d%d%d%s: %s: %s and %s differ at float %zu of %zu: %.9g, %.9g",   \
              s->name, label, rnd.scores, rnd.probs, rnd.out, tag, #x, w->names[a_], w->names[b_], i_,          \
              (size_t)(n), i_ < (size_t)(n) ? x[a_][i_] : 0.0, i_ < (size_t)(n) ? x[b_][i_] : 0.0); } } while (0)
    // (the backward passes read way nw-1's o and stats: the same in every way once compared)
    EACH(K_->dot_forward(o[t_], st[t_], scratch, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd));
    SAME(o, nq * Dv, "dot_forward");
    SAME(st, nst, "dot_forward");
    for (int r0 = 0; r0 < S; r0 += s->chunk)
        EACH(K_->dot_backward_rows(dq[t_], dk[t_], dv[t_], dout, q, k, v, o[nw - 1], st[nw - 1], mask, B, S, q0,
                                   r0, r0 + s->chunk < S ? r0 + s->chunk : S, N, Nkv, Dqk, Dv, rnd));
    SAME(dq, nq * Dqk, "dot_backward_rows");
    SAME(dk, nk * Dqk, "dot_backward_rows");
    SAME(dv, nk * Dv, "dot_backward_rows");
    HASH();

    // flash at block sizes that divide nothing, of one row, of a tile, past the sequence
    int blocks[][2] = {{5, 7}, {1, 1}, {16, 16}, {33, 20}, {64, 1000}};
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
        int bq = blocks[bi][0], bkv = blocks[bi][1];
        char label[64];
        snprintf(label, sizeof label, "flash bq=%d bkv=%d", bq, bkv);
        EACH(K_->flash_forward(o[t_], st[t_], scratch, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd, bq, bkv));
        SAME(o, nq * Dv, label);
        SAME(st, nst, label);
        EACH(K_->flash_backward_rows(dq[t_], dk[t_], dv[t_], scratch, dout, q, k, v, o[nw - 1], st[nw - 1], mask, B,
                                     S, q0, 0, S, N, Nkv, Dqk, Dv, rnd, bq, bkv));
        SAME(dq, nq * Dqk, label);
        SAME(dk, nk * Dqk, label);
        SAME(dv, nk * Dv, label);
        HASH();
    }

    // ring: the parts in the ring's order (own part first), each block at its offset k0
    if (!mask || W == S) {   // a ring block's mask is (B,1,S,S)
        for (int t = 0; t < nw; t++) memset(o[t], 0, nq * Dv * sizeof(float));
        EACH(K_->ring_begin(st[t_], B, S, N));
        for (int p = s->part; p >= 0; p--)
            EACH(K_->ring_block_forward(o[t_], st[t_], scratch, q, k + p * pk, v + p * pv, mask, B, S, q0, p * S, N,
                                        Nkv, Dqk, Dv, rnd, 0));
        EACH(K_->ring_end(o[t_], st[t_], B, S, N, Dv, rnd));
        SAME(o, nq * Dv, "ring_block_forward");
        SAME(st, nst, "ring_block_forward");
        // attention=flash's ranges inside each block: of one key, dividing nothing, past the block
        int spans[] = {1, 6, 1000};
        for (size_t si = 0; si < sizeof spans / sizeof spans[0]; si++) {
            char label[64];
            snprintf(label, sizeof label, "ring_block_forward bkv=%d", spans[si]);
            for (int t = 0; t < nw; t++) memset(o[t], 0, nq * Dv * sizeof(float));
            EACH(K_->ring_begin(st[t_], B, S, N));
            for (int p = s->part; p >= 0; p--)
                EACH(K_->ring_block_forward(o[t_], st[t_], scratch, q, k + p * pk, v + p * pv, mask, B, S, q0, p * S,
                                            N, Nkv, Dqk, Dv, rnd, spans[si]));
            EACH(K_->ring_end(o[t_], st[t_], B, S, N, Dv, rnd));
            SAME(o, nq * Dv, label);
            SAME(st, nst, label);
        }
        for (int p = s->part; p >= 0; p--)
            EACH(K_->ring_block_backward(dq[t_], dk[t_] + p * pk, dv[t_] + p * pv, dout, q, k + p * pk, v + p * pv,
                                         o[nw - 1], st[nw - 1], mask, B, S, q0, p * S, N, Nkv, Dqk, Dv, rnd));
        SAME(dq, nq * Dqk, "ring_block_backward");
        SAME(dk, nk * Dqk, "ring_block_backward");
        SAME(dv, nk * Dv, "ring_block_backward");
        HASH();
    }
#undef HASH
#undef EACH
#undef SAME
    free(q); free(k); free(v); free(dout); free(dk0); free(dv0); free(scratch);
    for (int t = 0; t < nw; t++) { free(o[t]); free(st[t]); free(dq[t]); free(dk[t]); free(dv[t]); }
}
#endif
