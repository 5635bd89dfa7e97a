// gpu/grouped16.cu: the experts' grouped products in bf16 by a kernel of our own, on tensor
// cores (nvcuda::wmma: 16 x 16 x 16 tiles, bf16 operands, float32 sums), where cuBLAS's grouped
// call refuses them: cuBLAS 13.0's cublasGemmGroupedBatchedEx takes bf16 operands only with a
// bf16 result (these products' results are float32: a sum of leaves, an input gradient added
// onto others), and float32 operands not with CUBLAS_COMPUTE_32F_FAST_16BF (only in tf32, at
// half the rate). Without it the 16-bit products went a call per expert (deepseek-medium: 64
// small products where one launch could run them all) and the float32 ones ran in tf32.
//
// One launch runs every group's products: the output of each group is cut into tiles of
// BM x BN, and block b computes the b-th tile of the list (group by group, row of tiles by
// row of tiles), so all the experts' tiles fill the GPU at once. A block's 4 warps each hold
// 64 x 64 of the tile's sums in registers (4 x 4 fragments: 16 products for 8 fragment loads
// from shared memory). The operands come through shared memory BK of the contraction at a
// time, in STAGES buffers: while the warps multiply one slice, the next three are on their way
// (bf16 operands by asynchronous copies, cp.async), and one barrier a slice keeps them apart.
// Operands stored as float32 (holding bf16 values, as the layers give them in bf16 mode)
// become bf16 on their way to shared memory, exactly; they are loaded into registers before a
// slice's products and written to shared memory after them.
//
// The two forms (gpu/grouped16.h): rows, C_g = A_g @ op(B_g) on each group's rows (A and C
// packed by rows, B one (K,N) or (N,K) matrix per group), and dw, dw_g = inp_g^T @ dout_g over
// the group's rows (the contraction runs over the rows). A transposed operand is read as it
// lies, its tile in shared memory in the stored orientation, and read by the warps as a
// column-major fragment. Sums are float32 in the tensor cores' order, so not the ordered
// GEMM's bits: this kernel serves only where cuBLAS was chosen, whose bits are not those either.
#include "gpu/gpu.h"
#include "gpu/backend.h"
#include "gpu/grouped16.h"
#include <type_traits>   // std::conditional: a fragment's layout from the operand's orientation

#if GPU_HAVE_WMMA
using namespace nvcuda;
typedef __nv_bfloat16 bf16;

enum {
    BM = 128, BN = 128,   // a block's tile of the output
    BK = 32,              // the contraction's slice a stage
    STAGES = 4,           // slices in shared memory: one multiplied, three on their way
    THREADS = 128,        // 4 warps: 2 down the tile's rows, 2 across its columns
    WM = 64, WN = 64,     // a warp's part of the tile
    FM = WM / 16, FN = WN / 16,   // its fragments of 16 x 16: 4 x 4
    PAD = 8,              // bf16 rows padded by 8: no bank conflicts, rows still 16-byte aligned
    SLICE = BM * (BK + PAD) > BK * (BM + PAD) ? BM * (BK + PAD) : BK * (BM + PAD),   // an operand's slice
    PIECES = BM * BK / 8 / THREADS,   // 16-byte pieces of each operand's slice a thread: 4
    MAX_PARTS = 128,      // groups a launch (its arguments stay under 4 KiB)
};
static_assert(BM == BN, "a slice of A and one of B take the same room in either orientation");
static_assert(BM * BK % (8 * THREADS) == 0, "a slice's pieces shared evenly by the threads");
static_assert((BM / WM) * (BN / WN) * WARP_SIZE == THREADS, "a warp for each part of the tile");

// A launch's groups: group g[i] with len[i] rows from row r0[i]; its tiles are tile[i] ..
// tile[i+1]-1 of the launch.
struct Parts {
    int n, tile[MAX_PARTS + 1], g[MAX_PARTS], r0[MAX_PARTS], len[MAX_PARTS];
};

// One product as a block sees it: C (M,N) (+)= op(A) (M,K) @ op(B) (K,N), row strides as stored;
// A and B stored as T: bf16, or float32 (converted to bf16 on their way to shared memory).
template <class T> struct Product {
    const T *A, *B;
    float *C;
    int M, N, K, lda, ldb, ldc;
};

// The shapes the launch shares: rows form (dw 0) C_g = A_g @ op(B_g), A (R,K), B (G,K,N) or
// (G,N,K), C (R,N); dw form (dw 1) C_g (N1,N2) = A_g^T @ B_g, A (R,N1), B (R,N2), C (G,N1,N2).
struct Shape {
    int dw, N1, N2, K;   // rows form: N1 = N; dw form: the output's rows N1 and columns N2
    int transB;
};

// Part i's product.
template <class T>
__device__ static Product<T> product_of(const Parts &p, int i, const Shape &s, const T *A, const T *B, float *C) {
    size_t r0 = (size_t)p.r0[i], g = (size_t)p.g[i];
    if (s.dw)
        return Product<T>{A + r0 * s.N1, B + r0 * s.N2, C + g * s.N1 * s.N2, s.N1, s.N2, p.len[i], s.N1, s.N2, s.N2};
    return Product<T>{A + r0 * s.K, B + g * s.K * s.N1, C + r0 * s.N1, p.len[i], s.N1, s.K, s.K, s.transB ? s.K : s.N1,
                      s.N1};
}

// Piece c of a slice `width` values wide that starts at (row0, col0) of a row-major matrix:
// 8 values of its row r from column col, at `at` in the slice's copy in shared memory (rows of
// width + PAD).
struct Piece {
    int r, col, at;
};
__device__ static Piece piece_of(int row0, int col0, int width, int c) {
    int r = c / (width / 8), col = c % (width / 8) * 8;
    return Piece{row0 + r, col0 + col, r * (width + PAD) + col};
}

// A piece as bf16 bits: 16 bytes at once where its 8 values lie inside the matrix (rows_valid x
// cols_valid, row stride ld) and are aligned (32, two loads, for float32), else one value at a
// time, zeros outside. A float32 value is rounded to bf16 (nearest even), exact for the bf16
// values the layers give in bf16 mode, as cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF converts them.
__device__ static uint16_t bits_of(bf16 x) { return *(const uint16_t *)&x; }
__device__ static uint16_t bits_of(float x) { return bits_of(__float2bfloat16(x)); }
__device__ static uint4 whole_piece(const bf16 *p) { return *(const uint4 *)p; }
__device__ static uint4 whole_piece(const float *p) {
    float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    union { uint4 v; uint16_t h[8]; } u;
    for (int j = 0; j < 8; j++) u.h[j] = bits_of(f[j]);
    return u.v;
}
template <class T> __device__ static bool whole(const T *m, int ld, int rows_valid, int cols_valid, Piece q) {
    return q.r < rows_valid && q.col + 8 <= cols_valid && (uintptr_t)(m + (size_t)q.r * ld + q.col) % 16 == 0;
}
template <class T> __device__ static uint4 load_piece(const T *m, int ld, int rows_valid, int cols_valid, Piece q) {
    const T *p = m + (size_t)q.r * ld + q.col;
    if (whole(m, ld, rows_valid, cols_valid, q)) return whole_piece(p);
    union { uint4 v; uint16_t h[8]; } u;
    for (int j = 0; j < 8; j++) u.h[j] = q.r < rows_valid && q.col + j < cols_valid ? bits_of(p[j]) : 0;   // (0: +0.0)
    return u.v;
}

// A piece on its way to the slice in shared memory. bf16: a whole piece by an asynchronous
// copy, another written now; float32: loaded into `held`, then written by land().
__device__ static void fetch(bf16 *slice, const bf16 *m, int ld, int rows_valid, int cols_valid, Piece q, uint4 &) {
    if (whole(m, ld, rows_valid, cols_valid, q)) cp_async16(slice + q.at, m + (size_t)q.r * ld + q.col, 1);
    else *(uint4 *)(slice + q.at) = load_piece(m, ld, rows_valid, cols_valid, q);
}
__device__ static void fetch(bf16 *, const float *m, int ld, int rows_valid, int cols_valid, Piece q, uint4 &held) {
    held = load_piece(m, ld, rows_valid, cols_valid, q);
}
__device__ static void land(bf16 *, const bf16 *, Piece, const uint4 &) {}   // (the copy lands by itself)
__device__ static void land(bf16 *slice, const float *, Piece q, const uint4 &held) { *(uint4 *)(slice + q.at) = held; }

// The slice k0 .. k0+BK of op(A)'s rows m0 .. m0+BM and of op(B)'s columns n0 .. n0+BN, PIECES
// pieces of each a thread, into one stage (sa, sb): start() sends them, finish() lands those
// held in registers. A slice lies in shared memory as in its matrix: A (BM,BK) or, when A is
// read transposed (TA), (BK,BM); B (BK,BN) or, TB, (BN,BK).
template <bool TA, bool TB, class T> struct Fill {
    uint4 a[PIECES], b[PIECES];   // (float32 operands: the pieces as bf16, from start to finish)
    __device__ static Piece of_a(int m0, int k0, int c) { return TA ? piece_of(k0, m0, BM, c) : piece_of(m0, k0, BK, c); }
    __device__ static Piece of_b(int n0, int k0, int c) { return TB ? piece_of(n0, k0, BK, c) : piece_of(k0, n0, BN, c); }
    __device__ void start(const Product<T> &q, int m0, int n0, int k0, bf16 *sa, bf16 *sb) {
#pragma unroll
        for (int i = 0; i < PIECES; i++) {
            int c = threadIdx.x + i * THREADS;
            fetch(sa, q.A, q.lda, TA ? q.K : q.M, TA ? q.M : q.K, of_a(m0, k0, c), a[i]);
            fetch(sb, q.B, q.ldb, TB ? q.N : q.K, TB ? q.K : q.N, of_b(n0, k0, c), b[i]);
        }
    }
    __device__ void finish(int m0, int n0, int k0, bf16 *sa, bf16 *sb) const {
#pragma unroll
        for (int i = 0; i < PIECES; i++) {
            int c = threadIdx.x + i * THREADS;
            land(sa, (const T *)nullptr, of_a(m0, k0, c), a[i]);
            land(sb, (const T *)nullptr, of_b(n0, k0, c), b[i]);
        }
    }
};

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;

// The warp's sums acc (its rows wm .. wm+WM and columns wn .. wn+WN of the tile) += the slices
// in shared memory.
template <bool TA, bool TB>
__device__ static void multiply(Acc (&acc)[FM][FN], const bf16 *sa, const bf16 *sb, int wm, int wn) {
    typedef typename std::conditional<TA, wmma::col_major, wmma::row_major>::type LA;
    typedef typename std::conditional<TB, wmma::col_major, wmma::row_major>::type LB;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa[FM];
#pragma unroll
        for (int i = 0; i < FM; i++) {   // op(A)'s rows wm+16i .., columns kk ..
            int m = wm + 16 * i;
            const bf16 *a = TA ? sa + kk * (BM + PAD) + m : sa + m * (BK + PAD) + kk;
            wmma::load_matrix_sync(fa[i], a, TA ? BM + PAD : BK + PAD);
        }
#pragma unroll
        for (int j = 0; j < FN; j++) {   // op(B)'s rows kk .., columns wn+16j .., one at a time (registers)
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
            int n = wn + 16 * j;
            const bf16 *b = TB ? sb + n * (BK + PAD) + kk : sb + kk * (BN + PAD) + n;
            wmma::load_matrix_sync(fb, b, TB ? BK + PAD : BN + PAD);
#pragma unroll
            for (int i = 0; i < FM; i++) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
        }
    }
}

// The tile's sums to C: a fragment inside C, on 32 bytes (as wmma wants), straight from the
// registers (the old values read into them first when accumulate); a fragment over C's edge
// through the warp's 16 x 16 floats of shared memory, element by element, only those inside
// C. Every warp meets the same warp barriers whichever way its fragments go.
template <class T>
__device__ static void write_tile(Acc (&acc)[FM][FN], const Product<T> &q, int m0, int n0, int accumulate,
                                 float *scratch) {
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    int wm = m0 + warp / (BN / WN) * WM, wn = n0 + warp % (BN / WN) * WN;
    float *s = scratch + warp * 256;
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < FN; j++) {
            int m = wm + 16 * i, n = wn + 16 * j;
            float *c = q.C + (size_t)m * q.ldc + n;
            bool inside = m + 16 <= q.M && n + 16 <= q.N && q.ldc % 8 == 0 && (uintptr_t)c % 32 == 0;
            if (inside && accumulate) {
                Acc old;
                wmma::load_matrix_sync(old, c, q.ldc, wmma::mem_row_major);
                for (int e = 0; e < old.num_elements; e++) acc[i][j].x[e] += old.x[e];
            }
            if (inside) wmma::store_matrix_sync(c, acc[i][j], q.ldc, wmma::mem_row_major);
            else wmma::store_matrix_sync(s, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256 && !inside; e += WARP_SIZE) {
                int r = e / 16, col = e % 16;
                if (m + r < q.M && n + col < q.N) {
                    float *out = c + (size_t)r * q.ldc + col;
                    *out = accumulate ? *out + s[e] : s[e];
                }
            }
            __syncwarp();   // the scratch read before the next fragment's store
        }
}

// Stage u's slices of A and B in the block's shared memory.
__device__ static bf16 *stage_a(bf16 *smem, int u) { return smem + (size_t)u * 2 * SLICE; }
__device__ static bf16 *stage_b(bf16 *smem, int u) { return smem + (size_t)u * 2 * SLICE + SLICE; }

// One block: tile blockIdx.x of the launch's list. Slice k of the contraction goes to stage
// k % STAGES in the group of copies numbered k (empty groups past the last slice), so that
// waiting until at most STAGES - 2 groups are under way lands slice k.
template <bool TA, bool TB, class T>
__global__ static void __launch_bounds__(THREADS, 2)
grouped16_kernel(Parts p, Shape s, const T *A, const T *B, float *C, int accumulate) {
    GPU_SHARED(bf16, smem);   // STAGES stages, each a slice of A and one of B
    int t = blockIdx.x, i = 0;
    while (t >= p.tile[i + 1]) i++;   // (at most MAX_PARTS steps, the same for the whole block)
    Product<T> q = product_of(p, i, s, A, B, C);
    int tiles_n = (q.N + BN - 1) / BN, m0 = (t - p.tile[i]) / tiles_n * BM, n0 = (t - p.tile[i]) % tiles_n * BN;
    int warp = threadIdx.x / WARP_SIZE, wm = warp / (BN / WN) * WM, wn = warp % (BN / WN) * WN;
    Acc acc[FM][FN];
#pragma unroll
    for (int a = 0; a < FM; a++)
#pragma unroll
        for (int b = 0; b < FN; b++) wmma::fill_fragment(acc[a][b], 0.0f);

    int steps = (q.K + BK - 1) / BK;
    Fill<TA, TB, T> fill;
    for (int k = 0; k < STAGES - 1; k++) {   // the first slices on their way
        if (k < steps) {
            fill.start(q, m0, n0, k * BK, stage_a(smem, k), stage_b(smem, k));
            fill.finish(m0, n0, k * BK, stage_a(smem, k), stage_b(smem, k));
        }
        cp_async_commit();
    }
    for (int k = 0; k < steps; k++) {
        cp_async_wait<STAGES - 2>();   // this thread's copies of slice k landed
        __syncthreads();   // everyone's; and every warp done with slice k-1, whose stage is filled next
        int next = k + STAGES - 1, u = next % STAGES;
        if (next < steps) fill.start(q, m0, n0, next * BK, stage_a(smem, u), stage_b(smem, u));
        cp_async_commit();
        multiply<TA, TB>(acc, stage_a(smem, k % STAGES), stage_b(smem, k % STAGES), wm, wn);
        if (next < steps) fill.finish(m0, n0, next * BK, stage_a(smem, u), stage_b(smem, u));
    }
    __syncthreads();   // every warp done with the slices before the edges' scratch takes their place
    write_tile(acc, q, m0, n0, accumulate, (float *)(void *)smem);
}

// The launch of up to MAX_PARTS parts through the kernel of their orientation (80 KiB of
// shared memory a block: beyond the 48 without opt-in, two blocks a multiprocessor).
template <bool TA, bool TB, class T>
static void launch_one(const Parts &p, const Shape &s, const T *a, const T *b, float *C, int accumulate) {
    size_t smem = sizeof(bf16) * STAGES * 2 * SLICE;
    static_assert(sizeof(bf16) * STAGES * 2 * SLICE >= sizeof(float) * 256 * (THREADS / WARP_SIZE),
                  "the edge tiles' scratch fits");
    GPU_CHECK(cudaFuncSetAttribute(grouped16_kernel<TA, TB, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    GPU_LAUNCH((grouped16_kernel<TA, TB, T>), p.tile[p.n], THREADS, smem)(p, s, a, b, C, accumulate);
    GPU_CHECK_LAUNCH();
}
template <class T>
static void launch(const Parts &p, const Shape &s, const T *a, const T *b, float *C, int accumulate) {
    if (s.dw) launch_one<true, false>(p, s, a, b, C, accumulate);
    else if (s.transB) launch_one<false, true>(p, s, a, b, C, accumulate);
    else launch_one<false, false>(p, s, a, b, C, accumulate);
}

// Every group with rows (r0 = first[g], len = first[g+1] - first[g] where first is strided
// by `stride`), its output tiles_m x tiles_n tiles, MAX_PARTS groups a launch.
template <class T>
static void run(const int *first, size_t stride, int G, const Shape &s, const T *A, const T *B, float *C,
                int accumulate) {
    Parts p;
    p.n = 0;
    p.tile[0] = 0;
    for (int g = 0; g < G; g++) {
        int r0 = first[(size_t)g * stride], len = first[(size_t)(g + 1) * stride] - r0;
        if (len <= 0) continue;
        int M = s.dw ? s.N1 : len, N = s.dw ? s.N2 : s.N1;
        p.g[p.n] = g; p.r0[p.n] = r0; p.len[p.n] = len;
        p.tile[p.n + 1] = p.tile[p.n] + (M + BM - 1) / BM * ((N + BN - 1) / BN);
        if (++p.n == MAX_PARTS) { launch(p, s, A, B, C, accumulate); p.n = 0; }
    }
    if (p.n) launch(p, s, A, B, C, accumulate);
}

int rows_grouped_tc(int transB, const int *rows, int G, int N, int K, const void *A, const void *B, float *C,
                    int accumulate, int bf16_stored) {
    if (N == 0) return 1;
    if (K == 0) return 0;   // a product over nothing: the loop's (zeros, or nothing added)
    Shape s = {0, N, 0, K, transB};
    if (bf16_stored) run(rows, 1, G, s, (const bf16 *)A, (const bf16 *)B, C, accumulate);
    else run(rows, 1, G, s, (const float *)A, (const float *)B, C, accumulate);
    return 1;
}

int dw_grouped_tc(const int *off, int n, int G, int C, int OC, const void *inp, const void *dout, float *dw,
                  int accumulate, int bf16_stored) {
    if (C == 0 || OC == 0) return 1;
    Shape s = {1, C, OC, 0, 0};
    if (bf16_stored) run(off, (size_t)n, G, s, (const bf16 *)inp, (const bf16 *)dout, dw, accumulate);
    else run(off, (size_t)n, G, s, (const float *)inp, (const float *)dout, dw, accumulate);
    return 1;
}
#else
int rows_grouped_tc(int, const int *, int, int, int, const void *, const void *, float *, int, int) { return 0; }
int dw_grouped_tc(const int *, int, int, int, int, const void *, const void *, float *, int, int) { return 0; }
#endif
