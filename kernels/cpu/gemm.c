// kernels/cpu/gemm.c: the ordered GEMM (kernels/cpu/gemm.h): packed panels, cache blocks, and a
// register-tile micro-kernel per instruction set (AVX-512, AVX2, scalar) chosen at run time.
// The products cut into pieces added along the canonical tree (the chunked product, a weight
// gradient's leaves) are kernels/cpu/gemm_tree.c, on the same kernels and packing
// (kernels/cpu/gemm_parts.h).
//
// How the chain survives the blocking. C is cut into column blocks of NC and the
// contraction into K blocks of KC (up to 1024 of each, so the layers of the presets run
// one block of each and every panel is packed once per call). Per (column block, K block)
// the threads first pack the B block together, then each takes row blocks of C: it packs
// its A rows and runs the micro-kernel over every tile. A K block continues every
// element's chain where the previous one stopped: the micro-kernel loads the partial chain
// from C into its accumulators (instead of 0) and goes on with k in order, so the chain is
// the same whatever KC is. With accumulate, C's old value is added only to the finished
// chain: when K takes more than one block, the column block's old values are first copied
// aside (`save`), the chains are built in C, and the last K block adds the saved values.
// Rows and columns past the edge of C are zero-padded in the panels and computed in a tile
// on the stack; a lane's chain never looks at its neighbours, so the padding changes
// nothing.
//
// B read in place (when K fits one block): gemm_stream reads op(B) = B where it lies, at
// any number of rows, and gemm_stream_t reads the rows of W for op(B) = W^T, up to
// STREAM_M_WT rows on AVX-512 and STREAM_M_WT_AVX2 on AVX2 (gemm.h; the scalar set packs
// it). Their chains are the same: each element is one pass over all of K from 0, and the
// old value is added to the finished chain. On these paths the AVX-512 and AVX2 tiles also
// read op(A) = A in place, a whole row panel at a time (panel_in_place).
//
// Packing is a copy where the operand's k-major lines are already contiguous and a
// transposition where they are not (pack_t: op(A) = A, op(B) = W^T), done 16 x 16 or 8 x 8
// at a time in registers.
//
// The packing buffers (a B block of KC x NC floats, up to 4 MiB, per call; an A block of
// MC x KC, 384 KiB, per thread; the saved M x NC old values when accumulating over more
// than one K block; on the in-place paths, whose K is one block, op(A) packed for up to MS
// rows at a time, shared by the threads, and one edge panel per thread) belong to the
// kernel, like a BLAS library's own buffers, not to the model: they are plain heap memory
// outside the device's tagged allocator, freed before the call returns, so the planner's
// figures do not see them either way. No packed weight outlives a call.
#include "kernels/cpu/gemm_parts.h"
#include "core/common.h"
#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <limits.h>
#include <stdlib.h>
#include <string.h>

// The most rows of a product that reads B in place (gemm_stream for op(B) = B: any;
// gemm_stream_t for B^T); larger products pack it. A test can move both thresholds to run
// every shape down both paths.
static int stream_b = INT_MAX, stream_wt = -1;   // -1: the kernel set's own bound (KernelInfo)
void gemm_set_stream_rows(int rows) {
    stream_b = rows < 0 ? INT_MAX : rows;
    stream_wt = rows < 0 ? -1 : rows;
}

static int copy_b = 1;   // gemm_set_copy_b
void gemm_set_copy_b(int on) { copy_b = on; }
CopyKernel gemm_copy_kernel(const KernelInfo *kn) { return copy_b ? kn->copy : NULL; }

// Whether row panel p of the chunk at i0 is read in place: a whole panel of op(A) = A, a
// kernel set with the tile for it, and rows not a multiple of 4 KiB apart (such rows fall
// in one set of L1, which holds 8 of the tile's 12: mixtral-small's chunked products with
// K = 1024 took 1.05-1.12x the time of packed panels in a step's profile). gemm_stream_pack
// packs the others.
static int a_in_place = 1;   // gemm_set_a_in_place
void gemm_set_a_in_place(int on) { a_in_place = on; }
static int panel_in_place(const KernelInfo *kn, const GemmArgs *g, int i0, int p) {
    return a_in_place && kn->ain && !g->A16 && g->ak == 1 && g->ai % 1024 != 0 && g->M - i0 - p * kn->mr >= kn->mr;
}

static void kernel_scalar(int kc, const float *Ap, const float *Bp, int ldb, float *C, int ldc, int load,
                          const float *old, int ldo) {
    float c[4][8];
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 8; j++) c[r][j] = load ? C[(size_t)r * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++, Ap += 4, Bp += ldb)
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 8; j++) c[r][j] = fmaf(Ap[r], Bp[j], c[r][j]);
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 8; j++)
            C[(size_t)r * ldc + j] = old ? old[(size_t)r * ldo + j] + c[r][j] : c[r][j];
}

// The tiles read op(A) from a packed panel (lda = 0: the k-th values of the rows at Ap +
// k*mr) or, on the in-place paths, where it lies (row r at Ap + r*lda: panel_in_place). Each
// value is broadcast in the same order either way: the same chains, the same bits. Packing
// op(A) = A is a transposition, the one part of an in-place product besides the tile, and
// costs more the fewer columns share it; in place, row pointers a few rows apart and the
// row stride in the addresses take its place. On the Zen 4 of docs/performance.md,
// build/gemm_bench's "ain" lines, 2 threads, cold, packed against in place, AVX-512:
// (2048,512)@(512,256) 186 -> 200 GFLOP/s, (1024,512)@(512,384) 188 -> 198,
// (256,512)@(512,512) 175 -> 194, (768,512)@(512,1024) 203 -> 206; AVX2: 177 -> 192, 181 ->
// 187, 158 -> 156, 199 -> 203; one thread 0.99-1.06x.

// The tile of C (rows x cols, rows ldc apart) asked for, for writing, as the tile starts: its
// lines are stored (and read, with accumulate) only after the kc steps, and a product's C was
// last touched long before, so they come from memory; asked first, they are at hand by then.
// A prefetch changes no arithmetic and never faults. On the Zen 4, 2 threads, cold, the two
// builds in turn (medians of 41-61): the deepseek-small experts' (M,512)@(512,384) at M = 512
// to 2048 and its dy @ w^T 0.98-1.00x the time on AVX-512, 0.95x on AVX2; A^T @ B with
// accumulate 0.92x and 0.88x.
__attribute__((always_inline)) static inline void prefetch_c(const float *C, int ldc, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        __builtin_prefetch(C + (size_t)r * ldc, 1, 3);
        __builtin_prefetch(C + (size_t)r * ldc + cols - 1, 1, 3);
    }
}

// The next row panel's rows, a cache line of each every 16 k-steps, asked into L2 while
// this tile runs (next: see InPlaceKernel). Read in place, a panel's rows are short runs
// (2 KiB at K = 512) that start cold on the first column panel, and the hardware
// prefetchers pick each up late. On the Zen 4, 2 threads, operands cold, the two builds in
// one process in turn (medians of 31-61), new/old time: the experts' (M,512)@(512,1024) and
// (M,512)@(512,384) at M = 700-2048 0.982-0.999 on AVX-512 (median of 15: 0.989), 0.95-0.98
// on AVX2; the chunked products' pieces 1.00 (gemm_tree.c leaves it off).
__attribute__((always_inline)) static inline void prefetch_a(const float *next, size_t lda, int rows, int k) {
    if (next && !(k & 15))
        for (int r = 0; r < rows; r++) _mm_prefetch((const char *)(next + (size_t)r * lda + k), _MM_HINT_T1);
}

// 6 rows x 16 columns in twelve 8-wide registers, the rows in place from two pointers (rows
// 0 and 3). Bc, where not NULL, receives the B panel's rows as they are read (gemm_stream:
// the copy the next row panels read).
__attribute__((target("avx2,fma"), always_inline))
static inline void tile_avx2(int kc, const float *Ap, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                             int load, const float *old, int ldo, float *Bc, const float *next) {
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        c[r][0] = load ? _mm256_loadu_ps(C + (size_t)r * ldc) : _mm256_setzero_ps();
        c[r][1] = load ? _mm256_loadu_ps(C + (size_t)r * ldc + 8) : _mm256_setzero_ps();
    }
    prefetch_c(C, ldc, 6, 16);
    size_t rs = lda ? lda : 1, step = lda ? 1 : 6;   // from row to row; from k to k
    const float *p0 = Ap, *p1 = Ap + 3 * rs;
    for (int k = 0; k < kc; k++, p0 += step, p1 += step, Bp += ldb) {
        prefetch_b(Bp, ldb, 8);
        prefetch_a(next, lda, 6, k);
        __m256 b0 = _mm256_loadu_ps(Bp), b1 = _mm256_loadu_ps(Bp + 8);
        if (Bc) {
            _mm256_store_ps(Bc + 16 * (size_t)k, b0);
            _mm256_store_ps(Bc + 16 * (size_t)k + 8, b1);
        }
        const float *p[2] = {p0, p1};
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++)
#pragma GCC unroll 3
            for (int s = 0; s < 3; s++) {   // row 3q + s
                __m256 a = _mm256_broadcast_ss(p[q] + s * rs);
                c[3 * q + s][0] = _mm256_fmadd_ps(a, b0, c[3 * q + s][0]);
                c[3 * q + s][1] = _mm256_fmadd_ps(a, b1, c[3 * q + s][1]);
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
__attribute__((target("avx2,fma")))
static void kernel_avx2(int kc, const float *Ap, const float *Bp, int ldb, float *C, int ldc, int load,
                        const float *old, int ldo) {
    tile_avx2(kc, Ap, 0, Bp, ldb, C, ldc, load, old, ldo, NULL, NULL);
}
__attribute__((target("avx2,fma")))
static void kernel_avx2_copy(int kc, const float *Ap, const float *Bp, int ldb, float *C, int ldc, int load,
                             const float *old, int ldo, float *Bc) {
    tile_avx2(kc, Ap, 0, Bp, ldb, C, ldc, load, old, ldo, Bc, NULL);
}
__attribute__((target("avx2,fma")))
static void kernel_avx2_ain(int kc, const float *A, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                            const float *old, int ldo, float *Bc, const float *next) {
    if (Bc) tile_avx2(kc, A, lda, Bp, ldb, C, ldc, 0, old, ldo, Bc, next);
    else if (next) tile_avx2(kc, A, lda, Bp, ldb, C, ldc, 0, old, ldo, NULL, next);
    else tile_avx2(kc, A, lda, Bp, ldb, C, ldc, 0, old, ldo, NULL, NULL);   // no stores nor prefetches in the loop
}

// 12 rows x 32 columns in twenty-four 16-wide registers, the rows in place from four
// pointers (rows 0, 3, 6 and 9); Bc as tile_avx2's.
__attribute__((target("avx512f"), always_inline))
static inline void tile_avx512(int kc, const float *Ap, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                               int load, const float *old, int ldo, float *Bc, const float *next) {
    __m512 c[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        c[r][0] = load ? _mm512_loadu_ps(C + (size_t)r * ldc) : _mm512_setzero_ps();
        c[r][1] = load ? _mm512_loadu_ps(C + (size_t)r * ldc + 16) : _mm512_setzero_ps();
    }
    prefetch_c(C, ldc, 12, 32);
    size_t rs = lda ? lda : 1, step = lda ? 1 : 12;   // from row to row; from k to k
    const float *p0 = Ap, *p1 = Ap + 3 * rs, *p2 = Ap + 6 * rs, *p3 = Ap + 9 * rs;
    for (int k = 0; k < kc; k++, p0 += step, p1 += step, p2 += step, p3 += step, Bp += ldb) {
        prefetch_b(Bp, ldb, 16);
        prefetch_a(next, lda, 12, k);
        __m512 b0 = _mm512_loadu_ps(Bp), b1 = _mm512_loadu_ps(Bp + 16);
        if (Bc) {
            _mm512_store_ps(Bc + 32 * (size_t)k, b0);
            _mm512_store_ps(Bc + 32 * (size_t)k + 16, b1);
        }
        const float *p[4] = {p0, p1, p2, p3};
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
#pragma GCC unroll 3
            for (int s = 0; s < 3; s++) {   // row 3q + s
                __m512 a = _mm512_set1_ps(p[q][s * rs]);
                c[3 * q + s][0] = _mm512_fmadd_ps(a, b0, c[3 * q + s][0]);
                c[3 * q + s][1] = _mm512_fmadd_ps(a, b1, c[3 * q + s][1]);
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
__attribute__((target("avx512f")))
static void kernel_avx512(int kc, const float *Ap, const float *Bp, int ldb, float *C, int ldc, int load,
                          const float *old, int ldo) {
    tile_avx512(kc, Ap, 0, Bp, ldb, C, ldc, load, old, ldo, NULL, NULL);
}
__attribute__((target("avx512f")))
static void kernel_avx512_copy(int kc, const float *Ap, const float *Bp, int ldb, float *C, int ldc, int load,
                               const float *old, int ldo, float *Bc) {
    tile_avx512(kc, Ap, 0, Bp, ldb, C, ldc, load, old, ldo, Bc, NULL);
}
__attribute__((target("avx512f")))
static void kernel_avx512_ain(int kc, const float *A, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                              const float *old, int ldo, float *Bc, const float *next) {
    if (Bc) tile_avx512(kc, A, lda, Bp, ldb, C, ldc, 0, old, ldo, Bc, next);
    else if (next) tile_avx512(kc, A, lda, Bp, ldb, C, ldc, 0, old, ldo, NULL, next);
    else tile_avx512(kc, A, lda, Bp, ldb, C, ldc, 0, old, ldo, NULL, NULL);   // no stores nor prefetches in the loop
}

__attribute__((target("avx512f")))
static void kernel_avx512_t(int kc, const float *const *w, const float *Ap, float *T) {
    __m512 c[12][2];
    const float *p[12];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        c[r][0] = c[r][1] = _mm512_setzero_ps();
        p[r] = w[r];
    }
    for (int k = 0; k < kc; k++, Ap += 32) {
        __m512 a0 = _mm512_load_ps(Ap), a1 = _mm512_load_ps(Ap + 16);
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++) {
            __m512 b = _mm512_set1_ps(p[r][k]);
            c[r][0] = _mm512_fmadd_ps(a0, b, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(a1, b, c[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) {
        _mm512_store_ps(T + r * 32, c[r][0]);
        _mm512_store_ps(T + r * 32 + 16, c[r][1]);
    }
}

// The same for AVX2: 6 columns of C by 16 rows in the lanes, from a panel Ap (kc, 16);
// T[r*16 + l] receives the chain of C(i0+l, j0+r). Twelve accumulators, two A vectors and
// a broadcast fill the sixteen registers.
__attribute__((target("avx2,fma")))
static void kernel_avx2_t(int kc, const float *const *w, const float *Ap, float *T) {
    __m256 c[6][2];
    const float *p[6];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        c[r][0] = c[r][1] = _mm256_setzero_ps();
        p[r] = w[r];
    }
    for (int k = 0; k < kc; k++, Ap += 16) {
        __m256 a0 = _mm256_load_ps(Ap), a1 = _mm256_load_ps(Ap + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
            __m256 b = _mm256_broadcast_ss(p[r] + k);
            c[r][0] = _mm256_fmadd_ps(a0, b, c[r][0]);
            c[r][1] = _mm256_fmadd_ps(a1, b, c[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        _mm256_store_ps(T + r * 16, c[r][0]);
        _mm256_store_ps(T + r * 16 + 8, c[r][1]);
    }
}

// ---- Packing. A panel is w consecutive rows or columns of an operand laid out k-major, so
// that the micro-kernel reads it with unit stride. Where the operand holds those w lines
// with k contiguous (op(A) = A row-major, op(B) = W^T with W row-major, op(A)^T for the
// transposed tile), packing is a transposition: pack_t, in a plain loop and with
// in-register transposes of 16 x 16 (AVX-512) or 8 x 8 (AVX2) blocks. All three write the
// same panel; each kernel set below packs with its own instruction set. ----

static void pack_t_scalar(float *P, int w, const float *X, size_t ld, int r0, int rows, int k0, int kc) {
    for (int r = 0; r < rows; r++) {
        const float *x = X + (size_t)(r0 + r) * ld + k0;
        for (int k = 0; k < kc; k++) P[(size_t)k * w + r] = x[k];
    }
    for (int r = rows; r < w; r++)
        for (int k = 0; k < kc; k++) P[(size_t)k * w + r] = 0.0f;
}

// v[r] (16 floats of line r) -> v[k] (the k-th float of every line), in 64 shuffles:
// pairs of lines interleaved, then quadruples within each 128-bit lane, then the lanes.
__attribute__((target("avx512f")))
static inline void transpose16(__m512 v[16]) {
    __m512 t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {   // v[i+j], lane L: element 4L+j of lines i .. i+3
        v[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        v[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        v[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        v[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {   // lane L of v[j], v[4+j], v[8+j], v[12+j] -> line 4L+j
        __m512 u0 = _mm512_shuffle_f32x4(v[j], v[4 + j], 0x88), u1 = _mm512_shuffle_f32x4(v[j], v[4 + j], 0xDD);
        __m512 u2 = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0x88);
        __m512 u3 = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0xDD);
        t[j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
        t[8 + j] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
        t[4 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
    }
    for (int i = 0; i < 16; i++) v[i] = t[i];
}

// Groups of 16 lines by 16 k: masked loads (lines past `rows` are zeros, k past kc is not
// read) and masked stores of the group's lines within w.
__attribute__((target("avx512f")))
static void pack_t_avx512(float *P, int w, const float *X, size_t ld, int r0, int rows, int k0, int kc) {
    for (int g = 0; g < w; g += 16) {
        __mmask16 lines = (__mmask16)((1u << imin(16, w - g)) - 1);
        for (int k = 0; k < kc; k += 16) {
            int kn = imin(16, kc - k);
            __mmask16 ks = (__mmask16)((1u << kn) - 1);
            __m512 v[16];
            for (int r = 0; r < 16; r++)
                v[r] = g + r < rows ? _mm512_maskz_loadu_ps(ks, X + (size_t)(r0 + g + r) * ld + k0 + k)
                                    : _mm512_setzero_ps();
            transpose16(v);
            for (int i = 0; i < kn; i++) _mm512_mask_storeu_ps(P + (size_t)(k + i) * w + g, lines, v[i]);
        }
    }
}

// v[r] (8 floats of line r) -> v[k], in 24 shuffles.
__attribute__((target("avx2")))
static inline void transpose8(__m256 v[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {   // s[i+j], lane L: element 4L+j of lines i .. i+3
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x20);
        v[4 + j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x31);
    }
}

// The first n (<= 8) floats of v at p. Masked loads and stores (vmaskmovps) are slow on
// AMD's cores, so whole vectors and the A panel's 6 floats take plain ones: on a Zen 4
// the AVX2 set's products that transpose op(A) ran 1.04-1.20x faster, 2 threads, cold
// ((2048,512)@(512,256) 153 -> 184 GFLOP/s), AVX-512's masked ones (native there) gaining
// nothing from the same change.
__attribute__((target("avx2"), always_inline))
static inline void store_first(float *p, int n, __m256i mask, __m256 v) {
    if (n == 8) _mm256_storeu_ps(p, v);
    else if (n == 6) {
        _mm_storeu_ps(p, _mm256_castps256_ps128(v));
        _mm_storel_pi((__m64 *)(p + 4), _mm256_extractf128_ps(v, 1));
    } else _mm256_maskstore_ps(p, mask, v);
}

// Groups of 8 lines by 8 k, as pack_t_avx512 (AVX2's masks are vectors of lanes); whole
// groups without masks.
__attribute__((target("avx2")))
static void pack_t_avx2(float *P, int w, const float *X, size_t ld, int r0, int rows, int k0, int kc) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int g = 0; g < w; g += 8) {
        int n = imin(8, w - g);
        __m256i lines = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
        for (int k = 0; k < kc; k += 8) {
            int kn = imin(8, kc - k);
            __m256i ks = _mm256_cmpgt_epi32(_mm256_set1_epi32(kn), lane);
            __m256 v[8];
            for (int r = 0; r < 8; r++) {
                const float *x = X + (size_t)(r0 + g + r) * ld + k0 + k;
                v[r] = g + r >= rows ? _mm256_setzero_ps() : kn == 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, ks);
            }
            transpose8(v);
            for (int i = 0; i < kn; i++) store_first(P + (size_t)(k + i) * w + g, n, lines, v[i]);
        }
    }
}

static const KernelInfo kernels[] = {
    [GEMM_KERNEL_SCALAR] = {kernel_scalar, 4, 8, "scalar 4x8", NULL, 0, 0, 0, pack_t_scalar, NULL, NULL},
    [GEMM_KERNEL_AVX2] = {kernel_avx2, 6, 16, "avx2 6x16", kernel_avx2_t, 6, 16, STREAM_M_WT_AVX2, pack_t_avx2,
                          kernel_avx2_copy, kernel_avx2_ain},
    [GEMM_KERNEL_AVX512] = {kernel_avx512, 12, 32, "avx512 12x32", kernel_avx512_t, 12, 32, STREAM_M_WT,
                            pack_t_avx512, kernel_avx512_copy, kernel_avx512_ain},
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

const KernelInfo *gemm_kernel_pick(void) {
    if (forced != GEMM_KERNEL_AUTO) return &kernels[forced];
    if (gemm_kernel_available(GEMM_KERNEL_AVX512)) return &kernels[GEMM_KERNEL_AVX512];
    if (gemm_kernel_available(GEMM_KERNEL_AVX2)) return &kernels[GEMM_KERNEL_AVX2];
    return &kernels[GEMM_KERNEL_SCALAR];
}

const char *gemm_kernel_name(void) { return gemm_kernel_pick()->name; }

void gemm_kernel_from_env(void) {
    const char *v = getenv("MESHMOE_GEMM_KERNEL");
    if (!v) return;
    GemmKernel k = !strcmp(v, "avx512") ? GEMM_KERNEL_AVX512 : !strcmp(v, "avx2") ? GEMM_KERNEL_AVX2
                 : !strcmp(v, "scalar") ? GEMM_KERNEL_SCALAR : GEMM_KERNEL_AUTO;
    if (k == GEMM_KERNEL_AUTO) die("MESHMOE_GEMM_KERNEL='%s' is not one of: avx512, avx2, scalar", v);
    if (!gemm_kernel_available(k)) die("MESHMOE_GEMM_KERNEL=%s: this CPU does not run that kernel", v);
    gemm_force_kernel(k);
}

void gemm_pack_lines(float *P, int w, const float *X, size_t ld, int rows, int kc) {
    gemm_kernel_pick()->pack(P, w, X, ld, 0, rows, 0, kc);
}

// Ap (kc, mr) k-major: Ap[k*mr + r] = op(A)(i0+r, k0+k), 0 for r >= rows.
// op(A)(i, k) = A[i*ai + k*ak] (or A16's, widened).
static void pack_a(const KernelInfo *kn, float *Ap, const GemmArgs *g, int i0, int rows, int k0, int kc, int mr) {
    if (g->A16) {
        gemm_pack_a16(kn, Ap, g, i0, rows, k0, kc, mr);
        return;
    }
    const float *A = g->A;
    size_t ai = g->ai, ak = g->ak;
    if (ak == 1) {   // op(A) = A: a row is a contiguous run of k
        kn->pack(Ap, mr, A, ai, i0, rows, k0, kc);
        return;
    }
    for (int k = 0; k < kc; k++) {   // op(A) = A^T: a k is a contiguous run of rows
        const float *a = A + (size_t)(k0 + k) * ak + i0;
        float *p = Ap + (size_t)k * mr;
        for (int r = 0; r < rows; r++) p[r] = a[r];
        for (int r = rows; r < mr; r++) p[r] = 0.0f;
    }
}

// Bp (kc, nr) k-major: Bp[k*nr + c] = op(B)(k0+k, j0+c), 0 for c >= cols.
// op(B)(k, j) = B[k*bk + j*bj].
void gemm_pack_b(const KernelInfo *kn, float *Bp, const float *B, size_t bk, size_t bj, int j0, int cols, int k0,
                   int kc, int nr) {
    if (bk == 1) {   // op(B) = B^T: a column is a contiguous run of k
        kn->pack(Bp, nr, B, bj, j0, cols, k0, kc);
        return;
    }
    for (int k = 0; k < kc; k++) {   // op(B) = B: a k is a contiguous run of columns
        const float *b = B + (size_t)(k0 + k) * bk + j0;
        float *p = Bp + (size_t)k * nr;
        for (int c = 0; c < cols; c++) p[c] = b[c];
        for (int c = cols; c < nr; c++) p[c] = 0.0f;
    }
}

void gemm_pack_b_of(const KernelInfo *kn, float *Bp, const GemmArgs *g, int j0, int cols, int k0, int kc, int nr) {
    if (g->B16) gemm_pack_b16(kn, Bp, g, j0, cols, k0, kc, nr);
    else gemm_pack_b(kn, Bp, g->B, g->bk, g->bj, j0, cols, k0, kc, nr);
}

// op(A) = A^T: rows k0 .. k1-1 of every panel of `rows` rows of op(A), read from `a`, the
// contiguous run of those rows at k0 in A (its rows ak apart), panel by panel, so that each
// panel's piece of those rows is written in one run. Row by row, the pieces written one after
// the other are kc*mr floats apart (96 KiB at K = 2048), all in the same few sets of L1, and
// each write misses; the k1-k0 rows read stay in the caches while their panels go. A full
// panel's piece of a row is a copy of constant size, which the compiler inlines, instead of
// a call into the C library for every 48 bytes. AT_ROWS rows at a time against one: the
// weight gradients' trees of 8 leaves, cold, 2 threads, the two builds in one harness in
// turn (medians of 41, old/new time, AMD Zen 4): (512,256) at K = 2048 1.05-1.06, (512,384)
// at K = 512 and 1024 1.00-1.04, (512,512), (384,512) and (512,1024) 1.01-1.02; the AVX2
// tile 1.10 at (512,256); 8 or 32 rows instead of 16, 0.99-1.05.
enum { AT_ROWS = 16 };
static void pack_at_rows(float *Ap, const float *a, size_t ak, int rows, int k0, int k1, int kc, int mr) {
    for (int i = 0; i < rows; i += mr) {
        int n = imin(mr, rows - i);
        for (int k = k0; k < k1; k++) {
            float *p = Ap + (size_t)i * kc + (size_t)k * mr;
            const float *x = a + (size_t)(k - k0) * ak + i;
            if (n == 12) memcpy(p, x, 12 * sizeof(float));
            else if (n == 6) memcpy(p, x, 6 * sizeof(float));
            else memcpy(p, x, sizeof(float) * n);
            for (int r = n; r < mr; r++) p[r] = 0.0f;
        }
    }
}

// A tile at the edge of C (rows < mr or cols < nr): the kernel runs on a full tile on the
// stack, holding the valid elements' partial chains and old values, and the valid ones are
// copied back. op(A) from a packed panel Ap (lda = 0), or read in place at Ap, rows lda
// apart (whole panels only, load = 0).
static void edge_tile(const KernelInfo *kn, int kc, const float *Ap, size_t lda, const float *Bp, int ldb, float *C,
                      int ldc, int rows, int cols, int load, const float *old, int ldo) {
    float tile[MR_MAX * NR_MAX] = {0}, otile[MR_MAX * NR_MAX] = {0};
    int nr = kn->nr;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            if (load) tile[r * nr + c] = C[(size_t)r * ldc + c];
            if (old) otile[r * nr + c] = old[(size_t)r * ldo + c];
        }
    if (lda) kn->ain(kc, Ap, lda, Bp, ldb, tile, nr, old ? otile : NULL, nr, NULL, NULL);
    else kn->fn(kc, Ap, Bp, ldb, tile, nr, load, old ? otile : NULL, nr);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) C[(size_t)r * ldc + c] = tile[r * nr + c];
}

// Rows [i0, i0+mc) by columns [j0, j0+nc) of C, K block [k0, k0+kc), the B block packed in
// Bp (nc/nr panels of kc x nr); Ap is this thread's A buffer; save (row stride nc) holds the
// old values of C's column block when accumulate takes more than one K block.
static void gemm_rows(const KernelInfo *kn, const GemmArgs *g, int i0, int mc, int j0, int nc, int k0, int kc,
                      const float *Bp, float *Ap, const float *save) {
    int mr = kn->mr, nr = kn->nr, last = k0 + kc == g->K, split = g->K > kc || k0 > 0;
    for (int ir = 0; ir < mc; ir += mr)
        pack_a(kn, Ap + (size_t)ir * kc, g, i0 + ir, imin(mr, mc - ir), k0, kc, mr);
    for (int jr = 0; jr < nc; jr += nr)
        for (int ir = 0; ir < mc; ir += mr) {
            float *c = g->C + (size_t)(i0 + ir) * g->ldc + j0 + jr;
            const float *old = NULL;
            int ldo = g->ldc;
            if (last && g->accumulate) {
                old = split ? save + (size_t)(i0 + ir) * nc + jr : c;
                ldo = split ? nc : g->ldc;
            }
            int rows = imin(mr, mc - ir), cols = imin(nr, nc - jr);
            const float *a = Ap + (size_t)ir * kc, *b = Bp + (size_t)jr * kc;
            if (rows == mr && cols == nr) kn->fn(kc, a, b, nr, c, g->ldc, k0 > 0, old, ldo);
            else edge_tile(kn, kc, a, 0, b, nr, c, g->ldc, rows, cols, k0 > 0, old, ldo);
        }
}

float *gemm_buffer(size_t floats) {
    float *p = aligned_alloc(64, (sizeof(float) * floats + 63) / 64 * 64);
    if (!p) die("out of host memory for the GEMM's packing buffers (%zu floats)", floats);
    return p;
}

// Work items of the in-place paths: a column panel over a run of a chunk's row panels. The
// column panels alone go to the threads when they split evenly; otherwise (5 panels on 2
// threads, or one narrow panel) each panel's rows are cut into as many runs as there are
// threads. The runs per panel.
int gemm_row_runs(int cpanels, int par) {
    int threads = 1;
#ifdef _OPENMP
    if (par) threads = omp_get_max_threads();
#endif
    return cpanels % threads ? threads : 1;
}

// Whether each thread runs its own row panels of a chunk over every column panel (gemm_stream
// says why): where the row panels split evenly over the threads or number 4 per thread.
int gemm_own_rows(int panels, int threads) { return panels % threads == 0 || panels >= 4 * threads; }

// The calling thread's place in its team: *threads of them, this one *t.
void gemm_team_place(int *threads, int *t) {
    *threads = 1, *t = 0;
#ifdef _OPENMP
    *threads = omp_get_num_threads();
    *t = omp_get_thread_num();
#endif
}

// Row panels [p0, p1) of the chunk of `rows` rows at i0, op(A) packed into Ap (k-major,
// a panel of mr rows after another), by the calling thread.
void gemm_stream_pack(const KernelInfo *kn, const GemmArgs *g, float *Ap, int i0, int rows, int p0, int p1) {
    int mr = kn->mr, K = g->K;
    // op(A) = A: each panel a transposition (a whole one read in place instead); 16-bit: each
    // panel widened
    if (g->ak == 1 || g->A16) {
        for (int p = p0; p < p1; p++)
            if (!panel_in_place(kn, g, i0, p))
                pack_a(kn, Ap + (size_t)p * mr * K, g, i0 + p * mr, imin(mr, rows - p * mr), 0, K, mr);
        return;
    }
    int r0 = p0 * mr, n = imin(p1 * mr, rows) - r0;   // op(A) = A^T: AT_ROWS rows of A at a time
    for (int k0 = 0; k0 < K && n > 0; k0 += AT_ROWS)
        pack_at_rows(Ap + (size_t)r0 * K, g->A + (size_t)k0 * g->ak + i0 + r0, g->ak, n, k0, imin(K, k0 + AT_ROWS), K, mr);
}

// The column panel at jr run down row panels [p0, p1) of the chunk at i0. Read where it lies,
// a panel's rows are a row of B apart, 2 or 4 KiB at the experts' 512 and 1024 columns: they
// fall in a few sets of L1 and L2, which hold only some of them, and every row panel would
// read the panel again from further out. So the first row panel runs the copy kernel, which
// stores each row of the panel into the thread's Be as it reads it (two stores per k, the
// loads it makes anyway), and the others read Be at unit stride; a partial panel is packed
// first. On the Intel Xeon of docs/performance.md, against reading B in place for every row
// panel, cold, medians of 15 in turn: (M,1024,512) at M = 256 to 2048 1.73-1.84x on one
// thread and 1.01-1.16x on two; (M,384,512) and (M,256,512), whose strides share fewer sets,
// 0.83-1.25x and 0.94-1.02x; the AVX2 tile 1.02-1.39x over the copy it made before of its
// whole panel where it had many row panels. The chains are the kernel's own either way.
// first: the thread's first column panel over these rows, the one that reads them from
// memory (each tile asks for the next panel's rows: prefetch_a).
static void stream_tiles(const KernelInfo *kn, const GemmArgs *g, const float *Ap, float *Be, int i0, int jr,
                         int p0, int p1, int first) {
    int mr = kn->mr, nr = kn->nr, K = g->K, cols = imin(nr, g->N - jr), ldb = (int)g->bk;
    const float *b = g->B + jr;
    if (cols < nr) {
        gemm_pack_b(kn, Be, g->B, g->bk, 1, jr, cols, 0, K, nr);
        b = Be;
        ldb = nr;
    }
    for (int p = p0; p < p1; p++) {
        int rows = imin(mr, g->M - i0 - p * mr), copy = rows == mr && b != Be && p + 1 < p1 && gemm_copy_kernel(kn);
        float *c = g->C + (size_t)(i0 + p * mr) * g->ldc + jr;
        gemm_panel_tile(kn, g, Ap, i0, p, 0, K, b, ldb, c, g->ldc, rows, cols, g->accumulate ? c : NULL, g->ldc,
                        copy ? Be : NULL, first && p + 1 < p1);
        if (copy) {
            b = Be;
            ldb = nr;
        }
    }
}

void gemm_panel_tile(const KernelInfo *kn, const GemmArgs *g, const float *Ap, int i0, int p, int k0, int kc,
                     const float *b, int ldb, float *c, int ldc, int rows, int cols, const float *old, int ldo,
                     float *Bc, int ahead) {
    int mr = kn->mr;
    const float *a = Ap + ((size_t)p * g->K + k0) * mr;
    size_t lda = 0;
    if (panel_in_place(kn, g, i0, p)) {
        a = g->A + (size_t)(i0 + p * mr) * g->ai + k0;
        lda = g->ai;
    }
    if (rows < mr || cols < kn->nr) edge_tile(kn, kc, a, lda, b, ldb, c, ldc, rows, cols, 0, old, ldo);
    else if (lda) {
        const float *next = ahead && panel_in_place(kn, g, i0, p + 1) ? a + mr * lda : NULL;
        kn->ain(kc, a, lda, b, ldb, c, ldc, old, ldo, Bc, next);
    }
    else if (Bc) kn->copy(kc, a, b, ldb, c, ldc, 0, old, ldo, Bc);
    else kn->fn(kc, a, b, ldb, c, ldc, 0, old, ldo);
}

// op(B) = B, K within one block: a k of a B panel is a contiguous run of columns, so the
// micro-kernel reads B where it lies and no B block is packed. Packing B copies all K x N
// of it, as much memory traffic as the product reads: at 32 rows it costs more than the
// FMAs, and at 512 rows it still costs more than the strided reads of B save
// (build/gemm_bench's "few rows" lines). Rows go in chunks of MS; a B panel is read from B
// once per chunk by each thread that runs it. K runs in one pass, so every chain starts at
// 0 and the old value (accumulate) is added to the finished chain, read from C itself. A
// last, partial column panel is packed (zero-padded); a whole one is copied by the first row
// panel that reads it (stream_tiles).
//
// The threads' work: where the chunk's row panels split evenly over the threads, or there
// are at least 4 per thread, each thread packs its own run of row panels and runs every
// column panel down them, so that it reads only the A panels it wrote, from its own
// cache. On an Intel Xeon (Emerald Rapids), where a line another core wrote comes over
// the mesh, nine of the presets' shapes took 0.93-1.00x the time of the column split below
// in all (four runs; the two in turn product by product, cold, 2 threads, median of 15;
// one shape alone moved from 0.80x to 1.16x with the machine), and a whole step 0.90x
// (mixtral-small, remat_policy=none, medians of six runs each in turn: 1664 against 1858
// ms; deepseek-small 1507 against 1598); the chunked products (gemm_chunked) 0.93-0.98x
// over four of theirs. Not measured on AMD's cores (whose two cores share an L3) nor with
// the AVX2 tile. Otherwise (few rows) the threads pack the chunk together and take column
// panels, each panel's rows cut into as many runs as there are threads where the column
// panels do not split evenly (row_runs).
static void gemm_stream(const KernelInfo *kn, const GemmArgs *g, int par) {
    int mr = kn->mr, nr = kn->nr, M = g->M, N = g->N, K = g->K, ms = imin(M, MS);
    int cpanels = (N + nr - 1) / nr, runs = gemm_row_runs(cpanels, par);
    float *Ap = gemm_buffer((size_t)(ms + mr - 1) / mr * mr * K);
    #pragma omp parallel if (par)
    {
        float *Be = gemm_buffer((size_t)K * nr);
        int threads, t;
        gemm_team_place(&threads, &t);
        for (int i0 = 0; i0 < M; i0 += ms) {
            int rows = imin(ms, M - i0), panels = (rows + mr - 1) / mr;
            if (gemm_own_rows(panels, threads)) {   // each thread its own rows
                int p0 = panels * t / threads, p1 = panels * (t + 1) / threads;
                gemm_stream_pack(kn, g, Ap, i0, rows, p0, p1);
                for (int jr = 0; jr < N; jr += nr) stream_tiles(kn, g, Ap, Be, i0, jr, p0, p1, jr == 0);
                #pragma omp barrier   // before the next chunk is packed into Ap
                continue;
            }
            if (g->ak == 1) {
                #pragma omp for schedule(static)
                for (int p = 0; p < panels; p++) gemm_stream_pack(kn, g, Ap, i0, rows, p, p + 1);
            } else {
                #pragma omp for schedule(static)
                for (int k = 0; k < K; k++) pack_at_rows(Ap, g->A + (size_t)k * g->ak + i0, g->ak, rows, k, k + 1, K, mr);
            }
            #pragma omp for schedule(static)
            for (int item = 0; item < cpanels * runs; item++) {
                int run = item % runs;
                stream_tiles(kn, g, Ap, Be, i0, item / runs * nr, panels * run / runs, panels * (run + 1) / runs, 0);
            }
        }
        free(Be);
    }
    free(Ap);
}

// Few rows, op(B) = W^T with W (N,K) stored row-major: packing W^T into k-major panels is
// a transposition of all of W, again more work than a product of few rows. Instead the
// transposed tile reads the weight rows where they lie, one broadcast per row and k, while
// the rows of C run in the vector lanes from a panel of op(A)^T (cheap to pack: few rows).
// Each thread packs all of op(A)^T, then takes groups of tn columns of C; a group at the
// right edge repeats its last row of W and drops those lanes. K runs in one pass, and the
// old value (accumulate) is added to the finished chain.
static void gemm_stream_t(const KernelInfo *kn, const GemmArgs *g, int par) {
    int tn = kn->tn, tl = kn->tl, M = g->M, N = g->N, K = g->K, panels = (M + tl - 1) / tl;
    float *Ap = gemm_buffer((size_t)panels * tl * K);
    #pragma omp parallel if (par)
    {
        float *T = gemm_buffer((size_t)tn * tl);
        const float *w[MR_MAX];
        #pragma omp for schedule(static)
        for (int p = 0; p < panels; p++)   // Ap[k*tl + l] = op(A)(p*tl + l, k)
            gemm_pack_b(kn, Ap + (size_t)p * tl * K, g->A, g->ak, g->ai, p * tl, imin(tl, M - p * tl), 0, K, tl);
        #pragma omp for schedule(static)
        for (int j0 = 0; j0 < N; j0 += tn) {
            int cols = imin(tn, N - j0);
            for (int r = 0; r < tn; r++) w[r] = g->B + (size_t)(j0 + imin(r, cols - 1)) * g->bj;
            for (int p = 0; p < panels; p++) {
                kn->tfn(K, w, Ap + (size_t)p * tl * K, T);
                for (int l = 0; l < imin(tl, M - p * tl); l++) {
                    float *c = g->C + (size_t)(p * tl + l) * g->ldc + j0;
                    for (int r = 0; r < cols; r++) c[r] = g->accumulate ? c[r] + T[r * tl + l] : T[r * tl + l];
                }
            }
        }
        free(T);
    }
    free(Ap);
}

// The kernel set for a product: the CPU's (or the forced one), but at most 16 columns fill
// the AVX2 kernel's 16-wide tile and half of the AVX-512 one's (a router's 8 or 16 experts).
// Where op(A) = A^T (a weight gradient's leaf, whose A panels are plain copies) the narrower
// tile does half the work, with the same bits: 2x on the router's leaf (512,256)^T @
// (256,16). Where op(A) = A the panels are transpositions, and the AVX-512 set's 16 x 16
// ones are much the cheaper part of such a product: the AVX2 tile came out at 0.5-0.6x
// there (the product timed alone, cold).
static const KernelInfo *kernels_for(int transA, int N) {
    const KernelInfo *kn = gemm_kernel_pick();
    if (transA && N <= 16 && forced == GEMM_KERNEL_AUTO && kn == &kernels[GEMM_KERNEL_AVX512])
        kn = &kernels[GEMM_KERNEL_AVX2];
    return kn;
}

// K = 0: empty chains, 0, plus the old value (an expert's leaf with no rows).
static void empty_chains(int M, int N, int accumulate, float *C, int ldc) {
    for (int i = 0; i < M; i++) {
        float *o = C + (size_t)i * ldc;
        if (accumulate) onto_zero(o, o, N);
        else memset(o, 0, sizeof(float) * (size_t)N);
    }
}

// The blocked product: every operand packed, block by block (the top of this file).
void gemm_blocked(const KernelInfo *kn, const GemmArgs *g, int par) {
    int M = g->M, N = g->N, K = g->K, accumulate = g->accumulate, ldc = g->ldc;
    int mr = kn->mr, nr = kn->nr, kmax = imin(K, KC), nmax = imin(N, NC), split = K > KC;
    // Row blocks: about 4 per thread when M is small (never fewer rows than a tile).
    int threads = 1;
#ifdef _OPENMP
    if (par) threads = omp_get_max_threads();
#endif
    int mc = (M + 4 * threads - 1) / (4 * threads);
    mc = imin(MC, (mc + mr - 1) / mr * mr);
    int nrb = (M + mc - 1) / mc;
    float *Bp = gemm_buffer((size_t)kmax * ((nmax + nr - 1) / nr * nr));
    float *save = accumulate && split ? gemm_buffer((size_t)M * nmax) : NULL;
    float *C = g->C;
    // Blocks of C are independent, so they run in parallel; the split changes no bits.
    #pragma omp parallel if (par)
    {
        float *Ap = gemm_buffer((size_t)mc * kmax);
        for (int j0 = 0; j0 < N; j0 += NC) {
            int nc = imin(NC, N - j0);
            for (int k0 = 0; k0 < K; k0 += KC) {
                int kc = imin(KC, K - k0);
                if (save && k0 == 0) {   // the old values, added once the chains are finished
                    #pragma omp for schedule(static)
                    for (int i = 0; i < M; i++)
                        memcpy(save + (size_t)i * nc, C + (size_t)i * ldc + j0, sizeof(float) * nc);
                }
                #pragma omp for schedule(static)
                for (int jr = 0; jr < nc; jr += nr)
                    gemm_pack_b_of(kn, Bp + (size_t)jr * kc, g, j0 + jr, imin(nr, nc - jr), k0, kc, nr);
                #pragma omp for schedule(dynamic)
                for (int rb = 0; rb < nrb; rb++)
                    gemm_rows(kn, g, rb * mc, imin(mc, M - rb * mc), j0, nc, k0, kc, Bp, Ap, save);
            }
        }
        free(Ap);
    }
    free(Bp);
    free(save);
}

void ordered_gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                  const float *B, int ldb, int accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        empty_chains(M, N, accumulate, C, ldc);
        return;
    }
    const KernelInfo *kn = kernels_for(transA, N);
    GemmArgs g = {M, N, K, accumulate, ldc, A, B,
                  transA ? 1 : (size_t)lda, transA ? (size_t)lda : 1,
                  transB ? 1 : (size_t)ldb, transB ? (size_t)ldb : 1, C, 0, NULL, NULL};
    int par = (double)M * N * K > 1e6;
    // The in-place paths run K in one block; a longer K takes the blocked path, so that
    // their packed op(A) (MS rows at a time, or the transposed tile's few rows) stays
    // within a K block.
    if (!transB && M <= stream_b && K <= KC) {
        gemm_stream(kn, &g, par);
        return;
    }
    if (transB && kn->tfn && M <= (stream_wt >= 0 ? stream_wt : kn->wt_rows) && K <= KC) {
        gemm_stream_t(kn, &g, par);
        return;
    }
    gemm_blocked(kn, &g, par);
}

// Operands stored as bf16 bits: the blocked path, whose panels are packed from them widened
// (gemm_pack16.c); the paths that read an operand in place read floats. The same chains as
// ordered_gemm on the widened values, whichever path that takes: the same bits.
void ordered_gemm16(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                    int ldb, int accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        empty_chains(M, N, accumulate, C, ldc);
        return;
    }
    GemmArgs g = {M, N, K, accumulate, ldc, NULL, NULL,
                  transA ? 1 : (size_t)lda, transA ? (size_t)lda : 1,
                  transB ? 1 : (size_t)ldb, transB ? (size_t)ldb : 1, C, 0, A, B};
    gemm_blocked(kernels_for(transA, N), &g, (double)M * N * K > 1e6);
}
