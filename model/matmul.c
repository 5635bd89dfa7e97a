// model/matmul.c: the ordered GEMM every layer uses (or OpenBLAS, on request) and the matmul layer.
#include "model/matmul.h"
#include "model/gemm.h"
#include "model/treesum.h"
#include "sharding/memory.h"
#include "common.h"

#ifndef MESHMOE_NO_BLAS
#include <cblas.h>
#endif

// ---------------------------------------------------------------------------------------
// The ordered GEMM: every output element is one chain of fused multiply-adds over k,
// in order, C[i][j] = fma(A[i][K-1], B[K-1][j], ... fma(A[i][0], B[0][j], 0)). Nothing
// else takes part in it: not the other rows, not the other columns, not how many rows or
// columns share the call, not where the row sits in its buffer. That is what sharding
// needs (docs/model.md#summation-order): a token routed to an expert together with 3 others or
// with 300, a column computed on one device or on a tensor-parallel slice, get the same
// bits. OpenBLAS does not promise that: its kernels add a row's products in an order
// that depends on the row's place in its register tile (measured here: a row copied to
// each of the 64 positions of a 64-row block gives 3 different results on the Zen/Haswell
// kernels). OpenBLAS stays available as `matmul_impl=openblas` (but then only the dense
// path splits the batch bit-identically).
//
// The kernel (model/gemm.c): packed panels, cache blocks and a register-tile micro-kernel
// for AVX-512, AVX2 or plain C, chosen at run time; all three give the same bits.

static int use_openblas = 0;

void matmul_set_impl(const char *impl) {
    if (!strcmp(impl, "ordered")) use_openblas = 0;
    else if (!strcmp(impl, "openblas")) {
#ifdef MESHMOE_NO_BLAS
        die("matmul_impl=openblas, but this build has no OpenBLAS (install libopenblas-dev and rebuild)");
#endif
        use_openblas = 1;
    } else die("matmul_impl '%s' is not one of: ordered, openblas", impl);
}

// C = alpha * op(A) @ op(B) + beta * C through OpenBLAS (matmul_impl=openblas).
static void sgemm_blas(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
#ifndef MESHMOE_NO_BLAS
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    (void)transA; (void)transB; (void)M; (void)N; (void)K; (void)alpha; (void)A; (void)lda;
    (void)B; (void)ldb; (void)beta; (void)C; (void)ldc;
    die("internal: OpenBLAS called in a build without it");
#endif
}

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) die("internal: gemm takes alpha 1 and beta 0 or 1");
    mem_device()->flops += 2.0 * M * N * K;
    if (use_openblas && !mem_dry()) sgemm_blas(transA, transB, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    else if (!use_openblas) ordered_gemm(transA, transB, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc);
}

void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    gemm(0, 0, T, OC, C, 1.0f, inp, C, w, OC, accumulate ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int T, int C, int OC, Leaves leaf) {
    if (dinp) gemm(0, 1, T, C, OC, 1.0f, dout, OC, w, OC, 1.0f, dinp, C);   // (T,OC) @ (OC,C)
    if (dw) {
        if ((long)leaf.B * leaf.S != T) die("internal: matmul_backward of %d tokens given leaves of %d", T, leaf.B * leaf.S);
        LeafSum ls;
        leafsum_begin(&ls, leaf, dw, (size_t)C * OC, "matmul dw leaf");
        for (long i = 0; i < leaf.n; i++) {
            float *g = leafsum_leaf(&ls);
            long t0 = leaf_token(leaf, i);
            // g (C,OC) = inp[t0:t0+len]^T (C,len) @ dout[t0:t0+len] (len,OC)
            gemm(1, 0, C, OC, leaf.len, 1.0f, inp + (size_t)t0 * C, C, dout + (size_t)t0 * OC, OC, 0.0f, g, OC);
            leafsum_push(&ls);
        }
        leafsum_end(&ls);
    }
}

void matmul_forward_chunked(float *out, const float *inp, const float *w, int T, int C, int OC, int chunks) {
    matmul_forward_chunked_cap(out, inp, w, T, T, C, OC, chunks);
}

void matmul_forward_chunked_cap(float *out, const float *inp, const float *w, int T, int cap, int C, int OC, int chunks) {
    if (chunks < 1 || C % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", C, chunks);
    int Cc = C / chunks;
    TreeSum ts;
    treesum_begin_cap(&ts, (size_t)T * OC, (size_t)cap * OC, MEM_TEMP, "matmul partial product");
    for (int r = 0; r < chunks; r++) {
        float *part = treesum_leaf(&ts);   // (T,OC) = inp[:, piece r] @ w[piece r, :]
        gemm(0, 0, T, OC, Cc, 1.0f, inp + (size_t)r * Cc, C, w + (size_t)r * Cc * OC, OC, 0.0f, part, OC);
        treesum_push(&ts);
    }
    mem_zero(out, sizeof(float) * T * OC);
    treesum_end(&ts, out);
}

void matmul_dinp_chunked(float *dinp, const float *dout, const float *w, int T, int C, int OC, int chunks) {
    matmul_dinp_chunked_cap(dinp, dout, w, T, T, C, OC, chunks);
}

void matmul_dinp_chunked_cap(float *dinp, const float *dout, const float *w, int T, int cap, int C, int OC, int chunks) {
    if (chunks < 1 || OC % chunks) die("internal: a contraction of %d cannot be cut into %d pieces", OC, chunks);
    int Oc = OC / chunks;
    TreeSum ts;
    treesum_begin_cap(&ts, (size_t)T * C, (size_t)cap * C, MEM_TEMP, "matmul partial input grad");
    for (int r = 0; r < chunks; r++) {
        float *part = treesum_leaf(&ts);   // (T,C) = dout[:, piece r] @ w[:, piece r]^T
        gemm(0, 1, T, C, Oc, 1.0f, dout + (size_t)r * Oc, OC, w + (size_t)r * Oc, OC, 0.0f, part, C);
        treesum_push(&ts);
    }
    mem_zero(dinp, sizeof(float) * T * C);
    treesum_end(&ts, dinp);
}

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
        snprintf(buf, sizeof buf, "%s (kernels: %s; OpenBLAS picked %s, but this CPU has AVX-512)",
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

// Debian's OpenBLAS 0.3.21 picks its Haswell (AVX2) kernels on AMD Zen 4/5 CPUs that
// have AVX-512; its SkylakeX kernels are about 2x faster there (measured sgemm). The
// choice is read from OPENBLAS_CORETYPE when the library loads, so if the CPU has
// AVX-512 and the variable is unset, we set it and re-execute ourselves once.
// Set OPENBLAS_CORETYPE yourself to override (e.g. OPENBLAS_CORETYPE=Haswell).
#ifndef MESHMOE_NO_BLAS
static int cpu_has_avx512(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[8192];
    int ok = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            ok = strstr(line, " avx512f") && strstr(line, " avx512bw") && strstr(line, " avx512vl") &&
                 strstr(line, " avx512dq");
            break;
        }
    fclose(f);
    return ok;
}
#endif

#include <unistd.h>
void blas_prefer_fast_kernels(char **argv) {
#ifndef MESHMOE_NO_BLAS
    if (getenv("OPENBLAS_CORETYPE") || !cpu_has_avx512()) return;
    const char *core = openblas_get_corename();
    if (strcmp(core, "Haswell") && strcmp(core, "Zen")) return;
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    setenv("MESHMOE_BLAS_PICKED", core, 1);   // so the start-up line can say what changed
    execv("/proc/self/exe", argv);
    // If re-executing failed, carry on with the kernels we have.
#else
    (void)argv;
#endif
}
