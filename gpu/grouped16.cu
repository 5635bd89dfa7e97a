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
// row of tiles), so all the experts' tiles fill the GPU at once. A block's 8 warps each hold
// 64 x 32 of the tile's sums in registers (4 x 2 fragments); the operands come through
// shared memory BK of the contraction at a time, two buffers, the next slice loaded into
// registers while the warps multiply the present one. Operands stored as float32 (holding
// bf16 values, as the layers give them in bf16 mode) become bf16 on their way to shared
// memory, exactly.
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
    BK = 32,              // the contraction's slice a step
    THREADS = 256,        // 8 warps: 2 down the tile's rows, 4 across its columns
    WM = 64, WN = 32,     // a warp's part: 4 x 2 fragments of 16 x 16
    PAD = 8,              // bf16 rows padded by 8: fewer bank conflicts, rows still 16-byte aligned
    SLICE = BM * (BK + PAD) > BK * (BM + PAD) ? BM * (BK + PAD) : BK * (BM + PAD),   // an operand's slice
    MAX_PARTS = 128,      // groups a launch (its arguments stay under 4 KiB)
};
static_assert(BM == BN, "a slice of A and one of B take the same room in either orientation");
static_assert(BM * BK / 8 == 2 * THREADS, "each thread loads two 16-byte pieces of each operand's slice");

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

// The piece of 8 values that this thread moves for piece c (0 .. 511) of a slice `width`
// values wide of a row-major matrix (row stride ld, rows_valid x cols_valid of it exist)
// starting at (row0, col0), as bf16: 16 bytes at once where the 8 lie inside and are aligned
// (32, two loads, for float32), else one value at a time, zeros outside. A float32 value is
// rounded to bf16 (nearest even), exact for the bf16 values the layers give in bf16 mode, as
// cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF converts them.
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
template <class T>
__device__ static uint4 load_piece(const T *src, int ld, int row0, int col0, int rows_valid, int cols_valid, int width,
                                   int c) {
    int r = row0 + c / (width / 8), col = col0 + c % (width / 8) * 8;
    const T *p = src + (size_t)r * ld + col;
    if (r < rows_valid && col + 8 <= cols_valid && (uintptr_t)p % 16 == 0)
        return whole_piece(p);
    union { uint4 v; uint16_t h[8]; } u;
    for (int j = 0; j < 8; j++) u.h[j] = r < rows_valid && col + j < cols_valid ? bits_of(p[j]) : 0;   // (0: +0.0)
    return u.v;
}

// The slice k0 .. k0+BK of op(A)'s rows m0 .. m0+BM and of op(B)'s columns n0 .. n0+BN, two
// pieces of each a thread. A slice lies in shared memory as in its matrix: A (BM,BK) or, when
// A is read transposed (TA), (BK,BM); B (BK,BN) or, TB, (BN,BK).
template <bool TA, bool TB> struct Slices {
    uint4 a[2], b[2];
    template <class T> __device__ void load(const Product<T> &q, int m0, int n0, int k0) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = threadIdx.x + i * THREADS;
            a[i] = TA ? load_piece(q.A, q.lda, k0, m0, q.K, q.M, BM, c)    // A^T's slice: (BK,BM) as stored
                      : load_piece(q.A, q.lda, m0, k0, q.M, q.K, BK, c);   // (BM,BK)
            b[i] = TB ? load_piece(q.B, q.ldb, n0, k0, q.N, q.K, BK, c)    // B^T's slice: (BN,BK) as stored
                      : load_piece(q.B, q.ldb, k0, n0, q.K, q.N, BN, c);   // (BK,BN)
        }
    }
    __device__ void store(bf16 *sa, bf16 *sb) const {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = threadIdx.x + i * THREADS;
            int wa = TA ? BM : BK, wb = TB ? BK : BN;   // the slices' row widths
            *(uint4 *)(sa + c / (wa / 8) * (wa + PAD) + c % (wa / 8) * 8) = a[i];
            *(uint4 *)(sb + c / (wb / 8) * (wb + PAD) + c % (wb / 8) * 8) = b[i];
        }
    }
};

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;

// The warp's sums acc (4 x 2 fragments, its rows wm .. wm+64 and columns wn .. wn+32 of the
// tile) += the slices in shared memory.
template <bool TA, bool TB>
__device__ static void multiply(Acc (&acc)[4][2], const bf16 *sa, const bf16 *sb, int wm, int wn) {
    typedef typename std::conditional<TA, wmma::col_major, wmma::row_major>::type LA;
    typedef typename std::conditional<TB, wmma::col_major, wmma::row_major>::type LB;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa[4];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb[2];
#pragma unroll
        for (int i = 0; i < 4; i++) {   // op(A)'s rows wm+16i .., columns kk ..
            int m = wm + 16 * i;
            const bf16 *a = TA ? sa + kk * (BM + PAD) + m : sa + m * (BK + PAD) + kk;
            wmma::load_matrix_sync(fa[i], a, TA ? BM + PAD : BK + PAD);
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {   // op(B)'s rows kk .., columns wn+16j ..
            int n = wn + 16 * j;
            const bf16 *b = TB ? sb + n * (BK + PAD) + kk : sb + kk * (BN + PAD) + n;
            wmma::load_matrix_sync(fb[j], b, TB ? BK + PAD : BN + PAD);
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
}

// The tile's sums to C: a fragment inside C, on 32 bytes (as wmma wants), straight from the
// registers (the old values read into them first when accumulate); a fragment over C's edge
// through the warp's 16 x 16 floats of shared memory, element by element, only those inside
// C. Every warp meets the same warp barriers whichever way its fragments go.
template <class T>
__device__ static void write_tile(Acc (&acc)[4][2], const Product<T> &q, int m0, int n0, int accumulate,
                                 float *scratch) {
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    int wm = m0 + warp / 4 * WM, wn = n0 + warp % 4 * WN;
    float *s = scratch + warp * 256;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
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

// One block: tile blockIdx.x of the launch's list.
template <bool TA, bool TB, class T>
__global__ static void __launch_bounds__(THREADS, 2)
grouped16_kernel(Parts p, Shape s, const T *A, const T *B, float *C, int accumulate) {
    GPU_SHARED(bf16, smem);   // two slices of A, then two of B
    int t = blockIdx.x, i = 0;
    while (t >= p.tile[i + 1]) i++;   // (at most MAX_PARTS steps, the same for the whole block)
    Product<T> q = product_of(p, i, s, A, B, C);
    int tiles_n = (q.N + BN - 1) / BN, m0 = (t - p.tile[i]) / tiles_n * BM, n0 = (t - p.tile[i]) % tiles_n * BN;
    int warp = threadIdx.x / WARP_SIZE;
    Acc acc[4][2];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 2; b++) wmma::fill_fragment(acc[a][b], 0.0f);

    Slices<TA, TB> next;
    next.load(q, m0, n0, 0);
    next.store(smem, smem + 2 * SLICE);
    __syncthreads();
    int steps = (q.K + BK - 1) / BK;
    for (int k = 0; k < steps; k++) {
        int cur = k % 2;
        if (k + 1 < steps) next.load(q, m0, n0, (k + 1) * BK);   // global loads in flight during the products
        multiply<TA, TB>(acc, smem + cur * SLICE, smem + (2 + cur) * SLICE, warp / 4 * WM, warp % 4 * WN);
        if (k + 1 < steps) next.store(smem + (1 - cur) * SLICE, smem + (3 - cur) * SLICE);
        __syncthreads();   // the next slices written, and this one's products done, before either is reused
    }
    write_tile(acc, q, m0, n0, accumulate, (float *)(void *)smem);
}

// The launch of up to MAX_PARTS parts through the kernel of their orientation.
template <class T>
static void launch(const Parts &p, const Shape &s, const T *a, const T *b, float *C, int accumulate) {
    size_t smem = sizeof(bf16) * 4 * SLICE;   // 40 KiB: no opt-in beyond 48
    static_assert(sizeof(bf16) * 4 * SLICE >= sizeof(float) * 256 * (THREADS / WARP_SIZE),
                  "the edge tiles' scratch fits");
    int tiles = p.tile[p.n];
    if (s.dw) GPU_LAUNCH((grouped16_kernel<true, false, T>), tiles, THREADS, smem)(p, s, a, b, C, accumulate);
    else if (s.transB) GPU_LAUNCH((grouped16_kernel<false, true, T>), tiles, THREADS, smem)(p, s, a, b, C, accumulate);
    else GPU_LAUNCH((grouped16_kernel<false, false, T>), tiles, THREADS, smem)(p, s, a, b, C, accumulate);
    GPU_CHECK_LAUNCH();
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
