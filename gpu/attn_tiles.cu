// gpu/attn_tiles.cu: the causal attention core on tiles in shared memory, the same sums in
// the same order as the per-row kernels of gpu/attention.cu (so the same bits), in far less
// time: a block of TILE_THREADS threads loads a tile of query rows and, tile by tile, the
// keys and values they see into shared memory, and every thread keeps its share of the
// outputs in registers. The per-row kernels read each key and value from global memory once
// per query row and add every output element in global memory.
//
// How the order is kept:
// - Forward, one block per (TILE_Q query rows, head, sequence), TILE_PARTS threads per row,
//   each holding the output elements d = part, part + TILE_PARTS, ... of its row. A merge of
//   keys [ja, jb) (the whole row for the dot product and a ring block, a key block of bkv for
//   flash) is the per-row kernel's two passes: the row's max over the keys it sees (each
//   thread over its keys, then the threads of the row combined so that the first key with
//   the largest score wins, as in the per-row loop), the rescale if the max grew, then the
//   keys in order: exponentials into shared memory, l and each output element added key by
//   key in key order.
// - dq, one block per (TILE_Q query rows, head, sequence): p_ij and dS_ij of a tile of keys
//   into shared memory, then each dq element adds its keys in key order.
// - dk and dv, one block per (TILE_K keys, kv head, sequence): for each head of the group,
//   tiles of query rows in row order, p_ij and dS_ij into shared memory, then each dk, dv
//   element adds the rows in (head, row) order, starting from the value it had.
// - Every score, exponential, p_ij and dS_ij is the per-row kernels' expression on the same
//   floats (gpu/attention.h: score_of, dot_dev), and D_i = dO_i . o_i is one in-order sum.
// The tiles run the calls without a materialised mask whose heads fit shared memory
// (tiles_fit: at most 48 KiB, the limit every GPU gives a block without asking); the others
// go to the per-row kernels (as every call does under gpu_attention=rows).
#include "gpu/gpu.h"
#include "gpu/attention.h"

enum {
    TILE_Q = 16,                           // query rows of a tile
    TILE_K = 16,                           // keys of a tile
    TILE_PARTS = 8,                        // threads per query row (forward, dq) or per key (dk, dv)
    TILE_THREADS = TILE_Q * TILE_PARTS,    // 128 = TILE_K * TILE_PARTS
    TILE_MAX_D = 256,                      // the widest head
    TILE_REGS = TILE_MAX_D / TILE_PARTS,   // output elements per thread
    TILE_SHARED_MAX = 48 * 1024,
};

// Rows r .. r+n-1 of head h of sequence b of x (B,S,N,D) into xs (n, stride), a row past
// S as zeros.
__device__ static void load_rows(float *xs, int stride, const float *x, const Geom &G, int b, int h, int r, int n,
                                 int D) {
    for (int t = threadIdx.x; t < n * D; t += TILE_THREADS) {
        int y = t / D, d = t % D, i = r + y;
        xs[y * stride + d] = i < G.S ? x[(((size_t)b * G.S + i) * G.N + h) * D + d] : 0.0f;
    }
}
// Keys j .. j+n-1 of kv head g of sequence b of x (P,B,S,Nkv,D) into xs (n, stride).
__device__ static void load_keys(float *xs, int stride, const float *x, const Geom &G, int b, int g, int j, int n,
                                 int D) {
    for (int t = threadIdx.x; t < n * D; t += TILE_THREADS) {
        int y = t / D, d = t % D;
        xs[y * stride + d] = x[(key_row(G, b, j + y) * G.Nkv + g) * D + d];
    }
}

// ---- forward ----

// The shared arrays of the forward (floats, then ints).
struct FwdShared {
    float *Q, *K, *V, *E, *m, *l, *a, *pmax;
    int *pkey, *state;
};
__device__ static FwdShared fwd_shared(float *sh, const Geom &G) {
    FwdShared s;
    int qd = G.Dqk + 1;
    s.Q = sh;                               // (TILE_Q, Dqk+1): the tile's query rows
    s.K = s.Q + TILE_Q * qd;                // (TILE_K, Dqk+1): a tile of keys
    s.V = s.K + TILE_K * qd;                // (TILE_K, Dv): their values
    s.E = s.V + TILE_K * G.Dv;              // (TILE_Q, TILE_K+1): exponentials
    s.m = s.E + TILE_Q * (TILE_K + 1);      // (TILE_Q): each row's running max, sum, rescale
    s.l = s.m + TILE_Q;
    s.a = s.l + TILE_Q;
    s.pmax = s.a + TILE_Q;                  // (TILE_Q, TILE_PARTS): each thread's max ...
    s.pkey = (int *)(s.pmax + TILE_Q * TILE_PARTS);   // ... and its key: -2 none seen, -1 none above the mask value
    s.state = s.pkey + TILE_Q * TILE_PARTS;           // (TILE_Q): merge_max's answer
    return s;
}
static size_t fwd_bytes(const Geom &G) {
    return sizeof(float) * ((TILE_Q + TILE_K) * (G.Dqk + 1) + TILE_K * G.Dv + TILE_Q * (TILE_K + 1) + 3 * TILE_Q +
                            TILE_Q * TILE_PARTS) +
           sizeof(int) * (TILE_Q * TILE_PARTS + TILE_Q);
}

// The max over keys ja .. jb-1 of what row r sees (its first nvis keys): each thread over its
// keys, then thread 0 of the row combines its TILE_PARTS threads' (max, first key). Leaves in
// S.m[r] the row's max so far and in S.state[r] 0 (the row sees none of these keys), 1 (its
// max did not grow) or 2 (it grew: l is rescaled already, the output elements are to be
// multiplied by S.a[r]).
__device__ static void merge_max(FwdShared S, const Geom &G, const float *k, int b, int g, int ja, int jb, int r,
                                 int part, int nvis) {
    int qd = G.Dqk + 1;
    float bm = ATTN_MASK_VALUE;
    int key = -2;
    for (int t0 = ja; t0 < jb; t0 += TILE_K) {
        int nk = imin(TILE_K, jb - t0);
        load_keys(S.K, qd, k, G, b, g, t0, nk, G.Dqk);
        __syncthreads();
        for (int c = part; c < nk; c += TILE_PARTS) {
            if (t0 + c >= nvis) continue;
            float s = score_of(G, S.Q + r * qd, S.K + c * qd);
            if (key == -2) key = -1;
            if (s > bm) { bm = s; key = t0 + c; }
        }
        __syncthreads();
    }
    S.pmax[r * TILE_PARTS + part] = bm;
    S.pkey[r * TILE_PARTS + part] = key;
    __syncthreads();
    if (part == 0) {   // the row's loop keeps the first key of the largest score: so do we
        float best = ATTN_MASK_VALUE;
        int first = -1, seen = 0;
        for (int p = 0; p < TILE_PARTS; p++) {
            float x = S.pmax[r * TILE_PARTS + p];
            int j = S.pkey[r * TILE_PARTS + p];
            if (j == -2) continue;
            seen = 1;
            if (j >= 0 && (x > best || (x == best && first >= 0 && j < first))) { best = x; first = j; }
        }
        S.state[r] = seen;
        if (seen && best > S.m[r]) {
            float a = expf(S.m[r] - best);
            S.l[r] *= a;
            S.m[r] = best;
            S.a[r] = a;
            S.state[r] = 2;
        }
    }
    __syncthreads();
}

// grid (tiles of TILE_Q rows, N, B): gpu/attention.cu's forward_kernel, with one merge of all
// the keys a row sees (bkv = 0) or one per key block of bkv (flash).
__global__ static void tile_forward_kernel(float *o, float *stats, const float *q, const float *k, const float *v,
                                           Geom G, int bkv, int begin, int end) {
    GPU_SHARED(float, sh);
    FwdShared S = fwd_shared(sh, G);
    int r = threadIdx.x / TILE_PARTS, part = threadIdx.x % TILE_PARTS, qd = G.Dqk + 1, ed = TILE_K + 1;
    int i0 = blockIdx.x * TILE_Q, h = blockIdx.y, b = blockIdx.z, g = h / (G.N / G.Nkv), i = i0 + r;
    int live = i < G.S, nvis = live ? keys_scanned(G, i) : 0;
    size_t orow = ((size_t)b * G.S + i) * G.N + h;
    float *st = stats + (((size_t)b * G.N + h) * G.S + i) * 2;
    float acc[TILE_REGS];   // acc[u]: output element part + u TILE_PARTS of row i
    load_rows(S.Q, qd, q, G, b, h, i0, TILE_Q, G.Dqk);
    if (part == 0) {
        S.m[r] = begin || !live ? ATTN_MASK_VALUE : st[0];
        S.l[r] = begin || !live ? 0.0f : st[1];
    }
#pragma unroll
    for (int u = 0; u < TILE_REGS; u++) {
        int d = part + u * TILE_PARTS;
        acc[u] = d < G.Dv && live && !begin ? o[orow * G.Dv + d] : 0.0f;
    }
    __syncthreads();
    int kmax = keys_scanned(G, imin(i0 + TILE_Q, G.S) - 1), span = bkv > 0 ? bkv : kmax;
    for (int ja = 0; ja < kmax; ja += span) {
        int jb = imin(ja + span, kmax);
        merge_max(S, G, k, b, g, ja, jb, r, part, nvis);
        int seen = S.state[r] > 0;
        float m = S.m[r];
        if (S.state[r] == 2) {
#pragma unroll
            for (int u = 0; u < TILE_REGS; u++) acc[u] *= S.a[r];
        }
        for (int t0 = ja; t0 < jb; t0 += TILE_K) {   // the keys in order: e, then l and the outputs
            int nk = imin(TILE_K, jb - t0);
            load_keys(S.K, qd, k, G, b, g, t0, nk, G.Dqk);
            load_keys(S.V, G.Dv, v, G, b, g, t0, nk, G.Dv);
            __syncthreads();
            for (int c = part; c < nk && seen; c += TILE_PARTS) {
                if (t0 + c >= nvis) continue;
                float e = expf(score_of(G, S.Q + r * qd, S.K + c * qd) - m);
                S.E[r * ed + c] = G.rnd.probs ? bf16_round_dev(e) : e;
            }
            __syncthreads();
            int nc = seen ? imin(nk, nvis - t0) : 0;   // this row's keys in the tile
            if (part == 0) {
                float l = S.l[r];
                for (int c = 0; c < nc; c++) l += S.E[r * ed + c];
                S.l[r] = l;
            }
            for (int c = 0; c < nc; c++) {
                float e = S.E[r * ed + c];
                const float *vc = S.V + c * G.Dv;
#pragma unroll
                for (int u = 0; u < TILE_REGS; u++) {
                    int d = part + u * TILE_PARTS;
                    if (d < G.Dv) acc[u] += e * vc[d];
                }
            }
            __syncthreads();
        }
    }
    if (!live) return;   // (past the last barrier)
    float l = S.l[r];
#pragma unroll
    for (int u = 0; u < TILE_REGS; u++) {
        int d = part + u * TILE_PARTS;
        if (d >= G.Dv) continue;
        float x = acc[u];
        if (end) {   // gpu/attention.cu's finish_row
            float num = G.rnd.probs ? bf16_round_dev(x) : x;
            x = G.rnd.out ? bf16_round_dev(num / l) : num / l;
        }
        o[orow * G.Dv + d] = x;
    }
    if (part == 0) {
        st[0] = S.m[r];
        st[1] = l;
    }
}

// ---- backward ----

// p_ij and dS_ij = p_ij (dO_i . v_j - D_i): gpu/attention.cu's prob_and_ds on shared copies.
__device__ static void prob_ds(const Geom &G, const float *qi, const float *doi, const float *kj, const float *vj,
                               float m, float l, float Di, float *p, float *ds) {
    float e = expf(score_of(G, qi, kj) - m);
    if (G.rnd.probs) e = bf16_round_dev(e);
    *p = e / l;
    *ds = *p * (dot_dev(doi, vj, G.Dv) - Di);
}

// The shared arrays of the backward kernels.
struct BwdShared {
    float *Q, *dO, *K, *V, *P, *DS, *D, *m, *l;
};
__device__ static BwdShared bwd_shared(float *sh, const Geom &G) {
    BwdShared s;
    int qd = G.Dqk + 1, vd = G.Dv + 1;
    s.Q = sh;                               // (TILE_Q, Dqk+1): query rows
    s.dO = s.Q + TILE_Q * qd;               // (TILE_Q, Dv+1): their output gradients
    s.K = s.dO + TILE_Q * vd;               // (TILE_K, Dqk+1): keys
    s.V = s.K + TILE_K * qd;                // (TILE_K, Dv+1): values
    s.P = s.V + TILE_K * vd;                // (TILE_Q, TILE_K+1): p_ij (dk, dv only)
    s.DS = s.P + TILE_Q * (TILE_K + 1);     // (TILE_Q, TILE_K+1): dS_ij
    s.D = s.DS + TILE_Q * (TILE_K + 1);     // (TILE_Q): D_i, m_i, l_i of the rows
    s.m = s.D + TILE_Q;
    s.l = s.m + TILE_Q;
    return s;
}
static size_t bwd_bytes(const Geom &G) {
    return sizeof(float) * ((TILE_Q + TILE_K) * (G.Dqk + 1 + G.Dv + 1) + 2 * TILE_Q * (TILE_K + 1) + 3 * TILE_Q);
}
// D_i, m_i, l_i of rows i0 .. i0+n-1 of head h (dO rows already in S.dO), one thread a row.
__device__ static void load_row_stats(BwdShared S, const Geom &G, const float *o, const float *stats, int b, int h,
                                      int i0, int n) {
    int y = threadIdx.x, i = i0 + y;
    if (y >= n) return;
    const float *st = stats + (((size_t)b * G.N + h) * G.S + i) * 2;
    S.D[y] = dot_dev(S.dO + y * (G.Dv + 1), o + (((size_t)b * G.S + i) * G.N + h) * G.Dv, G.Dv);
    S.m[y] = st[0];
    S.l[y] = st[1];
}

// grid (tiles of TILE_Q of the rows r0 .. r1-1, N, B): gpu/attention.cu's backward_dq_kernel.
__global__ static void tile_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v,
                                      const float *o, const float *stats, Geom G, int r0, int r1, int zero) {
    GPU_SHARED(float, sh);
    BwdShared S = bwd_shared(sh, G);
    int r = threadIdx.x / TILE_PARTS, part = threadIdx.x % TILE_PARTS, qd = G.Dqk + 1, vd = G.Dv + 1;
    int i0 = r0 + blockIdx.x * TILE_Q, h = blockIdx.y, b = blockIdx.z, g = h / (G.N / G.Nkv), i = i0 + r;
    int rows = imin(TILE_Q, r1 - i0), live = r < rows, nvis = live ? keys_scanned(G, i) : 0, ed = TILE_K + 1;
    size_t qrow = ((size_t)b * G.S + i) * G.N + h;
    float acc[TILE_REGS];   // acc[u]: dq element part + u TILE_PARTS of row i
    load_rows(S.Q, qd, q, G, b, h, i0, rows, G.Dqk);
    load_rows(S.dO, vd, dout, G, b, h, i0, rows, G.Dv);
#pragma unroll
    for (int u = 0; u < TILE_REGS; u++) {
        int d = part + u * TILE_PARTS;
        acc[u] = d < G.Dqk && live && !zero ? dq[qrow * G.Dqk + d] : 0.0f;
    }
    __syncthreads();
    load_row_stats(S, G, o, stats, b, h, i0, rows);
    __syncthreads();
    int kmax = keys_scanned(G, i0 + rows - 1);
    for (int t0 = 0; t0 < kmax; t0 += TILE_K) {
        int nk = imin(TILE_K, kmax - t0);
        load_keys(S.K, qd, k, G, b, g, t0, nk, G.Dqk);
        load_keys(S.V, vd, v, G, b, g, t0, nk, G.Dv);
        __syncthreads();
        for (int c = part; c < nk; c += TILE_PARTS) {
            if (t0 + c >= nvis) continue;
            float p;
            prob_ds(G, S.Q + r * qd, S.dO + r * vd, S.K + c * qd, S.V + c * vd, S.m[r], S.l[r], S.D[r], &p,
                    &S.DS[r * ed + c]);
        }
        __syncthreads();
        int nc = imin(nk, nvis - t0);   // this row's keys in the tile, in order
        for (int c = 0; c < nc; c++) {
            float ds = S.DS[r * ed + c];
            const float *kc = S.K + c * qd;
#pragma unroll
            for (int u = 0; u < TILE_REGS; u++) {
                int d = part + u * TILE_PARTS;
                if (d < G.Dqk) acc[u] += ds * kc[d];
            }
        }
        __syncthreads();
    }
    if (!live) return;
#pragma unroll
    for (int u = 0; u < TILE_REGS; u++) {
        int d = part + u * TILE_PARTS;
        if (d < G.Dqk) dq[qrow * G.Dqk + d] = acc[u];
    }
}

// grid (tiles of TILE_K of the W keys, Nkv, B): gpu/attention.cu's backward_dkdv_kernel, the
// rows r0 .. r1-1 of each head of kv group g added to each key's dk and dv in (head, row) order.
__global__ static void tile_dkdv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k,
                                        const float *v, const float *o, const float *stats, Geom G, int r0, int r1) {
    GPU_SHARED(float, sh);
    BwdShared S = bwd_shared(sh, G);
    int c = threadIdx.x / TILE_PARTS, part = threadIdx.x % TILE_PARTS, qd = G.Dqk + 1, vd = G.Dv + 1;
    int j0 = blockIdx.x * TILE_K, g = blockIdx.y, b = blockIdx.z, j = j0 + c, ed = TILE_K + 1;
    int nk = imin(TILE_K, G.W - j0), live = c < nk, group = G.N / G.Nkv;
    size_t krow = live ? key_row(G, b, j) * G.Nkv + g : 0;
    float ak[TILE_REGS], av[TILE_REGS];   // dk and dv elements part + u TILE_PARTS of key j
    load_keys(S.K, qd, k, G, b, g, j0, nk, G.Dqk);
    load_keys(S.V, vd, v, G, b, g, j0, nk, G.Dv);
#pragma unroll
    for (int u = 0; u < TILE_REGS; u++) {
        int d = part + u * TILE_PARTS;
        ak[u] = live && d < G.Dqk ? dk[krow * G.Dqk + d] : 0.0f;
        av[u] = live && d < G.Dv ? dv[krow * G.Dv + d] : 0.0f;
    }
    int first = j0 + G.k0 - G.q0;   // the first row that sees key j0
    if (first < r0) first = r0;
    for (int h = g * group; h < (g + 1) * group; h++)
        for (int ia = first; ia < r1; ia += TILE_Q) {
            int nr = imin(TILE_Q, r1 - ia);
            load_rows(S.Q, qd, q, G, b, h, ia, nr, G.Dqk);
            load_rows(S.dO, vd, dout, G, b, h, ia, nr, G.Dv);
            __syncthreads();
            load_row_stats(S, G, o, stats, b, h, ia, nr);
            __syncthreads();
            for (int x = threadIdx.x; x < TILE_Q * TILE_K; x += TILE_THREADS) {
                int y = x / TILE_K, cc = x % TILE_K;
                if (y >= nr || cc >= nk || j0 + cc >= keys_scanned(G, ia + y)) continue;
                prob_ds(G, S.Q + y * qd, S.dO + y * vd, S.K + cc * qd, S.V + cc * vd, S.m[y], S.l[y], S.D[y],
                        &S.P[y * ed + cc], &S.DS[y * ed + cc]);
            }
            __syncthreads();
            for (int y = 0; y < nr && live; y++) {   // the rows in order
                if (j >= keys_scanned(G, ia + y)) continue;
                float p = S.P[y * ed + c], ds = S.DS[y * ed + c];
                const float *doy = S.dO + y * vd, *qy = S.Q + y * qd;
#pragma unroll
                for (int u = 0; u < TILE_REGS; u++) {
                    int d = part + u * TILE_PARTS;
                    if (d < G.Dv) av[u] += p * doy[d];
                }
#pragma unroll
                for (int u = 0; u < TILE_REGS; u++) {
                    int d = part + u * TILE_PARTS;
                    if (d < G.Dqk) ak[u] += ds * qy[d];
                }
            }
            __syncthreads();
        }
    if (!live) return;
#pragma unroll
    for (int u = 0; u < TILE_REGS; u++) {
        int d = part + u * TILE_PARTS;
        if (d < G.Dqk) dk[krow * G.Dqk + d] = ak[u];
        if (d < G.Dv) dv[krow * G.Dv + d] = av[u];
    }
}

// ---- the calls ----

// Can the tiles run this call? No mask, heads of at most TILE_MAX_D, shared memory enough.
static int tiles_fit(const Geom &G, size_t bytes) {
    return !G.mask && G.Dqk <= TILE_MAX_D && G.Dv <= TILE_MAX_D && bytes <= TILE_SHARED_MAX;
}

int attn_tiles_forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int bkv,
                       int begin, int end) {
    size_t bytes = fwd_bytes(G);
    if (!tiles_fit(G, bytes)) return 0;
    dim3 grid((G.S + TILE_Q - 1) / TILE_Q, G.N, G.B);
    GPU_LAUNCH(tile_forward_kernel, grid, TILE_THREADS, bytes)(o, stats, q, k, v, G, bkv, begin, end);
    GPU_CHECK_LAUNCH();
    return 1;
}

int attn_tiles_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, const float *stats, Geom G, int r0, int r1, int zero_dq) {
    size_t bytes = bwd_bytes(G);
    if (!tiles_fit(G, bytes)) return 0;
    dim3 rows((r1 - r0 + TILE_Q - 1) / TILE_Q, G.N, G.B), keys((G.W + TILE_K - 1) / TILE_K, G.Nkv, G.B);
    GPU_LAUNCH(tile_dq_kernel, rows, TILE_THREADS, bytes)(dq, dout, q, k, v, o, stats, G, r0, r1, zero_dq);
    GPU_CHECK_LAUNCH();
    if (G.W == 0) return 1;
    GPU_LAUNCH(tile_dkdv_kernel, keys, TILE_THREADS, bytes)(dk, dv, dout, q, k, v, o, stats, G, r0, r1);
    GPU_CHECK_LAUNCH();
    return 1;
}
