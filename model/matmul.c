// model/matmul.c: GEMM through OpenBLAS (or a portable fallback) and the matmul layer.
#include "model/matmul.h"
#include "model/treesum.h"
#include "sharding/memory.h"
#include "common.h"

#ifndef MESHMOE_NO_BLAS
#include <cblas.h>
#endif

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    mem_device()->flops += 2.0 * M * N * K;
#ifndef MESHMOE_NO_BLAS
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    // Portable fallback: each output element is one dot product over K, in order.
    #pragma omp parallel for collapse(2) if ((double)M * N * K > 1e5)
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

void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    gemm(0, 0, T, OC, C, 1.0f, inp, C, w, OC, accumulate ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     int T, int C, int OC, int leaf) {
    if (dinp) gemm(0, 1, T, C, OC, 1.0f, dout, OC, w, OC, 1.0f, dinp, C);   // (T,OC)@(OC,C)
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
