// gpu/attn_mma_bwd.cu: the causal attention core's backward on tensor cores
// (gpu_attention=tensor_cores; gpu/attn_mma.cu describes the kernels, gpu/attn_mma.h holds
// what the forward and backward share): dk, dv per tile of keys and dq per tile of query
// rows, each with its scores in registers where the GPU's fragment layout allows, else
// through shared memory; by default dk, dv first, writing the dS it made to device memory,
// and dq from that dS (MESHMOE_ATTN_DQ).
#include "gpu/attn_mma.h"

#if GPU_HAVE_WMMA
// ---- backward ----

struct MmaBwd {
    bf16 *Q, *dO, *K, *V, *P, *dS;   // (MQ, Dqk), (MQ, Dv), (MK, Dqk), (MK, Dv), (MQ, MK) x 2
    float *S, *dP;                   // (MQ, MK): scores, dO V^T (S also the sums' staging, tiles_load)
    float *m, *l, *D;                // (MQ): each query row's max, sum and dO . o
};
// scores 0: without P, dS, S and dP (the kernels with their scores in registers); keys: the
// rows of K and V.
__host__ __device__ static size_t bwd_layout(const Geom &G, uintptr_t base, MmaBwd *s, int scores = 1, int keys = MK) {
    Carve c = {base, 0};
    MmaBwd f = {};
    f.Q = c.take<bf16>(MQ * (G.Dqk + PAD_H));
    f.dO = c.take<bf16>(MQ * (G.Dv + PAD_H));
    f.K = c.take<bf16>(keys * (G.Dqk + PAD_H));
    f.V = c.take<bf16>(keys * (G.Dv + PAD_H));
    if (scores) {
        f.P = c.take<bf16>(MQ * (MK + PAD_H));
        f.dS = c.take<bf16>(MQ * (MK + PAD_H));
        f.S = c.take<float>(MQ * (MK + PAD_F));
        f.dP = c.take<float>(MQ * (MK + PAD_F));
    }
    f.m = c.take<float>(MQ);
    f.l = c.take<float>(MQ);
    f.D = c.take<float>(MQ);
    if (s) *s = f;
    return c.used;
}

// a . b over n elements in order (dot_dev's adds), four elements a load where both rows are
// 16-byte aligned: a warp's threads read 32 rows apart, so each load instruction fetches 32
// scattered pieces, and 16 bytes each take a quarter of the instructions that 4 bytes do
// (ncu on an H200, 2026-12-04: the kernel's warps waited on memory 348 cycles an instruction).
__device__ static float dot_in_order4(const float *a, const float *b, int n) {
    if (((uintptr_t)a | (uintptr_t)b) % 16 || n % 4) return dot_dev(a, b, n);
    const float4 *a4 = (const float4 *)a, *b4 = (const float4 *)b;
    float s = 0.0f;
#pragma unroll 4
    for (int d = 0; d < n / 4; d++) {
        float4 x = a4[d], y = b4[d];
        s += x.x * y.x;
        s += x.y * y.y;
        s += x.z * y.z;
        s += x.w * y.w;
    }
    return s;
}

// grid (rows r0 .. r1-1 in blocks of MMA_THREADS, N, B): dots (B,N,S) row i = dO_i . o_i, one
// in-order float32 sum, one thread a row: computed once per call, where each key tile of the
// dk, dv kernel would compute it again.
__global__ static void row_dots_kernel(float *dots, const float *dout, const float *o, Geom G, int r0, int r1) {
    int i = r0 + blockIdx.x * MMA_THREADS + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    if (i >= r1) return;
    size_t row = ((size_t)b * G.S + i) * G.N + h;
    dots[((size_t)b * G.N + h) * G.S + i] = dot_in_order4(dout + row * G.Dv, o + row * G.Dv, G.Dv);
}

// Query rows ia .. ia+n-1 of head h: Q, dO as bf16 (zeros past n), and per row m, l and
// D = dO . o (row_dots_kernel's).
__device__ static void load_queries(MmaBwd S, const Geom &G, const Heads &H, const float *dots, const float *stats,
                                    int b, int h, int ia, int n) {
    tile_copy(S.Q, G.Dqk + PAD_H, query_tile(H.q, G, H, b, h, ia, G.Dqk), n, MQ, G.Dqk);
    tile_copy(S.dO, G.Dv + PAD_H, query_tile(H.dout, G, H, b, h, ia, G.Dv), n, MQ, G.Dv);
    int y = threadIdx.x;
    if (y >= n) return;
    size_t r = ((size_t)b * G.N + h) * G.S + ia + y;
    S.D[y] = dots[r];
    S.m[y] = stats[r * 2];
    S.l[y] = stats[r * 2 + 1];
}

// S = Q K^T and dP = dO V^T for the tile, then (a thread a query row) p and dS = p (dP - D)
// into P and dS as bf16, zero where a row does not see a key.
__device__ static void probs_and_ds(MmaBwd S, const Geom &G, int ia, int nr, int j0, int nk) {
    int lds = MK + PAD_F, ldp = MK + PAD_H;
    products_abt(S.S, lds, S.Q, S.K, G.Dqk + PAD_H, MQ, MK, G.Dqk);
    products_abt(S.dP, lds, S.dO, S.V, G.Dv + PAD_H, MQ, MK, G.Dv);
    __syncthreads();
    // PER_ROW threads a row, each every PER_ROW-th column (each element on its own).
    int y = threadIdx.x / PER_ROW;
    int nv = y < nr ? imin(nk, keys_scanned(G, ia + y) - j0) : 0;
    for (int c = threadIdx.x % PER_ROW; c < MK; c += PER_ROW) {
        float p = 0.0f, ds = 0.0f;
        if (c < nv) {
            float s = S.S[y * lds + c];
            if (G.rnd.scores) s = bf16_round_dev(s);
            float e = expf(s - S.m[y]);
            if (G.rnd.probs) e = bf16_round_dev(e);
            p = e / S.l[y];
            ds = p * (S.dP[y * lds + c] - S.D[y]);
        }
        S.P[y * ldp + c] = __float2bfloat16(p);
        S.dS[y * ldp + c] = __float2bfloat16(ds);
    }
    __syncthreads();
}

// grid (N, tiles of MQ of the rows r0 .. r1-1, B), the last tile first: dq rows written (zero) or added to.
__global__ static void mma_dq_kernel(float *dq, Heads H, const float *dots, const float *stats, Geom G, int r0, int r1,
                                     int zero) {
    GPU_SHARED(float, sh);
    MmaBwd S;
    bwd_layout(G, (uintptr_t)sh, &S);
    int ia = r0 + heavy_first() * MQ, h = blockIdx.x, b = blockIdx.z, g = h / (G.N / G.Nkv);
    int nr = imin(MQ, r1 - ia), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H;
    Acc dQ[DQ_TILES];   // this warp's tiles of the rows' dq sums
    load_queries(S, G, H, dots, stats, b, h, ia, nr);
    tiles_load<DQ_TILES>(dQ, S.S, dq, QueryRows{G, b, h, ia}, nr, MQ, G.Dqk, zero);
    int kmax = keys_scanned(G, ia + nr - 1);
    for (int j0 = 0; j0 < kmax; j0 += MK) {
        int nk = imin(MK, kmax - j0);
        tile_copy(S.K, ldq, key_tile(H.k, G, b, g, j0, G.Dqk), nk, MK, G.Dqk);
        tile_copy(S.V, ldv, key_tile(H.v, G, b, g, j0, G.Dv), nk, MK, G.Dv);
        __syncthreads();
        probs_and_ds(S, G, ia, nr, j0, nk);
        products_onto<DQ_TILES>(dQ, S.dS, MK + PAD_H, 0, S.K, ldq, MQ, G.Dqk, MK);   // dQ += dS K
        __syncthreads();
    }
    tiles_store<DQ_TILES>(dq, QueryRows{G, b, h, ia}, nr, MQ, G.Dqk, dQ, S.S);
}

// ---- dq with its scores in registers ----
// mma_dq_kernel's sums, each warp taking its own 16 of the block's MQ query rows, without
// shared memory between the products: S = Q K^T and dP = dO V^T into the warp's accumulator
// tiles, p and dS made element by element where they lie (slots_apply2: each row slot's m, l,
// D and visible keys made once, gpu/attn_mma.h), dS turned in registers into the matrix_a
// fragments of dQ += dS K (acc_to_a), and dQ's tiles (the warp's rows) read from and written
// to device memory element by element. The tiles of K and V come in while the block computes:
// K in two buffers, the next tile's copied while this one's is read; V in one, the next
// tile's copied once every warp has made its dP. The same operations in the same order as
// mma_dq_kernel: the same results.

enum { KEY_SLABS = MK / 16 };   // a key tile's 16-key slabs

struct DqRegs {
    bf16 *Q, *dO, *K[2], *V;   // (MQ, Dqk), (MQ, Dv), two of (MK, Dqk), (MK, Dv)
};
__host__ __device__ static size_t dq_regs_layout(const Geom &G, uintptr_t base, DqRegs *s) {
    Carve c = {base, 0};
    DqRegs f;
    f.Q = c.take<bf16>(MQ * (G.Dqk + PAD_H));
    f.dO = c.take<bf16>(MQ * (G.Dv + PAD_H));
    f.K[0] = c.take<bf16>(MK * (G.Dqk + PAD_H));
    f.K[1] = c.take<bf16>(MK * (G.Dqk + PAD_H));
    f.V = c.take<bf16>(MK * (G.Dv + PAD_H));
    if (s) *s = f;
    return c.used;
}

// A warp's dQ tiles (its 16 rows from y0 of the block's nr, tile t columns 16 t ..) from dq
// (zeros where zero), and back.
template <int QT>
__device__ __forceinline__ static void dq_tiles_load(Acc *dQ, const float *dq, QueryRows row, const Geom &G, int y0,
                                                     int nr, int zero) {
#pragma unroll
    for (int t = 0; t < QT; t++) {
        if (t >= G.Dqk / 16) break;
        wmma::fill_fragment(dQ[t], 0.0f);
        if (!zero)
            row_tile_apply(dQ[t], y0, t, [&](int y, int c, float) { return y < nr ? dq[row(y) * G.Dqk + c] : 0.0f; });
    }
}
// dQ += dS K for a key tile of SLABS x 16 keys: a[c] this warp's rows of dS, keys 16 c ..;
// K (keys, Dqk) with rows ldq apart; each tile's slabs in key order.
template <int QT, int SLABS, class FragA>
__device__ __forceinline__ static void dq_add_products(Acc *dQ, const FragA *a, const bf16 *K, int ldq, int nt) {
#pragma unroll
    for (int t = 0; t < QT; t++) {
        if (t >= nt) break;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fk;
        for (int c = 0; c < SLABS; c++) {
            wmma::load_matrix_sync(fk, K + 16 * c * ldq + 16 * t, ldq);
            wmma::mma_sync(dQ[t], a[c], fk, dQ[t]);
        }
    }
}
template <int QT>
__device__ __forceinline__ static void dq_tiles_store(float *dq, Acc *dQ, QueryRows row, const Geom &G, int y0, int nr) {
#pragma unroll
    for (int t = 0; t < QT; t++) {
        if (t >= G.Dqk / 16) break;
        row_tile_apply(dQ[t], y0, t, [&](int y, int c, float v) {
            if (y < nr) dq[row(y) * G.Dqk + c] = v;
            return v;
        });
    }
}

// grid (N, tiles of MQ of the rows r0 .. r1-1, B), the last tile first; QT: the most dQ tiles
// of a warp (Dqk / 16).
template <int QT>
__global__ static void mma_dq_regs_kernel(float *dq, Heads H, const float *dots, const float *stats, Geom G, int r0,
                                          int r1, int zero) {
    GPU_SHARED(float, sh);
    DqRegs S;
    dq_regs_layout(G, (uintptr_t)sh, &S);
    int ia = r0 + heavy_first() * MQ, h = blockIdx.x, b = blockIdx.z, g = h / (G.N / G.Nkv);
    int nr = imin(MQ, r1 - ia), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H, nt = G.Dqk / 16, y0 = threadIdx.x / 32 * 16;
    int kmax = keys_scanned(G, ia + nr - 1);
    tile_copy_async(S.Q, ldq, query_tile(H.q, G, H, b, h, ia, G.Dqk), nr, MQ, G.Dqk);
    tile_copy_async(S.dO, ldv, query_tile(H.dout, G, H, b, h, ia, G.Dv), nr, MQ, G.Dv);
    if (kmax > 0) {
        tile_copy_async(S.K[0], ldq, key_tile(H.k, G, b, g, 0, G.Dqk), imin(MK, kmax), MK, G.Dqk);
        tile_copy_async(S.V, ldv, key_tile(H.v, G, b, g, 0, G.Dv), imin(MK, kmax), MK, G.Dv);
    }
    cp_async_commit();
    float m[LANE_ROWS], l[LANE_ROWS], D[LANE_ROWS];   // each row slot's max, sum and dO . o
    for (int q = 0; q < LANE_ROWS; q++) {
        int y = y0 + slot_row(q);
        size_t r = ((size_t)b * G.N + h) * G.S + ia + y;
        m[q] = y < nr ? stats[2 * r] : 0.0f;
        l[q] = y < nr ? stats[2 * r + 1] : 1.0f;
        D[q] = y < nr ? dots[r] : 0.0f;
    }
    QueryRows row{G, b, h, ia};
    Acc dQ[QT];   // this warp's rows' dq sums, tile t its columns 16 t ..
    dq_tiles_load<QT>(dQ, dq, row, G, y0, nr, zero);
    for (int j0 = 0, u = 0; j0 < kmax; j0 += MK, u ^= 1) {
        int nk = imin(MK, kmax - j0), next = j0 + MK < kmax;
        cp_async_wait<0>();
        __syncthreads();   // (this tile's K and V there; every warp done with the tile before, and K[u ^ 1])
        int nnext = imin(MK, kmax - j0 - MK);   // (the next tile's keys)
        if (next) tile_copy_async(stage_of(S.K, u ^ 1), ldq, key_tile(H.k, G, b, g, j0 + MK, G.Dqk), nnext, MK, G.Dqk);
        cp_async_commit();
        const bf16 *K = stage_of(S.K, u);
        int nv[LANE_ROWS];   // the row slot's keys of this tile: columns 0 .. nv-1
        for (int q = 0; q < LANE_ROWS; q++) {
            int y = y0 + slot_row(q);
            nv[q] = y < nr ? imin(nk, keys_scanned(G, ia + y) - j0) : 0;
        }
        RowA dS[KEY_SLABS];
#pragma unroll
        for (int c = 0; c < KEY_SLABS; c++) {   // the slab's S and dP, then p and dS where they lie
            Acc s, dp;
            wmma::fill_fragment(s, 0.0f);
            wmma::fill_fragment(dp, 0.0f);
            mma_onto_pair<wmma::row_major, wmma::col_major>(
                s, MmaOperands{S.Q + y0 * ldq, ldq, 16, K + 16 * c * ldq, ldq, 16, G.Dqk},            // S = Q K^T
                dp, MmaOperands{S.dO + y0 * ldv, ldv, 16, S.V + 16 * c * ldv, ldv, 16, G.Dv});      // dP = dO V^T
            slots_apply2(s, dp, [&](int q, int cs, float sc, float dpv) {
                if (16 * c + slot_col(cs) >= nv[q]) return 0.0f;
                if (G.rnd.scores) sc = bf16_round_dev(sc);
                float e = expf(sc - m[q]);
                if (G.rnd.probs) e = bf16_round_dev(e);
                float p = e / l[q];
                return p * (dpv - D[q]);
            });
            acc_to_a(dS[c], s);
        }
        __syncthreads();   // (every warp done with V)
        if (next) tile_copy_async(S.V, ldv, key_tile(H.v, G, b, g, j0 + MK, G.Dv), nnext, MK, G.Dv);
        cp_async_commit();
        dq_add_products<QT, KEY_SLABS>(dQ, dS, K, ldq, nt);   // dQ += dS K
    }
    cp_async_wait<0>();   // (a block without keys: Q's and dO's copies)
    dq_tiles_store<QT>(dq, dQ, row, G, y0, nr);
}

// grid (Nkv, tiles of MK of the W keys, B), the first keys (seen by the most rows) first: dk,
// dv += the rows r0 .. r1-1 of each head of kv group g.
__global__ static void mma_dkdv_kernel(float *dk, float *dv, Heads H, const float *dots, const float *stats, Geom G,
                                       int r0, int r1) {
    GPU_SHARED(float, sh);
    MmaBwd S;
    bwd_layout(G, (uintptr_t)sh, &S);
    int j0 = blockIdx.y * MK, g = blockIdx.x, b = blockIdx.z, group = G.N / G.Nkv;
    int nk = imin(MK, G.W - j0), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H;
    Acc dK[DKV_TILES], dV[DKV_TILES];   // this warp's tiles of the keys' dk and dv sums
    tile_copy(S.K, ldq, key_tile(H.k, G, b, g, j0, G.Dqk), nk, MK, G.Dqk);
    tile_copy(S.V, ldv, key_tile(H.v, G, b, g, j0, G.Dv), nk, MK, G.Dv);
    tiles_load<DKV_TILES>(dK, S.S, dk, KeyRows{G, b, g, j0}, nk, MK, G.Dqk, 0);
    tiles_load<DKV_TILES>(dV, S.S, dv, KeyRows{G, b, g, j0}, nk, MK, G.Dv, 0);
    int first = j0 + G.k0 - G.q0;   // the first row that sees key j0
    if (first < r0) first = r0;
    for (int h = g * group; h < (g + 1) * group; h++)
        for (int ia = first; ia < r1; ia += MQ) {
            int nr = imin(MQ, r1 - ia);
            __syncthreads();   // (the previous tile's products have read Q, dO, P and dS)
            load_queries(S, G, H, dots, stats, b, h, ia, nr);
            __syncthreads();
            probs_and_ds(S, G, ia, nr, j0, nk);
            products_onto<DKV_TILES>(dV, S.P, MK + PAD_H, 1, S.dO, ldv, MK, G.Dv, MQ);    // dV += P^T dO
            products_onto<DKV_TILES>(dK, S.dS, MK + PAD_H, 1, S.Q, ldq, MK, G.Dqk, MQ);   // dK += dS^T Q
        }
    __syncthreads();
    tiles_store<DKV_TILES>(dk, KeyRows{G, b, g, j0}, nk, MK, G.Dqk, dK, S.S);
    tiles_store<DKV_TILES>(dv, KeyRows{G, b, g, j0}, nk, MK, G.Dv, dV, S.S);
}

// ---- dk, dv with their scores in registers ----
// mma_dkdv_kernel's sums with the scores transposed, as FlashAttention-2's backward makes them:
// each warp takes 16 of the block's MK2 keys, and for each tile of MQ query rows makes S^T =
// K Q^T and dP^T = V dO^T 16 queries at a time in its accumulator tiles, p^T and dS^T element
// by element where they lie (an element's row a key, its column a query: each column slot's
// count of visible keys made once a slab), turned in registers into the matrix_a fragments of
// dV += P^T dO and dK += dS^T Q. dK and dV, the warp's keys', stay in its fragments for the
// whole kernel, read and written element by element. The query tiles come in while the block
// computes: with two stages (where two blocks a multiprocessor still fit) the next tile's Q,
// dO and statistics are copied into the second buffers while this one's are read; with one,
// after. The products and roundings of mma_dkdv_kernel, each key's in the same order.
enum { MK2 = 64, KEY_SLABS2 = MK2 / 16 };   // keys of a block, 16 a warp; its 16-key slabs

// dS through device memory (MESHMOE_ATTN_DQ=ds, below): the dk, dv kernel writes each tile of
// dS^T it makes (MK2 keys x MQ queries, bf16, the values dK's product reads) and dq reads them
// back, where it would make S, dP and dS again. Query tile iq is the rows r0 + MQ iq .. of the
// call's rows r0 .. r1-1; it sees key tiles 0 .. ds_tiles_of(iq) - 1, stored one after another,
// after those of the query tiles before it, for each (sequence, head) in turn.
__host__ __device__ static inline int ds_tiles_of(const Geom &G, int r0, int r1, int iq) {
    int last = imin(r0 + MQ * (iq + 1), r1) - 1;
    return (keys_scanned(G, last) + MK2 - 1) / MK2;
}
__host__ __device__ static inline size_t ds_tiles_before(const Geom &G, int r0, int r1, int iq) {
    size_t n = 0;
    for (int i = 0; i < iq; i++) n += ds_tiles_of(G, r0, r1, i);
    return n;
}
// The dS^T tiles of one (sequence, head): those of all the call's query tiles.
__device__ static inline size_t ds_tiles_per_head(const Geom &G, int r0, int r1) {
    return ds_tiles_before(G, r0, r1, (r1 - r0 + MQ - 1) / MQ);
}
// Where the first dS^T tile of a query tile of head h of sequence b begins, in elements:
// before, the tiles of the head's query tiles before it; per_head, ds_tiles_per_head's.
__device__ static inline size_t ds_tile_at(const Geom &G, int b, int h, size_t per_head, size_t before) {
    return (((size_t)b * G.N + h) * per_head + before) * (MK2 * MQ);
}

struct DkdvRegs {
    bf16 *K, *V, *Q[2], *dO[2];   // (MK2, Dqk), (MK2, Dv); per stage (MQ, Dqk), (MQ, Dv)
    float *m[2], *l[2], *D[2];    // per stage (MQ): each query row's max, sum and dO . o
};
__host__ __device__ static size_t dkdv_regs_layout(const Geom &G, uintptr_t base, DkdvRegs *s, int stages) {
    Carve c = {base, 0};
    DkdvRegs f;
    f.K = c.take<bf16>(MK2 * (G.Dqk + PAD_H));
    f.V = c.take<bf16>(MK2 * (G.Dv + PAD_H));
    for (int u = 0; u < 2; u++) {
        if (u >= stages) {
            f.Q[u] = f.Q[0], f.dO[u] = f.dO[0], f.m[u] = f.m[0], f.l[u] = f.l[0], f.D[u] = f.D[0];
            continue;
        }
        f.Q[u] = c.take<bf16>(MQ * (G.Dqk + PAD_H));
        f.dO[u] = c.take<bf16>(MQ * (G.Dv + PAD_H));
        f.m[u] = c.take<float>(MQ);
        f.l[u] = c.take<float>(MQ);
        f.D[u] = c.take<float>(MQ);
    }
    if (s) *s = f;
    return c.used;
}

// The block's query tiles: tile i is rows ia(i) .. ia(i) + rows(i) - 1 of head head(i), for
// each head of kv group g the rows from the first that sees the block's keys to r1.
struct QueryTiles {
    int g, group, first, r1, per_head;
    __device__ int count() const { return per_head * group; }
    __device__ int head(int i) const { return g * group + i / per_head; }
    __device__ int ia(int i) const { return first + i % per_head * MQ; }
    __device__ int rows(int i) const { return imin(MQ, r1 - ia(i)); }
};
// Query tile i's Q and dO, and each row's m, l and D, copied into stage u (cp_async16, cp_async4).
__device__ static void query_tile_async(DkdvRegs &S, const QueryTiles &T, int i, int u, const Geom &G, const Heads &H,
                                        const float *dots, const float *stats, int b) {
    int h = T.head(i), ia = T.ia(i), nr = T.rows(i), y = threadIdx.x;
    tile_copy_async(stage_of(S.Q, u), G.Dqk + PAD_H, query_tile(H.q, G, H, b, h, ia, G.Dqk), nr, MQ, G.Dqk);
    tile_copy_async(stage_of(S.dO, u), G.Dv + PAD_H, query_tile(H.dout, G, H, b, h, ia, G.Dv), nr, MQ, G.Dv);
    if (y >= MQ) return;
    size_t r = ((size_t)b * G.N + h) * G.S + ia + (y < nr ? y : 0);
    cp_async4(stage_of(S.m, u) + y, stats + 2 * r, y < nr);
    cp_async4(stage_of(S.l, u) + y, stats + 2 * r + 1, y < nr);
    cp_async4(stage_of(S.D, u) + y, dots + r, y < nr);
}

// x = fn(k, column, x) over tile t of this warp's dK or dV (keys x0 ..), k the block's key.
template <class F> __device__ static void key_tile_apply(Acc &x, int x0, int t, F fn) {
    elems_apply(x, [&](int r, int c, float v) { return fn(x0 + r, 16 * t + c, v); });
}

// grid (Nkv, tiles of MK2 of the W keys, B), the first keys first; KT, VT: the most tiles of
// dK (Dqk / 16) and dV (Dv / 16) a warp holds; stages: 1 or 2 (dkdv_regs_layout).
// ds: NULL, or where dS^T's tiles go (ds_tile); then the query tiles are dq's, from r0 in steps
// of MQ (the first may begin before the first row that sees the block's keys: its rows
// before that row see none of them, and add zeros to dK and dV).
template <int KT, int VT>
__global__ static void mma_dkdv_regs_kernel(float *dk, float *dv, bf16 *ds, Heads H, const float *dots,
                                            const float *stats, Geom G, int r0, int r1, int stages) {
    GPU_SHARED(float, sh);
    DkdvRegs S;
    dkdv_regs_layout(G, (uintptr_t)sh, &S, stages);
    int j0 = blockIdx.y * MK2, g = blockIdx.x, b = blockIdx.z, group = G.N / G.Nkv, x0 = threadIdx.x / 32 * 16;
    int nk = imin(MK2, G.W - j0), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H, ntk = G.Dqk / 16, ntv = G.Dv / 16;
    int first = j0 + G.k0 - G.q0;   // the first row that sees key j0
    if (first < r0) first = r0;
    if (ds && first < r1) first = r0 + (first - r0) / MQ * MQ;
    QueryTiles T = {g, group, first, r1, first < r1 ? (r1 - first + MQ - 1) / MQ : 0};
    tile_copy_async(S.K, ldq, key_tile(H.k, G, b, g, j0, G.Dqk), nk, MK2, G.Dqk);
    tile_copy_async(S.V, ldv, key_tile(H.v, G, b, g, j0, G.Dv), nk, MK2, G.Dv);
    if (T.count() > 0) query_tile_async(S, T, 0, 0, G, H, dots, stats, b);
    cp_async_commit();
    KeyRows key{G, b, g, j0};
    Acc dK[KT], dV[VT];
#pragma unroll
    for (int t = 0; t < KT; t++) {
        if (t >= ntk) break;
        key_tile_apply(dK[t], x0, t, [&](int x, int c, float) { return x < nk ? dk[key(x) * G.Dqk + c] : 0.0f; });
    }
#pragma unroll
    for (int t = 0; t < VT; t++) {
        if (t >= ntv) break;
        key_tile_apply(dV[t], x0, t, [&](int x, int c, float) { return x < nk ? dv[key(x) * G.Dv + c] : 0.0f; });
    }
    // dS^T's place: the head's tiles before query tile i, summed as i goes (the tiles of a
    // head in order, from the block's first query tile), where they were summed from the
    // call's first query tile for every tile (a loop over up to S / 64 of them).
    size_t ds_per_head = ds ? ds_tiles_per_head(G, r0, r1) : 0, ds_first = 0, ds_before = 0;
    if (ds && T.count() > 0) ds_first = ds_tiles_before(G, r0, r1, (first - r0) / MQ);
    for (int i = 0; i < T.count(); i++) {
        int u = stages == 2 ? i % 2 : 0, ia = T.ia(i), nr = T.rows(i);
        if (i % T.per_head == 0) ds_before = ds_first;
        if (stages == 2 && i + 1 < T.count()) query_tile_async(S, T, i + 1, u ^ 1, G, H, dots, stats, b);
        cp_async_commit();
        cp_async_wait<1>();   // (this tile's copies: all but the group just closed)
        __syncthreads();
        const bf16 *Q = stage_of(S.Q, u), *dO = stage_of(S.dO, u);
        const float *m = stage_of(S.m, u), *l = stage_of(S.l, u), *D = stage_of(S.D, u);
        bf16 *dst = ds ? ds + ds_tile_at(G, b, T.head(i), ds_per_head, ds_before) + blockIdx.y * (MK2 * MQ) : NULL;
        if (ds) ds_before += ds_tiles_of(G, r0, r1, (ia - r0) / MQ);
#pragma unroll
        for (int c = 0; c < MQ / 16; c++) {   // 16 queries at a time
            int lim[LANE_COLS];   // the column slot's query sees keys 0 .. lim-1 of the block
            for (int k = 0; k < LANE_COLS; k++) {
                int y = 16 * c + slot_col(k);
                lim[k] = y < nr ? imin(nk, keys_scanned(G, ia + y) - j0) : 0;
            }
            Acc st, dpt;
            wmma::fill_fragment(st, 0.0f);
            wmma::fill_fragment(dpt, 0.0f);
            mma_onto_pair<wmma::row_major, wmma::col_major>(
                st, MmaOperands{S.K + x0 * ldq, ldq, 16, Q + 16 * c * ldq, ldq, 16, G.Dqk},     // S^T = K Q^T
                dpt, MmaOperands{S.V + x0 * ldv, ldv, 16, dO + 16 * c * ldv, ldv, 16, G.Dv});  // dP^T = V dO^T
            slots_apply(st, [&](int rs, int k, float s) {   // p^T
                if (x0 + slot_row(rs) >= lim[k]) return 0.0f;
                if (G.rnd.scores) s = bf16_round_dev(s);
                int y = 16 * c + slot_col(k);
                float e = expf(s - m[y]);
                if (G.rnd.probs) e = bf16_round_dev(e);
                return e / l[y];
            });
            slots_apply2(dpt, st, [&](int rs, int k, float dp, float p) {   // dS^T
                return x0 + slot_row(rs) < lim[k] ? p * (dp - D[16 * c + slot_col(k)]) : 0.0f;
            });
            RowA pa, dsa;
            acc_to_a(pa, st);
            acc_to_a(dsa, dpt);
            // dS^T for dq, the very numbers dK's product reads (keys from x0, queries from 16 c;
            // zeros where the query does not see the key)
            if (dst) a_store((uint16_t *)dst + x0 * MQ + 16 * c, MQ, dsa);
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
#pragma unroll
            for (int t = 0; t < VT; t++) {   // dV += P^T dO
                if (t >= ntv) break;
                wmma::load_matrix_sync(fb, dO + 16 * c * ldv + 16 * t, ldv);
                wmma::mma_sync(dV[t], pa, fb, dV[t]);
            }
#pragma unroll
            for (int t = 0; t < KT; t++) {   // dK += dS^T Q
                if (t >= ntk) break;
                wmma::load_matrix_sync(fb, Q + 16 * c * ldq + 16 * t, ldq);
                wmma::mma_sync(dK[t], dsa, fb, dK[t]);
            }
        }
        __syncthreads();   // (every warp done with this tile's buffers)
        if (stages == 1 && i + 1 < T.count()) query_tile_async(S, T, i + 1, 0, G, H, dots, stats, b);
        cp_async_commit();
    }
    cp_async_wait<0>();   // (a block without query tiles: K's and V's copies)
#pragma unroll
    for (int t = 0; t < KT; t++) {
        if (t >= ntk) break;
        key_tile_apply(dK[t], x0, t, [&](int x, int c, float v) {
            if (x < nk) dk[key(x) * G.Dqk + c] = v;
            return v;
        });
    }
#pragma unroll
    for (int t = 0; t < VT; t++) {
        if (t >= ntv) break;
        key_tile_apply(dV[t], x0, t, [&](int x, int c, float v) {
            if (x < nk) dv[key(x) * G.Dv + c] = v;
            return v;
        });
    }
}

// ---- dq from dS in device memory ----
// dQ = dS K with the dk, dv kernel's tiles of dS^T (MESHMOE_ATTN_DQ=ds): a product a key tile,
// without S, dP or the softmax. Each warp takes 16 of the block's MQ query rows, its dQ tiles
// in registers for the whole kernel as mma_dq_regs_kernel's; each key tile's K and dS^T come in
// while the tile before is multiplied (two buffers of each). The keys in the same order, each
// 16-key slab's products onto the sums in turn, as mma_dq_regs_kernel adds them.

struct DqDs {
    bf16 *K[2], *dS[2];   // two of (MK2, Dqk) and of (MK2, MQ): dS^T, a row a key
};
__host__ __device__ static size_t dq_ds_layout(const Geom &G, uintptr_t base, DqDs *s) {
    Carve c = {base, 0};
    DqDs f;
    for (int u = 0; u < 2; u++) {
        f.K[u] = c.take<bf16>(MK2 * (G.Dqk + PAD_H));
        f.dS[u] = c.take<bf16>(MK2 * (MQ + PAD_H));
    }
    if (s) *s = f;
    return c.used;
}
// Key tile j's K and dS^T of this block's query tile into buffers u.
__device__ static void dq_ds_tile_async(DqDs &S, int u, int j, const bf16 *dst, const Geom &G, const Heads &H, int b,
                                        int g) {
    int nk = imin(MK2, G.W - j * MK2);
    tile_copy_async(stage_of(S.K, u), G.Dqk + PAD_H, key_tile(H.k, G, b, g, j * MK2, G.Dqk), nk, MK2, G.Dqk);
    tile_copy_async(stage_of(S.dS, u), MQ + PAD_H, dst + (size_t)j * (MK2 * MQ), MK2, MK2, MQ);
}

// grid (N, tiles of MQ of the rows r0 .. r1-1, B), the last tile first; QT: the most dQ tiles
// of a warp (Dqk / 16).
template <int QT>
__global__ static void mma_dq_ds_kernel(float *dq, const bf16 *ds, Heads H, Geom G, int r0, int r1, int zero) {
    GPU_SHARED(float, sh);
    DqDs S;
    dq_ds_layout(G, (uintptr_t)sh, &S);
    int iq = heavy_first(), ia = r0 + iq * MQ, h = blockIdx.x, b = blockIdx.z, g = h / (G.N / G.Nkv);
    int nr = imin(MQ, r1 - ia), ldq = G.Dqk + PAD_H, lds = MQ + PAD_H, nt = G.Dqk / 16, y0 = threadIdx.x / 32 * 16;
    int tiles = ds_tiles_of(G, r0, r1, iq);
    const bf16 *dst = ds + ds_tile_at(G, b, h, ds_tiles_per_head(G, r0, r1), ds_tiles_before(G, r0, r1, iq));
    if (tiles > 0) dq_ds_tile_async(S, 0, 0, dst, G, H, b, g);
    cp_async_commit();
    QueryRows row{G, b, h, ia};
    Acc dQ[QT];   // this warp's rows' dq sums, tile t its columns 16 t ..
    dq_tiles_load<QT>(dQ, dq, row, G, y0, nr, zero);
    for (int j = 0; j < tiles; j++) {
        int u = j % 2;
        cp_async_wait<0>();
        __syncthreads();   // (this tile there; every warp done with the tile before, in buffers u ^ 1)
        if (j + 1 < tiles) dq_ds_tile_async(S, u ^ 1, j + 1, dst, G, H, b, g);
        cp_async_commit();
        const bf16 *K = stage_of(S.K, u), *dS = stage_of(S.dS, u);
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> a[KEY_SLABS2];
#pragma unroll
        for (int c = 0; c < KEY_SLABS2; c++)   // this warp's rows of dS, keys 16 c .. (stored as dS^T)
            wmma::load_matrix_sync(a[c], dS + 16 * c * lds + y0, lds);
        dq_add_products<QT, KEY_SLABS2>(dQ, a, K, ldq, nt);   // dQ += dS K
    }
    cp_async_wait<0>();
    dq_tiles_store<QT>(dq, dQ, row, G, y0, nr);
}

// ---- the call ----

template <int QT>
static void dq_regs_go(float *dq, Heads H, const float *dots, const float *stats, Geom G, int r0, int r1, int zero,
                       dim3 grid, size_t bytes) {
    GPU_CHECK(cudaFuncSetAttribute(mma_dq_regs_kernel<QT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    GPU_LAUNCH(mma_dq_regs_kernel<QT>, grid, MMA_THREADS, bytes)(dq, H, dots, stats, G, r0, r1, zero);
    GPU_CHECK_LAUNCH();
}
static void dq_regs_launch(float *dq, Heads H, const float *dots, const float *stats, Geom G, int r0, int r1, int zero,
                           dim3 grid) {
    size_t bytes = dq_regs_layout(G, 0, NULL);
    if (G.Dqk <= 128) dq_regs_go<128 / 16>(dq, H, dots, stats, G, r0, r1, zero, grid, bytes);
    else if (G.Dqk <= 192) dq_regs_go<192 / 16>(dq, H, dots, stats, G, r0, r1, zero, grid, bytes);   // (MLA's)
    else dq_regs_go<MMA_MAX_D / 16>(dq, H, dots, stats, G, r0, r1, zero, grid, bytes);
}

// Two stages where two blocks with them still fit a multiprocessor's shared memory (each
// block also takes 1 KiB of the system's), else one; MESHMOE_ATTN_STAGES=1 or 2 chooses (2
// where a block's shared memory allows), to compare them.
static int dkdv_stages(const Geom &G) {
    const char *want = getenv("MESHMOE_ATTN_STAGES");
    if (want && strcmp(want, "1") && strcmp(want, "2")) {
        fprintf(stderr, "meshmoe: MESHMOE_ATTN_STAGES is 1 or 2 (unset: by the shared memory), not '%s'\n", want);
        exit(1);
    }
    int dev = 0, per_sm = 0, per_block = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    GPU_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    GPU_CHECK(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    size_t two = dkdv_regs_layout(G, 0, NULL, 2);
    if (two > (size_t)per_block) return 1;
    if (want) return want[0] - '0';
    return 2 * (two + 1024) <= (size_t)per_sm ? 2 : 1;
}
template <int KT, int VT>
static void dkdv_regs_go(float *dk, float *dv, bf16 *ds, Heads H, const float *dots, const float *stats, Geom G, int r0,
                         int r1) {
    int stages = dkdv_stages(G);
    size_t bytes = dkdv_regs_layout(G, 0, NULL, stages);
    dim3 grid(G.Nkv, (G.W + MK2 - 1) / MK2, G.B);
    GPU_CHECK(cudaFuncSetAttribute(mma_dkdv_regs_kernel<KT, VT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bytes));
    GPU_LAUNCH((mma_dkdv_regs_kernel<KT, VT>), grid, MMA_THREADS, bytes)(dk, dv, ds, H, dots, stats, G, r0, r1,
                                                                         stages);
    GPU_CHECK_LAUNCH();
}
// Heads up to 128 wide (fewer registers), or MLA's 192-wide queries and keys with 128-wide
// values; 0 (not launched) for values wider than 128, whose 16 tiles of dV a warp would spill
// registers (ptxas on sm_90): the kernel through shared memory takes those. ds: as
// mma_dkdv_regs_kernel's.
static int dkdv_regs_launch(float *dk, float *dv, bf16 *ds, Heads H, const float *dots, const float *stats, Geom G,
                            int r0, int r1) {
    if (G.Dv > 128) return 0;
    if (G.Dqk <= 128) dkdv_regs_go<8, 8>(dk, dv, ds, H, dots, stats, G, r0, r1);
    else if (G.Dqk <= 192) dkdv_regs_go<12, 8>(dk, dv, ds, H, dots, stats, G, r0, r1);   // (MLA's heads: 128 + 64)
    else dkdv_regs_go<16, 8>(dk, dv, ds, H, dots, stats, G, r0, r1);
    return 1;
}

template <int QT>
static void dq_ds_go(float *dq, const bf16 *ds, Heads H, Geom G, int r0, int r1, int zero, dim3 grid) {
    size_t bytes = dq_ds_layout(G, 0, NULL);
    GPU_CHECK(cudaFuncSetAttribute(mma_dq_ds_kernel<QT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    GPU_LAUNCH(mma_dq_ds_kernel<QT>, grid, MMA_THREADS, bytes)(dq, ds, H, G, r0, r1, zero);
    GPU_CHECK_LAUNCH();
}
static void dq_ds_launch(float *dq, const bf16 *ds, Heads H, Geom G, int r0, int r1, int zero, dim3 grid) {
    if (G.Dqk <= 128) dq_ds_go<128 / 16>(dq, ds, H, G, r0, r1, zero, grid);
    else if (G.Dqk <= 192) dq_ds_go<192 / 16>(dq, ds, H, G, r0, r1, zero, grid);
    else dq_ds_go<MMA_MAX_D / 16>(dq, ds, H, G, r0, r1, zero, grid);
}

// The bytes of a call's dS^T tiles where dq reads them from memory (MESHMOE_ATTN_DQ=ds, the
// default, or unset), else 0 (=scores: dq makes S, dP and dS again). Through memory only with
// the scores in registers, values up to 128 wide (the dk, dv kernel that writes them) and at
// most DS_MOST bytes (mixtral-medium's call: 4 x 16 heads x 528 tiles of 8 KiB, 264 MiB).
enum { DS_MOST_MIB = 1024 };
static size_t ds_bytes(const Geom &G, int r0, int r1, int regs) {
    const char *how = getenv("MESHMOE_ATTN_DQ");
    if (how && strcmp(how, "ds") && strcmp(how, "scores")) {
        fprintf(stderr, "meshmoe: MESHMOE_ATTN_DQ is 'ds' (the default) or 'scores', not '%s'\n", how);
        exit(1);
    }
    if ((how && !strcmp(how, "scores")) || !regs || G.Dv > 128 || G.W <= 0 || r1 <= r0) return 0;
    size_t tiles = (size_t)G.B * G.N * ds_tiles_before(G, r0, r1, (r1 - r0 + MQ - 1) / MQ);
    size_t bytes = tiles * MK2 * MQ * sizeof(bf16);
    return bytes <= ((size_t)DS_MOST_MIB << 20) ? bytes : 0;
}

int attn_mma_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, const float *stats, Geom G, int r0, int r1, int zero_dq) {
    size_t bytes = bwd_layout(G, 0, NULL);   // (both kernels')
    if (!mma_fits(G, bytes)) return 0;
    GPU_CHECK(cudaFuncSetAttribute(mma_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    GPU_CHECK(cudaFuncSetAttribute(mma_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    // D = dO . o of each row, in a buffer of the stream's own (cudaMallocAsync, freed in stream
    // order: GPU-only and inside this call, like gpu/matmul.cu's scratch), indexed as stats.
    float *dots;
    GPU_CHECK(cudaMallocAsync((void **)&dots, sizeof(float) * ((size_t)G.B * G.N * G.S + 1), gpu_stream()));
    dim3 by_row((r1 - r0 + MMA_THREADS - 1) / MMA_THREADS, G.N, G.B);
    if (r1 > r0) {
        GPU_LAUNCH(row_dots_kernel, by_row, MMA_THREADS, 0)(dots, dout, o, G, r0, r1);
        GPU_CHECK_LAUNCH();
    }
    bf16 *base;
    Heads H = heads_make(q, dout, k, v, G, r0, r1 - r0, &base);
    dim3 rows(G.N, (r1 - r0 + MQ - 1) / MQ, G.B), keys(G.Nkv, (G.W + MK - 1) / MK, G.B);
    int regs = attn_scores_in_registers();
    size_t nds = ds_bytes(G, r0, r1, regs);
    if (nds) {   // dk, dv first, writing dS^T; then dq from it
        bf16 *ds;
        GPU_CHECK(cudaMallocAsync((void **)&ds, nds, gpu_stream()));
        dkdv_regs_launch(dk, dv, ds, H, dots, stats, G, r0, r1);
        dq_ds_launch(dq, ds, H, G, r0, r1, zero_dq, rows);
        GPU_CHECK(cudaFreeAsync(ds, gpu_stream()));
    } else if (regs) dq_regs_launch(dq, H, dots, stats, G, r0, r1, zero_dq, rows);
    else {
        GPU_LAUNCH(mma_dq_kernel, rows, MMA_THREADS, bytes)(dq, H, dots, stats, G, r0, r1, zero_dq);
        GPU_CHECK_LAUNCH();
    }
    if (!nds && G.W > 0 && !(regs && dkdv_regs_launch(dk, dv, NULL, H, dots, stats, G, r0, r1))) {
        GPU_LAUNCH(mma_dkdv_kernel, keys, MMA_THREADS, bytes)(dk, dv, H, dots, stats, G, r0, r1);
        GPU_CHECK_LAUNCH();
    }
    GPU_CHECK(cudaFreeAsync(base, gpu_stream()));
    GPU_CHECK(cudaFreeAsync(dots, gpu_stream()));
    return 1;
}

#else   // no warp matrix products in this build (HIP): the tiles take every call

int attn_mma_backward(float *, float *, float *, const float *, const float *, const float *, const float *,
                      const float *, const float *, Geom, int, int, int) {
    return 0;
}
#endif
