// kernels/cpu/attn_tiles.h: the causal attention core on tiles of 16 query rows
// (kernels/cpu/attn_tiles.c), the fast path of kernels/cpu/attention.c. Each function does
// for 16 query rows at once what the per-row loops of kernels/cpu/attention.c do for one
// (merge_keys_row, keys_backward_row): the same float operations on every element, in the
// same order, so the same bits.
//
// Shapes as in kernels/attention.h. A tile is rows i0 .. i0+R-1 (R <= TILE_ROWS) of
// sequence b and query head h (kv head g); its row r, at position q0+i0+r, sees key j of
// k, v (at position k0+j) when k0+j <= q0+i0+r. No materialised mask: with one, the
// per-row loops decide.
//
// A tile's working set lives on the stack of the thread that runs it: the packed q (and dO)
// rows, TILE_MAX_D x 16 floats each, the scores of 16 rows against the merged keys
// (forward, up to TILE_MAX_KEYS x 16 floats) or against 64 keys (backward, with their dS),
// and the lanes of one call of the exponential (16 or 64 keys x 16 rows): at most 81 KiB
// forward, 44 KiB backward. Like the GEMM's packing buffers it belongs to the kernel, not
// to the model: the device's tagged allocator and the planner do not see it.
#ifndef MESHMOE_KERNELS_CPU_ATTN_TILES_H
#define MESHMOE_KERNELS_CPU_ATTN_TILES_H
#include "kernels/attention.h"

enum {
    TILE_ROWS = 16,     // query rows per tile: one lane each in a 16-float vector
    TILE_MAX_D = 256,   // the widest q/k or v head a tile packs (on the stack)
    TILE_MAX_KEYS = 1024,   // the most keys whose scores one merge holds at once (on the stack)
};

typedef struct AttnGeom {
    int B, S, q0, k0, N, Nkv, Dqk, Dv;
} AttnGeom;

// Whether the tiles take heads of these widths.
static inline int tiles_fit(int Dqk, int Dv) { return Dqk <= TILE_MAX_D && Dv <= TILE_MAX_D; }

// merge_keys_row for each row of the tile: keys ja .. jb-1 (jb - ja <= TILE_MAX_KEYS) into
// the rows' running state, acc in o (B,S,N,Dv) and (m, l) in stats (B,N,S,2).
void tile_merge_keys(float *o, float *stats, const float *q, const float *k, const float *v, AttnGeom G, int b,
                     int h, int i0, int R, int ja, int jb, AttnRounding rnd);

// keys_backward_row for each row of the tile, against keys ja .. jb-1: dq rows += their
// share (in key order), dk, dv (P,B,S,Nkv,.) += the tile's rows' share (in row order);
// D_i = dO_i . o_i and (m, l) read from o and stats.
void tile_keys_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, const float *stats, AttnGeom G, int b, int h, int i0,
                        int R, int ja, int jb, AttnRounding rnd);

#endif
