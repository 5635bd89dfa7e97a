// gpu/attn_mma.h: what the tensor-core attention's forward (gpu/attn_mma.cu, whose opening
// comment describes the kernels) and backward (gpu/attn_mma_bwd.cu) share: the tiles' sizes,
// the operands in bf16 and their copies into shared memory, the warp matrix products, the
// fragments' element layout, and the check of a call's fit. CUDA only (GPU_HAVE_WMMA).
#ifndef MESHMOE_GPU_ATTN_MMA_H
#define MESHMOE_GPU_ATTN_MMA_H
#include "gpu/gpu.h"
#include "gpu/attention.h"
#include "gpu/backend.h"
#include <stdlib.h>   // getenv
#include <string.h>

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
// s[c] += a b_c over kdim for each c < N: one a against N b's (b_c = b + c * bnext), a's
// fragment loaded once for each 16 of kdim and the N products made one after another, none
// waiting for the one before (a tensor-core product's result takes tens of cycles: a chain
// of them, each onto the last, keeps the warp waiting). Each s[c] adds its steps in the order
// mma_onto does: the same sums.
template <int N, class LA, class LB>
__device__ __forceinline__ static void mma_onto_each(Acc (&s)[N], const bf16 *a, int lda, int astep, const bf16 *b,
                                                     int ldb, int bstep, int bnext, int kdim) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
    for (int kk = 0; kk < kdim / 16; kk++) {
        wmma::load_matrix_sync(fa, a + kk * astep, lda);
#pragma unroll
        for (int c = 0; c < N; c++) {
            wmma::load_matrix_sync(fb, b + c * bnext + kk * bstep, ldb);
            wmma::mma_sync(s[c], fa, fb, s[c]);
        }
    }
}

// One product's operands for mma_onto_pair: a (16 x kdim) and b (kdim x 16), as mma_onto's.
struct MmaOperands {
    const bf16 *a;
    int lda, astep;
    const bf16 *b;
    int ldb, bstep, kdim;
};
// f1 += x.a x.b and f2 += y.a y.b, step by step side by side (the shorter done first), so
// that one's product is made while the other's is on its way; each sum in mma_onto's order.
template <class LA, class LB>
__device__ __forceinline__ static void mma_onto_pair(Acc &f1, MmaOperands x, Acc &f2, MmaOperands y) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
    int steps = (x.kdim > y.kdim ? x.kdim : y.kdim) / 16;
    for (int kk = 0; kk < steps; kk++) {
        if (kk < x.kdim / 16) {
            wmma::load_matrix_sync(fa, x.a + kk * x.astep, x.lda);
            wmma::load_matrix_sync(fb, x.b + kk * x.bstep, x.ldb);
            wmma::mma_sync(f1, fa, fb, f1);
        }
        if (kk < y.kdim / 16) {
            wmma::load_matrix_sync(fa, y.a + kk * y.astep, y.lda);
            wmma::load_matrix_sync(fb, y.b + kk * y.bstep, y.ldb);
            wmma::mma_sync(f2, fa, fb, f2);
        }
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

// 16 bytes from device or shared memory, and back (the emulation copies: its bf16 is a struct).
#if defined(GPU_EMULATE)
__device__ static uint4 load16(const void *p) { uint4 v; memcpy(&v, p, 16); return v; }
__device__ static void store16(void *p, uint4 v) { memcpy(p, &v, 16); }
#else
__device__ static uint4 load16(const void *p) { return *(const uint4 *)p; }
__device__ static void store16(void *p, uint4 v) { *(uint4 *)p = v; }
#endif

// dst (B, heads, n, D) = src's rows as bf16 (round to nearest even, as __float2bfloat16
// everywhere): query rows lo + i of head hh (keys = 0), or keys i of kv head hh (keys = 1);
// 8 values a thread (D a multiple of 16), read 16 bytes at a time where src is 16-byte
// aligned (vec) and written 16 bytes at a time.
__global__ static void heads_bf16_kernel(bf16 *dst, const float *src, Geom G, int keys, int lo, int n, int D, int vec) {
    int heads = keys ? G.Nkv : G.N, per = D / 8;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)G.B * heads * n * per;
    if (t >= total) return;
    size_t r = t / per;
    int c = (int)(t % per) * 8, i = (int)(r % n), hh = (int)(r / n % heads), b = (int)(r / n / heads);
    size_t row = keys ? key_row(G, b, i) * G.Nkv + hh : ((size_t)b * G.S + lo + i) * G.N + hh;
    const float *x = src + row * D + c;
    float f[8];
    if (vec) {
        float4 a = ((const float4 *)x)[0], z = ((const float4 *)x)[1];
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = z.x, f[5] = z.y, f[6] = z.z, f[7] = z.w;
    } else {
        for (int u = 0; u < 8; u++) f[u] = x[u];
    }
    union { uint4 v; bf16 h[8]; } y;
    for (int u = 0; u < 8; u++) y.h[u] = __float2bfloat16(f[u]);
    store16(dst + r * D + c, y.v);
}

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

// a[u] of a two-buffer pair, u = 0 or 1 (a select: an array indexed at run time would be put
// in local memory, with the struct that holds it).
template <class T> __device__ __forceinline__ static T *stage_of(T *const (&a)[2], int u) { return u ? a[1] : a[0]; }

// tile_copy's rows as copies that run while the block computes (cp_async16, gpu/gpu.h), rows
// past n written as zeros by the copies themselves; the caller closes the group, waits for it
// and meets a barrier before any thread reads xs.
__device__ static void tile_copy_async(bf16 *xs, int ld, const bf16 *x, int n, int nmax, int D) {
    int per = D / 8, total = nmax * per;
    for (int t = threadIdx.x; t < total; t += MMA_THREADS) {
        int r = t / per, c = t % per * 8;
        cp_async16(xs + r * ld + c, r < n ? x + (size_t)r * D + c : x, r < n);
    }
}

// The call's operands as Heads, in one buffer of the stream's own (*base, for cudaFreeAsync):
// q and dout (NULL: none) for the query rows lo .. lo+rows-1, k and v for the W keys.
static inline Heads heads_make(const float *q, const float *dout, const float *k, const float *v, const Geom &G, int lo,
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
            *base + at[x], src[x], G, keys[x], lo, n[x], D[x], (uintptr_t)src[x] % 16 == 0);
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
__device__ static inline int heavy_first(void) { return (int)(gridDim.y - 1 - blockIdx.y); }

// The output's sums stay in registers, each warp's accumulator tiles of O (MQ x Dv) as
// products_onto shares them out, for the whole kernel, as the backward keeps dQ, dK, dV.
// Rescaling a row between key tiles, and finishing it, needs each fragment element's row,
// which wmma does not document: on sm_80 and sm_90 element e of lane L of an accumulator
// sits in row L / 4 + 8 ((e / 2) % 2) and column 2 (L % 4) + e % 2 + 8 (e / 4), two of
// mma.sync's 16 x 8 sums side by side; and element e of a row-major matrix_a fragment (bf16,
// 16 x 16 x 16) sits at the same row and column (mma.sync's m16n8k16 operand A).
// attn_layout_holds (gpu/attn_mma.cu) tests both once per process on the GPU: where the rows do not hold, the
// forward goes to the tiles (gpu/attn_tiles.cu); where the columns and matrix_a do not, dq
// goes to the kernel that passes its scores through shared memory.
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> RowA;
__device__ static inline int acc_row(int e) { return threadIdx.x % 32 / 4 + 8 * (e / 2 % 2); }
__device__ static inline int acc_col(int e) { return threadIdx.x % 4 * 2 + e % 2 + 8 * (e / 4); }
template <class F> __device__ static void elems_apply(Acc &f, F fn) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = fn(acc_row(e), acc_col(e), f.x[e]);
}
template <class F> __device__ static void elems_apply2(Acc &d, const Acc &x, F fn) {
    for (int e = 0; e < d.num_elements; e++) d.x[e] = fn(acc_row(e), acc_col(e), d.x[e], x.x[e]);
}
// a = c rounded to bf16, element by element.
__device__ static inline void acc_to_a(RowA &a, const Acc &c) {
    for (int e = 0; e < a.num_elements; e++) a.x[e] = __float2bfloat16(c.x[e]);
}
// A row-major matrix_a fragment's bf16 numbers (laid out as an accumulator's, above) into the
// row-major 16 x 16 tile t (leading dimension ld, even; t 4-byte aligned): a lane's elements
// e and e + 1 are neighbours in one row, so each pair goes as one 4-byte store.
__device__ static inline void a_store(uint16_t *t, int ld, const RowA &a) {
    for (int e = 0; e < a.num_elements; e += 2) {
        uint32_t *pair = (uint32_t *)(t + (size_t)acc_row(e) * ld + acc_col(e));
        *pair = __bfloat16_as_ushort(a.x[e]) | (uint32_t)__bfloat16_as_ushort(a.x[e + 1]) << 16;
    }
}
template <class F> __device__ static void rows_apply(Acc &f, F fn) {
    elems_apply(f, [&](int r, int, float x) { return fn(r, x); });
}
// Tile t of a warp's sums over its 16 rows from y0 (a row-owned tile: dQ, O): x = fn(y,
// column, x) for its elements, y the block's row.
template <class F> __device__ static void row_tile_apply(Acc &x, int y0, int t, F fn) {
    elems_apply(x, [&](int r, int c, float v) { return fn(y0 + r, 16 * t + c, v); });
}

// A lane's elements of an accumulator tile by slots, for the kernels with their scores in
// registers: what depends only on an element's row (a query's max, sum, visible keys) or only
// on its column is made once a tile per slot, not once per element. Element e of a lane (the
// layout above) lies in row slot e / 2 % 2 and column slot e % 2 + 2 (e / 4), two rows and
// four columns; slot_row, slot_col: a slot's row and column in the tile.
enum { LANE_ROWS = 2, LANE_COLS = 4 };
template <class F> __device__ __forceinline__ static void slots_apply(Acc &f, F fn) {
#pragma unroll
    for (int e = 0; e < f.num_elements; e++) f.x[e] = fn(e / 2 % 2, e % 2 + 2 * (e / 4), f.x[e]);
}
template <class F> __device__ __forceinline__ static void slots_apply2(Acc &d, const Acc &x, F fn) {
#pragma unroll
    for (int e = 0; e < d.num_elements; e++) d.x[e] = fn(e / 2 % 2, e % 2 + 2 * (e / 4), d.x[e], x.x[e]);
}
__device__ static inline int slot_row(int s) { return threadIdx.x % 32 / 4 + 8 * s; }
__device__ static inline int slot_col(int s) { return threadIdx.x % 4 * 2 + s % 2 + 8 * (s / 2); }

// Whether the fragment layouts above hold on this GPU (gpu/attn_mma.cu, checked once per
// process): which = 0 the accumulator's rows (the forward), 1 its columns and matrix_a's too
// (the backward with its scores in registers).
int attn_layout_holds(int which);
// The kernels with their scores in registers (the forward's and the backward's), where the
// GPU's fragments are laid out as elems_apply says, unless MESHMOE_ATTN_SCORES=smem (the
// kernels through shared memory, for comparison; any other value than that or registers is
// refused).
int attn_scores_in_registers(void);

// A bf16 call (the output rounded) without a mask, heads of 16-multiples up to MMA_MAX_D, and
// its shared memory within what this GPU gives a block that asks (227 KiB on an H100).
static inline int mma_fits(const Geom &G, size_t bytes) {
    if (G.mask || !G.rnd.out || G.Dqk % 16 || G.Dv % 16 || G.Dqk > MMA_MAX_D || G.Dv > MMA_MAX_D) return 0;
    int dev = 0, most = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    GPU_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return bytes <= (size_t)most;
}

#endif
#endif
