// gpu/attn_mma_bwd.cu: the causal attention core's backward on tensor cores
// (gpu_attention=tensor_cores; gpu/attn_mma.cu describes the kernels, gpu/attn_mma.h holds
// what the forward and backward share): dq per tile of query rows and dk, dv per tile of
// keys, each with its scores in registers where the GPU's fragment layout allows, else
// through shared memory.
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

// grid (rows r0 .. r1-1 in blocks of MMA_THREADS, N, B): dots (B,N,S) row i = dO_i . o_i, one
// in-order float32 sum, one thread a row: computed once per call, where each key tile of the
// dk, dv kernel would compute it again.
__global__ static void row_dots_kernel(float *dots, const float *dout, const float *o, Geom G, int r0, int r1) {
    int i = r0 + blockIdx.x * MMA_THREADS + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    if (i >= r1) return;
    size_t row = ((size_t)b * G.S + i) * G.N + h;
    dots[((size_t)b * G.N + h) * G.S + i] = dot_dev(dout + row * G.Dv, o + row * G.Dv, G.Dv);
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
// tiles, p and dS made element by element where they lie (elems_apply2: each element's row
// and column by the fragment layout), dS turned in registers into the matrix_a fragments of
// dQ += dS K (acc_to_a), and dQ's tiles (the warp's rows) read from and written to device
// memory element by element. The block's barriers only bracket the K and V tiles' loads.
// The same operations in the same order as mma_dq_kernel: the same results. Its shared
// memory: bwd_layout without the scores' arrays.

enum { KEY_SLABS = MK / 16 };   // a key tile's 16-key slabs


// grid (N, tiles of MQ of the rows r0 .. r1-1, B), the last tile first; QT: the most dQ tiles
// of a warp (Dqk / 16).
template <int QT>
__global__ static void mma_dq_regs_kernel(float *dq, Heads H, const float *dots, const float *stats, Geom G, int r0,
                                          int r1, int zero) {
    GPU_SHARED(float, sh);
    MmaBwd S;
    bwd_layout(G, (uintptr_t)sh, &S, 0);
    int ia = r0 + heavy_first() * MQ, h = blockIdx.x, b = blockIdx.z, g = h / (G.N / G.Nkv);
    int nr = imin(MQ, r1 - ia), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H, nt = G.Dqk / 16, y0 = threadIdx.x / 32 * 16;
    load_queries(S, G, H, dots, stats, b, h, ia, nr);
    QueryRows row{G, b, h, ia};
    Acc dQ[QT];   // this warp's rows' dq sums, tile t its columns 16 t ..
#pragma unroll
    for (int t = 0; t < QT; t++) {
        if (t >= nt) break;
        wmma::fill_fragment(dQ[t], 0.0f);
        if (!zero)
            row_tile_apply(dQ[t], y0, t, [&](int y, int c, float) { return y < nr ? dq[row(y) * G.Dqk + c] : 0.0f; });
    }
    const float *m = S.m, *l = S.l, *D = S.D;
    int kmax = keys_scanned(G, ia + nr - 1);
    for (int j0 = 0; j0 < kmax; j0 += MK) {
        int nk = imin(MK, kmax - j0);
        __syncthreads();   // (the rows' statistics written; the previous tile's products done with K and V)
        tile_copy(S.K, ldq, key_tile(H.k, G, b, g, j0, G.Dqk), nk, MK, G.Dqk);
        tile_copy(S.V, ldv, key_tile(H.v, G, b, g, j0, G.Dv), nk, MK, G.Dv);
        __syncthreads();
        RowA dS[KEY_SLABS];
#pragma unroll
        for (int c = 0; c < KEY_SLABS; c++) {   // the slab's S and dP, then p and dS where they lie
            Acc s, dp;
            wmma::fill_fragment(s, 0.0f);
            wmma::fill_fragment(dp, 0.0f);
            mma_onto_pair<wmma::row_major, wmma::col_major>(
                s, MmaOperands{S.Q + y0 * ldq, ldq, 16, S.K + 16 * c * ldq, ldq, 16, G.Dqk},          // S = Q K^T
                dp, MmaOperands{S.dO + y0 * ldv, ldv, 16, S.V + 16 * c * ldv, ldv, 16, G.Dv});      // dP = dO V^T
            elems_apply2(s, dp, [&](int r, int cc, float sc, float dpv) {
                int y = y0 + r, nv = y < nr ? imin(nk, keys_scanned(G, ia + y) - j0) : 0;
                if (16 * c + cc >= nv) return 0.0f;
                if (G.rnd.scores) sc = bf16_round_dev(sc);
                float e = expf(sc - m[y]);
                if (G.rnd.probs) e = bf16_round_dev(e);
                float p = e / l[y];
                return p * (dpv - D[y]);
            });
            acc_to_a(dS[c], s);
        }
#pragma unroll
        for (int t = 0; t < QT; t++) {   // dQ += dS K
            if (t >= nt) break;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fk;
            for (int c = 0; c < KEY_SLABS; c++) {
                wmma::load_matrix_sync(fk, S.K + 16 * c * ldq + 16 * t, ldq);
                wmma::mma_sync(dQ[t], dS[c], fk, dQ[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < QT; t++) {
        if (t >= nt) break;
        row_tile_apply(dQ[t], y0, t, [&](int y, int c, float v) {
            if (y < nr) dq[row(y) * G.Dqk + c] = v;
            return v;
        });
    }
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
// by element where they lie (an element's row a key, its column a query), turned in registers
// into the matrix_a fragments of dV += P^T dO and dK += dS^T Q. dK and dV, the warp's keys',
// stay in its fragments for the whole kernel, read and written element by element. The
// block's barriers only bracket the query tiles' loads. The products and roundings of
// mma_dkdv_kernel, each key's in the same order.
enum { MK2 = 64 };   // keys of a block, 16 a warp

// x = fn(k, column, x) over tile t of this warp's dK or dV (keys x0 ..), k the block's key.
template <class F> __device__ static void key_tile_apply(Acc &x, int x0, int t, F fn) {
    elems_apply(x, [&](int r, int c, float v) { return fn(x0 + r, 16 * t + c, v); });
}

// grid (Nkv, tiles of MK2 of the W keys, B), the first keys first; KT, VT: the most tiles of
// dK (Dqk / 16) and dV (Dv / 16) a warp holds.
template <int KT, int VT>
__global__ static void mma_dkdv_regs_kernel(float *dk, float *dv, Heads H, const float *dots, const float *stats,
                                            Geom G, int r0, int r1) {
    GPU_SHARED(float, sh);
    MmaBwd S;
    bwd_layout(G, (uintptr_t)sh, &S, 0, MK2);
    int j0 = blockIdx.y * MK2, g = blockIdx.x, b = blockIdx.z, group = G.N / G.Nkv, x0 = threadIdx.x / 32 * 16;
    int nk = imin(MK2, G.W - j0), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H, ntk = G.Dqk / 16, ntv = G.Dv / 16;
    tile_copy(S.K, ldq, key_tile(H.k, G, b, g, j0, G.Dqk), nk, MK2, G.Dqk);
    tile_copy(S.V, ldv, key_tile(H.v, G, b, g, j0, G.Dv), nk, MK2, G.Dv);
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
    int first = j0 + G.k0 - G.q0;   // the first row that sees key j0
    if (first < r0) first = r0;
    const float *m = S.m, *l = S.l, *D = S.D;
    for (int h = g * group; h < (g + 1) * group; h++)
        for (int ia = first; ia < r1; ia += MQ) {
            int nr = imin(MQ, r1 - ia);
            __syncthreads();   // (the previous tile's products have read Q and dO)
            load_queries(S, G, H, dots, stats, b, h, ia, nr);
            __syncthreads();
            // whether query y (of the tile) sees key x (of the block)
            auto sees = [&](int x, int y) { return y < nr && x < imin(nk, keys_scanned(G, ia + y) - j0); };
#pragma unroll
            for (int c = 0; c < MQ / 16; c++) {   // 16 queries at a time
                Acc st, dpt;
                wmma::fill_fragment(st, 0.0f);
                wmma::fill_fragment(dpt, 0.0f);
                mma_onto_pair<wmma::row_major, wmma::col_major>(
                    st, MmaOperands{S.K + x0 * ldq, ldq, 16, S.Q + 16 * c * ldq, ldq, 16, G.Dqk},     // S^T = K Q^T
                    dpt, MmaOperands{S.V + x0 * ldv, ldv, 16, S.dO + 16 * c * ldv, ldv, 16, G.Dv});  // dP^T = V dO^T
                elems_apply(st, [&](int r, int cc, float s) {   // p^T
                    int y = 16 * c + cc;
                    if (!sees(x0 + r, y)) return 0.0f;
                    if (G.rnd.scores) s = bf16_round_dev(s);
                    float e = expf(s - m[y]);
                    if (G.rnd.probs) e = bf16_round_dev(e);
                    return e / l[y];
                });
                elems_apply2(dpt, st, [&](int r, int cc, float dp, float p) {   // dS^T
                    int y = 16 * c + cc;
                    return sees(x0 + r, y) ? p * (dp - D[y]) : 0.0f;
                });
                RowA pa, dsa;
                acc_to_a(pa, st);
                acc_to_a(dsa, dpt);
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
#pragma unroll
                for (int t = 0; t < VT; t++) {   // dV += P^T dO
                    if (t >= ntv) break;
                    wmma::load_matrix_sync(fb, S.dO + 16 * c * ldv + 16 * t, ldv);
                    wmma::mma_sync(dV[t], pa, fb, dV[t]);
                }
#pragma unroll
                for (int t = 0; t < KT; t++) {   // dK += dS^T Q
                    if (t >= ntk) break;
                    wmma::load_matrix_sync(fb, S.Q + 16 * c * ldq + 16 * t, ldq);
                    wmma::mma_sync(dK[t], dsa, fb, dK[t]);
                }
            }
        }
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
    size_t bytes = bwd_layout(G, 0, NULL, 0);
    if (G.Dqk <= 128) dq_regs_go<128 / 16>(dq, H, dots, stats, G, r0, r1, zero, grid, bytes);
    else dq_regs_go<MMA_MAX_D / 16>(dq, H, dots, stats, G, r0, r1, zero, grid, bytes);
}

template <int KT, int VT>
static void dkdv_regs_go(float *dk, float *dv, Heads H, const float *dots, const float *stats, Geom G, int r0, int r1) {
    size_t bytes = bwd_layout(G, 0, NULL, 0, MK2);
    dim3 grid(G.Nkv, (G.W + MK2 - 1) / MK2, G.B);
    GPU_CHECK(cudaFuncSetAttribute(mma_dkdv_regs_kernel<KT, VT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bytes));
    GPU_LAUNCH((mma_dkdv_regs_kernel<KT, VT>), grid, MMA_THREADS, bytes)(dk, dv, H, dots, stats, G, r0, r1);
    GPU_CHECK_LAUNCH();
}
// Heads up to 128 wide (fewer registers), or MLA's 192-wide queries and keys with 128-wide
// values; 0 (not launched) for values wider than 128, whose 16 tiles of dV a warp would spill
// registers (ptxas on sm_90): the kernel through shared memory takes those.
static int dkdv_regs_launch(float *dk, float *dv, Heads H, const float *dots, const float *stats, Geom G, int r0,
                            int r1) {
    if (G.Dv > 128) return 0;
    if (G.Dqk <= 128) dkdv_regs_go<8, 8>(dk, dv, H, dots, stats, G, r0, r1);
    else dkdv_regs_go<16, 8>(dk, dv, H, dots, stats, G, r0, r1);
    return 1;
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
    if (regs) dq_regs_launch(dq, H, dots, stats, G, r0, r1, zero_dq, rows);
    else {
        GPU_LAUNCH(mma_dq_kernel, rows, MMA_THREADS, bytes)(dq, H, dots, stats, G, r0, r1, zero_dq);
        GPU_CHECK_LAUNCH();
    }
    if (G.W > 0 && !(regs && dkdv_regs_launch(dk, dv, H, dots, stats, G, r0, r1))) {
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
