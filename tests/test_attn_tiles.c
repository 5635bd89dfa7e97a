// tests/test_attn_tiles.c: the attention kernels on tiles of 16 query rows (attention_cpu,
// kernels/cpu/attn_tiles.c) against the same kernels in per-row loops (attention_cpu_plain),
// bit for bit, on random inputs: every kernel of kernels/attention.h (dot-product forward and
// backward over query chunks, flash at several block sizes, ring blocks at every offset),
// float32 and with each bf16 rounding point, on ragged shapes (head widths 1 .. 96 that are
// not multiples of 16, sequences that are not multiples of the tile, a query offset q0 with
// keys in several parts, grouped heads). dk and dv start from random values, so the
// accumulation into them is compared too. Then:
//   - a materialised mask that is not causal (random bits): the tiles know only the causal
//     staircase, so the table must hand such a call to the per-row loops; equal bits show
//     that it did (the causal tiles would give other numbers);
//   - one and three OpenMP threads give the same bits;
//   - shapes past the tiles' limits (a head wider than TILE_MAX_D, a sequence longer than
//     TILE_MAX_KEYS) fall back, same bits.
#include "kernels/attention.h"
#include "kernels/cpu/attn_tiles.h"
#include "tests/test.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 7;
static float urand(void) { rng = rng * 1664525u + 1013904223u; return (rng >> 8) / 8388608.0f - 1.0f; }
static float *rnd_array(size_t n, float scale) {
    float *p = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = scale * urand();
    return p;
}
static float *copy(const float *x, size_t n) {
    float *p = malloc(n * sizeof(float) + 1);
    memcpy(p, x, n * sizeof(float));
    return p;
}
// The first differing float, for the message.
static size_t first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) if (memcmp(a + i, b + i, sizeof(float))) return i;
    return n;
}

// FNV-1a over the bytes of every output the tiles wrote: printed at the end, so that builds
// for different instruction sets (make OPT=...) can be compared on one machine.
static uint64_t digest = 0xcbf29ce484222325ull;
static void hash(const float *x, size_t n) {
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++) digest = (digest ^ p[i]) * 0x100000001b3ull;
}

typedef struct { const char *name; int B, S, N, Nkv, Dqk, Dv, P, part, chunk; } Shape;

// Both tables on the same inputs; every output compared bit for bit. mask: NULL or (B,1,S,W).
static void compare(const Shape *s, AttnRounding rnd, const unsigned char *mask, const char *tag) {
    const AttentionKernels *ka = &attention_cpu, *kp = &attention_cpu_plain;
    int B = s->B, S = s->S, N = s->N, Nkv = s->Nkv, Dqk = s->Dqk, Dv = s->Dv, P = s->P, q0 = s->part * S;
    int W = q0 + S;
    size_t nq = (size_t)B * S * N, nk = (size_t)P * B * S * Nkv, nst = (size_t)B * N * S * 2;
    size_t pk = (size_t)B * S * Nkv * Dqk, pv = (size_t)B * S * Nkv * Dv;   // one part of k, of v
    float *q = rnd_array(nq * Dqk, 1.5f), *k = rnd_array(nk * Dqk, 1.5f), *v = rnd_array(nk * Dv, 1.0f);
    float *dout = rnd_array(nq * Dv, 1.0f), *dk0 = rnd_array(nk * Dqk, 0.5f), *dv0 = rnd_array(nk * Dv, 0.5f);
    float *scratch = rnd_array((size_t)B * N * (W > Nkv * S ? W : Nkv * S), 1.0f);
    float *o[2], *st[2], *dq[2], *dk[2], *dv[2];
    for (int t = 0; t < 2; t++) {
        o[t] = rnd_array(nq * Dv, 1.0f); st[t] = rnd_array(nst, 1.0f); dq[t] = rnd_array(nq * Dqk, 1.0f);
        dk[t] = copy(dk0, nk * Dqk); dv[t] = copy(dv0, nk * Dv);
    }
    char what[200];
    // call once with each table (K_), writing its own outputs (o[t_], st[t_], dq[t_], dk[t_], dv[t_])
#define BOTH(call) for (int t_ = 0; t_ < 2; t_++) { const AttentionKernels *K_ = t_ ? kp : ka; call; }
    // the tiles' outputs so far into the digest
#define HASH() do { hash(o[0], nq * Dv); hash(st[0], nst); hash(dq[0], nq * Dqk); hash(dk[0], nk * Dqk); \
                    hash(dv[0], nk * Dv); } while (0)
#define SAME(x, n, label) do { size_t i_ = first_diff(x[0], x[1], n);                                              \
        snprintf(what, sizeof what, "%s %s rnd=%d%d%d%s: %s", s->name, label, rnd.scores, rnd.probs, rnd.out, tag, #x); \
        CHECK(i_ == n, "%s differs at float %zu of %zu: tiles %.9g, per-row %.9g", what, i_, (size_t)(n),        \
              i_ < (size_t)(n) ? x[0][i_] : 0.0, i_ < (size_t)(n) ? x[1][i_] : 0.0); } while (0)

    // dot product: forward, then the backward over the query chunks
    BOTH(K_->dot_forward(o[t_], st[t_], scratch, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd));
    SAME(o, nq * Dv, "dot_forward");
    SAME(st, nst, "dot_forward");
    for (int r0 = 0; r0 < S; r0 += s->chunk)
        BOTH(K_->dot_backward_rows(dq[t_], dk[t_], dv[t_], dout, q, k, v, o[1], st[1], mask, B, S, q0, r0,
                                   r0 + s->chunk < S ? r0 + s->chunk : S, N, Nkv, Dqk, Dv, rnd));
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
        BOTH(K_->flash_forward(o[t_], st[t_], scratch, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd, bq, bkv));
        SAME(o, nq * Dv, label);
        SAME(st, nst, label);
        BOTH(K_->flash_backward_rows(dq[t_], dk[t_], dv[t_], scratch, dout, q, k, v, o[1], st[1], mask, B, S, q0, 0, S, N, Nkv,
                                     Dqk, Dv, rnd, bq, bkv));
        SAME(dq, nq * Dqk, label);
        SAME(dk, nk * Dqk, label);
        SAME(dv, nk * Dv, label);
        HASH();
    }

    // ring: the parts in the ring's order (own part first), each block at its offset k0
    if (!mask || W == S) {   // a ring block's mask is (B,1,S,S)
        for (int t = 0; t < 2; t++) memset(o[t], 0, nq * Dv * sizeof(float));
        BOTH(K_->ring_begin(st[t_], B, S, N));
        for (int p = s->part; p >= 0; p--)
            BOTH(K_->ring_block_forward(o[t_], st[t_], scratch, q, k + p * pk, v + p * pv, mask, B, S, q0, p * S, N, Nkv,
                                        Dqk, Dv, rnd));
        BOTH(K_->ring_end(o[t_], st[t_], B, S, N, Dv, rnd));
        SAME(o, nq * Dv, "ring_block_forward");
        SAME(st, nst, "ring_block_forward");
        for (int p = s->part; p >= 0; p--)
            BOTH(K_->ring_block_backward(dq[t_], dk[t_] + p * pk, dv[t_] + p * pv, dout, q, k + p * pk, v + p * pv, o[1], st[1],
                                         mask, B, S, q0, p * S, N, Nkv, Dqk, Dv, rnd));
        SAME(dq, nq * Dqk, "ring_block_backward");
        SAME(dk, nk * Dqk, "ring_block_backward");
        SAME(dv, nk * Dv, "ring_block_backward");
        HASH();
    }
#undef HASH
#undef BOTH
#undef SAME
    free(q); free(k); free(v); free(dout); free(dk0); free(dv0); free(scratch);
    for (int t = 0; t < 2; t++) { free(o[t]); free(st[t]); free(dq[t]); free(dk[t]); free(dv[t]); }
}

// A mask of random bits, each row seeing at least its first key (B,1,S,W).
static unsigned char *random_mask(int B, int S, int W) {
    unsigned char *m = malloc((size_t)B * S * W);
    for (size_t x = 0; x < (size_t)B * S * W; x++) m[x] = urand() > -0.3f || x % W == 0;
    return m;
}

int main(void) {
    Shape shapes[] = {
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
    AttnRounding rnds[] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {0, 1, 0}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ri = 0; ri < sizeof rnds / sizeof rnds[0]; ri++) compare(&shapes[si], rnds[ri], NULL, "");
    printf("  tiles = per-row loops, bit for bit: %zu shapes x %zu roundings, %d comparisons; outputs' digest "
           "%016llx\n", sizeof shapes / sizeof shapes[0], sizeof rnds / sizeof rnds[0], test_passed,
           (unsigned long long)digest);

    // A mask that is not causal takes the per-row loops.
    Shape ms = {"random mask", 2, 23, 4, 2, 16, 24, 1, 0, 23};
    unsigned char *mask = random_mask(ms.B, ms.S, ms.S);
    compare(&ms, (AttnRounding){0, 0, 0}, mask, " (mask)");
    free(mask);

    // The thread count changes nothing.
    Shape ts = {"threads", 3, 50, 4, 2, 64, 64, 2, 1, 25};
    omp_set_num_threads(1);
    int f0 = test_failed;
    compare(&ts, (AttnRounding){0, 0, 0}, NULL, " (1 thread)");
    omp_set_num_threads(3);
    compare(&ts, (AttnRounding){0, 0, 0}, NULL, " (3 threads)");
    CHECK(test_failed == f0, "the tiles depend on the thread count");

    // Past the tiles' limits: the per-row loops, the same bits. More keys than one merge
    // holds: the forward's per-row loops, the backward's tiles (64 keys at a time).
    Shape wide = {"head wider than TILE_MAX_D", 1, 9, 2, 1, TILE_MAX_D + 3, 8, 1, 0, 9};
    compare(&wide, (AttnRounding){0, 0, 0}, NULL, "");
    Shape longs = {"more than TILE_MAX_KEYS positions", 1, TILE_MAX_KEYS + 37, 1, 1, 3, 2, 1, 0, 520};
    compare(&longs, (AttnRounding){0, 0, 0}, NULL, "");
    TEST_SUMMARY();
}
