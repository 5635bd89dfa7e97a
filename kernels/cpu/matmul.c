// kernels/cpu/matmul.c: the CPU matrix products (kernels/matmul.h): the ordered GEMM, or
// OpenBLAS on request, and OpenBLAS's set-up.
//
// Why ordered. Every output element of the ordered GEMM is one chain of fused
// multiply-adds over k, in order, C[i][j] = fma(A[i][K-1], B[K-1][j], ... fma(A[i][0],
// B[0][j], 0)). Nothing else takes part in it: not the other rows, not the other columns,
// not how many rows or columns share the call, not where the row sits in its buffer. That
// is what sharding needs (docs/model.md#summation-order): a token routed to an expert
// together with 3 others or with 300, a column computed on one device or on a
// tensor-parallel slice, get the same bits. OpenBLAS does not promise that: its kernels
// add a row's products in an order that depends on the row's place in its register tile
// (measured here: a row copied to each of the 64 positions of a 64-row block gives 3
// different results on the Zen/Haswell kernels). OpenBLAS stays available as
// `matmul_impl=openblas` (but then only the dense path splits the batch bit-identically).
//
// The ordered GEMM (kernels/cpu/gemm.c): packed panels, cache blocks and a register-tile
// micro-kernel for AVX-512, AVX2 or plain C, chosen at run time; all three give the same bits.
#include "kernels/matmul.h"     // MatmulKernels
#include "kernels/cpu/gemm.h"    // ordered_gemm, plain_gemm
#include "kernels/grouped_loop.h" // the experts' grouped products, a call per expert
#include "kernels/piece_tree.h"  // the chunked product as separate products (OpenBLAS)
#include "core/common.h"         // die

#ifndef MESHMOE_NO_BLAS
#include <cblas.h>
#endif

static int use_openblas = 0;   // matmul_impl, set once at start-up

void matmul_cpu_use_openblas(int on) {
#ifdef MESHMOE_NO_BLAS
    if (on) die("matmul_impl=openblas, but this build has no OpenBLAS (install libopenblas-dev and rebuild)");
#endif
    use_openblas = on;
}

int matmul_cpu_uses_openblas(void) { return use_openblas; }

// C = op(A) @ op(B) (+ C when accumulate) through OpenBLAS (matmul_impl=openblas).
static void sgemm_blas(int transA, int transB, int M, int N, int K, const float *A, int lda,
                       const float *B, int ldb, int accumulate, float *C, int ldc) {
#ifndef MESHMOE_NO_BLAS
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, 1.0f, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
#else
    (void)transA; (void)transB; (void)M; (void)N; (void)K; (void)A; (void)lda;
    (void)B; (void)ldb; (void)accumulate; (void)C; (void)ldc;
    die("internal: OpenBLAS called in a build without it");
#endif
}

static void gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, int accumulate, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    if (use_openblas) sgemm_blas(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
    else ordered_gemm(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

static void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    gemm(0, 0, T, OC, C, inp, C, w, OC, accumulate, out, OC);   // (T,C) @ (C,OC)
}

static void matmul_backward_dinp(float *dinp, const float *dout, const float *w, int T, int C, int OC) {
    gemm(0, 1, T, C, OC, dout, OC, w, OC, 1, dinp, C);   // (T,OC) @ (OC,C)
}

static void matmul_backward_dw(float *dw, const float *inp, const float *dout, int len, int C, int OC, int accumulate) {
    gemm(1, 0, C, OC, len, inp, C, dout, OC, accumulate, dw, OC);   // (C,len) @ (len,OC)
}

static void add_rows(float *left, const float *right, size_t n) {
    for (size_t i = 0; i < n; i++) left[i] += right[i];
}

// The chunked product: the ordered GEMM's, or, for OpenBLAS, whose products are what they
// are, separate products into partial sums merged in passes (kernels/piece_tree.h).
static void gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B,
                         int ldb, float *C, int ldc) {
    if (!use_openblas) { ordered_gemm_chunked(transB, M, N, K, chunks, A, lda, B, ldb, C, ldc); return; }
    if (M == 0 || N == 0) return;
    // The partial sums are the library's working memory, like its packing buffers: not the
    // device's (the tagged allocator does not see them).
    int levels = piece_tree_levels(chunks);
    float *S = malloc(sizeof(float) * (size_t)M * N * (size_t)levels);
    if (!S) die("out of host memory for a chunked product's partial sums (%d x %d x %d)", M, N, levels);
    piece_tree(gemm, add_rows, transB, M, N, K / chunks, 0, chunks, A, lda, B, ldb, S, S + (size_t)M * N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = 0.0f + S[(size_t)i * N + j];
    free(S);
}

// A weight gradient's leaves: the ordered GEMM's tree in the tiles, or, for OpenBLAS,
// separate products into partial sums (its working memory, as above) merged in passes.
static void matmul_backward_dw_leaves(float *dw, const float *inp, const float *dout, const int *off, int n, int C,
                                      int OC, int accumulate) {
    if (!use_openblas) { ordered_gemm_leaves(C, OC, off, n, inp, C, dout, OC, accumulate, dw, OC); return; }
    if (C == 0 || OC == 0 || n <= 0) return;
    size_t mn = (size_t)C * OC;
    float *S = malloc(sizeof(float) * mn * (size_t)piece_tree_levels(n));
    if (!S) die("out of host memory for a weight gradient's %d leaves (%d x %d)", n, C, OC);
    leaf_tree(gemm, add_rows, C, OC, off, n, inp, C, dout, OC, S, S + mn);
    if (!accumulate)
        for (size_t i = 0; i < mn; i++) dw[i] = 0.0f;
    add_rows(dw, S, mn);
    free(S);
}

// The experts' grouped products, expert by expert: the ordered GEMM's rows do not depend on
// the rows beside them, so a call over all of them would give the same bits.
static void forward_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC,
                            int accumulate) {
    forward_grouped_loop(&matmul_cpu, out, inp, w, rows, G, C, OC, accumulate);
}
static void dinp_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C, int OC) {
    dinp_grouped_loop(&matmul_cpu, dinp, dout, w, rows, G, C, OC);
}
static void chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const float *A,
                            const float *B, float *out) {
    chunked_grouped_loop(&matmul_cpu, transB, rows, G, N, K, chunks, A, B, out);
}
static void dw_leaves_grouped(float *dw, const float *inp, const float *dout, const int *off, int n, int G, int C,
                              int OC, int accumulate) {
    dw_leaves_grouped_loop(&matmul_cpu, dw, inp, dout, off, n, G, C, OC, accumulate);
}

const MatmulKernels matmul_cpu = {matmul_forward, matmul_backward_dinp, matmul_backward_dw, gemm, gemm_chunked,
                                  matmul_backward_dw_leaves, forward_grouped, dinp_grouped, chunked_grouped,
                                  dw_leaves_grouped};

// The same products on the plain triple loop (matmul_impl=plain, backend_cpu_plain):
// each element the same in-order FMA chain, so the same bits as the ordered GEMM.
static void plain_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    plain_gemm(0, 0, T, OC, C, inp, C, w, OC, accumulate, out, OC);
}
static void plain_backward_dinp(float *dinp, const float *dout, const float *w, int T, int C, int OC) {
    plain_gemm(0, 1, T, C, OC, dout, OC, w, OC, 1, dinp, C);
}
static void plain_backward_dw(float *dw, const float *inp, const float *dout, int len, int C, int OC, int accumulate) {
    plain_gemm(1, 0, C, OC, len, inp, C, dout, OC, accumulate, dw, OC);
}

static void plain_backward_dw_leaves(float *dw, const float *inp, const float *dout, const int *off, int n, int C,
                                     int OC, int accumulate) {
    plain_gemm_leaves(C, OC, off, n, inp, C, dout, OC, accumulate, dw, OC);
}

static void plain_forward_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC,
                                  int accumulate) {
    forward_grouped_loop(&matmul_cpu_plain, out, inp, w, rows, G, C, OC, accumulate);
}
static void plain_dinp_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C, int OC) {
    dinp_grouped_loop(&matmul_cpu_plain, dinp, dout, w, rows, G, C, OC);
}
static void plain_chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const float *A,
                                  const float *B, float *out) {
    chunked_grouped_loop(&matmul_cpu_plain, transB, rows, G, N, K, chunks, A, B, out);
}
static void plain_dw_leaves_grouped(float *dw, const float *inp, const float *dout, const int *off, int n, int G,
                                    int C, int OC, int accumulate) {
    dw_leaves_grouped_loop(&matmul_cpu_plain, dw, inp, dout, off, n, G, C, OC, accumulate);
}

const MatmulKernels matmul_cpu_plain = {plain_forward,          plain_backward_dinp,   plain_backward_dw,
                                        plain_gemm,             plain_gemm_chunked,    plain_backward_dw_leaves,
                                        plain_forward_grouped,  plain_dinp_grouped,    plain_chunked_grouped,
                                        plain_dw_leaves_grouped};

// ---------------------------------------------------------------------------------------
// OpenBLAS's set-up: what the start-up line says, its thread count, and its kernel choice.
#ifndef MESHMOE_NO_BLAS
// Declared by OpenBLAS (not in every cblas.h).
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);
extern void openblas_set_num_threads(int);
#endif

const char *blas_description(void) {
    static char buf[256];
#ifndef MESHMOE_NO_BLAS
    const char *picked = getenv("MESHMOE_BLAS_PICKED");
    if (picked)
        snprintf(buf, sizeof buf, "%s (kernels: %s; OpenBLAS picked %s, older than this CPU)",
                 openblas_get_config(), openblas_get_corename(), picked);
    else
        snprintf(buf, sizeof buf, "%s (kernels: %s)", openblas_get_config(), openblas_get_corename());
#else
    snprintf(buf, sizeof buf, "portable C matmul (OpenBLAS not found at build time: slow; install libopenblas-dev and rebuild)");
#endif
    return buf;
}

void blas_set_threads(int n) {
#ifndef MESHMOE_NO_BLAS
    openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

// Debian's OpenBLAS 0.3.21 picks kernels older than the CPU runs when it does not know the
// CPU: its Haswell (AVX2) kernels on AMD Zen 4/5, its Prescott (SSE3) kernels on Intel
// Xeons newer than it (Emerald Rapids, seen here); its SkylakeX kernels are 2x to 5x faster
// there (measured sgemm). The choice is read from OPENBLAS_CORETYPE when the library loads,
// so if that variable is unset and the pick lacks the widest vectors the CPU has, we set it
// to an OpenBLAS core with those vectors and re-execute ourselves once.
// Set OPENBLAS_CORETYPE yourself to override (e.g. OPENBLAS_CORETYPE=Haswell).
#ifndef MESHMOE_NO_BLAS
static int name_in(const char *name, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(name, *names)) return 1;
    return 0;
}
#endif

#include <unistd.h>
void blas_prefer_fast_kernels(char **argv) {
#ifndef MESHMOE_NO_BLAS
    static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2_cores[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                             "SapphireRapids", NULL};
    if (getenv("OPENBLAS_CORETYPE")) return;
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char *core = openblas_get_corename(), *want = NULL;
    if (avx512 && !name_in(core, avx512_cores))
        want = "SkylakeX";
    else if (!avx512 && avx2 && !name_in(core, avx2_cores))
        want = "Haswell";
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("MESHMOE_BLAS_PICKED", core, 1);   // so the start-up line can say what changed
    execv("/proc/self/exe", argv);
    // If re-executing failed, carry on with the kernels we have.
#else
    (void)argv;
#endif
}
