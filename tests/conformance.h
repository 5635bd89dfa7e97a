// tests/conformance.h: the harness of the kernel conformance test (tests/test_conformance.c):
// which backend is under test and what it is compared with, its memory, random inputs,
// poisoned outputs, and comparisons that name the kernel, the shape, the first bad index,
// the expected and the obtained value.
//
// Two builds of the same source:
//   make test   (build/test_conformance): the CPU backend under test, host memory; the
//               expected values come from plain loops written in the test, in the CPU
//               kernel's order of operations, so every comparison is bit for bit (tol 0).
//   make gpu    (build/conformance_gpu, -DMESHMOE_CONFORMANCE_GPU): the GPU backend under
//               test, device memory; the expected values are the CPU backend's on the same
//               inputs (the oracle), compared bit for bit where the GPU does the same IEEE
//               operations in the same order, within a stated tolerance where it cannot
//               (the device's expf/logf/powf/sinf/cosf: a few ulp).
//
// Tolerances (GPU against the CPU oracle; the CPU build accepts equal bits only):
//   matrix products, data movement, sums in a fixed order, IEEE + - * / sqrt: equal bits;
//   anything through expf, logf, powf, sinf, cosf: EXP_ULPS, the device's documented bound
//   (CUDA without fast math: expf 2 ulp, logf 1, powf 4, sinf and cosf 2) plus the 1 ulp of
//   glibc's, passed through the few roundings after it; where a result comes out of a
//   subtraction (a softmax gradient, a rotation) an absolute floor of a few ulp of the
//   inputs' scale instead (ulps of a near-zero difference say nothing), and for sums of
//   such terms (attention's gradients) a few ulp of the array's largest element (scale_tol);
//   bf16 results: the same tolerance rounded to bf16, i.e. equal bits or one bf16 step.
#ifndef MESHMOE_TESTS_CONFORMANCE_H
#define MESHMOE_TESTS_CONFORMANCE_H
#include "kernels/kernels.h"
#include "kernels/bf16.h"
#include <stddef.h>
#include <stdint.h>

// The backend under test and the oracle (NULL: the plain loops of the test).
extern const Backend *const UNDER_TEST;
extern const Backend *const ORACLE;

enum { EXP_ULPS = 8, BF16_ULPS = 1 << 16 };   // one bf16 step is 2^16 float ulps
#define ABS_FLOOR 1e-6f                        // inputs of scale ~1: a few float ulps of 1

// A tolerance in ulps that holds against the CPU oracle; against the test's own loops,
// which repeat the CPU kernel's operations, nothing but equal bits is accepted.
int tol(int ulps);
// The same for a result that is rounded to bf16 when bf16 is set: one bf16 step.
int bf16_tol(int bf16, int ulps);
// An absolute tolerance of `ulps` float ulps of the largest |want| (0 against the test's
// loops): for sums of several terms that each went through expf, whose differences add up
// in proportion to the terms, not to the (possibly much smaller) sum.
float scale_tol(const float *want, size_t n, int ulps);

// One check: counted, and printed as "FAIL ..." with the message when ok is 0.
void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern int checks_passed, checks_failed;
// A part that this machine or build cannot run (no cuBLAS, no cuDNN, no tensor cores): said as
// "SKIPPED (why)"; a failure where CONFORMANCE_NO_SKIP is set (tests/gpu.sh on a GPU, where
// every part must run).
void skipped(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// The memory of the backend under test: host buffers, or the GPU's.
void *dev_alloc(size_t bytes);
void dev_free(void *p);
void dev_upload(void *dev, const void *host, size_t bytes);
void dev_download(void *host, const void *dev, size_t bytes);
// A device copy of host data; a device array poisoned with all-ones bytes (a NaN as a float
// or a double, -1 as an int), so that an element the kernel does not write fails; the
// device array's contents in a new host buffer (the caller frees it).
void *dev_copy(const void *host, size_t bytes);
void *dev_poisoned(size_t bytes);
void *dev_fetch(const void *dev, size_t bytes);

// Random inputs, fresh each run from a printed seed (CONFORMANCE_SEED repeats one).
void conformance_begin(void);
uint64_t rng_next(void);
int rng_int(int n);                                 // uniform in [0, n)
float *rand_floats(size_t n, float lo, float hi);   // uniform in [lo, hi), malloc'd
int *rand_ints(size_t n, int lo, int hi);           // uniform in [lo, hi), malloc'd
void *copy_of(const void *x, size_t bytes);         // a malloc'd copy

// got (n) against want (n): equal bits, or (ulps > 0) both finite and within ulps, or within
// abs_tol. One check per array; a failure names the kernel, the shape, the first bad index,
// both values and how many elements differ.
void compare_floats(const char *kernel, const char *shape, const float *want, const float *got, size_t n, int ulps,
                    float abs_tol);
void compare_ints(const char *kernel, const char *shape, const int *want, const int *got, size_t n);
void compare_doubles(const char *kernel, const char *shape, const double *want, const double *got, size_t n,
                     double rel_tol);
// The same for an array of the backend under test.
void check_dev_floats(const char *kernel, const char *shape, const float *want, const float *dev, size_t n, int ulps,
                      float abs_tol);
void check_dev_ints(const char *kernel, const char *shape, const int *want, const int *dev, size_t n);

float ref_sigmoid(float z);   // 1 / (1 + exp(-z)), as the CPU kernels write it

// The products' contract in plain loops (tests/conformance_dense.c), each element in the
// ordered GEMM's order: C (M,N) = op(A) op(B) (+ C when acc), one in-order FMA chain over k;
// the chunked product (kernels/matmul.h:gemm_chunked, chunks <= 16); and a weight gradient's
// n <= 16 leaves, leaf l over the rows off[l] .. off[l+1] of inp (.,C) and dout (.,OC).
void ref_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, int acc, float *C,
              int ldc);
void ref_gemm_chunked(int tb, int M, int N, int K, int chunks, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc);
void ref_dw_leaves(int C, int OC, const int *off, int n, const float *inp, const float *dout, int accumulate,
                   float *dw);

// The tests, one per family (tests/conformance_*.c).
void test_matmul(void);
void test_grouped(void);     // the experts' grouped products (tests/conformance_grouped.c)
void test_matmul16(void);    // the products on 16-bit operands (tests/conformance_matmul16.c)
void test_grouped16(void);   // their grouped twins (tests/conformance_grouped.c)
void test_matmul16_round(void);   // the rounded 16-bit products (tests/conformance_round16.c)
void test_norm(void);
void test_rope(void);
void test_embedding(void);
void test_mla(void);
void test_attention(void);   // tests/conformance_attention.c
void test_elementwise(void);   // mlp, cast, sum
void test_memory(void);        // MemoryOps and the device-thread hooks (tests/conformance_memory.c)
void test_loss(void);
void test_moe(void);
void test_router(void);
void test_optim(void);
void test_init(void);

#endif
