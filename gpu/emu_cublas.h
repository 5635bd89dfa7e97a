// gpu/emu_cublas.h: the part of cuBLAS that gpu/matmul.cu calls, run on the CPU, for the
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

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 }
    cublasStatus_t;
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

static cublasStatus_t emu_cublas_create(cublasHandle_t *h) {
    *h = (cublasHandle_t)calloc(1, sizeof(EmuCublas));
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t emu_cublas_destroy(cublasHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t emu_cublas_set_stream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    h->workspace = NULL;   // (as cuBLAS: setting the stream resets the workspace)
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t emu_cublas_set_workspace(cublasHandle_t h, void *w, size_t bytes) {
    h->workspace = w;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}
// (Recorded only: every sum here is rounded once, as the flag that forbids bf16 partial sums asks.)
static cublasStatus_t emu_cublas_set_math_mode(cublasHandle_t h, cublasMath_t mode) {
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

// f rounded to TF32 (10 mantissa bits), to nearest even; NaN as it is.
static float emu_tf32_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}

// Element i of an operand stored as `type`, as the compute type has cuBLAS read it.
static double emu_operand(const void *x, size_t i, cudaDataType type, cublasComputeType_t compute) {
    if (type == CUDA_R_16BF) return bf16_float(((const uint16_t *)x)[i]);
    float f = ((const float *)x)[i];
    if (compute == CUBLAS_COMPUTE_32F_FAST_16BF) return bf16_round(f);
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) return emu_tf32_round(f);
    return f;
}

// One product, column-major: C (m,n) = alpha op(A) (m,k) op(B) (k,n) + beta C; C float32, or
// bf16 bits (ct CUDA_R_16BF: the result rounded to nearest even, as cuBLAS's output conversion).
static cublasStatus_t emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
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

static cublasStatus_t emu_cublas_sgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                       const float *alpha, const float *A, int lda, const float *B, int ldb,
                                       const float *beta, float *C, int ldc) {
    return emu_gemm(ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, *beta, C, CUDA_R_32F, ldc,
                    CUBLAS_COMPUTE_32F);
}

static cublasStatus_t emu_cublas_gemm_ex(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
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
static cublasStatus_t emu_cublas_gemm_grouped(cublasHandle_t, const cublasOperation_t *ta, const cublasOperation_t *tb,
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

#endif
