// gpu/matmul16.cu: the GPU's 16-bit products (kernels/matmul16.h), the twin of
// kernels/cpu/matmul16.c: both operands bf16 as stored, the sums and the output float32 (or,
// in the *_round16 forms, the output rounded to bf16 and stored so).
//
// Under cuBLAS (gpu_matmul=cublas or cublas_bf16): the operands go to cuBLAS as they lie
// (cublasGemmEx with CUDA_R_16BF, gpu/matmul_cublas.h): tensor cores, each product of two bf16
// values exact, float32 sums in cuBLAS's order; no conversion, and half the bytes of the
// float32 products' operands read. The chunked products and a gradient's leaves are one
// product over the whole contraction, as gpu/matmul.cu does under cuBLAS; the experts'
// products one grouped call (cuBLAS's, or the backend's own kernel where cuBLAS refuses it).
// With the ordered GEMM (the default; HIP's only product): each operand widened to float32 in
// a scratch buffer of the stream's own (cudaMallocAsync, freed in stream order once the product
// has read it; GPU-only and inside the call, as gpu/matmul.cu's scratch), then matmul_cuda's
// kernel of the same name: the float32 twin's bits, so the CPU's.
#include "gpu/gpu.h"
#include "gpu/backend.h"
#include "gpu/matmul_cublas.h"
#include "kernels/grouped_loop.h"   // the grouped products a group at a time

#if GPU_HOST_PASS
// A float32 copy of the n bf16 values h, in the stream's scratch; release() gives it back.
static float *widened(const uint16_t *h, size_t n) {
    float *x;
    GPU_CHECK(cudaMallocAsync((void **)&x, sizeof(float) * (n ? n : 1), gpu_stream()));
    cast_cuda.unpack_bf16(x, h, n);
    return x;
}
static void release(float *x) { GPU_CHECK(cudaFreeAsync(x, gpu_stream())); }

// The values a strided operand spans: rows of `cols` values `ld` apart.
static size_t span(int rows, int cols, int ld) { return rows > 0 ? (size_t)(rows - 1) * ld + cols : 0; }

// 1 when a product of this shape goes to cuBLAS: cuBLAS chosen, and the product not empty (a
// contraction over K = 0, which writes zeros or adds nothing, stays with the ordered GEMM,
// as in gpu/matmul.cu).
static int on_cublas(int M, int N, int K) { return gpu_matmul_mode() != 0 && M > 0 && N > 0 && K > 0; }

// C (M,N) = op(A) op(B) (+= when accumulate) by cuBLAS on the bf16 operands (on_cublas only).
static void cublas16(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                     int ldb, int accumulate, float *C, int ldc) {
#if GPU_HAVE_CUBLAS
    gemm16_cublas(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
#else
    (void)transA; (void)transB; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb;
    (void)accumulate; (void)C; (void)ldc;
    fprintf(stderr, "meshmoe: internal: a cuBLAS product in a build without cuBLAS\n");
    exit(1);
#endif
}

// out (T,OC) = inp (T,C) @ w (C,OC), or += when accumulate.
static void matmul_forward(float *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC, int accumulate) {
    if (on_cublas(T, OC, C)) { cublas16(0, 0, T, OC, C, inp, C, w, OC, accumulate, out, OC); return; }
    float *x = widened(inp, (size_t)T * C), *wf = widened(w, (size_t)C * OC);
    matmul_cuda.matmul_forward(out, x, wf, T, C, OC, accumulate);
    release(x); release(wf);
}

// dinp (T,C) += dout (T,OC) @ w^T.
static void matmul_backward_dinp(float *dinp, const uint16_t *dout, const uint16_t *w, int T, int C, int OC) {
    if (on_cublas(T, C, OC)) { cublas16(0, 1, T, C, OC, dout, OC, w, OC, 1, dinp, C); return; }
    float *d = widened(dout, (size_t)T * OC), *wf = widened(w, (size_t)C * OC);
    matmul_cuda.matmul_backward_dinp(dinp, d, wf, T, C, OC);
    release(d); release(wf);
}

// dw (C,OC) = inp^T (C,len) @ dout (len,OC), or += when accumulate.
static void matmul_backward_dw(float *dw, const uint16_t *inp, const uint16_t *dout, int len, int C, int OC,
                               int accumulate) {
    if (on_cublas(C, OC, len)) { cublas16(1, 0, C, OC, len, inp, C, dout, OC, accumulate, dw, OC); return; }
    float *x = widened(inp, (size_t)len * C), *d = widened(dout, (size_t)len * OC);
    matmul_cuda.matmul_backward_dw(dw, x, d, len, C, OC, accumulate);
    release(x); release(d);
}

// The chunked product; under cuBLAS the whole contraction as one product (gpu/matmul.cu says why).
static void gemm_chunked(int transB, int M, int N, int K, int chunks, const uint16_t *A, int lda, const uint16_t *B,
                         int ldb, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    if (on_cublas(M, N, K)) { cublas16(0, transB, M, N, K, A, lda, B, ldb, 0, C, ldc); return; }
    float *a = widened(A, span(M, K, lda)), *b = widened(B, transB ? span(N, K, ldb) : span(K, N, ldb));
    matmul_cuda.gemm_chunked(transB, M, N, K, chunks, a, lda, b, ldb, C, ldc);
    release(a); release(b);
}

// A weight gradient's leaves; under cuBLAS the leaves' rows, adjacent, as one product.
static void matmul_backward_dw_leaves(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off, int n,
                                      int C, int OC, int accumulate) {
    if (C == 0 || OC == 0 || n <= 0) return;
    int rows = off[n] - off[0];
    if (on_cublas(C, OC, rows)) {
        cublas16(1, 0, C, OC, rows, inp + (size_t)off[0] * C, C, dout + (size_t)off[0] * OC, OC, accumulate, dw, OC);
        return;
    }
    float *x = widened(inp, (size_t)off[n] * C), *d = widened(dout, (size_t)off[n] * OC);
    matmul_cuda.matmul_backward_dw_leaves(dw, x, d, off, n, C, OC, accumulate);
    release(x); release(d);
}

// ---- The experts' grouped products: under cuBLAS in grouped calls (cuBLAS's, or where it
// refuses them the backend's own tensor-core kernel: MESHMOE_GROUPED, gpu/matmul_cublas.h),
// else (the ordered GEMM, or cuBLAS alone refusing) a group at a time through the kernels above.
#if GPU_HAVE_CUBLAS
static int grouped_rows_cublas(int transB, const int *rows, int G, int N, int K, const uint16_t *A, const uint16_t *B,
                               float *C, int accumulate) {
    return rows_grouped16_cublas(transB, rows, G, N, K, A, B, C, accumulate);   // (0 unless cuBLAS)
}
static int grouped_dw_cublas(const int *off, int n, int G, int C, int OC, const uint16_t *inp, const uint16_t *dout,
                             float *dw, int accumulate) {
    return dw_grouped16_cublas(off, n, G, C, OC, inp, dout, dw, accumulate);
}
#else
static int grouped_rows_cublas(int, const int *, int, int, int, const uint16_t *, const uint16_t *, float *, int) {
    return 0;   // (HIP: no cuBLAS, a group at a time through the ordered GEMM)
}
static int grouped_dw_cublas(const int *, int, int, int, int, const uint16_t *, const uint16_t *, float *, int) {
    return 0;
}
#endif

static void matmul_forward_grouped(float *out, const uint16_t *inp, const uint16_t *w, const int *rows, int G, int C,
                                   int OC, int accumulate) {
    if (!grouped_rows_cublas(0, rows, G, OC, C, inp, w, out, accumulate))
        forward_grouped_loop16(&matmul16_cuda, out, inp, w, rows, G, C, OC, accumulate);
}

static void matmul_backward_dinp_grouped(float *dinp, const uint16_t *dout, const uint16_t *w, const int *rows, int G,
                                         int C, int OC) {
    if (!grouped_rows_cublas(1, rows, G, C, OC, dout, w, dinp, 1))
        dinp_grouped_loop16(&matmul16_cuda, dinp, dout, w, rows, G, C, OC);
}

static void gemm_chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const uint16_t *A,
                                 const uint16_t *B, float *out) {
    if (!grouped_rows_cublas(transB, rows, G, N, K, A, B, out, 0))
        chunked_grouped_loop16(&matmul16_cuda, transB, rows, G, N, K, chunks, A, B, out);
}

static void matmul_backward_dw_leaves_grouped(float *dw, const uint16_t *inp, const uint16_t *dout, const int *off,
                                              int n, int G, int C, int OC, int accumulate) {
    if (grouped_dw_cublas(off, n, G, C, OC, inp, dout, dw, accumulate)) return;
    dw_leaves_grouped_loop16(&matmul16_cuda, dw, inp, dout, off, n, G, C, OC, accumulate);
}

// ---- The rounded forms (*_round16): under cuBLAS the sums converted to bf16 by the product
// itself (D as CUDA_R_16BF, beta 0; the experts' groups in a grouped call where cuBLAS takes
// bf16 results); otherwise the float32-output form above into the stream's scratch, packed
// after (cast_cuda.pack_bf16): with the ordered GEMM the CPU's bits.
static void cublas16_round(int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                           uint16_t *C, int ldc) {
#if GPU_HAVE_CUBLAS
    gemm16_round_cublas(transB, M, N, K, A, lda, B, ldb, C, ldc);
#else
    (void)transB; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)C; (void)ldc;
    fprintf(stderr, "meshmoe: internal: a cuBLAS product in a build without cuBLAS\n");
    exit(1);
#endif
}
static int grouped_round_cublas(int transB, const int *rows, int G, int N, int K, const uint16_t *A,
                                const uint16_t *B, uint16_t *C) {
#if GPU_HAVE_CUBLAS
    return rows_grouped16_round_cublas(transB, rows, G, N, K, A, B, C);
#else
    (void)transB; (void)rows; (void)G; (void)N; (void)K; (void)A; (void)B; (void)C;
    return 0;
#endif
}

// n float32 sums in the stream's scratch (zeros where zeroed: the dinp forms add onto them).
static float *sums(size_t n, int zeroed) {
    float *s;
    GPU_CHECK(cudaMallocAsync((void **)&s, sizeof(float) * (n ? n : 1), gpu_stream()));
    if (zeroed) GPU_CHECK(cudaMemsetAsync(s, 0, sizeof(float) * n, gpu_stream()));
    return s;
}
static void packed_from(uint16_t *out, float *s, size_t n) {
    cast_cuda.pack_bf16(out, s, n);
    release(s);
}

static void matmul_forward_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, int T, int C, int OC) {
    if (on_cublas(T, OC, C)) { cublas16_round(0, T, OC, C, inp, C, w, OC, out, OC); return; }
    float *s = sums((size_t)T * OC, 0);
    matmul_forward(s, inp, w, T, C, OC, 0);
    packed_from(out, s, (size_t)T * OC);
}

static void matmul_backward_dinp_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int T, int C,
                                         int OC) {
    if (on_cublas(T, C, OC)) { cublas16_round(1, T, C, OC, dout, OC, w, OC, dinp, C); return; }
    float *s = sums((size_t)T * C, 1);
    matmul_backward_dinp(s, dout, w, T, C, OC);
    packed_from(dinp, s, (size_t)T * C);
}

static void matmul_forward_grouped_round16(uint16_t *out, const uint16_t *inp, const uint16_t *w, const int *rows,
                                           int G, int C, int OC) {
    if (grouped_round_cublas(0, rows, G, OC, C, inp, w, out)) return;
    float *s = sums((size_t)rows[G] * OC, 0);
    matmul_forward_grouped(s, inp, w, rows, G, C, OC, 0);
    packed_from(out, s, (size_t)rows[G] * OC);
}

static void matmul_backward_dinp_grouped_round16(uint16_t *dinp, const uint16_t *dout, const uint16_t *w,
                                                 const int *rows, int G, int C, int OC) {
    if (grouped_round_cublas(1, rows, G, C, OC, dout, w, dinp)) return;
    float *s = sums((size_t)rows[G] * C, 1);
    matmul_backward_dinp_grouped(s, dout, w, rows, G, C, OC);
    packed_from(dinp, s, (size_t)rows[G] * C);
}

extern "C" const Matmul16Kernels matmul16_cuda = {matmul_forward,
                                                  matmul_backward_dinp,
                                                  matmul_backward_dw,
                                                  gemm_chunked,
                                                  matmul_backward_dw_leaves,
                                                  matmul_forward_grouped,
                                                  matmul_backward_dinp_grouped,
                                                  gemm_chunked_grouped,
                                                  matmul_backward_dw_leaves_grouped,
                                                  matmul_forward_round16,
                                                  matmul_backward_dinp_round16,
                                                  matmul_forward_grouped_round16,
                                                  matmul_backward_dinp_grouped_round16};
#endif
