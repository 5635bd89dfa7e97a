// gpu/matmul.cu: the matrix products on the GPU (kernels/matmul.h), the twin of
// kernels/cpu/matmul.c: the ordered GEMM (gpu/gemm.cu), or cuBLAS on request.
//
// Which one, and why the ordered GEMM is the default: its bits are the CPU's (each output
// element one in-order FMA chain over k), so a GPU run reproduces a CPU run's products and a
// product does not depend on how the mesh split its rows (docs/model.md#summation-order).
// cuBLAS (config key gpu_matmul=cublas: gpu_matmul_use_cublas(1) at start-up) is faster but
// picks its own blocking and split-k per shape: other bits, not row-stable. It runs in plain
// float32 (cuBLAS's default math mode: no TF32). HIP builds have only the ordered GEMM.
//
// gpu_matmul=cublas_bf16 (gpu_matmul_use_cublas(2), with dtype=bfloat16 only): the layers'
// weight products, forward and backward (matmul_forward, matmul_backward_dinp and _dw), on
// tensor cores, cublasGemmEx with bf16 operands and float32 accumulation and output. In bf16
// mode their operands are bf16-valued already: the weights' rounded copy, the activations
// rounded at the cast points (model/precision.h), and the gradients arriving at a product,
// which the backward rounds where the forward rounded the product's output, as JAX's
// autodiff does. So converting them to bf16 storage is exact, and every product of two bf16
// values is exact in float32: only the order of the float32 sums differs from the CPU's.
// So are the pieces of the tensor-parallel chunked products (gemm_chunked below). The one
// product whose operands are not (the router's gate: its logits' gradient, and its weights
// under float32_gate_logits) calls the general gemm, which stays float32 SGEMM
// (model/matmul.h:matmul_backward_float32); so do the attention core's products.
//
// cuBLAS is loaded with dlopen when chosen, not linked: the binaries then need no cuBLAS
// on a machine that does not use it, and the library's 100+ MB do not travel with them.
#include "gpu/gpu.h"
#include "gpu/gemm.h"
#include "gpu/backend.h"
#include "gpu/matmul_cublas.h"   // what gpu/matmul16.cu calls
#include "kernels/piece_tree.h"   // the chunked product as separate products
#include "kernels/grouped_loop.h" // the experts' grouped products, a call per expert
#include "gpu/grouped16.h"          // the experts' grouped products in bf16 by the own kernel
#include "gpu/matmul_lt.h"          // the 16-bit products through cuBLASLt, their algorithms kept
#if GPU_HAVE_CUBLAS
#include <string.h>
#if defined(GPU_EMULATE)
#include "gpu/emu_cublas.h"   // (the emulation's cuBLAS, on the CPU)
#else
#include <cublas_v2.h>
#include <dlfcn.h>
#endif
#endif

static int use_cublas = 0;   // set once at start-up: 0 the ordered GEMM, 1 cuBLAS, 2 and the weight products in bf16

#if GPU_HAVE_CUBLAS
// The cuBLAS functions we call, found in libcublas.so.13 (CUDA 13's soname).
static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    // (NULL in a cuBLAS before 12.5: the grouped products then loop over gemm_ex)
    cublasStatus_t (*gemm_grouped)(cublasHandle_t, const cublasOperation_t *, const cublasOperation_t *, const int *,
                                   const int *, const int *, const void *, const void *const *, cudaDataType,
                                   const int *, const void *const *, cudaDataType, const int *, const void *,
                                   void *const *, cudaDataType, const int *, int, const int *, cublasComputeType_t);
} cublas;

#if defined(GPU_EMULATE)
static const char *load_cublas(void) {   // (the table's fields in their order)
    cublas = decltype(cublas){emu_cublas_create, emu_cublas_destroy, emu_cublas_set_stream, emu_cublas_set_workspace,
                              emu_cublas_set_math_mode, emu_cublas_sgemm, emu_cublas_gemm_ex, emu_cublas_gemm_grouped};
    return NULL;
}
#else
static const char *load_cublas(void) {
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("/usr/local/cuda/lib64/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);   // a toolkit off the path
    if (!lib) return "libcublas.so.13 not found (install the CUDA 13 cuBLAS runtime or add it to LD_LIBRARY_PATH)";
    cublas.create = (cublasStatus_t (*)(cublasHandle_t *))dlsym(lib, "cublasCreate_v2");
    cublas.destroy = (cublasStatus_t (*)(cublasHandle_t))dlsym(lib, "cublasDestroy_v2");
    cublas.set_stream = (cublasStatus_t (*)(cublasHandle_t, cudaStream_t))dlsym(lib, "cublasSetStream_v2");
    cublas.set_workspace = (cublasStatus_t (*)(cublasHandle_t, void *, size_t))dlsym(lib, "cublasSetWorkspace_v2");
    cublas.set_math_mode = (cublasStatus_t (*)(cublasHandle_t, cublasMath_t))dlsym(lib, "cublasSetMathMode");
    *(void **)&cublas.sgemm = dlsym(lib, "cublasSgemm_v2");
    *(void **)&cublas.gemm_ex = dlsym(lib, "cublasGemmEx");
    *(void **)&cublas.gemm_grouped = dlsym(lib, "cublasGemmGroupedBatchedEx");
    if (!cublas.create || !cublas.destroy || !cublas.set_stream || !cublas.set_workspace || !cublas.set_math_mode ||
        !cublas.sgemm || !cublas.gemm_ex)
        return "libcublas.so.13 lacks one of cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2, "
               "cublasSetWorkspace_v2, cublasSetMathMode, cublasSgemm_v2, cublasGemmEx";
    return NULL;
}
#endif

// CUBLAS_CHECK(call): as GPU_CHECK (gpu/gpu.h), for cuBLAS's status codes.
#define CUBLAS_CHECK(call) cublas_check((call), #call, __FILE__, __LINE__)
static void cublas_check(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "meshmoe: cuBLAS error %d at %s:%d (%s)\n", (int)st, file, line, what);
    exit(1);
}

// One handle per host thread, on its stream, made at the thread's first product; destroyed
// when the thread's workspace is taken back or it goes back to the ordered GEMM.
static thread_local cublasHandle_t handle;

// The workspace of the thread's handle: a device thread's comes from the allocator (tag
// workspace, base/mesh.c, gpu_matmul_set_workspace below), so that the memory report counts
// it; a thread given none (a test's) leaves cuBLAS its own, which only the driver sees.
static thread_local void *workspace;
static thread_local size_t workspace_size;

// The thread's handle, made at its first product. A product with a bf16 result sums in
// float32 and rounds once: cuBLAS may otherwise split a long sum (K over about a thousand, few
// rows) and add the pieces in the result's type, bf16, rounding each (seen on an H200,
// 2026-12-04: 9 x 1100 x 1100 off by two bf16 steps in 77 of 9900 sums; the conformance
// test's round16 cases).
static cublasHandle_t my_handle(void) {
    if (!handle) {
        CUBLAS_CHECK(cublas.create(&handle));
        CUBLAS_CHECK(cublas.set_math_mode(handle, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
        CUBLAS_CHECK(cublas.set_stream(handle, gpu_stream()));   // (which resets the workspace: set it after)
        if (workspace) CUBLAS_CHECK(cublas.set_workspace(handle, workspace, workspace_size));
    }
    return handle;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets the operands
// swapped, with the same leading dimensions.
static void sgemm_cublas(int transA, int transB, int M, int N, int K, const float *A, int lda,
                         const float *B, int ldb, int accumulate, float *C, int ldc) {
    float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublas.sgemm(my_handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                              N, M, K, &one, B, ldb, A, lda, &beta, C, ldc));
}

// MESHMOE_CHECK_BF16=1 (tests/gpu.sh's tensor-core runs): gemm_bf16 also counts, on the
// GPU, the operand values it converts and those that were not bf16-valued (low 16 bits not
// zero, NaN aside), whose conversion rounded them; gpu_matmul_bf16_report prints both.
static int check_bf16 = 0;   // read at start-up, with gpu_matmul=cublas_bf16
// How gemm_bf16 gives cuBLAS its operands. By default (fast) it hands cuBLAS the float32
// operands with CUBLAS_COMPUTE_32F_FAST_16BF, which converts them to bf16 inside its kernels
// (exact: they are bf16-valued): no conversion kernel and no scratch buffer per product, 3.5%
// and 9% shorter steps than converting in the first bench that timed both (H200, 2026-11-30:
// mixtral-medium 0.555 s against 0.575, deepseek-medium 0.628 against 0.691).
// MESHMOE_CUBLAS_BF16=convert, and MESHMOE_CHECK_BF16=1 whose count is the conversion's,
// convert both operands with to_bf16_kernel first and multiply bf16 copies.
static int fast_bf16 = 0;

// How the experts' grouped products in bf16 go under cuBLAS (on bf16 storage, and on float32
// operands under cublas_bf16), MESHMOE_GROUPED at start-up: cuBLAS's grouped call, and where
// it refuses them in bf16 (cuBLAS 13.0 takes bf16 operands there only with a bf16 result, and
// float32 ones only in tf32) a cuBLAS call per group, in bf16 (auto, the default); the
// backend's own tensor-core kernel, gpu/grouped16.cu, always (kernel); cuBLAS alone, its
// grouped call in tf32 where bf16 is refused (cublas). The call per group is the default
// because it measured fastest (H200, 2026-12-04, deepseek-medium's 64 experts: 0.300 s a
// step against 0.303 with tf32 grouped calls and 0.368 with the own kernel, which ran at
// 150-160 TFLOP/s where cuBLAS's calls ran at 280-330). tests/products_gpu.c times the kernel
// against cuBLAS, and make bench-gpu trains with MESHMOE_GROUPED=kernel beside the default.
enum { GROUPED_AUTO, GROUPED_KERNEL, GROUPED_CUBLAS };
static int grouped_way = GROUPED_AUTO;
__device__ unsigned long long bf16_converted, bf16_inexact;

// One operand as stored: rows of `cols` floats, `ld` apart (a piece of a wider matrix has ld > cols).
typedef struct { const float *x; size_t rows, cols, ld; } Stored;

// Both operands of a product in one launch, each packed into rows of its own width (ld = cols)
// as bf16 bits (round to nearest even: exact for a bf16-valued value): da[i] = a's element i
// for i < a.rows x a.cols, then db likewise, one thread per element; with check, the counts above.
__global__ static void to_bf16_kernel(uint16_t *da, Stored a, uint16_t *db, Stored b, int check) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, na = a.rows * a.cols;
    if (i >= na + b.rows * b.cols) return;
    Stored s = i < na ? a : b;
    uint16_t *d = i < na ? da : db;
    size_t e = i < na ? i : i - na;
    float x = s.ld == s.cols ? s.x[e] : s.x[e / s.cols * s.ld + e % s.cols];
    d[e] = bf16_bits_dev(x);
    if (!check) return;
    if (i == 0) atomicAdd(&bf16_converted, (unsigned long long)(na + b.rows * b.cols));
    uint32_t u = __float_as_uint(x);
    if ((u & 0xffffu) && (u & 0x7fffffffu) <= 0x7f800000u) atomicAdd(&bf16_inexact, 1ull);
}

extern "C" void gpu_matmul_bf16_report(void) {
    if (!check_bf16) return;
    unsigned long long converted = 0, inexact = 0;
    GPU_CHECK(cudaMemcpyFromSymbol(&converted, bf16_converted, sizeof converted));
    GPU_CHECK(cudaMemcpyFromSymbol(&inexact, bf16_inexact, sizeof inexact));
    printf("cublas_bf16 check: %llu operand values converted to bf16, %llu of them not bf16-valued\n", converted,
           inexact);
}

// op(X) (rows, cols) as stored: X itself, or X^T with X (cols, rows); in rows ld apart.
static Stored stored(const float *x, int trans, int rows, int cols, int ld) {
    Stored s = {x, (size_t)(trans ? cols : rows), (size_t)(trans ? rows : cols), (size_t)ld};
    return s;
}

// C (M,N) = op(A) (M,K) @ op(B) (K,N) (+= when accumulate) on tensor cores, K > 0, the sums
// float32: cuBLAS converting the float32 operands itself (fast_bf16), or both operands
// converted first into a scratch buffer of the stream's own (cudaMallocAsync: freed in stream
// order once the product has read it; GPU-only and inside this call, so the allocator does
// not count it) and multiplied as bf16.
static void gemm_bf16(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
                      int ldb, int accumulate, float *C, int ldc) {
    const void *a = A, *b = B;
    cudaDataType_t type = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F_FAST_16BF;
    uint16_t *scratch = NULL;
    if (!fast_bf16) {
        Stored sa = stored(A, transA, M, K, lda), sb = stored(B, transB, K, N, ldb);
        size_t na = sa.rows * sa.cols, nb = sb.rows * sb.cols, at = (na + 127) / 128 * 128;   // B's copy on 256 bytes
        GPU_CHECK(cudaMallocAsync((void **)&scratch, sizeof(uint16_t) * (at + nb), gpu_stream()));
        GPU_LAUNCH(to_bf16_kernel, blocks_for(na + nb, GPU_THREADS), GPU_THREADS, 0)(scratch, sa, scratch + at, sb,
                                                                                     check_bf16);
        GPU_CHECK_LAUNCH();
        a = scratch;
        b = scratch + at;
        lda = (int)sa.cols;   // (the copies are packed)
        ldb = (int)sb.cols;
        type = CUDA_R_16BF;
        compute = CUBLAS_COMPUTE_32F;
    }
    float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;   // (row-major: the operands swapped, as sgemm_cublas)
    CUBLAS_CHECK(cublas.gemm_ex(my_handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                                N, M, K, &one, b, type, ldb, a, type, lda, &beta, C, CUDA_R_32F, ldc, compute,
                                CUBLAS_GEMM_DEFAULT));
    if (scratch) GPU_CHECK(cudaFreeAsync(scratch, gpu_stream()));
}

// ---- The experts' grouped products under cuBLAS: all of a layer's experts in one
// cublasGemmGroupedBatchedEx call, each expert a group of one product (their row counts
// differ), so that the GPU runs every expert's tiles at once where a call per expert ran one
// small product at a time (deepseek-medium: 64 experts of about 770 rows, each product a few
// dozen output tiles for 132 multiprocessors).

// One product of a grouped call, C (m,n) = op(A) (m,k) @ op(B) (k,n), its operands given as
// offsets in values (float32, or bf16 for A and B in the 16-bit products) from the call's
// three bases.
typedef struct { int m, n, k; size_t oa, ob, oc; } Part;

// cuBLAS reads the parts' pointers from GPU memory: a launch's arguments carry their offsets
// (4 KiB at most: PARTS_PER_CALL parts a call) and a kernel writes the pointers there.
enum { PARTS_PER_CALL = 128 };
typedef struct {
    const char *a, *b;
    char *c;
    int n, ab_bytes, c_bytes;   // the bytes of a value of A and B, and of C (4, or 2 for bf16)
    size_t oa[PARTS_PER_CALL], ob[PARTS_PER_CALL], oc[PARTS_PER_CALL];
} PartPointers;

// ptr (3n): the parts' A pointers, then their B, then their C; one thread a part.
__global__ static void part_pointers_kernel(const void **ptr, PartPointers p) {
    int i = threadIdx.x;
    if (i >= p.n) return;
    ptr[i] = p.a + p.oa[i] * p.ab_bytes;
    ptr[p.n + i] = p.b + p.ob[i] * p.ab_bytes;
    ptr[2 * p.n + i] = p.c + p.oc[i] * p.c_bytes;
}

// How a grouped call computes, found by the thread's first call: in float32 (gpu_matmul=cublas);
// under cublas_bf16, cuBLAS converting the float32 operands to bf16 (FAST_16BF, as gemm_bf16
// does), else to TF32, whose 10 mantissa bits hold a bf16-valued operand exactly (the same
// exact products, float32 sums); bf16 operands as stored (the 16-bit products, either mode),
// float32 sums. way[kind] is the first of the kind's ways not refused; past the list the
// caller makes a call per part.
enum { WAYS_F32, WAYS_FAST_BF16, WAYS_STORED_BF16, WAY_KINDS };
static const cublasComputeType_t f32_ways[] = {CUBLAS_COMPUTE_32F};
static const cublasComputeType_t bf16_ways[] = {CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_COMPUTE_32F_FAST_TF32};
static thread_local int way[WAY_KINDS];

// type: how A and B are stored (CUDA_R_32F or CUDA_R_16BF); ctype: C's (float32, or bf16 for
// the rounded products).
static cublasStatus_t grouped_call(int transA, int transB, const Part *pt, int n, const void *A, int lda,
                                   const void *B, int ldb, void *C, int ldc, int accumulate, cudaDataType_t type,
                                   cudaDataType_t ctype, cublasComputeType_t compute) {
    PartPointers pp;
    pp.a = (const char *)A; pp.b = (const char *)B; pp.c = (char *)C; pp.n = n;
    pp.ab_bytes = type == CUDA_R_16BF ? 2 : 4;
    pp.c_bytes = ctype == CUDA_R_16BF ? 2 : 4;
    cublasOperation_t ta[PARTS_PER_CALL], tb[PARTS_PER_CALL];
    int m[PARTS_PER_CALL], nn[PARTS_PER_CALL], k[PARTS_PER_CALL], la[PARTS_PER_CALL], lb[PARTS_PER_CALL],
        lc[PARTS_PER_CALL], one[PARTS_PER_CALL];
    float alpha[PARTS_PER_CALL], beta[PARTS_PER_CALL];
    for (int i = 0; i < n; i++) {   // (row-major: the operands swapped, as sgemm_cublas)
        ta[i] = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
        tb[i] = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
        m[i] = pt[i].n; nn[i] = pt[i].m; k[i] = pt[i].k;
        la[i] = ldb; lb[i] = lda; lc[i] = ldc;
        one[i] = 1;
        alpha[i] = 1.0f; beta[i] = accumulate ? 1.0f : 0.0f;
        pp.oa[i] = pt[i].oa; pp.ob[i] = pt[i].ob; pp.oc[i] = pt[i].oc;
    }
    const void **ptr;
    GPU_CHECK(cudaMallocAsync((void **)&ptr, sizeof(void *) * 3 * (size_t)n, gpu_stream()));
    GPU_LAUNCH(part_pointers_kernel, 1, PARTS_PER_CALL, 0)(ptr, pp);
    GPU_CHECK_LAUNCH();
    cublasStatus_t st = cublas.gemm_grouped(my_handle(), ta, tb, m, nn, k, alpha, (const void *const *)ptr + n,
                                            type, la, (const void *const *)ptr, type, lb, beta,
                                            (void *const *)(ptr + 2 * n), ctype, lc, n, one, compute);
    GPU_CHECK(cudaFreeAsync(ptr, gpu_stream()));
    return st;
}

// The np parts, C = op(A) op(B) (+ C when accumulate), A and B stored as `type`, in grouped
// calls of PARTS_PER_CALL; 0 when this cuBLAS has no grouped call for them (before 12.5, or
// no compute type it accepts; or the bf16 check's conversion of float32 operands, which
// counts operand by operand): the caller then loops.
static int gemm_grouped_cublas(int transA, int transB, const Part *pt, int np, const void *A, int lda, const void *B,
                               int ldb, float *C, int ldc, int accumulate, cudaDataType_t type) {
    int kind = type == CUDA_R_16BF ? WAYS_STORED_BF16 : use_cublas == 2 ? WAYS_FAST_BF16 : WAYS_F32;
    if (!cublas.gemm_grouped || (kind == WAYS_FAST_BF16 && !fast_bf16)) return 0;
    const cublasComputeType_t *ways = kind == WAYS_FAST_BF16 ? bf16_ways : f32_ways;
    // tf32 only for cuBLAS alone: by default what cuBLAS refuses in bf16 goes a call per group
    int nways = kind == WAYS_FAST_BF16 && grouped_way == GROUPED_CUBLAS ? 2 : 1, *w = &way[kind];
    for (int p0 = 0; p0 < np; p0 += PARTS_PER_CALL) {
        int n = np - p0 < PARTS_PER_CALL ? np - p0 : PARTS_PER_CALL;
        for (;;) {
            if (*w >= nways) return 0;
            cublasStatus_t st = grouped_call(transA, transB, pt + p0, n, A, lda, B, ldb, C, ldc, accumulate, type,
                                             CUDA_R_32F, ways[*w]);
            if (st == CUBLAS_STATUS_SUCCESS) break;
            // Only the first call may be refused (a later one takes what the first took).
            if (p0 > 0 || (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)) CUBLAS_CHECK(st);
            fprintf(stderr, "meshmoe: cuBLAS's grouped product refused compute type %d (status %d)%s\n", (int)ways[*w],
                    (int)st, *w + 1 < nways ? ", trying the next" : ": the experts' products go one call each");
            (*w)++;
        }
    }
    return 1;
}

// A grouped call's parts, one a group with rows.
static Part *parts_for(int G) {
    Part *pt = (Part *)calloc((size_t)(G > 0 ? G : 1), sizeof(Part));
    if (!pt) { fprintf(stderr, "meshmoe: out of host memory for %d grouped products\n", G); exit(1); }
    return pt;
}
#else
extern "C" void gpu_matmul_bf16_report(void) {}   // (HIP: no cuBLAS, no bf16 products)
#endif

extern "C" int gpu_matmul_use_cublas(int on, const char **why) {
    *why = NULL;
    if (!on) {
#if GPU_HAVE_CUBLAS
        if (handle) { CUBLAS_CHECK(cublas.destroy(handle)); handle = NULL; }
        lt_release();
#endif
        use_cublas = 0;
        return 1;
    }
#if GPU_HAVE_CUBLAS
    *why = load_cublas();
    use_cublas = *why == NULL ? on : 0;
    if (use_cublas) lt_start();
    const char *check = getenv("MESHMOE_CHECK_BF16");
    check_bf16 = use_cublas == 2 && check && !strcmp(check, "1");
    const char *how = getenv("MESHMOE_CUBLAS_BF16");
    if (how && strcmp(how, "fast") && strcmp(how, "convert")) {
        fprintf(stderr, "meshmoe: MESHMOE_CUBLAS_BF16 is 'fast' (the default) or 'convert', not '%s'\n", how);
        exit(1);
    }
    fast_bf16 = use_cublas == 2 && !check_bf16 && !(how && !strcmp(how, "convert"));
    const char *grouped = getenv("MESHMOE_GROUPED");
    static const char *const grouped_ways[] = {"auto", "kernel", "cublas"};
    grouped_way = GROUPED_AUTO;
    for (int i = 0; grouped && i < 3; i++)
        if (!strcmp(grouped, grouped_ways[i])) grouped_way = i;
    if (grouped && strcmp(grouped, grouped_ways[grouped_way])) {
        fprintf(stderr, "meshmoe: MESHMOE_GROUPED is 'auto' (the default), 'kernel' or 'cublas', not '%s'\n",
                grouped);
        exit(1);
    }
    return use_cublas != 0;
#else
    *why = "this is a HIP build: Debian's HIP has no BLAS, the ordered GEMM is the only product";
    return 0;
#endif
}

// The workspace cuBLAS's documentation recommends (kernels/kernels.h: cublas_workspace_bytes,
// which the planner counts too); none for the ordered GEMM, nor in a HIP build.
extern "C" size_t gpu_matmul_workspace_bytes(void) {
#if GPU_HAVE_CUBLAS
    if (!use_cublas) return 0;
    int gpu = 0, major = 0;
    GPU_CHECK(cudaGetDevice(&gpu));
    GPU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu));
    return cublas_workspace_bytes(major);
#else
    return 0;
#endif
}

// The calling thread's workspace is p (NULL: taken back; the thread's stream is done with
// it). A handle made before holds the old one: it goes, and the next product makes another.
extern "C" void gpu_matmul_set_workspace(void *p, size_t bytes) {
#if GPU_HAVE_CUBLAS
    if (handle) { CUBLAS_CHECK(cublas.destroy(handle)); handle = NULL; }
    lt_release();
    workspace = p;
    workspace_size = bytes;
#else
    (void)p; (void)bytes;
#endif
}

static void gemm(int transA, int transB, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, int accumulate, float *C, int ldc) {
    if (M == 0 || N == 0) return;
#if GPU_HAVE_CUBLAS
    if (use_cublas) { sgemm_cublas(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc); return; }
#endif
    ordered_gemm_gpu(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

// The layers' weight products: on tensor cores under gpu_matmul=cublas_bf16 (a product over
// K = 0, which only adds 0.0f or writes zeros, stays with gemm), else gemm.
static void weight_product(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
                           int ldb, int accumulate, float *C, int ldc) {
#if GPU_HAVE_CUBLAS
    if (use_cublas == 2 && M > 0 && N > 0 && K > 0) {
        gemm_bf16(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
        return;
    }
#endif
    gemm(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

// out (T,OC) = inp (T,C) @ w (C,OC), or += when accumulate.
static void matmul_forward(float *out, const float *inp, const float *w, int T, int C, int OC, int accumulate) {
    weight_product(0, 0, T, OC, C, inp, C, w, OC, accumulate, out, OC);
}

// dinp (T,C) += dout (T,OC) @ w^T.
static void matmul_backward_dinp(float *dinp, const float *dout, const float *w, int T, int C, int OC) {
    weight_product(0, 1, T, C, OC, dout, OC, w, OC, 1, dinp, C);
}

// dw (C,OC) = inp^T (C,len) @ dout (len,OC), or += when accumulate.
static void matmul_backward_dw(float *dw, const float *inp, const float *dout, int len, int C, int OC, int accumulate) {
    weight_product(1, 0, C, OC, len, inp, C, dout, OC, accumulate, dw, OC);
}

// left (n) += right (n), and C (M,N, row stride ldc) = 0.0f + S (M,N): the chunked product's
// merges and its result, one thread per element.
__global__ static void merge_kernel(float *left, const float *right, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) left[i] += right[i];
}
__global__ static void onto_zero_kernel(float *C, int ldc, const float *S, int N, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i / N * ldc + i % N] = 0.0f + S[i];
}

static void add_rows(float *left, const float *right, size_t n) {
    GPU_LAUNCH(merge_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(left, right, n);
    GPU_CHECK_LAUNCH();
}

// The chunked product (kernels/matmul.h): the pieces' partial sums in a scratch buffer of the
// stream's own (cudaMallocAsync, freed in stream order; GPU-only and inside this call, so the
// allocator does not count it, like the bf16 copies above), then C = 0.0f + their tree, with
// the ordered GEMM, whose bits these sums keep. cuBLAS keeps neither the ordered GEMM's bits
// nor any order of its own across shapes, so under it the pieces' tree buys nothing: one
// product over the whole contraction, a weight product (a row-parallel forward, a
// column-parallel input gradient), on tensor cores under cublas_bf16.
static void gemm_chunked(int transB, int M, int N, int K, int chunks, const float *A, int lda, const float *B,
                         int ldb, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    if (use_cublas) {   // cuBLAS keeps no order (docs/gpu.md): the whole contraction as one product
        weight_product(0, transB, M, N, K, A, lda, B, ldb, 0, C, ldc);
        return;
    }
    size_t mn = (size_t)M * N;
    float *S;
    GPU_CHECK(cudaMallocAsync((void **)&S, sizeof(float) * mn * (size_t)piece_tree_levels(chunks), gpu_stream()));
    piece_tree(weight_product, add_rows, transB, M, N, K / chunks, 0, chunks, A, lda, B, ldb, S, S + mn);
    GPU_LAUNCH(onto_zero_kernel, blocks_for(mn, GPU_THREADS), GPU_THREADS, 0)(C, ldc, S, N, mn);
    GPU_CHECK_LAUNCH();
    GPU_CHECK(cudaFreeAsync(S, gpu_stream()));
}

// A weight gradient's leaves (kernels/matmul.h): each leaf's product as matmul_backward_dw
// makes it, into partial sums in the stream's own scratch (levels x C x OC floats, like the
// chunked product's), merged along the tree, the root then added onto dw. Under cuBLAS (as
// gemm_chunked) the leaves' rows, adjacent, are one product added onto dw: one call where the
// tree took n products and n passes over C x OC floats (deepseek-medium's experts: 4 leaves
// of about 190 rows each).
static void matmul_backward_dw_leaves(float *dw, const float *inp, const float *dout, const int *off, int n, int C,
                                      int OC, int accumulate) {
    if (C == 0 || OC == 0 || n <= 0) return;
    if (use_cublas) {   // cuBLAS keeps no order (docs/gpu.md): the leaves' rows as one contraction
        weight_product(1, 0, C, OC, off[n] - off[0], inp + (size_t)off[0] * C, C, dout + (size_t)off[0] * OC, OC,
                       accumulate, dw, OC);
        return;
    }
    size_t mn = (size_t)C * OC;
    float *S;
    GPU_CHECK(cudaMallocAsync((void **)&S, sizeof(float) * mn * (size_t)piece_tree_levels(n), gpu_stream()));
    leaf_tree(weight_product, add_rows, C, OC, off, n, inp, C, dout, OC, S, S + mn);
    if (accumulate) add_rows(dw, S, mn);
    else {   // dw = 0.0f + root, dw not read
        GPU_LAUNCH(onto_zero_kernel, blocks_for(mn, GPU_THREADS), GPU_THREADS, 0)(dw, OC, S, OC, mn);
        GPU_CHECK_LAUNCH();
    }
    GPU_CHECK(cudaFreeAsync(S, gpu_stream()));
}

// ---- The experts' grouped products (kernels/matmul.h): under cuBLAS the groups' products in
// grouped calls (gemm_grouped_cublas; a chunked product's and a gradient's leaves one product
// a group, as above), else a call of the plain kernel per group (kernels/grouped_loop.h), whose
// bits are the CPU's.
#if GPU_HAVE_CUBLAS
// 1 when the grouped products go in bf16 (operands stored so, or converted as cuBLAS's
// FAST_16BF would, not counted one by one by MESHMOE_CHECK_BF16), so that the own kernel may take them.
static int grouped_in_bf16(int bf16_stored) { return bf16_stored || (use_cublas == 2 && fast_bf16); }

// Under cuBLAS, C_g (n_g,N) = A_g (n_g,K) @ op(B_g) (+ C_g when accumulate) on each group's rows
// in grouped calls: A (R,K) and C (R,N) packed, B_g the g-th of G stacked (K,N), or (N,K) when
// transB, A and B float32, or bf16 when bf16_stored; cuBLAS's call or the own kernel as
// MESHMOE_GROUPED says; 0 when not done (not cuBLAS, or cuBLAS refused: the caller loops).
static int rows_grouped_cublas(int transB, const int *rows, int G, int N, int K, const void *A, const void *B,
                               float *C, int accumulate, int bf16_stored) {
    if (!use_cublas) return 0;
    if (grouped_in_bf16(bf16_stored) && grouped_way == GROUPED_KERNEL)
        return rows_grouped_tc(transB, rows, G, N, K, A, B, C, accumulate, bf16_stored);
    Part *pt = parts_for(G);
    int np = 0;
    for (int g = 0; g < G; g++)
        if (rows[g + 1] > rows[g])
            pt[np++] = Part{rows[g + 1] - rows[g], N, K, (size_t)rows[g] * K, (size_t)g * K * N, (size_t)rows[g] * N};
    int done = gemm_grouped_cublas(0, transB, pt, np, A, K, B, transB ? K : N, C, N, accumulate,
                                   bf16_stored ? CUDA_R_16BF : CUDA_R_32F);
    free(pt);
    return done;
}

// Under cuBLAS as matmul_backward_dw_leaves: a group's leaves one product over its rows, dw_g
// (C,OC) = inp_g^T @ dout_g (+= when accumulate), the groups in grouped calls or the own
// kernel; 0 when not done.
static int dw_grouped_cublas(const int *off, int n, int G, int C, int OC, const void *inp, const void *dout, float *dw,
                             int accumulate, int bf16_stored) {
    if (!use_cublas) return 0;
    if (grouped_in_bf16(bf16_stored) && grouped_way == GROUPED_KERNEL)
        return dw_grouped_tc(off, n, G, C, OC, inp, dout, dw, accumulate, bf16_stored);
    Part *pt = parts_for(G);
    int np = 0;
    for (int g = 0; g < G; g++) {
        int r0 = off[(size_t)g * n], r1 = off[(size_t)g * n + n];
        if (r1 > r0) pt[np++] = Part{C, OC, r1 - r0, (size_t)r0 * C, (size_t)r0 * OC, (size_t)g * C * OC};
    }
    int done = gemm_grouped_cublas(1, 0, pt, np, inp, C, dout, OC, dw, OC, accumulate,
                                   bf16_stored ? CUDA_R_16BF : CUDA_R_32F);
    free(pt);
    return done;
}

// ---- What gpu/matmul16.cu calls (gpu/matmul_cublas.h): the same cuBLAS calls on bf16 storage.
int gpu_matmul_mode(void) { return use_cublas; }

void gemm16_cublas(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                   int accumulate, float *C, int ldc) {
    if (lt_gemm16(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, 0, ldc, workspace, workspace_size)) return;
    float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;   // (row-major: the operands swapped, as sgemm_cublas)
    CUBLAS_CHECK(cublas.gemm_ex(my_handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                                N, M, K, &one, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm16_round_cublas(int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         uint16_t *C, int ldc) {
    if (lt_gemm16(0, transB, M, N, K, A, lda, B, ldb, 0, C, 1, ldc, workspace, workspace_size)) return;
    float one = 1.0f, zero = 0.0f;   // (row-major: the operands swapped, as sgemm_cublas)
    CUBLAS_CHECK(cublas.gemm_ex(my_handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B,
                                CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &zero, C, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

// Whether this thread's cuBLAS refused a grouped call with bf16 results (said once, then not asked again).
static thread_local int round16_refused;

int rows_grouped16_round_cublas(int transB, const int *rows, int G, int N, int K, const uint16_t *A,
                                const uint16_t *B, uint16_t *C) {
    if (!use_cublas || !cublas.gemm_grouped || round16_refused || grouped_way == GROUPED_KERNEL) return 0;
    Part *pt = parts_for(G);
    int np = 0;
    for (int g = 0; g < G; g++)
        if (rows[g + 1] > rows[g])
            pt[np++] = Part{rows[g + 1] - rows[g], N, K, (size_t)rows[g] * K, (size_t)g * K * N, (size_t)rows[g] * N};
    for (int p0 = 0; p0 < np; p0 += PARTS_PER_CALL) {
        int n = np - p0 < PARTS_PER_CALL ? np - p0 : PARTS_PER_CALL;
        cublasStatus_t st = grouped_call(0, transB, pt + p0, n, A, K, B, transB ? K : N, C, N, 0, CUDA_R_16BF,
                                         CUDA_R_16BF, CUBLAS_COMPUTE_32F);
        if (st == CUBLAS_STATUS_SUCCESS) continue;
        // Only the first call may be refused (a later one takes what the first took).
        if (p0 > 0 || (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)) CUBLAS_CHECK(st);
        fprintf(stderr, "meshmoe: cuBLAS's grouped product refused bf16 results (status %d): the experts' rounded "
                "products go through float32 sums, then rounded\n", (int)st);
        round16_refused = 1;
        free(pt);
        return 0;
    }
    free(pt);
    return 1;
}

int rows_grouped16_cublas(int transB, const int *rows, int G, int N, int K, const uint16_t *A, const uint16_t *B,
                          float *C, int accumulate) {
    return rows_grouped_cublas(transB, rows, G, N, K, A, B, C, accumulate, 1);
}

int dw_grouped16_cublas(const int *off, int n, int G, int C, int OC, const uint16_t *inp, const uint16_t *dout,
                        float *dw, int accumulate) {
    return dw_grouped_cublas(off, n, G, C, OC, inp, dout, dw, accumulate, 1);
}
#else
static int rows_grouped_cublas(int, const int *, int, int, int, const void *, const void *, float *, int, int) {
    return 0;   // (HIP: no cuBLAS, every group through the ordered GEMM)
}
static int dw_grouped_cublas(const int *, int, int, int, int, const void *, const void *, float *, int, int) {
    return 0;
}
int gpu_matmul_mode(void) { return 0; }
#endif

#if GPU_HOST_PASS

// out_g (n,OC) = inp_g (n,C) @ w_g (C,OC)
static void matmul_forward_grouped(float *out, const float *inp, const float *w, const int *rows, int G, int C, int OC,
                                   int accumulate) {
    if (!rows_grouped_cublas(0, rows, G, OC, C, inp, w, out, accumulate, 0))
        forward_grouped_loop(&matmul_cuda, out, inp, w, rows, G, C, OC, accumulate);
}

// dinp_g (n,C) += dout_g (n,OC) @ w_g^T
static void matmul_backward_dinp_grouped(float *dinp, const float *dout, const float *w, const int *rows, int G, int C,
                                         int OC) {
    if (!rows_grouped_cublas(1, rows, G, C, OC, dout, w, dinp, 1, 0))
        dinp_grouped_loop(&matmul_cuda, dinp, dout, w, rows, G, C, OC);
}

// Under cuBLAS as gemm_chunked: the whole contraction, one product a group.
static void gemm_chunked_grouped(int transB, const int *rows, int G, int N, int K, int chunks, const float *A,
                                 const float *B, float *out) {
    if (!rows_grouped_cublas(transB, rows, G, N, K, A, B, out, 0, 0))
        chunked_grouped_loop(&matmul_cuda, transB, rows, G, N, K, chunks, A, B, out);
}

static void matmul_backward_dw_leaves_grouped(float *dw, const float *inp, const float *dout, const int *off, int n,
                                              int G, int C, int OC, int accumulate) {
    if (!dw_grouped_cublas(off, n, G, C, OC, inp, dout, dw, accumulate, 0))
        dw_leaves_grouped_loop(&matmul_cuda, dw, inp, dout, off, n, G, C, OC, accumulate);
}

extern "C" const MatmulKernels matmul_cuda = {matmul_forward,
                                              matmul_backward_dinp,
                                              matmul_backward_dw,
                                              gemm,
                                              gemm_chunked,
                                              matmul_backward_dw_leaves,
                                              matmul_forward_grouped,
                                              matmul_backward_dinp_grouped,
                                              gemm_chunked_grouped,
                                              matmul_backward_dw_leaves_grouped};
#endif
