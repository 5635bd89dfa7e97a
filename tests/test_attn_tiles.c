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
#include "tests/attn_cases.h"
#include "tests/test.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

// The two ways: the tiles (attention_cpu) and the per-row loops (attention_cpu_plain).
static const AttentionKernels *use(int way) { return way ? &attention_cpu_plain : &attention_cpu; }
static const char *const way_names[2] = {"tiles", "per-row"};
static const int way_pairs[1][2] = {{0, 1}};
static const AttnWays ways = {2, use, way_names, 1, way_pairs};
static void compare(const AttnShape *s, AttnRounding rnd, const unsigned char *mask, const char *tag) {
    attn_compare(s, rnd, mask, tag, &ways);
}

// A mask of random bits, each row seeing at least its first key (B,1,S,W).
static unsigned char *random_mask(int B, int S, int W) {
    unsigned char *m = malloc((size_t)B * S * W);
    for (size_t x = 0; x < (size_t)B * S * W; x++) m[x] = attn_urand() > -0.3f || x % W == 0;
    return m;
}

int main(void) {
    for (int si = 0; si < ATTN_SHAPES; si++)
        for (int ri = 0; ri < ATTN_ROUNDINGS; ri++) compare(&attn_shapes[si], attn_roundings[ri], NULL, "");
    printf("  tiles = per-row loops, bit for bit: %d shapes x %d roundings, %d comparisons; outputs' digest "
           "%016llx\n", ATTN_SHAPES, ATTN_ROUNDINGS, test_passed, (unsigned long long)attn_digest);

    // A mask that is not causal takes the per-row loops.
    AttnShape ms = {"random mask", 2, 23, 4, 2, 16, 24, 1, 0, 23};
    unsigned char *mask = random_mask(ms.B, ms.S, ms.S);
    compare(&ms, (AttnRounding){0, 0, 0}, mask, " (mask)");
    free(mask);

    // The thread count changes nothing: the same inputs (the generator started again) give
    // outputs with the same digest under one thread and under three.
    AttnShape ts = {"threads", 3, 50, 4, 2, 64, 64, 2, 1, 25};
    uint32_t rng = attn_rng;
    uint64_t digest[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t ? 3 : 1);
        attn_rng = rng;
        attn_digest = 0xcbf29ce484222325ull;
        compare(&ts, (AttnRounding){0, 0, 0}, NULL, t ? " (3 threads)" : " (1 thread)");
        digest[t] = attn_digest;
    }
    CHECK(digest[0] == digest[1], "the outputs depend on the thread count: digest %016llx with 1 thread, %016llx "
          "with 3", (unsigned long long)digest[0], (unsigned long long)digest[1]);

    // Past the tiles' limits: the per-row loops, the same bits. More keys than one merge
    // holds: the forward's per-row loops, the backward's tiles (64 keys at a time).
    AttnShape wide = {"head wider than TILE_MAX_D", 1, 9, 2, 1, TILE_MAX_D + 3, 8, 1, 0, 9};
    compare(&wide, (AttnRounding){0, 0, 0}, NULL, "");
    AttnShape longs = {"more than TILE_MAX_KEYS positions", 1, TILE_MAX_KEYS + 37, 1, 1, 3, 2, 1, 0, 520};
    compare(&longs, (AttnRounding){0, 0, 0}, NULL, "");
    TEST_SUMMARY();
}
