// gpu/grouped16.cu: the experts' grouped products on bf16 storage by a kernel of our own, on
// tensor cores (nvcuda::wmma: 16 x 16 x 16 tiles, bf16 operands, float32 sums), for a cuBLAS
// whose grouped call refuses them: cuBLAS 13.0's cublasGemmGroupedBatchedEx takes bf16
// operands only with a bf16 result, and these products' results are float32 (a sum of
// leaves, an input gradient added onto others). Without it each expert's product is a call
// of its own (deepseek-medium: 64 small products where one launch could run them all).
//
// One launch runs every group's products: the output of each group is cut into tiles of
// BM x BN, and block b computes the b-th tile of the list (group by group, row of tiles by
// row of tiles), so all the experts' tiles fill the GPU at once. A block's 8 warps each hold
// 64 x 32 of the tile's sums in registers (4 x 2 fragments); the operands come through
// shared memory BK of the contraction at a time, two buffers, the next slice loaded into
// registers while the warps multiply the present one.
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

// One product as a block sees it: C (M,N) (+)= op(A) (M,K) @ op(B) (K,N), row strides as stored.
struct Product {
    const bf16 *A, *B;
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
__device__ static Product product_of(const Parts &p, int i, const Shape &s, const bf16 *A, const bf16 *B, float *C) {
    size_t r0 = (size_t)p.r0[i], g = (size_t)p.g[i];
    if (s.dw) return Product{A + r0 * s.N1, B + r0 * s.N2, C + g * s.N1 * s.N2, s.N1, s.N2, p.len[i], s.N1, s.N2, s.N2};
    return Product{A + r0 * s.K, B + g * s.K * s.N1, C + r0 * s.N1, p.len[i], s.N1, s.K, s.K, s.transB ? s.K : s.N1,
                   s.N1};
}

// The piece of 8 values that this thread moves for piece c (0 .. 511) of a slice of `rows` x
// `width` values of a row-major matrix (row stride ld, rows_valid x cols_valid of it exist)
// starting at (row0, col0): a 16-byte load where the 8 lie inside and are aligned, else one
// value at a time, zeros outside.
__device__ static uint4 load_piece(const bf16 *src, int ld, int row0, int col0, int rows_valid, int cols_valid,
                                   int width, int c) {
    int r = row0 + c / (width / 8), col = col0 + c % (width / 8) * 8;
    const bf16 *p = src + (size_t)r * ld + col;
    if (r < rows_valid && col + 8 <= cols_valid && (uintptr_t)p % 16 == 0) return *(const uint4 *)p;
    union { uint4 v; uint16_t h[8]; } u;
    for (int j = 0; j < 8; j++) {
        bf16 x = r < rows_valid && col + j < cols_valid ? p[j] : __float2bfloat16(0.0f);
        u.h[j] = *(const uint16_t *)&x;
    }
    return u.v;
}

// The slice k0 .. k0+BK of op(A)'s rows m0 .. m0+BM and of op(B)'s columns n0 .. n0+BN, two
// pieces of each a thread. A slice lies in shared memory as in its matrix: A (BM,BK) or, when
// A is read transposed (TA), (BK,BM); B (BK,BN) or, TB, (BN,BK).
template <bool TA, bool TB> struct Slices {
    uint4 a[2], b[2];
    __device__ void load(const Product &q, int m0, int n0, int k0) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int c = threadIdx.x + i * THREADS;
            a[i] = TA ? load_piece(q.A, q.lda, k0, m0, q.K, q.M, BM, c) : load_piece(q.A, q.lda, m0, k0, q.M, q.K, BK, c);
            b[i] = TB ? load_piece(q.B, q.ldb, n0, k0, q.N, q.K, BK, c) : load_piece(q.B, q.ldb, k0, n0, q.K, q.N, BN, c);
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
            wmma::load_matrix_sync(fa[i], TA ? sa + kk * (BM + PAD) + m : sa + m * (BK + PAD) + kk, TA ? BM + PAD : BK + PAD);
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {   // op(B)'s rows kk .., columns wn+16j ..
            int n = wn + 16 * j;
            wmma::load_matrix_sync(fb[j], TB ? sb + n * (BK + PAD) + kk : sb + kk * (BN + PAD) + n, TB ? BK + PAD : BN + PAD);
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
__device__ static void write_tile(Acc (&acc)[4][2], const Product &q, int m0, int n0, int accumulate, float *scratch) {
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
template <bool TA, bool TB>
__global__ static void __launch_bounds__(THREADS, 2)
grouped16_kernel(Parts p, Shape s, const bf16 *A, const bf16 *B, float *C, int accumulate) {
    GPU_SHARED(bf16, smem);   // two slices of A, then two of B
    int t = blockIdx.x, i = 0;
    while (t >= p.tile[i + 1]) i++;   // (at most MAX_PARTS steps, the same for the whole block)
    Product q = product_of(p, i, s, A, B, C);
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
static void launch(const Parts &p, const Shape &s, const uint16_t *A, const uint16_t *B, float *C, int accumulate) {
    size_t smem = sizeof(bf16) * 4 * SLICE;   // 40 KiB: no opt-in beyond 48
    static_assert(sizeof(bf16) * 4 * SLICE >= sizeof(float) * 256 * (THREADS / WARP_SIZE), "the edge tiles' scratch fits");
    const bf16 *a = (const bf16 *)A, *b = (const bf16 *)B;
    if (s.dw) GPU_LAUNCH((grouped16_kernel<true, false>), p.tile[p.n], THREADS, smem)(p, s, a, b, C, accumulate);
    else if (s.transB) GPU_LAUNCH((grouped16_kernel<false, true>), p.tile[p.n], THREADS, smem)(p, s, a, b, C, accumulate);
    else GPU_LAUNCH((grouped16_kernel<false, false>), p.tile[p.n], THREADS, smem)(p, s, a, b, C, accumulate);
    GPU_CHECK_LAUNCH();
}

// Every group with rows (r0 = first[g], len = first[g+1] - first[g] where first is strided
// by `stride`), its output tiles_m x tiles_n tiles, MAX_PARTS groups a launch.
static void run(const int *first, size_t stride, int G, const Shape &s, const uint16_t *A, const uint16_t *B, float *C,
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

int rows_grouped16_tc(int transB, const int *rows, int G, int N, int K, const uint16_t *A, const uint16_t *B, float *C,
                      int accumulate) {
    if (N == 0) return 1;
    if (K == 0) return 0;   // a product over nothing: the loop's (zeros, or nothing added)
    Shape s = {0, N, 0, K, transB};
    run(rows, 1, G, s, A, B, C, accumulate);
    return 1;
}

int dw_grouped16_tc(const int *off, int n, int G, int C, int OC, const uint16_t *inp, const uint16_t *dout, float *dw,
                    int accumulate) {
    if (C == 0 || OC == 0) return 1;
    Shape s = {1, C, OC, 0, 0};
    run(off, (size_t)n, G, s, inp, dout, dw, accumulate);
    return 1;
}
#else
int rows_grouped16_tc(int, const int *, int, int, int, const uint16_t *, const uint16_t *, float *, int) { return 0; }
int dw_grouped16_tc(const int *, int, int, int, int, const uint16_t *, const uint16_t *, float *, int) { return 0; }
#endif
