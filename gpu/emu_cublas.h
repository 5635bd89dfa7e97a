// gpu/emu_cublas.h: the part of cuBLAS that gpu/matmul.cu calls (and of cuBLASLt that
// gpu/matmul_lt.cu calls), run on the CPU, for the
// emulation (gpu/emu.h): with it the emulated backend takes the cuBLAS paths too
// (gpu_matmul=cublas, cublas_bf16, the grouped products of megablox), so that how
// gpu/matmul.cu lays out their operands, leading dimensions, pointer arrays and parts is
// checked without a GPU (build/conformance_emu's cuBLAS cases, tests/gpu_emu.sh). What it
// cannot show is cuBLAS itself: its kernels, their speed, and which compute types it takes
// (here every one named below).
//
// The same interface as cuBLAS: column-major matrices, C = alpha op(A) op(B) + beta C, host
// scalars, and a grouped call's pointers in device memory (host memory here). Its own
// order of operations, as cuBLAS has its own: each element's sum over k in double, rounded
// to float once, so its results are not the ordered GEMM's bits. The operands as the
// compute type has cuBLAS take them: bf16 storage read as is; float32 rounded to bf16
// (FAST_16BF) or to TF32 (FAST_TF32), to nearest even, or taken whole (32F). A dimension or
// leading dimension that cuBLAS would refuse returns CUBLAS_STATUS_INVALID_VALUE, as cuBLAS
// does.
#ifndef MESHMOE_GPU_EMU_CUBLAS_H
#define MESHMOE_GPU_EMU_CUBLAS_H
#include <stdint.h>
#include <stdlib.h>   // getenv
#include <string.h>
#include "kernels/bf16.h"   // bf16_float, bf16_round

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_ALLOC_FAILED = 3, CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum {
    CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16 } cublasMath_t;
struct EmuCublas { cudaStream_t stream; void *workspace; size_t workspace_bytes; cublasMath_t math; };
typedef EmuCublas *cublasHandle_t;

static inline cublasStatus_t emu_cublas_create(cublasHandle_t *h) {
    *h = (cublasHandle_t)calloc(1, sizeof(EmuCublas));
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_cublas_destroy(cublasHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_cublas_set_stream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    h->workspace = NULL;   // (as cuBLAS: setting the stream resets the workspace)
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_cublas_set_workspace(cublasHandle_t h, void *w, size_t bytes) {
    h->workspace = w;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}
// (Recorded only: every sum here is rounded once, as the flag that forbids bf16 partial sums asks.)
static inline cublasStatus_t emu_cublas_set_math_mode(cublasHandle_t h, cublasMath_t mode) {
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

// f rounded to TF32 (10 mantissa bits), to nearest even; NaN as it is.
static inline float emu_tf32_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}

// Element i of an operand stored as `type`, as the compute type has cuBLAS read it.
static inline double emu_operand(const void *x, size_t i, cudaDataType type, cublasComputeType_t compute) {
    if (type == CUDA_R_16BF) return bf16_float(((const uint16_t *)x)[i]);
    float f = ((const float *)x)[i];
    if (compute == CUBLAS_COMPUTE_32F_FAST_16BF) return bf16_round(f);
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) return emu_tf32_round(f);
    return f;
}

// One product, column-major: C (m,n) = alpha op(A) (m,k) op(B) (k,n) + beta C; C float32, or
// bf16 bits (ct CUDA_R_16BF: the result rounded to nearest even, as cuBLAS's output conversion).
static inline cublasStatus_t emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                               const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb,
                               float beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute) {
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) || lda < 1 ||
        ldb < (tb == CUBLAS_OP_N ? k : n) || ldb < 1 || ldc < m || ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                size_t ia = ta == CUBLAS_OP_N ? i + (size_t)p * lda : p + (size_t)i * lda;
                size_t ib = tb == CUBLAS_OP_N ? p + (size_t)j * ldb : j + (size_t)p * ldb;
                s += emu_operand(A, ia, at, compute) * emu_operand(B, ib, bt, compute);
            }
            size_t ic = i + (size_t)j * ldc;
            if (ct == CUDA_R_16BF) {
                uint16_t *c = (uint16_t *)C + ic;
                *c = bf16_bits(beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + (double)beta * bf16_float(*c)));
                continue;
            }
            float *c = (float *)C + ic;
            *c = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + (double)beta * *c);
        }
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t emu_cublas_sgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                       const float *alpha, const float *A, int lda, const float *B, int ldb,
                                       const float *beta, float *C, int ldc) {
    return emu_gemm(ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, *beta, C, CUDA_R_32F, ldc,
                    CUBLAS_COMPUTE_32F);
}

static inline cublasStatus_t emu_cublas_gemm_ex(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                         const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                         cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t) {
    // (what gpu/matmul.cu asks for: a float32 result, or a bf16 one of bf16 operands)
    if (at != bt || (ct != CUDA_R_32F && !(ct == CUDA_R_16BF && at == CUDA_R_16BF))) return CUBLAS_STATUS_NOT_SUPPORTED;
    return emu_gemm(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt, ldb, *(const float *)beta, C, ct, ldc,
                    compute);
}

// Group g: group_size[g] products with its operations, sizes, scalars and leading
// dimensions; the products' pointers one after another in Aarray, Barray, Carray.
static inline cublasStatus_t emu_cublas_gemm_grouped(cublasHandle_t, const cublasOperation_t *ta, const cublasOperation_t *tb,
                                              const int *m, const int *n, const int *k, const void *alpha,
                                              const void *const *Aarray, cudaDataType at, const int *lda,
                                              const void *const *Barray, cudaDataType bt, const int *ldb,
                                              const void *beta, void *const *Carray, cudaDataType ct, const int *ldc,
                                              int group_count, const int *group_size, cublasComputeType_t compute) {
    if (at != bt || group_count < 0 || (ct != CUDA_R_32F && !(ct == CUDA_R_16BF && at == CUDA_R_16BF)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // EMU_CUBLAS_REFUSE_GROUPED_BF16=1: refuse bf16 operands here, as a cuBLAS whose grouped
    // call lacks that combination would, so that the callers' fallback runs (tests/gpu_emu.sh).
    const char *refuse = getenv("EMU_CUBLAS_REFUSE_GROUPED_BF16");
    if (at == CUDA_R_16BF && refuse && !strcmp(refuse, "1")) return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int g = 0, p = 0; g < group_count; g++)
        for (int i = 0; i < group_size[g]; i++, p++) {
            cublasStatus_t st = emu_gemm(ta[g], tb[g], m[g], n[g], k[g], ((const float *)alpha)[g], Aarray[p], at,
                                         lda[g], Barray[p], bt, ldb[g], ((const float *)beta)[g], Carray[p], ct,
                                         ldc[g], compute);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
        }
    return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt (gpu/matmul_lt.cu): descriptors as plain records, a heuristic that gives one
// algorithm recording what it was asked for, and a product that checks the call against that
// record before computing as emu_gemm. Where real cuBLASLt might run a kernel on operands it
// was not chosen for (a pointer less aligned than the heuristic was told, split sums added in
// bf16 for a bf16 result), this one fails with CUBLAS_STATUS_EXECUTION_FAILED, which
// gpu/matmul_lt.cu treats as fatal: the emulated runs show its classes never do that.
// EMU_CUBLASLT=none: the heuristic gives no algorithm (the callers' cublasGemmEx fallback);
// EMU_CUBLASLT=exact: an algorithm runs only the shape it was chosen for, refusing others
// (the refused call asking again for its own); EMU_CUBLASLT=second: the heuristic's first
// answer is one that it says will not run, its second the algorithm. tests/gpu_emu.sh runs each.
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4 } cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;
enum {
    CUBLASLT_REDUCTION_SCHEME_INPLACE = 1, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4, CUBLASLT_REDUCTION_SCHEME_MASK = 7
};
struct EmuLt { int unused; };
struct EmuLtDesc { cublasComputeType_t compute; int32_t ta, tb; };
struct EmuLtLayout { cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct EmuLtPref { uint64_t ws; uint32_t schemes, align[4]; };
typedef EmuLt *cublasLtHandle_t;
typedef EmuLtDesc *cublasLtMatmulDesc_t;
typedef EmuLtLayout *cublasLtMatrixLayout_t;
typedef EmuLtPref *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
enum { EMU_LT_MAGIC = 0x4c74 };   // algo.data: magic, m, n, k, the four alignments, the schemes

static inline cublasStatus_t emu_lt_create(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)calloc(1, sizeof(EmuLt));
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_destroy(cublasLtHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = (cublasLtMatmulDesc_t)calloc(1, sizeof(EmuLtDesc));
    (*d)->compute = compute;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_desc_destroy(cublasLtMatmulDesc_t d) {
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                      size_t bytes) {
    if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(a == CUBLASLT_MATMUL_DESC_TRANSA ? &d->ta : &d->tb, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_layout_create(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                           int64_t ld) {
    *l = (cublasLtMatrixLayout_t)calloc(1, sizeof(EmuLtLayout));
    **l = EmuLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_layout_destroy(cublasLtMatrixLayout_t l) {
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_pref_create(cublasLtMatmulPreference_t *p) {
    *p = (cublasLtMatmulPreference_t)calloc(1, sizeof(EmuLtPref));
    **p = EmuLtPref{0, CUBLASLT_REDUCTION_SCHEME_MASK, {256, 256, 256, 256}};   // (cuBLASLt's defaults)
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_pref_destroy(cublasLtMatmulPreference_t p) {
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t emu_lt_pref_set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                      const void *buf, size_t bytes) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && bytes == sizeof p->ws) memcpy(&p->ws, buf, bytes);
    else if (a == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK && bytes == 4) memcpy(&p->schemes, buf, bytes);
    else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES &&
             bytes == 4)
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes);
    else return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

// The product's m, n, k from the layouts, CUBLAS_STATUS_SUCCESS when they agree with each
// other and with the transposes, and the leading dimensions hold their rows.
static inline cublasStatus_t emu_lt_shape(const EmuLtDesc *d, const EmuLtLayout *a, const EmuLtLayout *b,
                                   const EmuLtLayout *c, uint64_t *m, uint64_t *n, uint64_t *k) {
    *m = c->rows; *n = c->cols;
    *k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols,
             bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != *m || bk != *k || bn != *n || a->ld < (int64_t)a->rows || b->ld < (int64_t)b->rows ||
        c->ld < (int64_t)c->rows || a->type != b->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t emu_lt_heuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                       cublasLtMatmulPreference_t p, int requested, cublasLtMatmulHeuristicResult_t *r,
                                       int *returned) {
    uint64_t m, n, k;
    *returned = 0;
    if (requested < 1 || dd->type != c->type || dd->rows != c->rows || dd->cols != c->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = emu_lt_shape(d, a, b, c, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const char *mode = getenv("EMU_CUBLASLT");
    if (mode && !strcmp(mode, "none")) return CUBLAS_STATUS_NOT_SUPPORTED;
    // second: the first answer one the heuristic says will not run (its state), the second the algorithm
    int first = mode && !strcmp(mode, "second") && requested > 1;
    memset(r, 0, sizeof *r * (size_t)(first + 1));
    uint64_t rec[8] = {EMU_LT_MAGIC, m, n, k, p->align[0], p->align[1], p->align[2] < p->align[3] ? p->align[2] :
                       p->align[3], p->schemes};
    r[0].state = CUBLAS_STATUS_NOT_SUPPORTED;
    memcpy(r[first].algo.data, rec, sizeof rec);
    r[first].state = CUBLAS_STATUS_SUCCESS;
    *returned = first + 1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline int emu_lt_aligned(const void *x, uint64_t bytes) { return (uintptr_t)x % bytes == 0; }

static inline cublasStatus_t emu_lt_matmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                    cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b,
                                    const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
                                    cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo, void *, size_t,
                                    cudaStream_t) {
    uint64_t m, n, k;
    cublasStatus_t st = emu_lt_shape(d, a, b, c, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const uint64_t *rec = algo ? algo->data : NULL;
    if (!rec || rec[0] != EMU_LT_MAGIC || C != D || c != dd) return CUBLAS_STATUS_INVALID_VALUE;
    if (!emu_lt_aligned(A, rec[4]) || !emu_lt_aligned(B, rec[5]) || !emu_lt_aligned(D, rec[6]) ||
        (c->type == CUDA_R_16BF && (rec[7] & (CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE))))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    const char *mode = getenv("EMU_CUBLASLT");
    if (mode && !strcmp(mode, "exact") && (rec[1] != m || rec[2] != n || rec[3] != k)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return emu_gemm((cublasOperation_t)d->ta, (cublasOperation_t)d->tb, (int)m, (int)n, (int)k, *(const float *)alpha,
                    A, a->type, (int)a->ld, B, b->type, (int)b->ld, *(const float *)beta, D, c->type, (int)c->ld,
                    d->compute);
}

#endif
