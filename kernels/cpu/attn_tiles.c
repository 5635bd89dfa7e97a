// kernels/cpu/attn_tiles.c: the causal attention core on tiles of 16 query rows
// (kernels/cpu/attn_tiles.h).
//
// Where the lanes go. A score s_ij = q_i . k_j is one chain over d, in order; so is
// dP_ij = dO_i . v_j. A vector of 16 lanes holds the chains of 16 query rows against one
// key: the tile's q rows are packed transposed, Qt (D, 16), and each step d adds
// Qt[d] * k_j[d] (k_j[d] broadcast) to the 16 chains, eight keys side by side so the adds
// do not wait on each other. The sums over keys and rows, o_i += e_ij v_j,
// dq_i += dS_ij k_j, dk_j += dS_ij q_i, dv_j += P_ij dO_i, are chains per output element
// with lanes over d: acc_rows keeps 16 to 64 elements of the output in registers while the
// terms stream past in the order of the per-row loops (keys in order for o and dq; rows in
// order for dk and dv). Every product is rounded and then added, as in plain C (the build
// is ISO C: the compiler fuses no multiply-add), so each element sees the float operations
// of kernels/cpu/attention.c in its order, and the same bits. expf stays the C library's,
// one call per visible (row, key) pair, as in the per-row loops.
//
// The causal mask within a tile is a staircase: row r sees keys up to pos0 + r, pos0 =
// q0 + i0 - k0. Every loop runs over exactly the visible pairs (a key's rows from the first
// that sees it, a row's keys up to its own position); lanes of pairs that are not visible
// are computed and never read.
#include "kernels/cpu/attn_tiles.h"
#include "kernels/bf16.h"
#include <math.h>

enum { L = TILE_ROWS, KB = 64 };   // KB: keys per backward sub-block (its P and dS, 2 x 4 KiB)

typedef float V16 __attribute__((vector_size(64), aligned(64)));
// A 16-float vector at any float address (rows of q, k, v are 4-byte aligned).
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias));

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline V16 ld(const float *p) { return *(const V16u *)p; }
static inline void st(float *p, V16 x) { *(V16u *)p = x; }

// The row, in k or v (P,B,S,Nkv,D), of key j of sequence b: part j/S, row j%S.
static inline const float *key_at(const float *x, const AttnGeom *G, int b, int j, int g, int D) {
    return x + ((((size_t)(j / G->S) * G->B + b) * G->S + j % G->S) * G->Nkv + g) * D;
}
// Query row i of sequence b, head h, in x (B,S,N,D).
static inline size_t qrow(const AttnGeom *G, int b, int i, int h) { return ((size_t)b * G->S + i) * G->N + h; }

// y (D) += c_0 x_0 + c_1 x_1 + ... + c_{n-1} x_{n-1}, x_t = x + t*xs, c_t = c[t*cs]: each
// y[d] is the chain ((y[d] + c_0 x_0[d]) + c_1 x_1[d]) + ..., as n calls of axpy. NV vectors
// of y (NV*16 elements) stay in registers over the n terms.
static inline __attribute__((always_inline)) void acc_vecs(float *y, const float *x, size_t xs, const float *c,
                                                           int cs, int n, int NV) {
    V16 a[4];
    for (int u = 0; u < NV; u++) a[u] = ld(y + 16 * u);
    for (int t = 0; t < n; t++) {
        float ct = c[(size_t)t * cs];
        const float *xt = x + t * xs;
        for (int u = 0; u < NV; u++) a[u] = a[u] + ct * ld(xt + 16 * u);
    }
    for (int u = 0; u < NV; u++) st(y + 16 * u, a[u]);
}
static void acc_rows(float *y, int D, const float *x, size_t xs, const float *c, int cs, int n) {
    int d = 0;
    for (; d + 64 <= D; d += 64) acc_vecs(y + d, x + d, xs, c, cs, n, 4);
    if (d + 32 <= D) { acc_vecs(y + d, x + d, xs, c, cs, n, 2); d += 32; }
    if (d + 16 <= D) { acc_vecs(y + d, x + d, xs, c, cs, n, 1); d += 16; }
    for (; d < D; d++) {
        float s = y[d];
        for (int t = 0; t < n; t++) s += c[(size_t)t * cs] * x[t * xs + d];
        y[d] = s;
    }
}
// As acc_rows, over keys ja .. jb-1 of sequence b (rows of x (P,B,S,Nkv,D)), c_j = c[(j-ja)*cs]:
// cut where the keys cross from one part to the next.
static void acc_keys(float *y, int D, const float *x, const AttnGeom *G, int b, int g, const float *c, int cs,
                     int ja, int jb) {
    for (int j = ja; j < jb;) {
        int je = imin(jb, (j / G->S + 1) * G->S);
        acc_rows(y, D, key_at(x, G, b, j, g, D), (size_t)G->Nkv * D, c + (size_t)(j - ja) * cs, cs, je - j);
        j = je;
    }
}

// s[t*16 + r] = chain over d of Xt[d*16 + r] * y_t[d], for the nt <= 8 keys' rows y_t:
// eight keys' 16 chains side by side.
static void scores8(float *s, const float *Xt, int D, const float *const *y, int nt) {
    V16 a[8] = {0};
    for (int d = 0; d < D; d++) {
        V16 x = ld(Xt + (size_t)d * L);
        for (int t = 0; t < 8; t++) a[t] = a[t] + x * y[t][d];
    }
    for (int t = 0; t < nt; t++) st(s + t * L, a[t]);
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
    for (int r = 0; r < L; r++) {
        const float *xr = r < R ? x + qrow(G, b, i0 + r, h) * D : NULL;
        for (int d = 0; d < D; d++) Xt[(size_t)d * L + r] = xr ? xr[d] : 0.0f;
    }
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
    for (int r = 0; r < R; r++) {
        int n = imin(jb, pos0 + r + 1);   // row r's keys: ja .. n-1
        if (n <= ja) continue;
        float *acc = o + qrow(&G, b, i0 + r, h) * Dv;
        float *stt = stats + (((size_t)b * G.N + h) * G.S + i0 + r) * 2;
        float m = stt[0], l = stt[1], bm = ATTN_MASK_VALUE;
        for (int j = ja; j < n; j++) {
            float *s = &e[(size_t)(j - ja) * L + r];
            if (rnd.scores) *s = bf16_round(*s);
            if (*s > bm) bm = *s;
        }
        if (bm > m) {   // a new max: rescale what was summed (merge_keys_row's rule)
            float a = expf(m - bm);
            l *= a;
            for (int d = 0; d < Dv; d++) acc[d] *= a;
            m = bm;
        }
        for (int j = ja; j < n; j++) {
            float *s = &e[(size_t)(j - ja) * L + r];
            float ej = expf(*s - m);
            if (rnd.probs) ej = bf16_round(ej);
            l += ej;
            *s = ej;
        }
        stt[0] = m;
        stt[1] = l;
        acc_keys(acc, Dv, v, &G, b, g, e + r, L, ja, n);
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
    float m[L], l[L], Di[L];
    pack_rows(Qt, q, &G, b, h, i0, R, Dqk);
    pack_rows(dOt, dout, &G, b, h, i0, R, Dv);
    for (int r = 0; r < R; r++) {
        size_t row = qrow(&G, b, i0 + r, h);
        const float *stt = stats + (((size_t)b * G.N + h) * G.S + i0 + r) * 2, *doi = dout + row * Dv;
        m[r] = stt[0];
        l[r] = stt[1];
        float s = 0.0f;   // D_i = dO_i . o_i, one in-order chain
        for (int d = 0; d < Dv; d++) s += doi[d] * o[row * Dv + d];
        Di[r] = s;
    }
    size_t qs = (size_t)G.N * Dqk, vs = (size_t)G.N * Dv;   // from one query row to the next
    const float *q0r = q + qrow(&G, b, i0, h) * Dqk, *do0r = dout + qrow(&G, b, i0, h) * Dv;
    // Key sub-blocks of KB keys (within one part): P and dS of the tile, then the sums.
    for (int j0 = ja; j0 < jend;) {
        int j1 = imin(imin(j0 + KB, jend), (j0 / G.S + 1) * G.S);
        scores(P, Qt, Dqk, k, &G, b, g, j0, j1);    // s
        scores(dS, dOt, Dv, v, &G, b, g, j0, j1);   // dO_i . v_j
        for (int j = j0; j < j1; j++) {
            float *pj = P + (size_t)(j - j0) * L, *dsj = dS + (size_t)(j - j0) * L;
            for (int r = imax(0, j - pos0); r < R; r++) {   // the rows that see key j
                float s = rnd.scores ? bf16_round(pj[r]) : pj[r];
                float e = expf(s - m[r]);
                if (rnd.probs) e = bf16_round(e);
                float p = e / l[r];
                pj[r] = p;
                dsj[r] = p * (dsj[r] - Di[r]);
            }
        }
        // dv_j += P_ij dO_i and dk_j += dS_ij q_i over the rows that see key j, in row order.
        for (int j = j0; j < j1; j++) {
            int rf = imax(0, j - pos0);
            const float *pj = P + (size_t)(j - j0) * L + rf, *dsj = dS + (size_t)(j - j0) * L + rf;
            acc_rows((float *)key_at(dv, &G, b, j, g, Dv), Dv, do0r + rf * vs, vs, pj, 1, R - rf);
            acc_rows((float *)key_at(dk, &G, b, j, g, Dqk), Dqk, q0r + rf * qs, qs, dsj, 1, R - rf);
        }
        // dq_i += dS_ij k_j over the keys row i sees, in key order.
        for (int r = 0; r < R; r++) {
            int n = imin(j1, pos0 + r + 1);
            if (n > j0)
                acc_rows(dq + qrow(&G, b, i0 + r, h) * Dqk, Dqk, key_at(k, &G, b, j0, g, Dqk),
                         (size_t)G.Nkv * Dqk, dS + r, L, n - j0);
        }
        j0 = j1;
    }
}
