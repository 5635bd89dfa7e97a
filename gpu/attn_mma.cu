// gpu/attn_mma.cu: the causal attention core with its products on tensor cores
// (gpu_attention=tensor_cores, dtype=bfloat16 only), flash attention's algorithm written with
// CUDA's warp matrix products (nvcuda::wmma: 16 x 16 x 16 tiles, bf16 operands, float32
// sums): the forward here, the backward in gpu/attn_mma_bwd.cu, what both use in
// gpu/attn_mma.h. A block of 4 warps takes 64 query rows (forward, dq) or 64 keys (dk, dv;
// 32 in the kernel through shared memory); each product is a set of 16 x 16 output tiles,
// each tile one warp's:
//   forward, per tile of 64 keys:  S = Q K^T; the online softmax of each row over the tile's
//                                  keys (two threads a row for the max and the exponentials,
//                                  one for l's sum in key order); O = a O + P V
//   dq, per tile of 32 keys:       S = Q K^T, dP = dO V^T; P, dS = P (dP - D); dQ += dS K
//   dk, dv, per head of the group and tile of 64 query rows: the same P and dS, transposed
//                                  (S^T = K Q^T, dP^T = V dO^T); dV += P^T dO, dK += dS^T Q
// The sums O (forward) and dQ, dK, dV (backward) stay in registers, each warp's accumulator
// tiles, for the whole kernel. The scores stay there too, as FlashAttention-2 keeps them:
// each warp its own 16 rows (or keys), the softmax, p and dS made where the elements lie and
// turned into the next product's operands in registers, by the fragment layout that
// attn_layout_holds checks on the GPU; where it does not hold (and with
// MESHMOE_ATTN_SCORES=smem, for comparison) the kernels pass the scores through shared
// memory (mma_forward_kernel, mma_dq_kernel, mma_dkdv_kernel). The block asks for what it
// needs beyond 48 KiB (for 128-wide heads: 52, 53 and 70 KiB forward, dq and dk, dv; three,
// three and two blocks a multiprocessor of an H100's 228 KiB by their registers).
//
// The numbers: q, k, v, o and dO are bf16-valued in bf16 training (docs/model.md, bf16 cast
// points 4, 6, 7, 9), so the products of q.k and dO.v are exact and only their float32 sums
// come in another order than the CPU's. The softmax keeps the CPU's rounding points (scores,
// exponentials, the output) but merges each tile of 64 keys in turn, where the CPU's dot
// product takes the row's maximum over all its keys first. The backward, as FlashAttention-2
// does, rounds p and dS to bf16 for their products, where the CPU keeps them float32. So the
// results are the CPU's bf16 results within bf16 tolerances, not its bits:
// build/test_gpu_attention measures how far on the CPU (emulated), the conformance test on a
// GPU. Calls that do not fit (a materialised mask, float32, heads not multiples of 16 or
// wider than 256, too little shared memory) go to the tiles of gpu/attn_tiles.cu.
#include "gpu/attn_mma.h"
#include <pthread.h>

extern "C" int gpu_attention_tensor_cores(void) { return GPU_HAVE_WMMA; }

#if GPU_HAVE_WMMA
// ---- forward ----

struct MmaFwd {
    bf16 *Q, *KV, *P;      // (MQ, Dqk); (MKF, Dqk) keys, then (MKF, Dv) values; (MQ, MKF): the tile's operands
    float *S;              // (MQ, MKF) scores (also the output sums' staging, tiles_load)
    float *m, *l, *a;      // (MQ) each row's max, sum and this tile's rescale
    float *pm;             // (MMA_THREADS) each thread's max over its columns of the tile
};
__host__ __device__ static size_t fwd_layout(const Geom &G, uintptr_t base, MmaFwd *s) {
    Carve c = {base, 0};
    MmaFwd f;
    f.Q = c.take<bf16>(MQ * (G.Dqk + PAD_H));
    f.KV = c.take<bf16>(MKF * ((G.Dqk > G.Dv ? G.Dqk : G.Dv) + PAD_H));   // the values over the keys once S is made
    f.P = c.take<bf16>(MQ * (MKF + PAD_H));
    f.S = c.take<float>(MQ * (MKF + PAD_F));
    f.m = c.take<float>(MQ);
    f.l = c.take<float>(MQ);
    f.a = c.take<float>(MQ);
    f.pm = c.take<float>(MMA_THREADS);
    if (s) *s = f;
    return c.used;
}

// The tile's online softmax, PER_ROW threads a row, each every PER_ROW-th column: the scores
// rounded as the CPU's and each thread's max over its columns; then the row's max, the
// rescale a of the sums so far and the exponentials (rounded as the CPU's) into P and, as
// float32, over the scores; then one thread a row adds them onto l in column order, as the
// CPU's sum does. P's columns past what a row sees are zero.
__device__ static void softmax_tile(MmaFwd S, const Geom &G, int i0, int rows, int j0, int nk) {
    int lds = MKF + PAD_F, ldp = MKF + PAD_H, r = threadIdx.x / PER_ROW, part = threadIdx.x % PER_ROW;
    int nv = r < rows ? imin(nk, keys_scanned(G, i0 + r) - j0) : 0;
    float *s = S.S + r * lds, bm = ATTN_MASK_VALUE;
    for (int c = part; c < nv; c += PER_ROW) {
        if (G.rnd.scores) s[c] = bf16_round_dev(s[c]);
        if (s[c] > bm) bm = s[c];
    }
    S.pm[threadIdx.x] = bm;
    __syncthreads();
    for (int p = 0; p < PER_ROW; p++)   // (a max: the same in any order)
        if (S.pm[r * PER_ROW + p] > bm) bm = S.pm[r * PER_ROW + p];
    float m = S.m[r], a = 1.0f;
    if (nv > 0 && bm > m) {
        a = expf(m - bm);
        m = bm;
    }
    for (int c = part; c < MKF; c += PER_ROW) {
        float e = 0.0f;
        if (c < nv) {
            e = expf(s[c] - m);
            if (G.rnd.probs) e = bf16_round_dev(e);
        }
        S.P[r * ldp + c] = __float2bfloat16(e);
        s[c] = e;
    }
    __syncthreads();
    if (part) return;
    float l = S.l[r] * a;   // (a is 1 unless the max grew: exact)
    for (int c = 0; c < nv; c++) l += s[c];
    S.m[r] = m;
    S.l[r] = l;
    S.a[r] = a;
}

// For each of this warp's tiles u of O (tile f = w + 4u, rows f / nc * 16 ..): x = fn(row, x),
// row the tile's row in the block's MQ.
template <int TILES, class F>
__device__ __forceinline__ static void sums_apply(Acc *acc, int D, F fn) {
    int w = threadIdx.x / 32, nc = D / 16, total = MQ / 16 * nc;
#pragma unroll
    for (int u = 0; u < TILES; u++) {
        int f = w + 4 * u, r0 = f / nc * 16;
        if (f >= total) break;
        rows_apply(acc[u], [&](int r, float x) { return fn(r0 + r, x); });
    }
}

// grid (N, tiles of MQ rows, B), the last tile first (heavy_first); OT: a warp's tiles of O at
// most (Dv up to 16 OT / MQ x 64).
// begin: from the empty state, else from o (the sums) and stats (a ring block's running
// state); end: o = sums / l rounded as the CPU's finish_row.
template <int OT>
__global__ static void mma_forward_kernel(float *o, float *stats, Heads H, Geom G, int begin, int end) {
    GPU_SHARED(float, sh);
    MmaFwd S;
    fwd_layout(G, (uintptr_t)sh, &S);
    int t = threadIdx.x, i0 = heavy_first() * MQ, h = blockIdx.x, b = blockIdx.z, g = h / (G.N / G.Nkv);
    int rows = imin(MQ, G.S - i0), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H;
    Acc O[OT];   // this warp's tiles of the rows' output sums
    tile_copy(S.Q, ldq, query_tile(H.q, G, H, b, h, i0, G.Dqk), rows, MQ, G.Dqk);
    tiles_load<OT>(O, S.S, o, QueryRows{G, b, h, i0}, rows, MQ, G.Dv, begin);
    if (t < MQ) {
        const float *st = stats + (((size_t)b * G.N + h) * G.S + i0 + t) * 2;
        S.m[t] = t < rows && !begin ? st[0] : ATTN_MASK_VALUE;
        S.l[t] = t < rows && !begin ? st[1] : 0.0f;
    }
    __syncthreads();
    int kmax = keys_scanned(G, i0 + rows - 1);
    for (int j0 = 0; j0 < kmax; j0 += MKF) {
        int nk = imin(MKF, kmax - j0);
        tile_copy(S.KV, ldq, key_tile(H.k, G, b, g, j0, G.Dqk), nk, MKF, G.Dqk);
        __syncthreads();
        products_abt(S.S, MKF + PAD_F, S.Q, S.KV, ldq, MQ, MKF, G.Dqk);   // S = Q K^T
        __syncthreads();
        tile_copy(S.KV, ldv, key_tile(H.v, G, b, g, j0, G.Dv), nk, MKF, G.Dv);   // (the keys are done with)
        softmax_tile(S, G, i0, rows, j0, nk);
        __syncthreads();
        const float *a = S.a;
        sums_apply<OT>(O, G.Dv, [&](int r, float x) { return x * a[r]; });
        products_onto<OT>(O, S.P, MKF + PAD_H, 0, S.KV, ldv, MQ, G.Dv, MKF);   // O += P V
        __syncthreads();
    }
    if (end) {
        const float *l = S.l;
        AttnRounding rnd = G.rnd;
        sums_apply<OT>(O, G.Dv, [&](int r, float x) {
            float num = rnd.probs ? bf16_round_dev(x) : x;
            return rnd.out ? bf16_round_dev(num / l[r]) : num / l[r];
        });
    }
    tiles_store<OT>(o, QueryRows{G, b, h, i0}, rows, MQ, G.Dv, O, S.S);
    if (t < rows) {
        float *st = stats + (((size_t)b * G.N + h) * G.S + i0 + t) * 2;
        st[0] = S.m[t];
        st[1] = S.l[t];
    }
}

// ---- the forward with its scores in registers ----
// mma_forward_kernel's arithmetic, FlashAttention-2's way: each warp takes its own 16 of the
// block's MQ query rows and keeps everything of them in its fragments: S = Q K^T for a tile of
// MKF keys (MKF / 16 accumulator tiles), the online softmax on the elements where they lie
// (the rows' maxima and sums over the four lanes that share a row, by shuffles), the
// exponentials turned into the matrix_a fragments of O = a O + P V, and O itself. The block's
// barriers only order the copies of the K and V tiles, which run under the products (below),
// and the products that read them. A row's sum of exponentials adds the parts of the four
// lanes that share the row, where mma_forward_kernel adds them in column order: the same
// numbers within a float32 rounding of the sum.

// The per-row state a thread keeps, by row slot (gpu/attn_mma.h: slots_apply): quad_max
// over the four lanes that share a row; row_add: an exponential onto the lane's part of the
// row's sum; row_total: the four parts onto the row's sum; slot_writer: whether this thread
// writes its slots' rows out (the first of the four).
__device__ static int slot_writer(void) { return threadIdx.x % 4 == 0; }
__device__ static float quad_max(float x) {
    float y = warp_shfl_xor(x, 1);
    x = y > x ? y : x;
    y = warp_shfl_xor(x, 2);
    return y > x ? y : x;
}
__device__ static void row_add(float &, float &part, float e) { part += e; }
__device__ static float row_total(float l, float part) {
    part += warp_shfl_xor(part, 1);
    return l + (part + warp_shfl_xor(part, 2));
}

struct FwdRegs {
    bf16 *Q, *K, *V;   // (MQ, Dqk), (MKF, Dqk), (MKF, Dv)
};
__host__ __device__ static size_t fwd_regs_layout(const Geom &G, uintptr_t base, FwdRegs *s) {
    Carve c = {base, 0};
    FwdRegs f;
    f.Q = c.take<bf16>(MQ * (G.Dqk + PAD_H));
    f.K = c.take<bf16>(MKF * (G.Dqk + PAD_H));
    f.V = c.take<bf16>(MKF * (G.Dv + PAD_H));
    if (s) *s = f;
    return c.used;
}

// The tile's online softmax on this warp's scores s (MKF / 16 tiles of its rows), m, l, a
// per row slot: the visible scores rounded as the CPU's, the rows' new maxima and rescales a
// (l rescaled), then the exponentials (rounded as the CPU's; 0 where a row does not see a
// key) over the scores and added onto l. Each slot's count of visible keys once a tile.
__device__ static void softmax_regs(Acc *s, float *m, float *l, float *a, const Geom &G, int i0, int y0, int rows,
                                    int j0, int nk) {
    int nv[LANE_ROWS];   // the row's keys of this tile: columns 0 .. nv-1
    float pm[LANE_ROWS], part[LANE_ROWS];
    for (int q = 0; q < LANE_ROWS; q++) {
        int y = y0 + slot_row(q);
        nv[q] = y < rows ? imin(nk, keys_scanned(G, i0 + y) - j0) : 0;
        pm[q] = ATTN_MASK_VALUE;
    }
#pragma unroll
    for (int c = 0; c < MKF / 16; c++)
        slots_apply(s[c], [&](int q, int cs, float x) {
            if (16 * c + slot_col(cs) >= nv[q]) return x;
            if (G.rnd.scores) x = bf16_round_dev(x);
            if (x > pm[q]) pm[q] = x;
            return x;
        });
    for (int q = 0; q < LANE_ROWS; q++) {
        float bm = quad_max(pm[q]);
        a[q] = 1.0f;
        if (bm > m[q]) {
            a[q] = expf(m[q] - bm);
            m[q] = bm;
        }
        l[q] *= a[q];   // (a is 1 unless the max grew: exact)
        part[q] = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < MKF / 16; c++)
        slots_apply(s[c], [&](int q, int cs, float x) {
            if (16 * c + slot_col(cs) >= nv[q]) return 0.0f;
            float e = expf(x - m[q]);
            if (G.rnd.probs) e = bf16_round_dev(e);
            row_add(l[q], part[q], e);
            return e;
        });
    for (int q = 0; q < LANE_ROWS; q++) l[q] = row_total(l[q], part[q]);
}

// grid (N, tiles of MQ rows, B), the last tile first; OT: the most tiles of O a warp holds (Dv / 16).
// The tiles of K and V come in while the block computes, as FlashAttention-2 schedules them
// (one buffer each): V of a tile is copied while its scores are made, K of the next tile while
// its P V is; each product waits only for its own operand.
template <int OT>
__global__ static void mma_forward_regs_kernel(float *o, float *stats, Heads H, Geom G, int begin, int end) {
    GPU_SHARED(float, sh);
    FwdRegs S;
    fwd_regs_layout(G, (uintptr_t)sh, &S);
    int i0 = heavy_first() * MQ, h = blockIdx.x, b = blockIdx.z, g = h / (G.N / G.Nkv), y0 = threadIdx.x / 32 * 16;
    int rows = imin(MQ, G.S - i0), ldq = G.Dqk + PAD_H, ldv = G.Dv + PAD_H, nt = G.Dv / 16;
    int kmax = keys_scanned(G, i0 + rows - 1);
    tile_copy_async(S.Q, ldq, query_tile(H.q, G, H, b, h, i0, G.Dqk), rows, MQ, G.Dqk);
    if (kmax > 0) tile_copy_async(S.K, ldq, key_tile(H.k, G, b, g, 0, G.Dqk), imin(MKF, kmax), MKF, G.Dqk);
    cp_async_commit();
    QueryRows row{G, b, h, i0};
    float *st = stats + (((size_t)b * G.N + h) * G.S + i0) * 2;   // (the block's rows' m, l pairs)
    float m[LANE_ROWS], l[LANE_ROWS], a[LANE_ROWS];
    for (int q = 0; q < LANE_ROWS; q++) {
        int y = y0 + slot_row(q);
        m[q] = y < rows && !begin ? st[2 * y] : ATTN_MASK_VALUE;
        l[q] = y < rows && !begin ? st[2 * y + 1] : 0.0f;
    }
    Acc O[OT];   // this warp's rows' output sums, tile t its columns 16 t ..
#pragma unroll
    for (int t = 0; t < OT; t++) {
        if (t >= nt) break;
        row_tile_apply(O[t], y0, t,
                       [&](int y, int c, float) { return y < rows && !begin ? o[row(y) * G.Dv + c] : 0.0f; });
    }
    for (int j0 = 0; j0 < kmax; j0 += MKF) {
        int nk = imin(MKF, kmax - j0);
        tile_copy_async(S.V, ldv, key_tile(H.v, G, b, g, j0, G.Dv), nk, MKF, G.Dv);   // (V free: see below)
        cp_async_commit();
        cp_async_wait<1>();   // (Q and this tile's K: all but V's group)
        __syncthreads();
        Acc s[MKF / 16];
        RowA p[MKF / 16];
#pragma unroll
        for (int c = 0; c < MKF / 16; c++) wmma::fill_fragment(s[c], 0.0f);
        mma_onto_each<MKF / 16, wmma::row_major, wmma::col_major>(s, S.Q + y0 * ldq, ldq, 16, S.K, ldq, 16, 16 * ldq,
                                                                  G.Dqk);   // S = Q K^T, 16 keys a fragment
        __syncthreads();   // (every warp done with K)
        if (j0 + MKF < kmax)
            tile_copy_async(S.K, ldq, key_tile(H.k, G, b, g, j0 + MKF, G.Dqk), imin(MKF, kmax - j0 - MKF), MKF, G.Dqk);
        cp_async_commit();
        softmax_regs(s, m, l, a, G, i0, y0, rows, j0, nk);
#pragma unroll
        for (int c = 0; c < MKF / 16; c++) acc_to_a(p[c], s[c]);
        cp_async_wait<1>();   // (V: all but the next K's group)
        __syncthreads();
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fv;
#pragma unroll
        for (int t = 0; t < OT; t++) {   // O = a O + P V
            if (t >= nt) break;
            slots_apply(O[t], [&](int q, int, float x) { return x * a[q]; });
            for (int c = 0; c < MKF / 16; c++) {
                wmma::load_matrix_sync(fv, S.V + 16 * c * ldv + 16 * t, ldv);
                wmma::mma_sync(O[t], p[c], fv, O[t]);
            }
        }
        __syncthreads();   // (every warp done with V, which the next tile's copy overwrites)
    }
    cp_async_wait<0>();   // (a block without keys: Q's copy)
    AttnRounding rnd = G.rnd;
#pragma unroll
    for (int t = 0; t < OT; t++) {
        if (t >= nt) break;
        if (end)
            slots_apply(O[t], [&](int q, int, float x) {
                float num = rnd.probs ? bf16_round_dev(x) : x;
                return rnd.out ? bf16_round_dev(num / l[q]) : num / l[q];
            });
        row_tile_apply(O[t], y0, t, [&](int y, int c, float x) {
            if (y < rows) o[row(y) * G.Dv + c] = x;
            return x;
        });
    }
    for (int q = 0; q < LANE_ROWS; q++) {
        int y = y0 + slot_row(q);
        if (y < rows && slot_writer()) {
            st[2 * y] = m[q];
            st[2 * y + 1] = l[q];
        }
    }
}

// The fragment layouts above, checked on one warp: tiles of known values (element (r, c) =
// 16 r + c) loaded into an accumulator and a matrix_a fragment, each element's value against
// its row (bad[0]) and its row and column (bad[1]).
__global__ static void frag_layout_kernel(int *bad) {
    alignas(32) __shared__ float tile[256];   // (a warp matrix load's 32 bytes)
    alignas(32) __shared__ bf16 tile_b[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        tile[i] = (float)i;
        tile_b[i] = __float2bfloat16((float)i);   // (integers up to 256: exact in bf16)
    }
    __syncthreads();
    Acc f;
    wmma::load_matrix_sync(f, tile, 16, wmma::mem_row_major);
    int rows = 0, cells = 0;
    elems_apply(f, [&](int r, int c, float x) {
        rows += (int)x / 16 != r;
        cells += x != (float)(16 * r + c);
        return x;
    });
    RowA a;
    wmma::load_matrix_sync(a, tile_b, 16);
    cells += a.num_elements != f.num_elements;
    for (int e = 0; e < a.num_elements; e++) cells += __bfloat162float(a.x[e]) != (float)(16 * acc_row(e) + acc_col(e));
    if (rows) atomicAdd(&bad[0], rows);
    if (cells) atomicAdd(&bad[1], cells);
}

// Whether the layouts hold on this GPU (asked once per process, by the first device thread to
// get here; a second GPU is the same kind): held[0] the accumulator's rows (the forward),
// held[1] its columns and matrix_a's too (dq with its scores in registers).
static pthread_mutex_t layout_lock = PTHREAD_MUTEX_INITIALIZER;
static int layout_held[2] = {-1, -1};
static void frag_layout_check(void) {
    int *bad, found[2] = {0, 0};
    GPU_CHECK(cudaMalloc((void **)&bad, sizeof found));
    GPU_CHECK(cudaMemsetAsync(bad, 0, sizeof found, gpu_stream()));
    GPU_LAUNCH(frag_layout_kernel, 1, 32, 0)(bad);
    GPU_CHECK_LAUNCH();
    GPU_CHECK(cudaMemcpyAsync(found, bad, sizeof found, cudaMemcpyDeviceToHost, gpu_stream()));
    GPU_CHECK(cudaStreamSynchronize(gpu_stream()));   // (the thread's stream does not wait for the legacy one)
    GPU_CHECK(cudaFree(bad));
    if (found[0])
        fprintf(stderr, "meshmoe: gpu_attention=tensor_cores: this GPU's accumulator layout is not the one "
                        "gpu/attn_mma.cu assumes (%d elements); the forward runs on tiles\n", found[0]);
    else if (found[1])
        fprintf(stderr, "meshmoe: gpu_attention=tensor_cores: this GPU's fragment columns are not the ones "
                        "gpu/attn_mma.cu assumes (%d elements); dq passes its scores through shared memory\n",
                found[1]);
    layout_held[0] = found[0] == 0;
    layout_held[1] = found[0] == 0 && found[1] == 0;
}
int attn_layout_holds(int which) {
    pthread_mutex_lock(&layout_lock);
    if (layout_held[0] < 0) frag_layout_check();
    int held = layout_held[which];
    pthread_mutex_unlock(&layout_lock);
    return held;
}
static int acc_rows_hold(void) { return attn_layout_holds(0); }

int attn_scores_in_registers(void) {
    const char *how = getenv("MESHMOE_ATTN_SCORES");
    if (how && strcmp(how, "registers") && strcmp(how, "smem")) {
        fprintf(stderr, "meshmoe: MESHMOE_ATTN_SCORES is 'registers' (the default) or 'smem', not '%s'\n", how);
        exit(1);
    }
    return !(how && !strcmp(how, "smem")) && attn_layout_holds(1);
}

// ---- the call ----

// The forward with OT tiles of O a warp (fewer registers for heads up to 128 wide).
template <int OT>
static void forward_launch(float *o, float *stats, Heads H, Geom G, int begin, int end, size_t bytes) {
    GPU_CHECK(cudaFuncSetAttribute(mma_forward_kernel<OT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    dim3 grid(G.N, (G.S + MQ - 1) / MQ, G.B);
    GPU_LAUNCH(mma_forward_kernel<OT>, grid, MMA_THREADS, bytes)(o, stats, H, G, begin, end);
    GPU_CHECK_LAUNCH();
}

// The forward with its scores in registers, OT tiles of O a warp.
template <int OT>
static void forward_regs_launch(float *o, float *stats, Heads H, Geom G, int begin, int end) {
    size_t bytes = fwd_regs_layout(G, 0, NULL);
    GPU_CHECK(cudaFuncSetAttribute(mma_forward_regs_kernel<OT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bytes));
    dim3 grid(G.N, (G.S + MQ - 1) / MQ, G.B);
    GPU_LAUNCH(mma_forward_regs_kernel<OT>, grid, MMA_THREADS, bytes)(o, stats, H, G, begin, end);
    GPU_CHECK_LAUNCH();
}

int attn_mma_forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int begin,
                     int end) {
    size_t bytes = fwd_layout(G, 0, NULL);
    if (!mma_fits(G, bytes) || !acc_rows_hold()) return 0;
    bf16 *base;
    Heads H = heads_make(q, NULL, k, v, G, 0, G.S, &base);
    // (values up to 128 wide in registers: wider ones would spill them, ptxas on sm_90)
    if (G.Dv <= 128 && attn_scores_in_registers()) forward_regs_launch<128 / 16>(o, stats, H, G, begin, end);
    else if (G.Dv <= 128) forward_launch<O_TILES / 2>(o, stats, H, G, begin, end, bytes);
    else forward_launch<O_TILES>(o, stats, H, G, begin, end, bytes);
    GPU_CHECK(cudaFreeAsync(base, gpu_stream()));
    return 1;
}

#else   // no warp matrix products in this build (HIP): the tiles take every call

int attn_mma_forward(float *, float *, const float *, const float *, const float *, Geom, int, int) { return 0; }
#endif
