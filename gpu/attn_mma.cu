// gpu/attn_mma.cu: the causal attention core with its products on tensor cores
// (gpu_attention=tensor_cores, dtype=bfloat16 only), flash attention's algorithm written with
// CUDA's warp matrix products (nvcuda::wmma: 16 x 16 x 16 tiles, bf16 operands, float32
// sums). A block of 4 warps takes 64 query rows (forward, dq) or 32 keys (dk, dv); each
// product is a set of 16 x 16 output tiles, each tile one warp's:
//   forward, per tile of 64 keys:  S = Q K^T; the online softmax of each row over the tile's
//                                  keys (two threads a row for the max and the exponentials,
//                                  one for l's sum in key order); O = a O + P V
//   dq, per tile of 32 keys:       S = Q K^T, dP = dO V^T; P, dS = P (dP - D) (two threads a
//                                  row); dQ += dS K
//   dk, dv, per head of the group and tile of 64 query rows: the same S, dP, P, dS;
//                                  dV += P^T dO, dK += dS^T Q
// Shared memory holds the bf16 operands and the float32 scores; the sums O (forward) and dQ,
// dK, dV (backward) stay in registers, each warp's accumulator tiles, for the whole kernel
// (the forward rescales O's rows between key tiles in registers, by the fragment layout that
// acc_rows_hold checks on the GPU). The block asks for what it needs beyond 48 KiB (for
// 128-wide heads: 61 KiB forward, three blocks a multiprocessor of an H100's 228 KiB, and
// 80 KiB backward, two; for MLA's 192: 77 and 92 KiB, two).
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
#include "gpu/gpu.h"
#include "gpu/attention.h"
#include "gpu/backend.h"
#include <pthread.h>
#include <stdlib.h>   // getenv
#include <string.h>

extern "C" int gpu_attention_tensor_cores(void) { return GPU_HAVE_WMMA; }

#if GPU_HAVE_WMMA
using namespace nvcuda;
typedef __nv_bfloat16 bf16;

enum {
    MQ = 64,              // query rows of a tile
    MK = 32,              // keys of a tile in the backward
    MKF = 64,             // keys of a tile in the forward (fewer trips of O through shared memory)
    MMA_THREADS = 128,    // 4 warps
    MMA_MAX_D = 256,      // the widest head
    PAD_H = 8,            // bf16 rows padded by 8 elements, float32 rows by 4: fewer bank conflicts,
    PAD_F = 4,            // and every 16-row tile still starts on 32 bytes, as wmma wants
    PER_ROW = MMA_THREADS / MQ,   // threads a query row in the softmax's element-wise work
    DQ_TILES = MQ / 16 * (MMA_MAX_D / 16) / 4,   // a warp's tiles of dQ (MQ x Dqk) at most
    DKV_TILES = MK / 16 * (MMA_MAX_D / 16) / 4,  // of dK (MK x Dqk), and of dV (MK x Dv)
    O_TILES = MQ / 16 * (MMA_MAX_D / 16) / 4,    // of the forward's output sums O (MQ x Dv)
};
static_assert(MMA_THREADS % MQ == 0, "the softmax gives each query row the same number of threads");

// Shared memory carved into arrays, each starting on 128 bytes; with base 0 it only counts.
struct Carve {
    uintptr_t base;
    size_t used;
    template <class T> __host__ __device__ T *take(size_t n) {
        T *p = (T *)(base + used);
        used += (n * sizeof(T) + 127) / 128 * 128;
        return p;
    }
};

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;   // a warp's 16 x 16 float32 sums

// fc += a b over kdim: a (16 x kdim) and b (kdim x 16) bf16 in shared memory, each in the
// layout LA, LB with leading dimension lda, ldb; astep, bstep: how far a and b move for each
// 16 of kdim. One warp's product, onto sums held in registers.
template <class LA, class LB>
__device__ __forceinline__ static void mma_onto(Acc &fc, const bf16 *a, int lda, int astep, const bf16 *b, int ldb,
                                                int bstep, int kdim) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
    for (int kk = 0; kk < kdim / 16; kk++) {
        wmma::load_matrix_sync(fa, a + kk * astep, lda);
        wmma::load_matrix_sync(fb, b + kk * bstep, ldb);
        wmma::mma_sync(fc, fa, fb, fc);
    }
}
// c (16 x 16 floats, row stride ldc) = a b over kdim, the operands as mma_onto's.
template <class LA, class LB>
__device__ static void mma_tile(float *c, int ldc, const bf16 *a, int lda, int astep, const bf16 *b, int ldb,
                                int bstep, int kdim) {
    Acc fc;
    wmma::fill_fragment(fc, 0.0f);
    mma_onto<LA, LB>(fc, a, lda, astep, b, ldb, bstep, kdim);
    wmma::store_matrix_sync(c, fc, ldc, wmma::mem_row_major);
}

// Where row y of a tile starts in its array, in rows of D floats: query rows i0 + y of head h
// in (B,S,N,D), or keys j0 + y of kv head g in (P,B,S,Nkv,D).
struct QueryRows {
    const Geom &G;
    int b, h, i0;
    __device__ size_t operator()(int y) const { return ((size_t)b * G.S + i0 + y) * G.N + h; }
};
struct KeyRows {
    const Geom &G;
    int b, g, j0;
    __device__ size_t operator()(int y) const { return key_row(G, b, j0 + y) * G.Nkv + g; }
};

// ---- the operands in bf16, once per call ----
// Each call first writes its operands q, k, v (and the backward's dO) as bf16 into buffers of
// the stream's own (cudaMallocAsync, freed in stream order: GPU-only and inside the call, like
// gpu/matmul.cu's scratch), head by head, so that a tile of rows is one contiguous run of bf16
// values, which the kernels copy into shared memory 16 bytes at a time:
//   queries (q, dO): (B, N, rows, D), the call's query rows lo .. lo+rows-1
//   keys (k, v):     (B, Nkv, W, D)
// (Tiles of the float32 arrays, converted as they came, cost each tile its index arithmetic
// and twice the bytes, for every query tile that reads a key tile again.)
struct Heads {
    const bf16 *q, *dout, *k, *v;
    int lo, rows;
};
__device__ static const bf16 *query_tile(const bf16 *x, const Geom &G, const Heads &H, int b, int h, int i, int D) {
    return x + (((size_t)b * G.N + h) * H.rows + (i - H.lo)) * D;
}
__device__ static const bf16 *key_tile(const bf16 *x, const Geom &G, int b, int g, int j, int D) {
    return x + (((size_t)b * G.Nkv + g) * G.W + j) * D;
}

// dst (B, heads, n, D) = src's rows as bf16 (round to nearest even, as __float2bfloat16
// everywhere): query rows lo + i of head hh (keys = 0), or keys i of kv head hh (keys = 1);
// 8 values a thread (D a multiple of 16).
__global__ static void heads_bf16_kernel(bf16 *dst, const float *src, Geom G, int keys, int lo, int n, int D) {
    int heads = keys ? G.Nkv : G.N, per = D / 8;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)G.B * heads * n * per;
    if (t >= total) return;
    size_t r = t / per;
    int c = (int)(t % per) * 8, i = (int)(r % n), hh = (int)(r / n % heads), b = (int)(r / n / heads);
    size_t row = keys ? key_row(G, b, i) * G.Nkv + hh : ((size_t)b * G.S + lo + i) * G.N + hh;
    const float *x = src + row * D + c;
    bf16 *y = dst + r * D + c;
    for (int u = 0; u < 8; u++) y[u] = __float2bfloat16(x[u]);
}

// 16 bytes from device or shared memory, and back (the emulation copies: its bf16 is a struct).
#if defined(GPU_EMULATE)
__device__ static uint4 load16(const void *p) { uint4 v; memcpy(&v, p, 16); return v; }
__device__ static void store16(void *p, uint4 v) { memcpy(p, &v, 16); }
#else
__device__ static uint4 load16(const void *p) { return *(const uint4 *)p; }
__device__ static void store16(void *p, uint4 v) { *(uint4 *)p = v; }
#endif

// Rows 0 .. n-1 of a tile (rows of D bf16 values, one after another from x) into xs (nmax rows,
// stride ld), rows past n as zeros. Each thread issues LOADS 16-byte loads before it stores the
// first: a load then a store would wait out every load's latency in turn.
enum { LOADS = 8 };
__device__ static void tile_copy(bf16 *xs, int ld, const bf16 *x, int n, int nmax, int D) {
    int per = D / 8, total = nmax * per;
    for (int t0 = threadIdx.x; t0 < total; t0 += LOADS * MMA_THREADS) {
        uint4 f[LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int t = t0 + u * MMA_THREADS;
            f[u] = t < total && t / per < n ? load16(x + (size_t)t * 8) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int t = t0 + u * MMA_THREADS;
            if (t >= total) break;
            store16(xs + t / per * ld + t % per * 8, f[u]);
        }
    }
}

// The call's operands as Heads, in one buffer of the stream's own (*base, for cudaFreeAsync):
// q and dout (NULL: none) for the query rows lo .. lo+rows-1, k and v for the W keys.
static Heads heads_make(const float *q, const float *dout, const float *k, const float *v, const Geom &G, int lo,
                        int rows, bf16 **base) {
    size_t nq = (size_t)G.B * G.N * rows, nk = (size_t)G.B * G.Nkv * G.W;
    size_t sizes[4] = {nq * G.Dqk, dout ? nq * G.Dv : 0, nk * G.Dqk, nk * G.Dv}, at[4], total = 0;
    for (int x = 0; x < 4; x++) {
        at[x] = total;
        total += (sizes[x] + 127) / 128 * 128;   // each array on 256 bytes
    }
    GPU_CHECK(cudaMallocAsync((void **)base, sizeof(bf16) * (total + 1), gpu_stream()));
    const float *src[4] = {q, dout, k, v};
    int keys[4] = {0, 0, 1, 1}, D[4] = {G.Dqk, G.Dv, G.Dqk, G.Dv}, n[4] = {rows, rows, G.W, G.W};
    for (int x = 0; x < 4; x++) {
        if (!sizes[x]) continue;
        GPU_LAUNCH(heads_bf16_kernel, blocks_for(sizes[x] / 8, GPU_THREADS), GPU_THREADS, 0)(
            *base + at[x], src[x], G, keys[x], lo, n[x], D[x]);
        GPU_CHECK_LAUNCH();
    }
    Heads H = {*base + at[0], dout ? *base + at[1] : NULL, *base + at[2], *base + at[3], lo, rows};
    return H;
}

// S (rows x cols, 16-multiples) = A B^T: A (rows, kdim) and B (cols, kdim) bf16 row-major;
// the 16 x 16 tiles shared out over the 4 warps.
__device__ static void products_abt(float *S, int lds, const bf16 *A, const bf16 *Bm, int ld, int rows, int cols,
                                    int kdim) {
    int w = threadIdx.x / 32, nc = cols / 16;
    for (int f = w; f < rows / 16 * nc; f += MMA_THREADS / 32)
        mma_tile<wmma::row_major, wmma::col_major>(S + f / nc * 16 * lds + f % nc * 16, lds, A + f / nc * 16 * ld,
                                                   ld, 16, Bm + f % nc * 16 * ld, ld, 16, kdim);
}
// acc[u] += A B for the tiles this warp holds (see below): A (rows, kdim) row-major
// (transposed = 0) or A^T stored (kdim, rows) (transposed = 1), B (kdim, cols) row-major, all
// bf16 in shared memory.
template <int TILES>
__device__ __forceinline__ static void products_onto(Acc *acc, const bf16 *A, int lda, int transposed,
                                                     const bf16 *Bm, int ldb, int rows, int cols, int kdim) {
    int w = threadIdx.x / 32, nc = cols / 16, total = rows / 16 * nc;
#pragma unroll
    for (int u = 0; u < TILES; u++) {
        int f = w + 4 * u;
        if (f >= total) break;
        const bf16 *b = Bm + f % nc * 16;
        if (transposed)
            mma_onto<wmma::col_major, wmma::row_major>(acc[u], A + f / nc * 16, lda, 16 * lda, b, ldb, 16 * ldb, kdim);
        else
            mma_onto<wmma::row_major, wmma::row_major>(acc[u], A + f / nc * 16 * lda, lda, 16, b, ldb, 16 * ldb, kdim);
    }
}

// The backward's sums (dQ; dK, dV) stay in registers for the whole kernel, as each warp's
// accumulator tiles: tile u of warp w is output tile f = w + 4u of the (rows/16) x (cols/16)
// tiles in row-major order (products_onto's sharing). They come in from device memory and go
// back through a 16 x 16 staging area per warp in shared memory (stage: 4 x 256 floats);
// every thread takes the same barriers, whatever tiles its warp has. TILES: the most a warp
// can hold (DQ_TILES, DKV_TILES), the size of acc.

// acc[u] = rows 0 .. rows-1 of the sums of x (row y at row(y), D floats each; cols = D), rows
// past n as zeros; all zeros when zero.
template <int TILES, class Rows>
__device__ __forceinline__ static void tiles_load(Acc *acc, float *stage, const float *x, Rows row, int n, int rows,
                                                  int D, int zero) {
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, nc = D / 16, total = rows / 16 * nc;
    float *st = stage + w * 256;
#pragma unroll
    for (int u = 0; u < TILES; u++) {
        int f = w + 4 * u, r0 = f / nc * 16, c0 = f % nc * 16;
        if (4 * u >= total) break;   // (the same for every thread)
        for (int e = lane; e < 256 && f < total; e += 32) {
            int y = r0 + e / 16;
            st[e] = !zero && y < n ? x[row(y) * D + c0 + e % 16] : 0.0f;
        }
        __syncthreads();
        if (f < total) wmma::load_matrix_sync(acc[u], st, 16, wmma::mem_row_major);
        __syncthreads();
    }
}
// The sums acc back into rows 0 .. n-1 of x (as tiles_load's).
template <int TILES, class Rows>
__device__ __forceinline__ static void tiles_store(float *x, Rows row, int n, int rows, int D, const Acc *acc,
                                                   float *stage) {
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, nc = D / 16, total = rows / 16 * nc;
    float *st = stage + w * 256;
#pragma unroll
    for (int u = 0; u < TILES; u++) {
        int f = w + 4 * u, r0 = f / nc * 16, c0 = f % nc * 16;
        if (4 * u >= total) break;
        if (f < total) wmma::store_matrix_sync(st, acc[u], 16, wmma::mem_row_major);
        __syncthreads();
        for (int e = lane; e < 256 && f < total; e += 32) {
            int y = r0 + e / 16;
            if (y < n) x[row(y) * D + c0 + e % 16] = st[e];
        }
        __syncthreads();
    }
}

// The grids put a tile's heads side by side and take the tiles heaviest first: the GPU starts
// blocks in the grid's order (x fastest), and a causal query tile's work grows with its
// index, so the last blocks to start, which the launch waits for, are the lightest ones.
// The query tile of this block: the grid's y from the last.
__device__ static int heavy_first(void) { return (int)(gridDim.y - 1 - blockIdx.y); }

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

// The output's sums stay in registers, each warp's accumulator tiles of O (MQ x Dv) as
// products_onto shares them out, for the whole kernel, as the backward keeps dQ, dK, dV.
// Rescaling a row between key tiles, and finishing it, needs each fragment element's row,
// which wmma does not document: on sm_80 and sm_90 element e of lane L of an accumulator
// sits in row L / 4 + 8 ((e / 2) % 2) and column 2 (L % 4) + e % 2 + 8 (e / 4), two of
// mma.sync's 16 x 8 sums side by side; and element e of a row-major matrix_a fragment (bf16,
// 16 x 16 x 16) sits at the same row and column (mma.sync's m16n8k16 operand A).
// frag_layout_check tests both once per process on the GPU: where the rows do not hold, the
// forward goes to the tiles (gpu/attn_tiles.cu); where the columns and matrix_a do not, dq
// goes to the kernel that passes its scores through shared memory.
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> RowA;
#if defined(GPU_EMULATE)
// (the emulation's fragment is the whole tile, held by the warp's first thread: element i is
// at row i / 16, column i % 16, in every kind of fragment)
template <class F> __device__ static void elems_apply(Acc &f, F fn) {
    if (threadIdx.x % WARP_SIZE) return;
    for (int i = 0; i < 256; i++) f.x[i] = fn(i / 16, i % 16, f.x[i]);
}
// d = fn(r, c, d, x), element by element over two accumulator tiles.
template <class F> __device__ static void elems_apply2(Acc &d, const Acc &x, F fn) {
    if (threadIdx.x % WARP_SIZE) return;
    for (int i = 0; i < 256; i++) d.x[i] = fn(i / 16, i % 16, d.x[i], x.x[i]);
}
// a = c rounded to bf16, element by element.
__device__ static void acc_to_a(RowA &a, const Acc &c) {
    if (threadIdx.x % WARP_SIZE) return;
    for (int i = 0; i < 256; i++) a.x[i] = __bfloat162float(__float2bfloat16(c.x[i]));
}
#else
__device__ static int acc_row(int e) { return threadIdx.x % 32 / 4 + 8 * (e / 2 % 2); }
__device__ static int acc_col(int e) { return threadIdx.x % 4 * 2 + e % 2 + 8 * (e / 4); }
template <class F> __device__ static void elems_apply(Acc &f, F fn) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = fn(acc_row(e), acc_col(e), f.x[e]);
}
template <class F> __device__ static void elems_apply2(Acc &d, const Acc &x, F fn) {
    for (int e = 0; e < d.num_elements; e++) d.x[e] = fn(acc_row(e), acc_col(e), d.x[e], x.x[e]);
}
__device__ static void acc_to_a(RowA &a, const Acc &c) {
    for (int e = 0; e < a.num_elements; e++) a.x[e] = __float2bfloat16(c.x[e]);
}
#endif
template <class F> __device__ static void rows_apply(Acc &f, F fn) {
    elems_apply(f, [&](int r, int, float x) { return fn(r, x); });
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

// The fragment layouts above, checked on one warp: tiles of known values (element (r, c) =
// 16 r + c) loaded into an accumulator and a matrix_a fragment, each element's value against
// its row (bad[0]) and its row and column (bad[1]).
__global__ static void frag_layout_kernel(int *bad) {
    __shared__ float tile[256];
    __shared__ bf16 tile_b[256];
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
#if !defined(GPU_EMULATE)   // (the emulation's fragments hold their tile in order)
    RowA a;
    wmma::load_matrix_sync(a, tile_b, 16);
    cells += a.num_elements != f.num_elements;
    for (int e = 0; e < a.num_elements; e++) cells += __bfloat162float(a.x[e]) != (float)(16 * acc_row(e) + acc_col(e));
#endif
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
static int layout_holds(int which) {
    pthread_mutex_lock(&layout_lock);
    if (layout_held[0] < 0) frag_layout_check();
    int held = layout_held[which];
    pthread_mutex_unlock(&layout_lock);
    return held;
}
static int acc_rows_hold(void) { return layout_holds(0); }

// ---- backward ----

struct MmaBwd {
    bf16 *Q, *dO, *K, *V, *P, *dS;   // (MQ, Dqk), (MQ, Dv), (MK, Dqk), (MK, Dv), (MQ, MK) x 2
    float *S, *dP;                   // (MQ, MK): scores, dO V^T (S also the sums' staging, tiles_load)
    float *m, *l, *D;                // (MQ): each query row's max, sum and dO . o
};
// scores 0: without P, dS, S and dP (dq with its scores in registers).
__host__ __device__ static size_t bwd_layout(const Geom &G, uintptr_t base, MmaBwd *s, int scores = 1) {
    Carve c = {base, 0};
    MmaBwd f = {};
    f.Q = c.take<bf16>(MQ * (G.Dqk + PAD_H));
    f.dO = c.take<bf16>(MQ * (G.Dv + PAD_H));
    f.K = c.take<bf16>(MK * (G.Dqk + PAD_H));
    f.V = c.take<bf16>(MK * (G.Dv + PAD_H));
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

// dQ's tile t of this warp's rows (y0 ..) and x: x = fn(y, column, x) for its elements, y the
// block's row.
template <class F> __device__ static void dq_tile_apply(Acc &x, int y0, int t, F fn) {
    elems_apply(x, [&](int r, int c, float v) { return fn(y0 + r, 16 * t + c, v); });
}

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
            dq_tile_apply(dQ[t], y0, t, [&](int y, int c, float) { return y < nr ? dq[row(y) * G.Dqk + c] : 0.0f; });
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
            mma_onto<wmma::row_major, wmma::col_major>(s, S.Q + y0 * ldq, ldq, 16, S.K + 16 * c * ldq, ldq, 16, G.Dqk);
            mma_onto<wmma::row_major, wmma::col_major>(dp, S.dO + y0 * ldv, ldv, 16, S.V + 16 * c * ldv, ldv, 16, G.Dv);
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
        dq_tile_apply(dQ[t], y0, t, [&](int y, int c, float v) {
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

// ---- the calls ----

// A bf16 call (the output rounded) without a mask, heads of 16-multiples up to MMA_MAX_D, and
// its shared memory within what this GPU gives a block that asks (227 KiB on an H100).
static int mma_fits(const Geom &G, size_t bytes) {
    if (G.mask || !G.rnd.out || G.Dqk % 16 || G.Dv % 16 || G.Dqk > MMA_MAX_D || G.Dv > MMA_MAX_D) return 0;
    int dev = 0, most = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    GPU_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return bytes <= (size_t)most;
}

// The forward with OT tiles of O a warp (fewer registers for heads up to 128 wide).
template <int OT>
static void forward_launch(float *o, float *stats, Heads H, Geom G, int begin, int end, size_t bytes) {
    GPU_CHECK(cudaFuncSetAttribute(mma_forward_kernel<OT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    dim3 grid(G.N, (G.S + MQ - 1) / MQ, G.B);
    GPU_LAUNCH(mma_forward_kernel<OT>, grid, MMA_THREADS, bytes)(o, stats, H, G, begin, end);
    GPU_CHECK_LAUNCH();
}

int attn_mma_forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int begin,
                     int end) {
    size_t bytes = fwd_layout(G, 0, NULL);
    if (!mma_fits(G, bytes) || !acc_rows_hold()) return 0;
    bf16 *base;
    Heads H = heads_make(q, NULL, k, v, G, 0, G.S, &base);
    if (G.Dv <= 128) forward_launch<O_TILES / 2>(o, stats, H, G, begin, end, bytes);
    else forward_launch<O_TILES>(o, stats, H, G, begin, end, bytes);
    GPU_CHECK(cudaFreeAsync(base, gpu_stream()));
    return 1;
}

// dq with its scores in registers where the GPU's fragments are laid out as elems_apply says,
// unless MESHMOE_ATTN_DQ=smem (the kernel through shared memory, for comparison; any other
// value is refused).
static int dq_in_registers(void) {
    const char *how = getenv("MESHMOE_ATTN_DQ");
    if (how && strcmp(how, "registers") && strcmp(how, "smem")) {
        fprintf(stderr, "meshmoe: MESHMOE_ATTN_DQ is 'registers' (the default) or 'smem', not '%s'\n", how);
        exit(1);
    }
    return !(how && !strcmp(how, "smem")) && layout_holds(1);
}

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
    if (dq_in_registers()) dq_regs_launch(dq, H, dots, stats, G, r0, r1, zero_dq, rows);
    else {
        GPU_LAUNCH(mma_dq_kernel, rows, MMA_THREADS, bytes)(dq, H, dots, stats, G, r0, r1, zero_dq);
        GPU_CHECK_LAUNCH();
    }
    if (G.W > 0) {
        GPU_LAUNCH(mma_dkdv_kernel, keys, MMA_THREADS, bytes)(dk, dv, H, dots, stats, G, r0, r1);
        GPU_CHECK_LAUNCH();
    }
    GPU_CHECK(cudaFreeAsync(base, gpu_stream()));
    GPU_CHECK(cudaFreeAsync(dots, gpu_stream()));
    return 1;
}

#else   // no warp matrix products in this build (HIP): the tiles take every call

int attn_mma_forward(float *, float *, const float *, const float *, const float *, Geom, int, int) { return 0; }
int attn_mma_backward(float *, float *, float *, const float *, const float *, const float *, const float *,
                      const float *, const float *, Geom, int, int, int) {
    return 0;
}
#endif
