// tests/products_gpu.c (build/products_gpu, made by `make gpu`; run by tests/gpu_bench.sh):
// the matrix products of the -medium presets' largest shapes, timed on the GPU with CUDA
// events. First the backend's own grouped kernel (gpu/grouped16.cu) against cuBLAS, deepseek's
// experts first (a run cut by its time limit still has them); then what bf16 storage saves:
// the trainer's products in bf16 mode take float32 arrays holding bf16 values, which cuBLAS
// converts inside its kernels (gpu_matmul=cublas_bf16), where bf16 storage hands it the 16-bit
// arrays (kernels/matmul16.h): each product both ways on the same values, and what packing one
// float32 operand into 16 bits costs (what a product pays while only its other operand is
// 16-bit: docs/bf16-storage.md, step 2); last the products whose result is kept 16-bit, their
// float32 result packed after against their result written as bf16 by the product.
//
// usage: build/products_gpu [small]   (small: tiny shapes, to check the program itself,
// e.g. under the emulation: build/products_emu small). Prints its tables in markdown.
//        build/products_gpu fresh [small]: what the experts' products pay for shapes cuBLAS
// has not met (fresh_table, below); tests/gpu_bench.sh runs it with and without
// MESHMOE_CUBLAS_LT=off.
#include "kernels/kernels.h"
#include "kernels/bf16.h"
#include "gpu/backend.h"
#include "gpu/grouped16.h"   // the own tensor-core kernel, timed beside cuBLAS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FORWARD, DINP, DW, GROUPED, GROUPED_DINP, GROUPED_DW };
static const char *const forms[] = {"x @ w", "dy @ w^T", "x^T @ dy", "x @ w, grouped", "dy @ w^T, grouped",
                                    "x^T @ dy, grouped"};

// A product: out (M,N) = op(A) (M,K) @ op(B) (K,N). The grouped forms have G groups of
// equal rows, each with its own weight: forward and input gradient, the M rows in groups
// (w: G of (K,N), or of (N,K) for the input gradient); weight gradient, the K rows in groups,
// G results (M,N), one leaf a group.
typedef struct {
    const char *what;
    int form, M, N, K, G;
    int own;     // 1: timed by the own kernel too (the first table)
    int round;   // 1: timed with bf16 results too (the third table; forward and input gradient forms)
} Shape;

static const Shape medium[] = {   // (deepseek's experts first: the shapes the own kernel is for)
    {"deepseek-medium: experts wi_0", GROUPED, 49152, 1024, 2048, 64, 1, 1},
    {"deepseek-medium: experts wo", GROUPED, 49152, 2048, 1024, 64, 1, 0},
    {"deepseek-medium: experts wi_0, input gradient", GROUPED_DINP, 49152, 2048, 1024, 64, 1, 0},
    {"deepseek-medium: experts wi_0, weight gradient", GROUPED_DW, 2048, 1024, 49152, 64, 1, 0},
    {"mixtral-medium: attention q", FORWARD, 8192, 2048, 2048, 1, 1, 0},
    {"mixtral-medium: head", FORWARD, 8192, 32000, 2048, 1, 0, 1},
    {"mixtral-medium: head, input gradient", DINP, 8192, 2048, 32000, 1, 0, 0},
    {"mixtral-medium: attention q, weight gradient", DW, 2048, 2048, 8192, 1, 1, 0},
    {"mixtral-medium: experts wi_0", GROUPED, 16384, 7168, 2048, 8, 1, 1},
    {"mixtral-medium: experts wo", GROUPED, 16384, 2048, 7168, 8, 1, 0},
    {"mixtral-medium: experts wi_0, input gradient", GROUPED_DINP, 16384, 2048, 7168, 8, 1, 0},
    {"mixtral-medium: experts wi_0, weight gradient", GROUPED_DW, 2048, 7168, 16384, 8, 1, 0},
    {"deepseek-medium: MLA wkv_b", FORWARD, 8192, 4096, 512, 1, 0, 0},
    {"mixtral-medium: experts d activation", GROUPED_DINP, 16384, 7168, 2048, 8, 0, 1},
    {"deepseek-medium: experts d activation", GROUPED_DINP, 49152, 1024, 2048, 64, 0, 1},
    {"deepseek-medium: dense MLP wi_0", FORWARD, 8192, 8192, 2048, 1, 0, 1},
};
static const Shape small[] = {
    {"small: forward", FORWARD, 48, 40, 32, 1, 1, 1},
    {"small: input gradient", DINP, 48, 32, 40, 1, 1, 1},
    {"small: weight gradient", DW, 32, 40, 48, 1, 1, 0},
    {"small: grouped", GROUPED, 64, 40, 32, 4, 1, 1},
    {"small: grouped input gradient", GROUPED_DINP, 64, 32, 40, 4, 1, 1},
    {"small: grouped weight gradient", GROUPED_DW, 32, 40, 64, 4, 1, 0},
};

// n random bf16 values in [-0.5, 0.5) on the device, as floats (*f) and as bits (*h).
static void operand(size_t n, float **f, uint16_t **h) {
    static uint64_t state = 0x9e3779b97f4a7c15ull;
    float *x = malloc(sizeof(float) * (n ? n : 1));
    uint16_t *b = malloc(sizeof(uint16_t) * (n ? n : 1));
    if (!x || !b) { fprintf(stderr, "products_gpu: out of host memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;   // xorshift64
        b[i] = bf16_bits((float)(state >> 40) * 0x1p-24f - 0.5f);
        x[i] = bf16_float(b[i]);
    }
    *f = gpu_alloc(sizeof(float) * (n ? n : 1));
    *h = gpu_alloc(sizeof(uint16_t) * (n ? n : 1));
    gpu_upload(*f, x, sizeof(float) * n);
    gpu_upload(*h, b, sizeof(uint16_t) * n);
    free(x); free(b);
}

// The operands and the result as stored, in values: A (the activation or output gradient), B
// (the weight, or the output gradient of a weight gradient) and C.
static size_t size_a(const Shape *s) { return (size_t)s->M * s->K; }
static size_t size_b(const Shape *s) {
    return (size_t)s->K * s->N * (s->form == GROUPED || s->form == GROUPED_DINP ? s->G : 1);
}
static size_t size_c(const Shape *s) { return (size_t)s->M * s->N * (s->form == GROUPED_DW ? s->G : 1); }

// The shape's product once: with the float32 operands A, B (b16 0) or their bits A16, B16 (1).
static void product(const Shape *s, int b16, const float *A, const float *B, const uint16_t *A16, const uint16_t *B16,
                    float *C, const int *rows) {
    const MatmulKernels *f = backend_cuda.matmul;
    const Matmul16Kernels *h = backend_cuda.matmul16;
    int M = s->M, N = s->N, K = s->K;
    switch (s->form) {
    case FORWARD:   // out (M,N) = x (M,K) @ w (K,N)
        if (b16) h->matmul_forward(C, A16, B16, M, K, N, 0);
        else f->matmul_forward(C, A, B, M, K, N, 0);
        break;
    case DINP:   // dinp (M,N) += dy (M,K) @ w^T, w (N,K)
        if (b16) h->matmul_backward_dinp(C, A16, B16, M, N, K);
        else f->matmul_backward_dinp(C, A, B, M, N, K);
        break;
    case DW:   // dw (M,N) = x^T @ dy, x (K,M), dy (K,N)
        if (b16) h->matmul_backward_dw(C, A16, B16, K, M, N, 0);
        else f->matmul_backward_dw(C, A, B, K, M, N, 0);
        break;
    case GROUPED:   // out (M,N) = x (M,K) @ w_g (K,N) on group g's rows
        if (b16) h->matmul_forward_grouped(C, A16, B16, rows, s->G, K, N, 0);
        else f->matmul_forward_grouped(C, A, B, rows, s->G, K, N, 0);
        break;
    case GROUPED_DINP:   // dinp (M,N) += dy (M,K) @ w_g^T on group g's rows, w_g (N,K)
        if (b16) h->matmul_backward_dinp_grouped(C, A16, B16, rows, s->G, N, K);
        else f->matmul_backward_dinp_grouped(C, A, B, rows, s->G, N, K);
        break;
    case GROUPED_DW:   // dw_g (M,N) = x_g^T @ dy_g over group g's rows of x (K,M) and dy (K,N)
        if (b16) h->matmul_backward_dw_leaves_grouped(C, A16, B16, rows, 1, s->G, M, N, 0);
        else f->matmul_backward_dw_leaves_grouped(C, A, B, rows, 1, s->G, M, N, 0);
        break;
    }
}

// The same product in bf16 by the backend's own tensor-core kernel (gpu/grouped16.cu), on the
// operands stored as bf16 (fp32 0) or as float32 (1): each form as a grouped call, a dense
// product one group of all the rows.
static void own_kernel(const Shape *s, int fp32, const float *A, const float *B, const uint16_t *A16,
                       const uint16_t *B16, float *C, const int *rows) {
    int all[2] = {0, s->form == DW || s->form == GROUPED_DW ? s->K : s->M}, G = s->G;
    const int *r = s->G > 1 ? rows : all;
    int form = s->form == DINP || s->form == GROUPED_DINP ? DINP
               : s->form == DW || s->form == GROUPED_DW   ? DW
                                                          : FORWARD;
    const void *a = fp32 ? (const void *)A : (const void *)A16, *b = fp32 ? (const void *)B : (const void *)B16;
    if (form == DW) dw_grouped_tc(r, 1, G, s->M, s->N, a, b, C, 0, !fp32);
    else rows_grouped_tc(form == DINP, r, G, s->N, s->K, a, b, C, form == DINP, !fp32);
}

// Milliseconds a call takes, the mean of `reps` calls after one to warm up: the float32
// product (which 0), the bf16 one (1), A packed into 16 bits (2), or the own kernel on bf16
// storage (3) or on the float32 operands (4).
static double time_ms(const Shape *s, int which, int reps, const float *A, const float *B, const uint16_t *A16,
                      const uint16_t *B16, float *C, uint16_t *P, const int *rows) {
    void *t0 = NULL;
    for (int r = 0; r <= reps; r++) {
        if (r == 1) t0 = backend_cuda.mark();
        if (which == 2) backend_cuda.cast->pack_bf16(P, A, size_a(s));
        else if (which >= 3) own_kernel(s, which == 4, A, B, A16, B16, C, rows);
        else product(s, which, A, B, A16, B16, C, rows);
    }
    double ms = backend_cuda.elapsed_ms(t0, backend_cuda.mark()) / reps;
    backend_cuda.marks_release();
    return ms;
}

// The product's result from a zeroed C, on the host (the caller frees it): b16 as time_ms's which.
static float *result(const Shape *s, int b16, const float *A, const float *B, const uint16_t *A16, const uint16_t *B16,
                     float *C, const int *rows) {
    size_t nc = size_c(s);
    gpu_fill_bytes(C, 0, sizeof(float) * nc);
    if (b16 >= 3) own_kernel(s, b16 == 4, A, B, A16, B16, C, rows);
    else product(s, b16, A, B, A16, B16, C, rows);
    float *host = malloc(sizeof(float) * nc);
    if (!host) { fprintf(stderr, "products_gpu: out of host memory\n"); exit(1); }
    gpu_download(host, C, sizeof(float) * nc);
    return host;
}

// The largest |f - h| over the largest |f|: how far the two ways' results are apart (the
// same products of bf16 values, summed in float32 in each kernel's own order).
static double apart(const float *f, const float *h, size_t n) {
    double d = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        double e = f[i] > h[i] ? f[i] - h[i] : h[i] - f[i], a = f[i] < 0 ? -f[i] : f[i];
        if (!(e <= d)) d = e;   // (a NaN counts)
        if (a > top) top = a;
    }
    return top > 0 ? d / top : d;
}

// A time in ms and a rate, or "-" where the clock gave nothing (the emulation's events).
static void cell(char *out, size_t size, double ms, double flops) {
    if (ms > 0 && flops > 0) snprintf(out, size, "%.3f | %.1f", ms, flops / ms * 1e-9);
    else if (ms > 0) snprintf(out, size, "%.3f", ms);
    else snprintf(out, size, flops > 0 ? "- | -" : "-");
}

// The own kernel against cuBLAS alone on the same operands, shape by shape (those marked
// own): bf16 storage (the 16-bit products), and float32 operands holding bf16 values, which
// cuBLAS's grouped call takes only in tf32 (the float32 products under cublas_bf16). A grouped
// form is what the experts' products run under MESHMOE_GROUPED=kernel (gpu/matmul.cu; by
// default, a cuBLAS call per group where cuBLAS refuses the grouped call in bf16); a dense one
// says how far the kernel is from cuBLAS.
static void own_kernel_table(const Shape *shapes, int n, int reps) {
    printf("Products on %s by cuBLAS alone (its grouped call, in tf32 where it refuses bf16 for float32 "
           "operands, or a call per group where it refuses that) against the backend's own tensor-core kernel "
           "(gpu/grouped16.cu), on bf16 storage and on the float32 operands; apart: the largest difference of "
           "the own kernel's results (both ways the same) from cuBLAS's on bf16 storage, over their largest "
           "value.\n\n", gpu_device_name());
    printf("| product | form | M x N x K | cuBLAS bf16 ms | TFLOP/s | own bf16 ms | TFLOP/s | cuBLAS float32 ms "
           "| TFLOP/s | own float32 ms | TFLOP/s | apart |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const Shape *s = &shapes[i];
        if (!s->own) continue;
        float *A, *B, *C;
        uint16_t *A16, *B16;
        operand(size_a(s), &A, &A16);
        operand(size_b(s), &B, &B16);
        C = gpu_alloc(sizeof(float) * size_c(s));
        int *rows = malloc(sizeof(int) * (s->G + 1)), R = s->form == GROUPED_DW ? s->K : s->M;
        for (int g = 0; g <= s->G; g++) rows[g] = (int)((long)R * g / s->G);
        float *rc = result(s, 1, A, B, A16, B16, C, rows), *rk = result(s, 3, A, B, A16, B16, C, rows);
        float *rf = result(s, 4, A, B, A16, B16, C, rows);
        double d = apart(rc, rk, size_c(s)), df = apart(rk, rf, size_c(s));
        free(rc); free(rk); free(rf);
        static const int ways[4] = {1, 3, 0, 4};   // the table's order: cuBLAS bf16, own bf16, cuBLAS float32, own
        double ms[4];
        for (int j = 0; j < 4; j++) ms[j] = time_ms(s, ways[j], reps, A, B, A16, B16, C, NULL, rows);
        double flops = 2.0 * s->M * s->N * s->K;
        char dims[64], cells[4][48], ap[64];
        snprintf(dims, sizeof dims, s->G > 1 ? "%d x %d x %d (%d groups)" : "%d x %d x %d", s->M, s->N, s->K, s->G);
        for (int j = 0; j < 4; j++) cell(cells[j], sizeof cells[j], ms[j], flops);
        if (df == 0) snprintf(ap, sizeof ap, "%.1e", d);
        else snprintf(ap, sizeof ap, "%.1e (float32 operands: %.1e)", d, df);
        printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", s->what, forms[s->form], dims, cells[0], cells[1],
               cells[2], cells[3], ap);
        fflush(stdout);
        free(rows);
        gpu_free(A); gpu_free(B); gpu_free(A16); gpu_free(B16); gpu_free(C);
    }
}

// The shape's product with bf16 results (kernels/matmul16.h's *_round16) into R16.
static void product_round16(const Shape *s, const uint16_t *A16, const uint16_t *B16, uint16_t *R16,
                            const int *rows) {
    const Matmul16Kernels *h = backend_cuda.matmul16;
    if (s->form == FORWARD) h->matmul_forward_round16(R16, A16, B16, s->M, s->K, s->N);
    if (s->form == DINP) h->matmul_backward_dinp_round16(R16, A16, B16, s->M, s->N, s->K);
    if (s->form == GROUPED) h->matmul_forward_grouped_round16(R16, A16, B16, rows, s->G, s->K, s->N);
    if (s->form == GROUPED_DINP) h->matmul_backward_dinp_grouped_round16(R16, A16, B16, rows, s->G, s->N, s->K);
}

// Milliseconds a call takes (as time_ms): the float32 result then packed (round 0), or the
// result written as bf16 by the product (1).
static double time_round_ms(const Shape *s, int round, int reps, const uint16_t *A16, const uint16_t *B16, float *C,
                            uint16_t *R16, const int *rows) {
    void *t0 = NULL;
    for (int r = 0; r <= reps; r++) {
        if (r == 1) t0 = backend_cuda.mark();
        if (round) product_round16(s, A16, B16, R16, rows);
        else {
            product(s, 1, NULL, NULL, A16, B16, C, rows);
            backend_cuda.cast->pack_bf16(R16, C, size_c(s));
        }
    }
    double ms = backend_cuda.elapsed_ms(t0, backend_cuda.mark()) / reps;
    backend_cuda.marks_release();
    return ms;
}

// The products whose result the trainer keeps 16-bit (SwiGLU's inputs, its activation's
// gradient), both ways on bf16 storage: float32 results packed after, as the layers did,
// against results written as bf16 by cuBLAS (D as CUDA_R_16BF; a grouped call with bf16
// results). apart: the largest difference of the two ways' bf16 results over the largest value.
static void round_table(const Shape *shapes, int n, int reps) {
    printf("\nThe products whose result is kept as bf16 (under bf16_storage=kept): the float32 result packed after "
           "(pack_bf16), against the result written as bf16 by the product itself (kernels/matmul16.h, *_round16); "
           "apart: the largest difference of the two over their largest value.\n\n");
    printf("| product | form | M x N x K | float32, packed ms | TFLOP/s | bf16 results ms | TFLOP/s | bf16 / packed time "
           "| apart |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const Shape *s = &shapes[i];
        if (!s->round) continue;
        float *A, *B, *C;
        uint16_t *A16, *B16, *R16;
        operand(size_a(s), &A, &A16);
        operand(size_b(s), &B, &B16);
        C = gpu_alloc(sizeof(float) * size_c(s));
        R16 = gpu_alloc(sizeof(uint16_t) * size_c(s));
        int *rows = malloc(sizeof(int) * (s->G + 1));
        for (int g = 0; g <= s->G; g++) rows[g] = (int)((long)s->M * g / s->G);
        size_t nc = size_c(s);
        float *packed = result(s, 1, A, B, A16, B16, C, rows), *direct = malloc(sizeof(float) * nc);
        uint16_t *bits = malloc(sizeof(uint16_t) * nc);
        if (!direct || !bits) { fprintf(stderr, "products_gpu: out of host memory\n"); exit(1); }
        product_round16(s, A16, B16, R16, rows);
        gpu_download(bits, R16, sizeof(uint16_t) * nc);
        for (size_t j = 0; j < nc; j++) {
            direct[j] = bf16_float(bits[j]);
            packed[j] = bf16_round(packed[j]);
        }
        double d = apart(packed, direct, nc);
        free(packed); free(direct); free(bits);
        double p = time_round_ms(s, 0, reps, A16, B16, C, R16, rows), r = time_round_ms(s, 1, reps, A16, B16, C, R16, rows);
        double flops = 2.0 * s->M * s->N * s->K;
        char dims[64], pc[48], rc[48], ratio[16];
        snprintf(dims, sizeof dims, s->G > 1 ? "%d x %d x %d (%d groups)" : "%d x %d x %d", s->M, s->N, s->K, s->G);
        cell(pc, sizeof pc, p, flops);
        cell(rc, sizeof rc, r, flops);
        snprintf(ratio, sizeof ratio, p > 0 ? "%.2f" : "-", p > 0 ? r / p : 0.0);
        printf("| %s | %s | %s | %s | %s | %s | %.1e |\n", s->what, forms[s->form], dims, pc, rc, ratio, d);
        fflush(stdout);
        free(rows);
        gpu_free(A); gpu_free(B); gpu_free(A16); gpu_free(B16); gpu_free(C); gpu_free(R16);
    }
}

// The host clock, in seconds.
static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// The experts' 16-bit forward products a call per expert, as a layer of mixtral-medium makes
// them (8 experts, 16384 rows in all, K 2048, N 7168; small: 4 experts, 64 rows, 32 x 40), over
// ROUNDS rounds whose row counts are drawn anew each round, as the routing draws them at
// every step and layer: ms a call by the host clock (the stream waited for at the end), the
// rounds with their shapes new, then the same rounds again, their shapes met. What the
// difference costs is the choosing of a kernel for a new shape (gpu/matmul_lt.cu: with its
// kept algorithms, or cublasGemmEx's heuristic under MESHMOE_CUBLAS_LT=off).
enum { ROUNDS = 24 };
static void fresh_table(int tiny) {
    int G = tiny ? 4 : 8, R = tiny ? 64 : 16384, K = tiny ? 32 : 2048, N = tiny ? 40 : 7168;
    float *Af, *Bf, *C = gpu_alloc(sizeof(float) * R * N);
    uint16_t *A, *B;
    operand((size_t)R * K, &Af, &A);
    operand((size_t)G * K * N, &Bf, &B);
    int rows[ROUNDS][8];
    unsigned long long x = 12345;
    for (int r = 0; r < ROUNDS; r++) {   // G row counts summing to R, from 1/4 to 7/4 of the mean each
        int left = R;
        for (int g = 0; g < G - 1; g++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int n = R / G / 4 + (int)((x >> 33) % (unsigned long long)(R / G * 3 / 2));
            rows[r][g] = n < left ? n : left;
            left -= rows[r][g];
        }
        rows[r][G - 1] = left;
    }
    const Matmul16Kernels *h = backend_cuda.matmul16;
    double ms[2];
    for (int pass = 0; pass < 2; pass++) {   // the shapes new, then met
        backend_cuda.sync();
        double t0 = seconds();
        for (int r = 0; r < ROUNDS; r++)
            for (int g = 0, r0 = 0; g < G; r0 += rows[r][g++])
                if (rows[r][g] > 0)
                    h->matmul_forward(C + (size_t)r0 * N, A + (size_t)r0 * K, B + (size_t)g * K * N, rows[r][g], K, N, 0);
        backend_cuda.sync();
        ms[pass] = 1e3 * (seconds() - t0) / (ROUNDS * G);
    }
    // The last round's results (C holds them) against the same products by another path: cuBLAS
    // converting the float32 operands itself (cublasGemmEx, gpu_matmul=cublas_bf16's float32
    // products), the same bf16 values summed in float32 in its own order: an algorithm kept from
    // another shape that ran this one wrongly would stand out of the rounding.
    float *ref = gpu_alloc(sizeof(float) * R * N), *got = malloc(sizeof(float) * R * N),
          *want = malloc(sizeof(float) * R * N);
    if (!got || !want) { fprintf(stderr, "products_gpu: out of host memory\n"); exit(1); }
    for (int g = 0, r0 = 0; g < G; r0 += rows[ROUNDS - 1][g++])
        if (rows[ROUNDS - 1][g] > 0)
            backend_cuda.matmul->matmul_forward(ref + (size_t)r0 * N, Af + (size_t)r0 * K, Bf + (size_t)g * K * N,
                                                rows[ROUNDS - 1][g], K, N, 0);
    backend_cuda.sync();
    gpu_download(got, C, sizeof(float) * R * N);
    gpu_download(want, ref, sizeof(float) * R * N);
    double d = apart(got, want, (size_t)R * N);
    const char *lt = getenv("MESHMOE_CUBLAS_LT");
    printf("| %s | %d x %d x %d, %d experts, %d rounds | %.4f | %.4f | %.4f | %.1e |\n",
           lt && !strcmp(lt, "off") ? "cublasGemmEx (MESHMOE_CUBLAS_LT=off)" : "cuBLASLt, algorithms kept", R, N, K,
           G, ROUNDS, ms[0], ms[1], ms[0] - ms[1], d);
    gpu_lt_report(0);   // what went through cuBLASLt, the heuristic's queries, the refusals
    free(got); free(want);
    gpu_free(ref); gpu_free(Af); gpu_free(A); gpu_free(Bf); gpu_free(B); gpu_free(C);
}

int main(int argc, char **argv) {
    int fresh = argc > 1 && !strcmp(argv[1], "fresh");
    if (fresh) argc--, argv++;
    int tiny = argc > 1 && !strcmp(argv[1], "small");
    const Shape *shapes = tiny ? small : medium;
    int n = tiny ? (int)(sizeof small / sizeof small[0]) : (int)(sizeof medium / sizeof medium[0]), reps = tiny ? 2 : 10;
    if (gpu_device_count() == 0) return 1;
    const char *why;
    // gpu_matmul=cublas_bf16, as the bench's meshmoe runs, its products cuBLAS's alone: the own
    // kernel (MESHMOE_GROUPED=kernel) is timed apart.
    setenv("MESHMOE_GROUPED", "cublas", 1);
    if (!gpu_matmul_use_cublas(2, &why)) {
        printf("products_gpu: no cuBLAS here: %s\n", why);
        return 1;
    }
    size_t ws = gpu_matmul_workspace_bytes();   // cuBLAS's workspace, as a device thread gives it
    void *wsp = ws ? gpu_alloc(ws) : NULL;
    if (wsp) gpu_matmul_set_workspace(wsp, ws);
    if (fresh) {
        fresh_table(tiny);
        backend_cuda.sync();
        if (wsp) { gpu_matmul_set_workspace(NULL, 0); gpu_free(wsp); }
        gpu_matmul_use_cublas(0, &why);
        return 0;
    }
    own_kernel_table(shapes, n, reps);   // (first: the table a cut run most needs)
    printf("\nThe same shapes' products on float32 operands holding bf16 values (cuBLAS converting them, "
           "CUBLAS_COMPUTE_32F_FAST_16BF) against the same values stored as bf16 (kernels/matmul16.h, CUDA_R_16BF); "
           "ms a call, the mean of %d after one; pack: one float32 operand A made 16-bit (cast's pack_bf16); "
           "apart: the largest difference of the two results over their largest value.\n\n",
           reps);
    printf("| product | form | M x N x K | float32 ms | float32 TFLOP/s | bf16 ms | bf16 TFLOP/s | bf16 / float32 time "
           "| pack A ms | apart |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const Shape *s = &shapes[i];
        float *A, *B, *C;
        uint16_t *A16, *B16, *P;
        operand(size_a(s), &A, &A16);
        operand(size_b(s), &B, &B16);
        C = gpu_alloc(sizeof(float) * size_c(s));
        P = gpu_alloc(sizeof(uint16_t) * size_a(s));
        gpu_fill_bytes(C, 0, sizeof(float) * size_c(s));
        int *rows = malloc(sizeof(int) * (s->G + 1)), R = s->form == GROUPED_DW ? s->K : s->M;   // the rows grouped
        for (int g = 0; g <= s->G; g++) rows[g] = (int)((long)R * g / s->G);
        float *rf = result(s, 0, A, B, A16, B16, C, rows), *rh = result(s, 1, A, B, A16, B16, C, rows);
        double d = apart(rf, rh, size_c(s));
        free(rf); free(rh);
        double f = time_ms(s, 0, reps, A, B, A16, B16, C, P, rows);
        double h = time_ms(s, 1, reps, A, B, A16, B16, C, P, rows);
        double p = time_ms(s, 2, reps, A, B, A16, B16, C, P, rows);
        double flops = 2.0 * s->M * s->N * s->K;
        char dims[64], fc[48], hc[48], pc[48], ratio[16];
        snprintf(dims, sizeof dims, s->G > 1 ? "%d x %d x %d (%d groups)" : "%d x %d x %d", s->M, s->N, s->K, s->G);
        cell(fc, sizeof fc, f, flops);
        cell(hc, sizeof hc, h, flops);
        cell(pc, sizeof pc, p, 0);
        snprintf(ratio, sizeof ratio, f > 0 ? "%.2f" : "-", f > 0 ? h / f : 0.0);
        printf("| %s | %s | %s | %s | %s | %s | %s | %.1e |\n", s->what, forms[s->form], dims, fc, hc, ratio, pc, d);
        fflush(stdout);
        free(rows);
        gpu_free(A); gpu_free(B); gpu_free(A16); gpu_free(B16); gpu_free(C); gpu_free(P);
    }
    setenv("MESHMOE_GROUPED", "auto", 1);   // (the trainer's default: cuBLAS's grouped call, bf16 results)
    gpu_matmul_use_cublas(2, &why);
    if (wsp) gpu_matmul_set_workspace(wsp, ws);
    round_table(shapes, n, reps);
    backend_cuda.sync();
    if (wsp) { gpu_matmul_set_workspace(NULL, 0); gpu_free(wsp); }
    gpu_matmul_use_cublas(0, &why);
    return 0;
}
