// model/gemm.c: the ordered GEMM (model/gemm.h): packed panels, cache blocks, and a
// register-tile micro-kernel per instruction set (AVX-512, AVX2, scalar) chosen at run time.
//
// How the chain survives the blocking. C is cut into blocks of MC x NC, each computed by one
// thread; the contraction into K blocks of KC. A K block continues every element's chain
// where the previous one stopped: the micro-kernel loads the partial chain from C into its
// accumulators (instead of 0) and goes on with k in order, so the chain is the same whatever
// KC is. With accumulate, C's old value is added only to the finished chain: when K takes
// more than one block, the block's old values are first copied aside (`save`), the chains
// are built in C, and the last K block adds the saved values. Rows and columns past the
// edge of C are zero-padded in the panels and computed in a tile on the stack; a lane's
// chain never looks at its neighbours, so the padding changes nothing.
//
// The packing buffers (at most MC*KC + KC*NC + MC*NC floats, 0.8 MB, per thread) belong
// to the kernel, like a BLAS library's own buffers, not to the model: they are plain heap
// memory outside the device's tagged allocator. transB needs no transposed copy: the B
// panels are packed from either layout.
#include "model/gemm.h"
#include "sharding/memory.h"
#include "common.h"
#include <immintrin.h>
#include <stdlib.h>

// Cache blocks: an A block (MC x KC, 144 KiB) and a B block (KC x NC, 384 KiB) stay in a
// 1 MiB L2 while the micro-kernel sweeps them; MC and NC are multiples of every kernel's
// tile so that only the edges of C are partial tiles.
enum { MC = 96, NC = 256, KC = 384, MR_MAX = 12, NR_MAX = 32 };

// The micro-kernel: a tile (mr, nr) of C from a packed A panel Ap (kc, mr) and a packed B
// panel Bp (kc, nr), both k-major. The accumulators start at 0 (load = 0) or at the partial
// chains held in C (load = 1); after kc steps the tile is stored, plus old (row stride ldo)
// when old is not NULL.
typedef void (*MicroKernel)(int kc, const float *Ap, const float *Bp, float *C, int ldc, int load,
                            const float *old, int ldo);

static void kernel_scalar(int kc, const float *Ap, const float *Bp, float *C, int ldc, int load,
                          const float *old, int ldo) {
    float c[4][8];
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 8; j++) c[r][j] = load ? C[(size_t)r * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++, Ap += 4, Bp += 8)
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 8; j++) c[r][j] = fmaf(Ap[r], Bp[j], c[r][j]);
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 8; j++)
            C[(size_t)r * ldc + j] = old ? old[(size_t)r * ldo + j] + c[r][j] : c[r][j];
}

// 6 rows x 16 columns in twelve 8-wide registers.
__attribute__((target("avx2,fma")))
static void kernel_avx2(int kc, const float *Ap, const float *Bp, float *C, int ldc, int load,
                        const float *old, int ldo) {
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        c[r][0] = load ? _mm256_loadu_ps(C + (size_t)r * ldc) : _mm256_setzero_ps();
        c[r][1] = load ? _mm256_loadu_ps(C + (size_t)r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kc; k++, Ap += 6, Bp += 16) {
        __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            __m256 a = _mm256_broadcast_ss(Ap + r);
            c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
            c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        float *o = C + (size_t)r * ldc;
        if (old) {
            c[r][0] = _mm256_add_ps(_mm256_loadu_ps(old + (size_t)r * ldo), c[r][0]);
            c[r][1] = _mm256_add_ps(_mm256_loadu_ps(old + (size_t)r * ldo + 8), c[r][1]);
        }
        _mm256_storeu_ps(o, c[r][0]);
        _mm256_storeu_ps(o + 8, c[r][1]);
    }
}

// 12 rows x 32 columns in twenty-four 16-wide registers.
__attribute__((target("avx512f")))
static void kernel_avx512(int kc, const float *Ap, const float *Bp, float *C, int ldc, int load,
                          const float *old, int ldo) {
    __m512 c[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        c[r][0] = load ? _mm512_loadu_ps(C + (size_t)r * ldc) : _mm512_setzero_ps();
        c[r][1] = load ? _mm512_loadu_ps(C + (size_t)r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++, Ap += 12, Bp += 32) {
        __m512 b0 = _mm512_load_ps(Bp), b1 = _mm512_load_ps(Bp + 16);
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++) {
            __m512 a = _mm512_set1_ps(Ap[r]);
            c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        float *o = C + (size_t)r * ldc;
        if (old) {
            c[r][0] = _mm512_add_ps(_mm512_loadu_ps(old + (size_t)r * ldo), c[r][0]);
            c[r][1] = _mm512_add_ps(_mm512_loadu_ps(old + (size_t)r * ldo + 16), c[r][1]);
        }
        _mm512_storeu_ps(o, c[r][0]);
        _mm512_storeu_ps(o + 16, c[r][1]);
    }
}

typedef struct { MicroKernel fn; int mr, nr; const char *name; } KernelInfo;
static const KernelInfo kernels[] = {
    [GEMM_KERNEL_SCALAR] = {kernel_scalar, 4, 8, "scalar 4x8"},
    [GEMM_KERNEL_AVX2] = {kernel_avx2, 6, 16, "avx2 6x16"},
    [GEMM_KERNEL_AVX512] = {kernel_avx512, 12, 32, "avx512 12x32"},
};
static GemmKernel forced = GEMM_KERNEL_AUTO;

int gemm_kernel_available(GemmKernel k) {
    switch (k) {
    case GEMM_KERNEL_AVX512: return __builtin_cpu_supports("avx512f");
    case GEMM_KERNEL_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return 1;
    }
}

void gemm_force_kernel(GemmKernel k) {
    if (!gemm_kernel_available(k)) die("internal: gemm kernel %d is not supported by this CPU", (int)k);
    forced = k;
}

static const KernelInfo *kernel_pick(void) {
    if (forced != GEMM_KERNEL_AUTO) return &kernels[forced];
    if (gemm_kernel_available(GEMM_KERNEL_AVX512)) return &kernels[GEMM_KERNEL_AVX512];
    if (gemm_kernel_available(GEMM_KERNEL_AVX2)) return &kernels[GEMM_KERNEL_AVX2];
    return &kernels[GEMM_KERNEL_SCALAR];
}

const char *gemm_kernel_name(void) { return kernel_pick()->name; }

static inline int imin(int a, int b) { return a < b ? a : b; }

// Ap (kc, mr) k-major: Ap[k*mr + r] = op(A)(i0+r, k0+k), 0 for r >= rows.
// op(A)(i, k) = A[i*ai + k*ak].
static void pack_a(float *Ap, const float *A, size_t ai, size_t ak, int i0, int rows, int k0, int kc, int mr) {
    for (int r = rows; r < mr; r++)
        for (int k = 0; k < kc; k++) Ap[(size_t)k * mr + r] = 0.0f;
    if (ai == 1)   // op(A) = A^T: a k is a contiguous run of rows
        for (int k = 0; k < kc; k++) {
            const float *a = A + (size_t)(k0 + k) * ak + i0;
            for (int r = 0; r < rows; r++) Ap[(size_t)k * mr + r] = a[r];
        }
    else
        for (int r = 0; r < rows; r++) {
            const float *a = A + (size_t)(i0 + r) * ai + (size_t)k0 * ak;
            for (int k = 0; k < kc; k++) Ap[(size_t)k * mr + r] = a[(size_t)k * ak];
        }
}

// Bp (kc, nr) k-major: Bp[k*nr + c] = op(B)(k0+k, j0+c), 0 for c >= cols.
// op(B)(k, j) = B[k*bk + j*bj].
static void pack_b(float *Bp, const float *B, size_t bk, size_t bj, int j0, int cols, int k0, int kc, int nr) {
    if (bj == 1)   // op(B) = B: a k is a contiguous run of columns
        for (int k = 0; k < kc; k++) {
            const float *b = B + (size_t)(k0 + k) * bk + j0;
            float *p = Bp + (size_t)k * nr;
            for (int c = 0; c < cols; c++) p[c] = b[c];
            for (int c = cols; c < nr; c++) p[c] = 0.0f;
        }
    else {   // op(B) = B^T: a column is a contiguous run of k
        for (int c = 0; c < cols; c++) {
            const float *b = B + (size_t)(j0 + c) * bj + (size_t)k0 * bk;
            for (int k = 0; k < kc; k++) Bp[(size_t)k * nr + c] = b[k];
        }
        for (int k = 0; k < kc; k++)
            for (int c = cols; c < nr; c++) Bp[(size_t)k * nr + c] = 0.0f;
    }
}

// A tile at the edge of C (rows < mr or cols < nr): the kernel runs on a full tile on the
// stack, holding the valid elements' partial chains and old values, and the valid ones are
// copied back.
static void edge_tile(const KernelInfo *kn, int kc, const float *Ap, const float *Bp, float *C, int ldc,
                      int rows, int cols, int load, const float *old, int ldo) {
    float tile[MR_MAX * NR_MAX] = {0}, otile[MR_MAX * NR_MAX] = {0};
    int nr = kn->nr;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            if (load) tile[r * nr + c] = C[(size_t)r * ldc + c];
            if (old) otile[r * nr + c] = old[(size_t)r * ldo + c];
        }
    kn->fn(kc, Ap, Bp, tile, nr, load, old ? otile : NULL, nr);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) C[(size_t)r * ldc + c] = tile[r * nr + c];
}

typedef struct {
    int M, N, K, accumulate, ldc;
    const float *A, *B;
    size_t ai, ak, bk, bj;
    float *C;
} GemmArgs;

// The block of C rows [i0, i0+mc), columns [j0, j0+nc), all of K.
static void gemm_block(const KernelInfo *kn, const GemmArgs *g, int i0, int mc, int j0, int nc,
                       float *Ap, float *Bp, float *save) {
    int mr = kn->mr, nr = kn->nr, split = g->K > KC;
    float *Cb = g->C + (size_t)i0 * g->ldc + j0;
    if (g->accumulate && split)   // the old values, added once the chains are finished
        for (int r = 0; r < mc; r++)
            for (int c = 0; c < nc; c++) save[(size_t)r * nc + c] = Cb[(size_t)r * g->ldc + c];
    for (int k0 = 0; k0 < g->K; k0 += KC) {
        int kc = imin(KC, g->K - k0), last = k0 + kc == g->K;
        for (int jr = 0; jr < nc; jr += nr)
            pack_b(Bp + (size_t)jr * kc, g->B, g->bk, g->bj, j0 + jr, imin(nr, nc - jr), k0, kc, nr);
        for (int ir = 0; ir < mc; ir += mr)
            pack_a(Ap + (size_t)ir * kc, g->A, g->ai, g->ak, i0 + ir, imin(mr, mc - ir), k0, kc, mr);
        for (int jr = 0; jr < nc; jr += nr)
            for (int ir = 0; ir < mc; ir += mr) {
                float *c = Cb + (size_t)ir * g->ldc + jr;
                const float *old = NULL;
                int ldo = g->ldc;
                if (last && g->accumulate) {
                    old = split ? save + (size_t)ir * nc + jr : c;
                    ldo = split ? nc : g->ldc;
                }
                int rows = imin(mr, mc - ir), cols = imin(nr, nc - jr);
                const float *a = Ap + (size_t)ir * kc, *b = Bp + (size_t)jr * kc;
                if (rows == mr && cols == nr) kn->fn(kc, a, b, c, g->ldc, k0 > 0, old, ldo);
                else edge_tile(kn, kc, a, b, c, g->ldc, rows, cols, k0 > 0, old, ldo);
            }
    }
}

void ordered_gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                  const float *B, int ldb, int accumulate, float *C, int ldc) {
    if (mem_dry() || M <= 0 || N <= 0) return;   // (a dry run computes nothing)
    if (K <= 0) {   // empty chains: 0, plus the old value
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *o = C + (size_t)i * ldc + j;
                *o = accumulate ? *o + 0.0f : 0.0f;
            }
        return;
    }
    const KernelInfo *kn = kernel_pick();
    GemmArgs g = {M, N, K, accumulate, ldc, A, B,
                  transA ? 1 : (size_t)lda, transA ? (size_t)lda : 1,
                  transB ? 1 : (size_t)ldb, transB ? (size_t)ldb : 1, C};
    int mb = (M + MC - 1) / MC, nb = (N + NC - 1) / NC, nblk = mb * nb;
    int kmax = imin(K, KC);
    // Blocks of C are independent, so they run in parallel; the split changes no bits.
    #pragma omp parallel if ((double)M * N * K > 1e6 && nblk > 1)
    {
        float *Ap = aligned_alloc(64, sizeof(float) * MC * kmax);
        float *Bp = aligned_alloc(64, sizeof(float) * NC * kmax);
        float *save = accumulate && K > KC ? aligned_alloc(64, sizeof(float) * MC * NC) : NULL;
        if (!Ap || !Bp || (accumulate && K > KC && !save)) die("out of host memory for the GEMM's packing buffers");
        #pragma omp for schedule(dynamic)
        for (int blk = 0; blk < nblk; blk++) {
            int i0 = blk / nb * MC, j0 = blk % nb * NC;
            gemm_block(kn, &g, i0, imin(MC, M - i0), j0, imin(NC, N - j0), Ap, Bp, save);
        }
        free(Ap);
        free(Bp);
        free(save);
    }
}
