// kernels/cpu/gemm_ain.c: the ordered GEMM's tiles that read op(A) = A where it lies, for the
// whole row panels of the in-place paths (kernels/cpu/gemm.c: gemm_panel_tile,
// gemm_a_in_place). Packing op(A) = A is a transposition, the one part of a product on those
// paths besides the tile, and it costs more the fewer columns share it. Reading the tile's
// rows where they lie (a few row pointers, the row stride in the addresses), each tile
// broadcasts the same values in the same order as from a packed panel, so every element is
// the same chain (kernels/cpu/gemm.h) and the same bits (tests/test_gemm.c runs both).
#include "kernels/cpu/gemm_parts.h"

// 12 rows x 32 columns, as kernels/cpu/gemm.c:tile_avx512, the rows from four pointers. On
// the Zen 4 of docs/performance.md, build/gemm_bench's "ain" lines, 2 threads, cold, packed
// against in place: (2048,512)@(512,256) 186 -> 200 GFLOP/s, (1024,512)@(512,384) 188 ->
// 198, (256,512)@(512,512) 175 -> 194, (768,512)@(512,1024) 203 -> 206; one thread
// 0.99-1.06x.
__attribute__((target("avx512f"), always_inline))
static inline void tile_avx512_ain(int kc, const float *A, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                                   const float *old, int ldo, float *Bc) {
    __m512 c[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < 12; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
    const float *p0 = A, *p1 = A + 3 * lda, *p2 = A + 6 * lda, *p3 = A + 9 * lda;   // rows 0, 3, 6, 9
    for (int k = 0; k < kc; k++, Bp += ldb, p0++, p1++, p2++, p3++) {
        prefetch_b(Bp, ldb, 16);
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
                __m512 a = _mm512_set1_ps(p[q][s * lda]);
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
void kernel_avx512_ain(int kc, const float *A, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                       const float *old, int ldo, float *Bc) {
    if (Bc) tile_avx512_ain(kc, A, lda, Bp, ldb, C, ldc, old, ldo, Bc);
    else tile_avx512_ain(kc, A, lda, Bp, ldb, C, ldc, old, ldo, NULL);   // no stores in the loop
}

// 6 rows x 16 columns, as kernels/cpu/gemm.c:tile_avx2, the rows from two pointers.
__attribute__((target("avx2,fma"), always_inline))
static inline void tile_avx2_ain(int kc, const float *A, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                                 const float *old, int ldo, float *Bc) {
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) c[r][0] = c[r][1] = _mm256_setzero_ps();
    const float *p0 = A, *p1 = A + 3 * lda;   // rows 0 and 3
    for (int k = 0; k < kc; k++, Bp += ldb, p0++, p1++) {
        prefetch_b(Bp, ldb, 8);
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
                __m256 a = _mm256_broadcast_ss(p[q] + s * lda);
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
void kernel_avx2_ain(int kc, const float *A, size_t lda, const float *Bp, int ldb, float *C, int ldc,
                     const float *old, int ldo, float *Bc) {
    if (Bc) tile_avx2_ain(kc, A, lda, Bp, ldb, C, ldc, old, ldo, Bc);
    else tile_avx2_ain(kc, A, lda, Bp, ldb, C, ldc, old, ldo, NULL);   // no stores in the loop
}
