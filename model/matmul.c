// model/matmul.c: GEMM through OpenBLAS (or a portable fallback) and the matmul layer.
#include "model/matmul.h"
#include "model/treesum.h"
#include "sharding/memory.h"
#include "common.h"

#ifndef MESHMOE_NO_BLAS
#include <cblas.h>
#endif

// sgemm_raw: C = alpha * op(A) @ op(B) + beta * C, no bookkeeping (safe to call from any
// thread: OpenBLAS runs single-threaded here, see blas_set_threads).
static void sgemm_raw(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
#ifndef MESHMOE_NO_BLAS
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    // Portable fallback: each output element is one dot product over K, in order.
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                float a = transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += a * b;
            }
            float *c = &C[(size_t)i * ldc + j];
            *c = alpha * acc + (beta == 0.0f ? 0.0f : beta * *c);
        }
#endif
}

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    mem_device()->flops += 2.0 * M * N * K;
    sgemm_raw(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Row-stable products. OpenBLAS picks its inner kernels by how many rows are left in a
// block, and those kernels add a row's products in different orders: the same token can
// get different bits in a 10-row GEMM than in a 64-row one. A result that depends on how
// many other tokens share the call would break DESIGN.md principle 2 (splitting the batch
// over devices, or routing a different number of tokens to an expert, would change the
// numbers). So every row-wise product runs in blocks of exactly MM_ROW_BLOCK rows; the last
// partial block is copied into a zero-padded block first. A row's result then depends on
// that row alone (tested in tests/test_core.c).
#define MM_ROW_BLOCK 64

// out (T,OC) = beta*out + inp (T,C) @ op(w); op(w) = w (C,OC) or, with transW, w^T for w (OC,C).
static void rows_gemm(float *out, const float *inp, const float *w, int T, int C, int OC, int transW, float beta) {
    int ldw = transW ? C : OC;
    int full = T / MM_ROW_BLOCK * MM_ROW_BLOCK;
    // Row blocks are independent, so they run in parallel (OpenMP), one BLAS call each.
    mem_device()->flops += 2.0 * full * OC * C;
    #pragma omp parallel for schedule(static) if (full > MM_ROW_BLOCK)
    for (int t0 = 0; t0 < full; t0 += MM_ROW_BLOCK)
        sgemm_raw(0, transW, MM_ROW_BLOCK, OC, C, 1.0f, inp + (size_t)t0 * C, C, w, ldw, beta, out + (size_t)t0 * OC, OC);
    int rest = T - full;
    if (rest == 0) return;
    float *pin = mem_floats(MEM_TEMP, (size_t)MM_ROW_BLOCK * C, "matmul padded rows");
    float *pout = mem_floats(MEM_TEMP, (size_t)MM_ROW_BLOCK * OC, "matmul padded rows out");
    memcpy(pin, inp + (size_t)full * C, sizeof(float) * rest * C);
    if (beta != 0.0f) memcpy(pout, out + (size_t)full * OC, sizeof(float) * rest * OC);
    gemm(0, transW, MM_ROW_BLOCK, OC, C, 1.0f, pin, C, w, ldw, beta, pout, OC);
    memcpy(out + (size_t)full * OC, pout, sizeof(float) * rest * OC);
    mem_device()->flops -= 2.0 * (MM_ROW_BLOCK - rest) * OC * C;   // count only the real rows
    mem_free(pin);
    mem_free(pout);
}

void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    rows_gemm(out, inp, w, T, C, OC, 0, accumulate ? 1.0f : 0.0f);
}

void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int T, int C, int OC, int leaf) {
    if (dinp) rows_gemm(dinp, dout, w, T, OC, C, 1, 1.0f);   // (T,OC) @ (OC,C)
    if (dw) {
        TreeSum ts;
        treesum_begin(&ts, (size_t)C * OC, MEM_TEMP, "matmul dw leaf");
        for (int t0 = 0; t0 < T; t0 += leaf) {
            float *g = treesum_leaf(&ts);
            int n = MM_MIN(leaf, T - t0);
            // g (C,OC) = inp[t0:t0+n]^T (C,n) @ dout[t0:t0+n] (n,OC)
            gemm(1, 0, C, OC, n, 1.0f, inp + (size_t)t0 * C, C, dout + (size_t)t0 * OC, OC, 0.0f, g, OC);
            treesum_push(&ts);
        }
        treesum_end(&ts, dw);
    }
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
// have AVX-512; its SkylakeX kernels are about 2x faster there (DESIGN.md, facts). The
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
