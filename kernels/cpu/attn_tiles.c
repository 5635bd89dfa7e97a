// kernels/cpu/attn_tiles.c: the causal attention core on tiles of 16 query rows
// (kernels/cpu/attn_tiles.h).
//
// Where the lanes go. A score s_ij = q_i . k_j is one chain over d, in order; so is
// dP_ij = dO_i . v_j. Vector lanes hold the chains of the tile's 16 query rows against one
// key (all 16 in one AVX-512 vector, 8 in each of two on AVX2): the tile's q rows are packed
// transposed, Qt (D, 16), and each step d adds Qt[d] * k_j[d] (k_j[d] broadcast) to the
// chains, eight keys side by side so the adds do not wait on each other. The sums over keys
// and rows, o_i += e_ij v_j, dq_i += dS_ij k_j, dk_j += dS_ij q_i, dv_j += P_ij dO_i, are
// chains per output element with lanes over d: acc_rows keeps up to 64 elements of up to
// four outputs in registers (four rows of o or dq, four keys of dk or dv; 32 of two on
// AVX2) while the terms stream
// past in the order of the per-row loops (keys in order for o and dq; rows in order for dk
// and dv), each term's load serving all of them. Every product is rounded and then added,
// as in plain C (the build is ISO C: the compiler fuses no multiply-add), so each element
// sees the float operations of kernels/cpu/attention.c in its order, and the same bits. The
// exponentials are expf16's, the C library's expf bit for bit, 16 rows' at a time.
//
// The causal mask within a tile is a staircase: row r sees keys up to pos0 + r, pos0 =
// q0 + i0 - k0. Every loop runs over exactly the visible pairs (a key's rows from the first
// that sees it, a row's keys up to its own position); lanes of pairs that are not visible
// are computed and never read.
#include "kernels/cpu/attn_tiles.h"
#include "kernels/bf16.h"
#include "kernels/cpu/expf16.h"
#include "kernels/cpu/gemm.h"      // gemm_pack_lines
#include "kernels/cpu/vec16.h"     // VN: the machine's vectors
#include <math.h>
#include <stdint.h>

enum { L = TILE_ROWS, KB = 64, EB = 16 };   // KB: keys per backward sub-block (its P and dS, 2 x 4 KiB);
                                           // EB: keys whose exponentials the forward takes in one call

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

// The row, in k or v (P,B,S,Nkv,D), of key j of sequence b: part j/S, row j%S. Without
// context parallelism every key is in part 0, and the division (a score pass takes 16 per 8
// keys) is skipped: the tiles' forward and backward took 0.99x (mixtral-small) and 0.98x
// (deepseek-small) the time at build/attn_bench's shapes (2 threads, Zen 4, the two builds in
// turn, medians of 31 rounds).
static inline const float *key_at(const float *x, const AttnGeom *G, int b, int j, int g, int D) {
    int part = j < G->S ? 0 : j / G->S;
    return x + ((((size_t)part * G->B + b) * G->S + (j - part * G->S)) * G->Nkv + g) * D;
}
// Query row i of sequence b, head h, in x (B,S,N,D).
static inline size_t qrow(const AttnGeom *G, int b, int i, int h) { return ((size_t)b * G->S + i) * G->N + h; }

// Up to ACC_MAX outputs at once: y_i (D) += c_i,0 x_0 + c_i,1 x_1 + ... + c_i,n-1 x_n-1 for
// i < ny, x_t = x + t*xs, c_i,t = c[i][t*cs]: each y_i[d] is the chain ((y_i[d] + c_i,0
// x_0[d]) + c_i,1 x_1[d]) + ..., as n calls of axpy, and each load of x_t serves all ny
// outputs. NV vectors of each y_i stay in registers over the n terms (ny x NV <= 16 of the
// 32 AVX-512 registers; an AVX2 build takes two outputs at a time: 8 accumulators and 4
// terms in its 16 registers).
//
// The tiles work on the machine's own vectors (kernels/cpu/vec16.h: VN, VW floats): with
// 16-float vectors an x86-64-v3 build ran them 2.7x slower than the per-row loops.
// x_t's vectors held in registers: GCC would otherwise load them again as an operand of
// each output's multiply, and the loads, not the arithmetic, would set the pace (on AVX2,
// without it, 10 loads per 16 multiplies and adds; with it the x86-64-v3 build's tiles took
// 0.96-0.98x the time for mixtral-small's shapes and 0.94-0.96x for deepseek-small's on a
// Zen 4, build/attn_bench, one thread).
#ifdef __AVX512F__
#define ACC_MAX 4
#define IN_REGISTER(v) __asm__("" : "+v"(v))
#elif defined(__AVX__)
#define ACC_MAX 2
#define IN_REGISTER(v) __asm__("" : "+x"(v))
#else   // SSE2: a vector of 8 floats is two registers, which no constraint names
#define ACC_MAX 2
#define IN_REGISTER(v) (void)0
#endif
#define NG (L / VW)   // lane groups per tile row set: the tile's row r is lane r % VW of group r / VW
static inline __attribute__((always_inline)) void acc_vecs(float *const *y, const float *x, size_t xs,
                                                           const float *const *c, int cs, int n, int d, int NV,
                                                           int NY) {
    VN a[ACC_MAX][4];
#pragma GCC unroll 4
    for (int i = 0; i < NY; i++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) a[i][u] = vldn(y[i] + d + VW * u);
    for (int t = 0; t < n; t++) {
        const float *xt = x + t * xs + d;
        VN xv[4];
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) {
            xv[u] = vldn(xt + VW * u);
            IN_REGISTER(xv[u]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < NY; i++) {
            float ct = c[i][(size_t)t * cs];
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++) a[i][u] = a[i][u] + ct * xv[u];
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NY; i++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) vstn(y[i] + d + VW * u, a[i][u]);
}
// acc_vecs over all of D for NY outputs: 4 vectors at a time, then 2, 1, and one by one.
static inline __attribute__((always_inline)) void acc_span(float *const *y, int D, const float *x, size_t xs,
                                                           const float *const *c, int cs, int n, int NY) {
    int d = 0;
    for (; d + 4 * VW <= D; d += 4 * VW) acc_vecs(y, x, xs, c, cs, n, d, 4, NY);
    if (d + 2 * VW <= D) { acc_vecs(y, x, xs, c, cs, n, d, 2, NY); d += 2 * VW; }
    if (d + VW <= D) { acc_vecs(y, x, xs, c, cs, n, d, 1, NY); d += VW; }
    for (; d < D; d++)
        for (int i = 0; i < NY; i++) {
            float s = y[i][d];
            for (int t = 0; t < n; t++) s += c[i][(size_t)t * cs] * x[t * xs + d];
            y[i][d] = s;
        }
}
// The ny (<= ACC_MAX) outputs y[0..ny-1], as acc_vecs says.
static void acc_rows(float *const *y, const float *const *c, int ny, int D, const float *x, size_t xs, int cs,
                     int n) {
    switch (ny) {
#if ACC_MAX >= 4
    case 4: acc_span(y, D, x, xs, c, cs, n, 4); break;
    case 3: acc_span(y, D, x, xs, c, cs, n, 3); break;
#endif
    case 2: acc_span(y, D, x, xs, c, cs, n, 2); break;
    default: acc_span(y, D, x, xs, c, cs, n, 1); break;
    }
}
// Rows y[0..ny-1] of the tile (ny <= ACC_MAX) that see the keys ja .. lim[i]-1 of x
// (P,B,S,Nkv,D), lim non-decreasing: y[i] += c_i,j x_j over their keys in key order, c_i,j =
// c[i][(j-ja)*L]. Segment by segment: the rows that see every key of a run of keys (the
// last rows of the group: their limits are the largest) take it in one pass, cut where the
// limits are and where the keys cross from one part to the next.
static void acc_keys(float *const *y, const float *const *c, int ny, int D, const float *x, const AttnGeom *G,
                     int b, int g, int ja, const int *lim) {
    size_t xs = (size_t)G->Nkv * D;
    int first = 0;   // the first row that sees key j
    for (int j = ja; j < lim[ny - 1];) {
        while (lim[first] <= j) first++;
        int je = imin(lim[first], (j / G->S + 1) * G->S);
        const float *cj[ACC_MAX];
        for (int i = first; i < ny; i++) cj[i - first] = c[i] + (size_t)(j - ja) * L;
        acc_rows(y + first, cj, ny - first, D, key_at(x, G, b, j, g, D), xs, L, je - j);
        j = je;
    }
}

// Each row r < R of the tile, out row (B,S,N,D) += sum_j c[(j-ja)*L + r] x_j over the keys
// ja .. jb-1 that row sees (up to pos0 + r), in key order: ACC_MAX rows at a time.
static void acc_tile_rows(float *out, int D, const float *x, const AttnGeom *G, int b, int h, int g, int i0, int R,
                          const float *c, int ja, int jb, int pos0) {
    for (int r = 0; r < R; r += ACC_MAX) {
        float *y[ACC_MAX];
        const float *cr[ACC_MAX];
        int lim[ACC_MAX], ny = imin(ACC_MAX, R - r);
        for (int i = 0; i < ny; i++) {
            y[i] = out + qrow(G, b, i0 + r + i, h) * D;
            cr[i] = c + r + i;
            lim[i] = imin(jb, pos0 + r + i + 1);
        }
        acc_keys(y, cr, ny, D, x, G, b, g, ja, lim);
    }
}

// s[t*16 + r] = chain over d of Xt[d*16 + r] * y_t[d], for the nt <= 8 keys' rows y_t:
// eight keys' chains side by side, for VW of the 16 rows at a time.
static void scores8(float *s, const float *Xt, int D, const float *const *y, int nt) {
    for (int g = 0; g < L; g += VW) {
        VN a[8] = {0};
        for (int d = 0; d < D; d++) {
            VN x = vldn(Xt + (size_t)d * L + g);
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) a[t] = a[t] + x * y[t][d];
        }
        for (int t = 0; t < nt; t++) vstn(s + t * L + g, a[t]);
    }
}
// s (jb-ja, 16): the chains of the tile's packed rows Xt (D, 16) against keys ja .. jb-1
// of x (P,B,S,Nkv,D), kv head g.
static void scores(float *s, const float *Xt, int D, const float *x, const AttnGeom *G, int b, int g, int ja,
                   int jb) {
    for (int j0 = ja; j0 < jb; j0 += 8) {
        const float *y[8];
        int nt = imin(8, jb - j0);
        for (int t = 0; t < 8; t++) y[t] = key_at(x, G, b, j0 + imin(t, nt - 1), g, D);
        scores8(s + (size_t)(j0 - ja) * L, Xt, D, y, nt);
    }
}
// Xt (D, 16) = the tile's R rows of x (B,S,N,D), transposed; lanes past R hold 0.
static void pack_rows(float *Xt, const float *x, const AttnGeom *G, int b, int h, int i0, int R, int D) {
    gemm_pack_lines(Xt, L, x + qrow(G, b, i0, h) * D, (size_t)G->N * D, R, D);
}

void tile_merge_keys(float *o, float *stats, const float *q, const float *k, const float *v, AttnGeom G, int b,
                     int h, int i0, int R, int ja, int jb, AttnRounding rnd) {
    int g = h / (G.N / G.Nkv), Dqk = G.Dqk, Dv = G.Dv;
    int pos0 = G.q0 + i0 - G.k0;          // row r sees keys j <= pos0 + r
    int jend = imin(jb, pos0 + R);        // the keys the last row sees
    if (jend <= ja) return;
    float Qt[TILE_MAX_D * L] __attribute__((aligned(64)));
    float e[TILE_MAX_KEYS * L] __attribute__((aligned(64)));   // (key, row): scores, then exp weights
    pack_rows(Qt, q, &G, b, h, i0, R, Dqk);
    scores(e, Qt, Dqk, k, &G, b, g, ja, jend);
    // Lane r of the tile is row r; it sees key j when r >= j - pos0. The max of each row's
    // scores, the max rule of merge_keys_row applied key by key.
    VN bm[NG], m[NG], l[NG];
    IN lane[NG];
    for (int u = 0; u < NG; u++) {
        for (int c = 0; c < VW; c++) lane[u][c] = u * VW + c;
        bm[u] = (VN){0} + ATTN_MASK_VALUE;
    }
    for (int j = ja; j < jend; j++) {
        float *sj = e + (size_t)(j - ja) * L;
        if (rnd.scores)
            for (int r = 0; r < L; r++) sj[r] = bf16_round(sj[r]);
        for (int u = 0; u < NG; u++) {
            VN sv = vldn(sj + u * VW);
            bm[u] = vblendn((sv > bm[u]) & (lane[u] >= j - pos0), sv, bm[u]);
        }
    }
    for (int r = 0; r < L; r++) {
        int u = r / VW, c = r % VW;
        float *stt = stats + (((size_t)b * G.N + h) * G.S + i0 + r) * 2;
        m[u][c] = r < R ? stt[0] : 0.0f;
        l[u][c] = r < R ? stt[1] : 0.0f;
        if (r < R && imin(jb, pos0 + r + 1) > ja && bm[u][c] > m[u][c]) {   // a new max: rescale what was summed
            float a = expf(m[u][c] - bm[u][c]), *acc = o + qrow(&G, b, i0 + r, h) * Dv;
            l[u][c] *= a;
            #pragma omp simd   // (element by element; scalar, this loop took a third of the function's samples)
            for (int d = 0; d < Dv; d++) acc[d] *= a;
            m[u][c] = bm[u][c];
        }
    }
    // e_j = exp(s_j - m) and l += e_j, key by key, in the rows that see key j (the exps of
    // all 16 lanes at once, kept in those rows), the exponentials of EB keys in one call.
    for (int j0 = ja; j0 < jend; j0 += EB) {
        int nj = imin(EB, jend - j0);
        float x[EB * L] __attribute__((aligned(64)));
        for (int t = 0; t < nj; t++) {
            const float *st = e + (size_t)(j0 + t - ja) * L;
            for (int u = 0; u < NG; u++) vstn(x + t * L + u * VW, vldn(st + u * VW) - m[u]);
        }
        expf_n(x, x, (long)nj * L);
        for (int t = 0; t < nj; t++) {
            int j = j0 + t;
            float *sj = e + (size_t)(j - ja) * L, *xt = x + t * L;
            if (rnd.probs)
                for (int r = 0; r < L; r++) xt[r] = bf16_round(xt[r]);
            for (int u = 0; u < NG; u++) {
                VN ev = vblendn((lane[u] >= j - pos0) & (lane[u] < R), vldn(xt + u * VW), vldn(sj + u * VW));
                vstn(sj + u * VW, ev);
                l[u] = vblendn(lane[u] >= j - pos0, l[u] + ev, l[u]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        if (imin(jb, pos0 + r + 1) > ja) {   // the rows that see a key of the range
            float *stt = stats + (((size_t)b * G.N + h) * G.S + i0 + r) * 2;
            stt[0] = m[r / VW][r % VW];
            stt[1] = l[r / VW][r % VW];
        }
    acc_tile_rows(o, Dv, v, &G, b, h, g, i0, R, e, ja, jb, pos0);   // acc_r += sum_j e_j v_j
}

// D_i = dO_i . o_i for the tile's R rows (o's first row at o0, rows ld apart), one in-order
// chain over d per row, the rows' chains in the lanes of D against dO's packed rows dOt:
// o's rows packed transposed too, KB columns at a time into buf (KB x 16); lanes past R: 0.
static void row_dots(VN D[NG], const float *dOt, const float *o0, size_t ld, int R, int Dv, float *buf) {
    for (int u = 0; u < NG; u++) D[u] = (VN){0};
    for (int d0 = 0; d0 < Dv; d0 += KB) {
        int dn = imin(KB, Dv - d0);
        gemm_pack_lines(buf, L, o0 + d0, ld, R, dn);
        for (int d = 0; d < dn; d++)
            for (int u = 0; u < NG; u++)
                D[u] = D[u] + vldn(dOt + (size_t)(d0 + d) * L + u * VW) * vldn(buf + (size_t)d * L + u * VW);
    }
}

void tile_keys_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, const float *stats, AttnGeom G, int b, int h, int i0,
                        int R, int ja, int jb, AttnRounding rnd) {
    int g = h / (G.N / G.Nkv), Dqk = G.Dqk, Dv = G.Dv;
    int pos0 = G.q0 + i0 - G.k0;
    int jend = imin(jb, pos0 + R);
    if (jend <= ja) return;
    float Qt[TILE_MAX_D * L] __attribute__((aligned(64))), dOt[TILE_MAX_D * L] __attribute__((aligned(64)));
    float P[KB * L] __attribute__((aligned(64))), dS[KB * L] __attribute__((aligned(64)));
    float m[L], l[L];
    for (int r = R; r < L; r++) m[r] = 0.0f, l[r] = 1.0f;   // lanes past the tile
    pack_rows(Qt, q, &G, b, h, i0, R, Dqk);
    pack_rows(dOt, dout, &G, b, h, i0, R, Dv);
    for (int r = 0; r < R; r++) {
        const float *stt = stats + (((size_t)b * G.N + h) * G.S + i0 + r) * 2;
        m[r] = stt[0];
        l[r] = stt[1];
    }
    VN lv[NG], dv_[NG], mv[NG];
    IN lane[NG];
    for (int r = 0; r < L; r++) {
        int u = r / VW, c = r % VW;
        lv[u][c] = l[r], mv[u][c] = m[r], lane[u][c] = r;
    }
    row_dots(dv_, dOt, o + qrow(&G, b, i0, h) * Dv, (size_t)G.N * Dv, R, Dv, P);   // P: scratch until it holds p
    size_t qs = (size_t)G.N * Dqk, vs = (size_t)G.N * Dv;   // from one query row to the next
    const float *q0r = q + qrow(&G, b, i0, h) * Dqk, *do0r = dout + qrow(&G, b, i0, h) * Dv;
    // Key sub-blocks of KB keys (within one part): P and dS of the tile, then the sums.
    for (int j0 = ja; j0 < jend;) {
        int j1 = imin(imin(j0 + KB, jend), (j0 / G.S + 1) * G.S);
        scores(P, Qt, Dqk, k, &G, b, g, j0, j1);    // s
        scores(dS, dOt, Dv, v, &G, b, g, j0, j1);   // dO_i . v_j
        float x[KB * L] __attribute__((aligned(64)));   // the exps of all 16 lanes, the block's keys in one call
        for (int j = j0; j < j1; j++) {
            float *pj = P + (size_t)(j - j0) * L;
            if (rnd.scores)
                for (int r = 0; r < L; r++) pj[r] = bf16_round(pj[r]);
            for (int u = 0; u < NG; u++) vstn(x + (j - j0) * L + u * VW, vldn(pj + u * VW) - mv[u]);
        }
        expf_n(x, x, (long)(j1 - j0) * L);
        for (int j = j0; j < j1; j++) {
            float *pj = P + (size_t)(j - j0) * L, *dsj = dS + (size_t)(j - j0) * L, *xj = x + (j - j0) * L;
            int rf = imax(0, j - pos0);   // the rows that see key j: rf .. R-1
            if (rnd.probs)
                for (int r = 0; r < L; r++) xj[r] = bf16_round(xj[r]);
            for (int u = 0; u < NG; u++) {   // p = e / l, dS = p (dP - D), lane by lane; lanes never read: 0
                VN p = vblendn((lane[u] >= rf) & (lane[u] < R), vldn(xj + u * VW), (VN){0}) / lv[u];
                vstn(pj + u * VW, p);
                vstn(dsj + u * VW, p * (vldn(dsj + u * VW) - dv_[u]));
            }
        }
        // dv_j += P_ij dO_i and dk_j += dS_ij q_i over the rows that see key j, in row order.
        // Up to ACC_MAX keys at a time where every row sees them all (keys j <= pos0).
        for (int j = j0; j < j1;) {
            int rf = imax(0, j - pos0), nk = 1;
            while (nk < ACC_MAX && j + nk < j1 && j + nk <= pos0) nk++;
            float *yv[ACC_MAX], *yk[ACC_MAX];
            const float *cp[ACC_MAX], *cs[ACC_MAX];
            for (int t = 0; t < nk; t++) {
                yv[t] = (float *)key_at(dv, &G, b, j + t, g, Dv);
                yk[t] = (float *)key_at(dk, &G, b, j + t, g, Dqk);
                cp[t] = P + (size_t)(j + t - j0) * L + rf;
                cs[t] = dS + (size_t)(j + t - j0) * L + rf;
            }
            acc_rows(yv, cp, nk, Dv, do0r + rf * vs, vs, 1, R - rf);
            acc_rows(yk, cs, nk, Dqk, q0r + rf * qs, qs, 1, R - rf);
            j += nk;
        }
        acc_tile_rows(dq, Dqk, k, &G, b, h, g, i0, R, dS, j0, j1, pos0);   // dq_i += sum_j dS_ij k_j
        j0 = j1;
    }
}
