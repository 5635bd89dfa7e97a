// tests/test_gemm.c: the ordered GEMM (kernels/cpu/gemm.c) on ragged shapes, every layout and
// every micro-kernel this CPU runs: bit for bit against a simple ordered kernel (below, the
// reference of the bits), and against a double-precision product; the plain triple loop
// (kernels/cpu/gemm_plain.c, matmul_impl=plain) bit for bit against the same reference.
#include "core/common.h"
#include "kernels/cpu/gemm.h"
#include "model/matmul.h"
#include "base/memory.h"
#include "kernels/bf16.h"
#include "tests/test.h"
#include <immintrin.h>
#include <math.h>

// ---- The reference of the bits: the simple ordered kernel, 6x16 AVX2 tiles and one
// element at a time for the rest, every element one fmaf chain over k from 0.0f. ----
static float ref_dot(const float *A, size_t ai, size_t ak, const float *B, int ldb, int i, int j, int K) {
    float acc = 0.0f;
    const float *a = A + (size_t)i * ai;
    for (int k = 0; k < K; k++) acc = fmaf(a[(size_t)k * ak], B[(size_t)k * ldb + j], acc);
    return acc;
}

__attribute__((target("avx2,fma")))
static void ref_rows_avx2(int i0, int i1, int j, int K, const float *A, size_t ai, size_t ak,
                          const float *B, int ldb, int accumulate, float *C, int ldc) {
    for (int i = i0; i + 6 <= i1; i += 6) {
        __m256 c[6][2];
        for (int r = 0; r < 6; r++) c[r][0] = c[r][1] = _mm256_setzero_ps();
        const float *a = A + (size_t)i * ai, *b = B + j;
        for (int k = 0; k < K; k++, b += ldb) {
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            for (int r = 0; r < 6; r++) {
                __m256 x = _mm256_broadcast_ss(a + (size_t)r * ai + (size_t)k * ak);
                c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
                c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
            }
        }
        for (int r = 0; r < 6; r++) {
            float *o = C + (size_t)(i + r) * ldc + j;
            if (accumulate) {
                c[r][0] = _mm256_add_ps(_mm256_loadu_ps(o), c[r][0]);
                c[r][1] = _mm256_add_ps(_mm256_loadu_ps(o + 8), c[r][1]);
            }
            _mm256_storeu_ps(o, c[r][0]);
            _mm256_storeu_ps(o + 8, c[r][1]);
        }
    }
}

static void ref_gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                     const float *B, int ldb, int accumulate, float *C, int ldc) {
    float *Bt = NULL;
    if (transB) {   // the simple kernel read op(B) k-major: a transposed copy
        Bt = malloc(sizeof(float) * ((size_t)K * N + 1));
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) Bt[(size_t)k * N + n] = B[(size_t)n * ldb + k];
        B = Bt;
        ldb = N;
    }
    size_t ai = transA ? 1 : (size_t)lda, ak = transA ? (size_t)lda : 1;
    int simd = gemm_kernel_available(GEMM_KERNEL_AVX2), j = 0;
    for (; simd && j + 16 <= N; j += 16) {
        int full = M / 6 * 6;
        ref_rows_avx2(0, full, j, K, A, ai, ak, B, ldb, accumulate, C, ldc);
        for (int i = full; i < M; i++)
            for (int jj = j; jj < j + 16; jj++) {
                float v = ref_dot(A, ai, ak, B, ldb, i, jj, K), *o = C + (size_t)i * ldc + jj;
                *o = accumulate ? *o + v : v;
            }
    }
    for (; j < N; j++)
        for (int i = 0; i < M; i++) {
            float v = ref_dot(A, ai, ak, B, ldb, i, j, K), *o = C + (size_t)i * ldc + j;
            *o = accumulate ? *o + v : v;
        }
    free(Bt);
}

static uint64_t rng = 12345;
static float uniform(void) {   // in [-1, 1)
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) * (1.0 / (1 << 24)) * 2.0 - 1.0);
}

// b16: the operands' values rounded to bf16 (X in place), returned as their 16-bit bits for
// the GEMM's 16-bit forms (ordered_gemm16 and its chunked and leaves twins), whose bits must
// be those of the reference on the widened values; NULL when b16 is 0.
static uint16_t *as16(int b16, float *X, size_t n) {
    if (!b16) return NULL;
    uint16_t *h = malloc(sizeof(uint16_t) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        h[i] = bf16_bits(X[i]);
        X[i] = bf16_float(h[i]);
    }
    return h;
}

// One case: every kernel against the reference bits, and the auto kernel against doubles.
// Returns the largest error relative to the bound seen. b16: the operands as 16-bit
// numbers (as16), on every kernel set (the 16-bit form packs every panel: no path to choose).
static double one_case(int tA, int tB, int M, int N, int K, int acc, int b16) {
    int lda = (tA ? M : K) + 3, ldb = (tB ? K : N) + 5, ldc = N + 7;   // strides wider than the rows
    size_t na = (size_t)(tA ? K : M) * lda, nb = (size_t)(tB ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * (na + 1)), *B = malloc(sizeof(float) * (nb + 1));
    float *C0 = malloc(sizeof(float) * nc), *want = malloc(sizeof(float) * nc), *got = malloc(sizeof(float) * nc);
    for (size_t i = 0; i < na; i++) A[i] = uniform();
    for (size_t i = 0; i < nb; i++) B[i] = uniform();
    uint16_t *A16 = as16(b16, A, na), *B16 = as16(b16, B, nb);
    for (size_t i = 0; i < nc; i++) C0[i] = uniform();
    memcpy(want, C0, sizeof(float) * nc);
    ref_gemm(tA, tB, M, N, K, A, lda, B, ldb, acc, want, ldc);
    // The plain triple loop: the reference's bits (and C's padding untouched: all of C compared).
    memcpy(got, C0, sizeof(float) * nc);
    plain_gemm(tA, tB, M, N, K, A, lda, B, ldb, acc, got, ldc);
    CHECK(memcmp(got, want, sizeof(float) * nc) == 0, "plain triple loop: M=%d N=%d K=%d transA=%d transB=%d "
          "accumulate=%d: not the reference bits", M, N, K, tA, tB, acc);
    // Both paths: B packed (stream rows 0) and B read in place (every M streams; a kernel
    // set without a transposed tile packs op(B) = B^T either way), in place with a B panel
    // copied by its first reader and without, and with op(A) = A packed where the set would
    // read it in place.
    // AUTO as well: on an AVX-512 CPU it takes the AVX2 tile for a narrow product with
    // op(A) = A^T.
    const GemmKernel kinds[] = {GEMM_KERNEL_AUTO, GEMM_KERNEL_SCALAR, GEMM_KERNEL_AVX2, GEMM_KERNEL_AVX512};
    const int stream_rows[] = {0, 1 << 30, 1 << 30, 1 << 30};
    const char *path[] = {"packed", "in place, copied", "in place", "in place, A packed"};
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < (b16 ? 1 : 4); p++) {
            if (!gemm_kernel_available(kinds[t])) continue;
            gemm_force_kernel(kinds[t]);
            gemm_set_stream_rows(stream_rows[p]);
            gemm_set_copy_b(p != 2);
            gemm_set_a_in_place(p != 3);
            memcpy(got, C0, sizeof(float) * nc);
            if (b16) ordered_gemm16(tA, tB, M, N, K, A16, lda, B16, ldb, acc, got, ldc);
            else ordered_gemm(tA, tB, M, N, K, A, lda, B, ldb, acc, got, ldc);
            CHECK(memcmp(got, want, sizeof(float) * nc) == 0, "%s, %s: M=%d N=%d K=%d transA=%d transB=%d "
                  "accumulate=%d: not the reference bits", gemm_kernel_name(), b16 ? "16-bit operands" : path[p],
                  M, N, K, tA, tB, acc);
        }
    gemm_force_kernel(GEMM_KERNEL_AUTO);
    gemm_set_stream_rows(-1);
    gemm_set_copy_b(1);
    gemm_set_a_in_place(1);
    // Against double precision (the float32 operands only: the 16-bit ones run the same
    // chains, which the reference bits above have checked): a chain of K fmas is off by at
    // most gamma_K sum_k |a_k b_k|, gamma_K = K u / (1 - K u) <= (K+1) u here (u = 2^-24,
    // the textbook bound of a recursive dot product); the add of the old value costs u |C|
    // more, and that alone nearly reaches the bound when |C| dwarfs the product (measured:
    // 0.94 of it at K = 1).
    double worst = 0.0;
    for (int i = 0; i < (b16 ? 0 : M); i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double a = tA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            double old = acc ? C0[(size_t)i * ldc + j] : 0.0, exact = old + s;
            double bound = ((K + 1) * mag + fabs(exact)) * 0x1p-24 + 1e-30;
            double err = fabs(got[(size_t)i * ldc + j] - exact) / bound;
            worst = max_keep_nan(worst, err);
        }
    if (!b16)
        CHECK(worst <= 1.0, "M=%d N=%d K=%d transA=%d transB=%d accumulate=%d: error %.3g of the bound", M, N, K,
              tA, tB, acc, worst);
    // Untouched: the padding between rows of C.
    int pad_ok = 1;
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) pad_ok &= got[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
    CHECK(pad_ok, "M=%d N=%d K=%d: wrote past the N columns of a row", M, N, K);
    free(A); free(B); free(C0); free(want); free(got); free(A16); free(B16);
    return worst;
}

// The chunked product (gemm.h: ordered_gemm_chunked): each piece's own chain (the reference
// GEMM over its k's), the pieces added along the canonical tree (left + right, the left
// subtree the largest power of two of pieces below n), then onto 0.0f; C overwritten.
static float ref_tree(const float *P, int lo, int n, size_t stride) {
    if (n == 1) return P[(size_t)lo * stride];
    int h = 1;
    while (2 * h < n) h *= 2;
    return ref_tree(P, lo, h, stride) + ref_tree(P, lo + h, n - h, stride);
}
// Variant v of the tree products' checks: the kernel set v / 3 (AUTO, scalar, AVX2, AVX-512);
// by v % 3, the B panel copied by its first reader (0), read in place (1), or copied with
// op(A) = A packed where the set would read it in place (2); 0 where this CPU lacks the set.
// v = -1 restores the defaults.
enum { TREE_VARIANTS = 12 };
static int tree_variant(int v) {
    const GemmKernel kinds[] = {GEMM_KERNEL_AUTO, GEMM_KERNEL_SCALAR, GEMM_KERNEL_AVX2, GEMM_KERNEL_AVX512};
    GemmKernel k = v < 0 ? GEMM_KERNEL_AUTO : kinds[v / 3];
    if (!gemm_kernel_available(k)) return 0;
    gemm_force_kernel(k);
    gemm_set_copy_b(v < 0 || v % 3 != 1);
    gemm_set_a_in_place(v < 0 || v % 3 != 2);
    return 1;
}

// b16: the operands as 16-bit numbers (as16), through ordered_gemm_chunked16.
static void chunked_case(int tB, int M, int N, int K, int chunks, float scale, int b16) {   // scale < 1: tiny, see below
    int lda = K + 3, ldb = (tB ? K : N) + 5, ldc = N + 7, kc = K / chunks;
    size_t na = (size_t)M * lda, nb = (size_t)(tB ? N : K) * ldb, nc = (size_t)M * ldc, mn = (size_t)M * N;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb), *P = malloc(sizeof(float) * mn * chunks);
    float *C0 = malloc(sizeof(float) * nc), *want = malloc(sizeof(float) * nc), *got = malloc(sizeof(float) * nc);
    int tiny = scale < 1.0f;   // A > 0, B < 0, every product below the smallest float: -0
    for (size_t i = 0; i < na; i++) A[i] = tiny ? scale * (1.0f + fabsf(uniform())) : uniform();
    for (size_t i = 0; i < nb; i++) B[i] = tiny ? -scale * (1.0f + fabsf(uniform())) : uniform();
    for (size_t i = 0; i < nc; i++) C0[i] = uniform();
    uint16_t *A16 = as16(b16, A, na), *B16 = as16(b16, B, nb);
    for (int r = 0; r < chunks; r++)   // piece r: element (i,j) at P[(i*N + j)*chunks + r]
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float c;
                ref_gemm(0, tB, 1, 1, kc, A + (size_t)i * lda + (size_t)r * kc, lda,
                         B + (tB ? (size_t)j * ldb + (size_t)r * kc : (size_t)r * kc * ldb + j), ldb, 0, &c, 1);
                P[((size_t)i * N + j) * chunks + r] = c;
            }
    memcpy(want, C0, sizeof(float) * nc);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) want[(size_t)i * ldc + j] = 0.0f + ref_tree(P + ((size_t)i * N + j) * chunks, 0, chunks, 1);
    memcpy(got, C0, sizeof(float) * nc);
    plain_gemm_chunked(tB, M, N, K, chunks, A, lda, B, ldb, got, ldc);
    CHECK(memcmp(got, want, sizeof(float) * nc) == 0, "plain, chunked: M=%d N=%d K=%d chunks=%d transB=%d: not the "
          "reference bits", M, N, K, chunks, tB);
    // Pieces longer than a K block: their own products (chunked_long), and the tiles' tree too.
    for (int tiles = 0; tiles <= (kc > 1024); tiles++) {
        gemm_set_long_pieces(!tiles);
        for (int v = 0; v < TREE_VARIANTS; v++) {
            if ((b16 && v % 3) || !tree_variant(v)) continue;   // 16-bit: every panel packed, so the kernel sets only
            memcpy(got, C0, sizeof(float) * nc);
            if (b16) ordered_gemm_chunked16(tB, M, N, K, chunks, A16, lda, B16, ldb, got, ldc);
            else ordered_gemm_chunked(tB, M, N, K, chunks, A, lda, B, ldb, got, ldc);
            CHECK(memcmp(got, want, sizeof(float) * nc) == 0,
                  "%s, chunked%s%s: M=%d N=%d K=%d chunks=%d transB=%d: not the reference bits (C's padding included)",
                  gemm_kernel_name(),
                  b16 ? ", 16-bit operands" : v % 3 == 1 ? " (B not copied)" : "", tiles ? ", the tiles' tree" : "",
                  M, N, K, chunks, tB);
        }
    }
    gemm_set_long_pieces(1);
    tree_variant(-1);
    free(A); free(B); free(P); free(C0); free(want); free(got); free(A16); free(B16);
}

// A weight gradient's leaves (gemm.h: ordered_gemm_leaves): leaf l is the product of rows
// off[l] .. off[l+1]-1 of A (.,M)^T and B (.,N), each element its own chain (the reference
// GEMM over those rows), the leaves added along the canonical tree, the root onto C's old
// values, or with accumulate 0 onto 0.0f (C's old values, NaN here, never read; its
// padding untouched); an empty leaf is 0.0f. lens: the leaves' row counts.
// b16: the operands as 16-bit numbers (as16), through ordered_gemm_leaves16.
static void leaves_case(int M, int N, const int *lens, int n, int accumulate, int b16) {
    int off[65] = {0};
    for (int l = 0; l < n; l++) off[l + 1] = off[l] + lens[l];
    int K = off[n], lda = M + 3, ldb = N + 5, ldc = N + 7;
    size_t na = (size_t)(K + 1) * lda, nb = (size_t)(K + 1) * ldb, nc = (size_t)M * ldc, mn = (size_t)M * N;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb), *P = malloc(sizeof(float) * mn * n);
    float *C0 = malloc(sizeof(float) * nc), *want = malloc(sizeof(float) * nc);
    float *got = aligned_alloc(64, (nc + 15) / 16 * 16 * sizeof(float));   // 64-byte rows where ldc allows: streamed
    for (size_t i = 0; i < na; i++) A[i] = uniform();
    for (size_t i = 0; i < nb; i++) B[i] = uniform();
    for (size_t i = 0; i < nc; i++) C0[i] = i % 11 == 0 ? -0.0f : uniform();   // -0: + an empty tree's 0.0f is +0
    uint16_t *A16 = as16(b16, A, na), *B16 = as16(b16, B, nb);
    if (!accumulate)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C0[(size_t)i * ldc + j] = NAN;
    for (int l = 0; l < n; l++)   // leaf l: element (i,j) at P[(i*N + j)*n + l]
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                ref_gemm(1, 0, 1, 1, lens[l], A + (size_t)off[l] * lda + i, lda, B + (size_t)off[l] * ldb + j, ldb, 0,
                         &P[((size_t)i * N + j) * n + l], 1);
    memcpy(want, C0, sizeof(float) * nc);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float *w = want + (size_t)i * ldc + j;
            *w = (accumulate ? *w : 0.0f) + ref_tree(P + ((size_t)i * N + j) * n, 0, n, 1);
        }
    memcpy(got, C0, sizeof(float) * nc);
    plain_gemm_leaves(M, N, off, n, A, lda, B, ldb, accumulate, got, ldc);
    CHECK(memcmp(got, want, sizeof(float) * nc) == 0, "plain, leaves: M=%d N=%d K=%d leaves=%d accumulate=%d: not the "
          "reference bits", M, N, K, n, accumulate);
    for (int v = 0; v < TREE_VARIANTS; v++) {
        if ((b16 && v % 3) || !tree_variant(v)) continue;   // 16-bit: every panel packed, so the kernel sets only
        memcpy(got, C0, sizeof(float) * nc);
        if (b16) ordered_gemm_leaves16(M, N, off, n, A16, lda, B16, ldb, accumulate, got, ldc);
        else ordered_gemm_leaves(M, N, off, n, A, lda, B, ldb, accumulate, got, ldc);
        CHECK(memcmp(got, want, sizeof(float) * nc) == 0, "%s, leaves%s: M=%d N=%d K=%d leaves=%d accumulate=%d: not "
              "the reference bits (C's padding included)", gemm_kernel_name(),
              b16 ? ", 16-bit operands" : v % 3 == 1 ? " (B not copied)" : "", M, N, K, n, accumulate);
    }
    tree_variant(-1);
    free(A); free(B); free(P); free(C0); free(want); free(got); free(A16); free(B16);
}

static Device dev;

int main(void) {
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    printf("  kernels on this CPU: scalar%s%s; auto picks %s\n",
           gemm_kernel_available(GEMM_KERNEL_AVX2) ? ", avx2" : "",
           gemm_kernel_available(GEMM_KERNEL_AVX512) ? ", avx512" : "", gemm_kernel_name());
    // Shapes: every remainder of the register tiles (12, 6, 4 rows; 32, 16, 8 columns) and
    // of the packing transposes (16 and 8 k at a time), the cache blocks (96 rows, 1024
    // columns, 1024 of K: one, several, and a ragged last block), the in-place path's row
    // chunks (768 rows: 781 takes two).
    int shapes[][3] = {
        {1, 1, 1}, {1, 40, 3}, {13, 1, 5}, {2, 33, 7}, {3, 31, 16}, {5, 17, 9}, {7, 15, 11},
        {11, 9, 20}, {12, 32, 1}, {13, 47, 33}, {23, 63, 40}, {25, 65, 64}, {97, 257, 100},
        {100, 300, 383}, {96, 256, 384}, {50, 70, 385}, {37, 41, 800}, {130, 520, 769}, {96, 512, 1024}, {29, 45, 1025}, {101, 530, 2100},
        {781, 37, 45}, {40, 1100, 70},
        // The AVX2 in-place path's copied panels: a row stride of 1024 floats (N + 5) with 17
        // row panels, and 67 row panels at any stride.
        {100, 1019, 64}, {400, 27, 30},
        // Large enough to run on all threads: 5 column panels of 32 (uneven on 2 threads, so
        // the panels' rows are split too), and narrow products of 16 and 5 columns.
        {300, 160, 40}, {1000, 16, 100}, {781, 5, 300},
    };
    // Each also with its operands as 16-bit numbers (ordered_gemm16: the blocked path only).
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int tA = 0; tA < 2; tA++)
            for (int tB = 0; tB < 2; tB++)
                for (int acc = 0; acc < 2; acc++)
                    for (int b16 = 0; b16 < 2; b16++) {
                        double w = one_case(tA, tB, shapes[s][0], shapes[s][1], shapes[s][2], acc, b16);
                        if (w > worst) worst = w;
                    }
    printf("  largest error against double precision: %.3f of the bound (K+1) u sum|a b| + u |C|\n", worst);
    // The chunked product: pieces of 1 to 8 (3 and 5: trees that are not complete), the
    // register tiles' remainders, threads splitting uneven column panels (300 x 160), a K
    // longer than the packed block (2100: fewer rows at a time); pieces longer than a K
    // block, each its own blocked product (gemm_tree.c: chunked_long): one (2100, and 1030
    // with a ragged last block), two, three (a right subtree of one piece) and five, with
    // N not a multiple of 8.
    int cshapes[][4] = {
        {1, 1, 4, 4}, {13, 47, 36, 4}, {37, 45, 120, 3}, {37, 45, 120, 5}, {12, 32, 64, 1}, {100, 300, 384, 4},
        {300, 160, 96, 4}, {781, 37, 192, 8}, {50, 70, 2100, 4}, {96, 512, 512, 2},
        {30, 70, 2100, 1}, {13, 45, 1030, 1}, {29, 37, 4200, 2}, {13, 40, 3300, 3}, {7, 21, 5150, 5},
    };
    for (size_t s = 0; s < sizeof cshapes / sizeof cshapes[0]; s++)
        for (int tB = 0; tB < 2; tB++)
            for (int b16 = 0; b16 < 2; b16++)
                chunked_case(tB, cshapes[s][0], cshapes[s][1], cshapes[s][2], cshapes[s][3], 1.0f, b16);
    // Products that underflow to -0 in every piece: the sum is -0, onto 0.0f it is +0, as the
    // tree's sum added onto a zeroed output.
    chunked_case(0, 13, 40, 16, 4, 0x1p-80f, 0);
    chunked_case(1, 13, 40, 16, 4, 0x1p-80f, 1);
    chunked_case(0, 13, 40, 2100, 1, 0x1p-80f, 0);
    chunked_case(1, 13, 40, 3300, 3, 0x1p-80f, 1);
    // A weight gradient's leaves: one leaf, a pair, trees that are not complete (3, 5, 9),
    // empty leaves first, inside and last, every leaf empty, leaves of uneven length as an
    // expert's rows per sequence are, the register tiles' remainders, enough work for all
    // threads (100 x 300), and a K longer than the packed block (2100: fewer rows at a time);
    // each added onto C and written onto 0.0f.
    static const int one[] = {7}, pair[] = {5, 9}, three[] = {4, 0, 6}, five[] = {0, 13, 1, 30, 2};
    static const int nine[] = {64, 71, 0, 58, 66, 90, 12, 40, 0}, none[] = {0, 0, 0}, long3[] = {700, 900, 500};
    for (int acc = 1; acc >= 0; acc--)
        for (int b16 = 0; b16 < 2; b16++) {   // and as 16-bit numbers
            leaves_case(13, 47, one, 1, acc, b16);
            leaves_case(37, 45, pair, 2, acc, b16);
            leaves_case(12, 32, three, 3, acc, b16);
            leaves_case(25, 65, five, 5, acc, b16);
            leaves_case(100, 300, nine, 9, acc, b16);
            leaves_case(781, 37, nine, 9, acc, b16);
            leaves_case(13, 40, none, 3, acc, b16);
            leaves_case(50, 70, long3, 3, acc, b16);
            leaves_case(100, 57, nine, 9, acc, b16);   // ldc 64: every row of C 64-byte aligned (gemm_tree.c streams them)
        }
    // K = 0: the empty chain is 0 (plus the old value).
    float c[4] = {1.5f, -2.0f, 3.0f, 4.0f}, a[1] = {0}, b[1] = {0};
    ordered_gemm(0, 0, 2, 2, 0, a, 1, b, 2, 1, c, 2);
    CHECK(c[0] == 1.5f && c[3] == 4.0f, "K=0 accumulate changed C: %g %g", c[0], c[3]);
    ordered_gemm(0, 0, 2, 2, 0, a, 1, b, 2, 0, c, 2);
    CHECK(c[0] == 0.0f && c[3] == 0.0f, "K=0 did not write 0: %g %g", c[0], c[3]);
    // Rows of 37 (vector adds and a tail) with a stride of 40: -0 + 0 is +0, every other old
    // value stays, and the 3 floats past each row are not touched.
    float wide[3 * 40];
    for (int k = 0; k < 3 * 40; k++) wide[k] = k % 5 == 0 ? -0.0f : (float)k - 60.5f;
    ordered_gemm(1, 0, 3, 37, 0, a, 3, b, 37, 1, wide, 40);
    int kept = 1;
    for (int k = 0; k < 3 * 40; k++) {
        float want = k % 40 < 37 && k % 5 == 0 ? 0.0f : k % 5 == 0 ? -0.0f : (float)k - 60.5f;
        kept &= memcmp(&wide[k], &want, sizeof want) == 0;
    }
    CHECK(kept, "K=0 accumulate over rows of 37: old values + 0.0f, bit for bit, padding untouched");
    float p[4] = {1.5f, -2.0f, 3.0f, 4.0f};
    plain_gemm(0, 0, 2, 2, 0, a, 1, b, 2, 1, p, 2);
    CHECK(p[0] == 1.5f && p[3] == 4.0f, "plain, K=0 accumulate changed C: %g %g", p[0], p[3]);
    plain_gemm(0, 0, 2, 2, 0, a, 1, b, 2, 0, p, 2);
    CHECK(p[0] == 0.0f && p[3] == 0.0f, "plain, K=0 did not write 0: %g %g", p[0], p[3]);
    TEST_SUMMARY();
}
