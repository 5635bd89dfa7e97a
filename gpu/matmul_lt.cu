// gpu/matmul_lt.cu: the 16-bit products under cuBLAS (gpu/matmul.cu's gemm16_cublas and
// gemm16_round_cublas: the weight products on bf16 storage, and the experts' products a call
// per expert) through cuBLASLt, with the algorithm asked for once per class of shapes and kept.
//
// Why: cublasGemmEx runs cuBLAS's heuristic, a computation on the host, for every shape it
// has not met, and the experts' products meet new ones all the time: an expert's row count
// (M, or K in a weight gradient) changes with the routing, step by step and layer by layer;
// while the host chooses, the GPU waits. Seen on an H200 (2026-12-04): deepseek-medium with a
// cuBLAS call per expert (megablox=false) took 1543, 670, 471, 404, 368, 335 and 307 ms for
// steps 0-6 as its shapes began to repeat, and mixtral-medium's steps went up and down
// between 175 and 243 ms; with the experts in the backend's own grouped kernel instead (no
// shape for cuBLAS to learn), deepseek-medium's steps were 247, 245, 245 ms from step 1 on.
//
// A class: the two transposes, whether C is bf16 and whether it is added to, M, N and K each
// rounded up to a power of two, the three leading dimensions, each pointer's alignment up to
// 256 bytes (cuBLASLt assumes 256 unless told: an algorithm chosen for aligned operands may
// not run on others), and the workspace's size. The first call of a class asks the heuristic
// with its own dimensions; the class's later calls run the algorithm it gave. cuBLASLt checks
// an algorithm against the call it is given (cublasLtMatmul refuses a configuration the
// algorithm cannot run, or a workspace smaller than it needs: NOT_SUPPORTED, INVALID_VALUE);
// a refused call asks the heuristic for its own shape and runs that algorithm once, the class
// keeping its own, or goes to cublasGemmEx (lt_gemm16 returns 0) if that is refused too. A
// class given no algorithm, or refused REFUSALS_MAX times, goes to cublasGemmEx for good.
// What each thread did is counted and said when it leaves the GPU (gpu_lt_report).
//
// The sums: float32 (CUBLAS_COMPUTE_32F, alpha 1, beta 0 or 1); a bf16 result's split sums
// added in float32 (the reduction schemes allowed: none, or in the compute type), as the
// handle's math mode asks of cublasGemmEx (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
// gpu/matmul.cu). MESHMOE_CUBLAS_LT=off: every product by cublasGemmEx (make bench-gpu's
// variant).
#include "gpu/gpu.h"
#include "gpu/backend.h"
#include "gpu/matmul_lt.h"

#if GPU_HAVE_CUBLAS
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(GPU_EMULATE)
#include "gpu/emu_cublas.h"   // (the emulation's cuBLASLt, on the CPU)
#else
#include <cublasLt.h>
#include <dlfcn.h>
#endif

typedef cublasLtMatrixLayout_t Layout;

// The cuBLASLt functions we call, found in libcublasLt.so.13.
static struct {
    cublasStatus_t (*create)(cublasLtHandle_t *);
    cublasStatus_t (*destroy)(cublasLtHandle_t);
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
    cublasStatus_t (*layout_create)(Layout *, cudaDataType, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*layout_destroy)(Layout);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, Layout, Layout, Layout, Layout,
                                cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, Layout, const void *,
                             Layout, const void *, const void *, Layout, void *, Layout, const cublasLtMatmulAlgo_t *,
                             void *, size_t, cudaStream_t);
} lt;
static int lt_on = 0;   // set once at start-up

#if defined(GPU_EMULATE)
static const char *lt_load(void) {   // (the table's fields in their order)
    lt = decltype(lt){emu_lt_create,    emu_lt_destroy,     emu_lt_desc_create, emu_lt_desc_destroy,
                      emu_lt_desc_set,  emu_lt_layout_create, emu_lt_layout_destroy, emu_lt_pref_create,
                      emu_lt_pref_destroy, emu_lt_pref_set, emu_lt_heuristic,   emu_lt_matmul};
    return NULL;
}
#else
static const char *lt_load(void) {
    void *lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("/usr/local/cuda/lib64/libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return "libcublasLt.so.13 not found";
    *(void **)&lt.create = dlsym(lib, "cublasLtCreate");
    *(void **)&lt.destroy = dlsym(lib, "cublasLtDestroy");
    *(void **)&lt.desc_create = dlsym(lib, "cublasLtMatmulDescCreate");
    *(void **)&lt.desc_destroy = dlsym(lib, "cublasLtMatmulDescDestroy");
    *(void **)&lt.desc_set = dlsym(lib, "cublasLtMatmulDescSetAttribute");
    *(void **)&lt.layout_create = dlsym(lib, "cublasLtMatrixLayoutCreate");
    *(void **)&lt.layout_destroy = dlsym(lib, "cublasLtMatrixLayoutDestroy");
    *(void **)&lt.pref_create = dlsym(lib, "cublasLtMatmulPreferenceCreate");
    *(void **)&lt.pref_destroy = dlsym(lib, "cublasLtMatmulPreferenceDestroy");
    *(void **)&lt.pref_set = dlsym(lib, "cublasLtMatmulPreferenceSetAttribute");
    *(void **)&lt.heuristic = dlsym(lib, "cublasLtMatmulAlgoGetHeuristic");
    *(void **)&lt.matmul = dlsym(lib, "cublasLtMatmul");
    void **f = (void **)&lt;
    for (size_t i = 0; i < sizeof lt / sizeof(void *); i++)
        if (!f[i]) return "libcublasLt.so.13 lacks one of the functions gpu/matmul_lt.cu calls";
    return NULL;
}
#endif

// LT_CHECK(call): a status other than success or a refusal (not supported, invalid value, a
// GPU without the kernels; for the heuristic, no memory to load its kernels, which its
// documentation warns of on a full GPU) is fatal.
// LT_MUST(call): anything but success is fatal (making and setting descriptors, handles).
#define LT_CHECK(call) lt_check((call), 1, #call, __FILE__, __LINE__)
#define LT_MUST(call) lt_check((call), 0, #call, __FILE__, __LINE__)
static cublasStatus_t lt_check(cublasStatus_t st, int refusal_ok, const char *what, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS || (refusal_ok && (st == CUBLAS_STATUS_NOT_SUPPORTED ||
                                                       st == CUBLAS_STATUS_INVALID_VALUE ||
                                                       st == CUBLAS_STATUS_ARCH_MISMATCH ||
                                                       st == CUBLAS_STATUS_ALLOC_FAILED)))
        return st;
    fprintf(stderr, "meshmoe: cuBLASLt error %d at %s:%d (%s)\n", (int)st, file, line, what);
    exit(1);
}

static void lt_start_once(void) {
    const char *env = getenv("MESHMOE_CUBLAS_LT");
    if (env && strcmp(env, "on") && strcmp(env, "off")) {
        fprintf(stderr, "meshmoe: MESHMOE_CUBLAS_LT is 'on' (the default) or 'off', not '%s'\n", env);
        exit(1);
    }
    if (env && !strcmp(env, "off")) return;
    const char *why = lt_load();
    if (why) fprintf(stderr, "meshmoe: %s: the 16-bit products go through cublasGemmEx\n", why);
    lt_on = why == NULL;
}

void lt_start(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, lt_start_once);
}

// ---- The thread's kept algorithms.

typedef struct {   // (all long: no padding, so that memcmp compares classes)
    long ta, tb, c16, acc, lm, ln, lk, lda, ldb, ldc, aa, ab, ac, ws;   // the class (above)
} Class;
typedef struct {
    Class c;
    int refused;   // calls that refused the kept algorithm
    int gemm_ex;   // 1: the class goes to cublasGemmEx
    cublasLtMatmulAlgo_t algo;
} Kept;
enum { KEPT_MAX = 1024 };    // classes a thread keeps (a model meets a few hundred); past it, cublasGemmEx
enum { REFUSALS_MAX = 8 };   // a class refused this often asks the heuristic as often as cublasGemmEx would
enum { ASKED = 4 };          // the heuristic's answers looked at: the first that it says runs is kept
static thread_local cublasLtHandle_t handle;
static thread_local Kept *kept;
static thread_local int nkept, last;   // (last: the entry find found last)
// The thread's counts since it began: products run by cuBLASLt, the heuristic's answers asked
// for, calls that refused a kept algorithm, and products given back to cublasGemmEx.
static thread_local long n_run, n_asked, n_refused, n_gemm_ex;

void lt_release(void) {
    if (handle) LT_MUST(lt.destroy(handle));
    handle = NULL;
    free(kept);
    kept = NULL;
    nkept = last = 0;
}

static int log2_up(int x) {   // the smallest e with 2^e >= x
    int e = 0;
    while ((1L << e) < x) e++;
    return e;
}
static int align_of(const void *p) {   // the largest power of two up to 256 dividing the address
    int a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}

// The class's kept entry, or NULL; the last one found first (an expert's products come one
// expert after another, mostly in one class).
static Kept *find(const Class *c) {
    if (last < nkept && !memcmp(&kept[last].c, c, sizeof *c)) return &kept[last];
    for (int i = 0; i < nkept; i++)
        if (!memcmp(&kept[i].c, c, sizeof *c)) return &kept[last = i];
    return NULL;
}

// One call's descriptors, column-major as cuBLASLt sees the row-major product: C^T (N,M) =
// op(B)^T (N,K) op(A)^T (K,M), so cuBLASLt's A is our B and its B our A, each layout the
// stored matrix before its transpose.
typedef struct { cublasLtMatmulDesc_t desc; Layout a, b, c; } Call;

static Call call_make(int transA, int transB, int M, int N, int K, int lda, int ldb, int c16, int ldc) {
    Call k;
    LT_MUST(lt.desc_create(&k.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = transB ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_MUST(lt.desc_set(k.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_MUST(lt.desc_set(k.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_MUST(lt.layout_create(&k.a, CUDA_R_16BF, transB ? K : N, transB ? N : K, ldb));
    LT_MUST(lt.layout_create(&k.b, CUDA_R_16BF, transA ? M : K, transA ? K : M, lda));
    LT_MUST(lt.layout_create(&k.c, c16 ? CUDA_R_16BF : CUDA_R_32F, N, M, ldc));
    return k;
}
static void call_free(Call *k) {
    LT_MUST(lt.layout_destroy(k->a));
    LT_MUST(lt.layout_destroy(k->b));
    LT_MUST(lt.layout_destroy(k->c));
    LT_MUST(lt.desc_destroy(k->desc));
}

// An algorithm for this call's shape and e's class, asked of the heuristic, into *algo: 1 when
// one was given.
static int choose(const Kept *e, const Call *k, cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref;
    LT_MUST(lt.pref_create(&pref));
    uint64_t ws = (uint64_t)e->c.ws;
    uint32_t a = (uint32_t)e->c.ab, b = (uint32_t)e->c.aa, c = (uint32_t)e->c.ac;   // (its A is our B)
    uint32_t schemes = e->c.c16 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_MASK;
    LT_MUST(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT_MUST(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
    LT_MUST(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a, sizeof a));
    LT_MUST(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b, sizeof b));
    LT_MUST(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c, sizeof c));
    LT_MUST(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c, sizeof c));
    cublasLtMatmulHeuristicResult_t r[ASKED];
    int n = 0;
    cublasStatus_t st = LT_CHECK(lt.heuristic(handle, k->desc, k->a, k->b, k->c, k->c, pref, ASKED, r, &n));
    LT_MUST(lt.pref_destroy(pref));
    n_asked++;
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < n; i++)
        if (r[i].state == CUBLAS_STATUS_SUCCESS) {
            *algo = r[i].algo;
            return 1;
        }
    return 0;
}

// The product by algo: 1 when cuBLASLt ran it, 0 when it refused.
static int run(const Kept *e, const cublasLtMatmulAlgo_t *algo, const Call *k, const void *A, const void *B,
               int accumulate, void *C, void *ws) {
    float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasStatus_t st = LT_CHECK(lt.matmul(handle, k->desc, &one, B, k->a, A, k->b, &beta, C, k->c, C, k->c, algo,
                                           e->c.ws ? ws : NULL, (size_t)e->c.ws, gpu_stream()));
    return st == CUBLAS_STATUS_SUCCESS;
}

// The product by cuBLASLt: the class's algorithm, or one for this shape where that is refused.
static int lt_run(Kept *e, const Call *k, const void *A, const void *B, int accumulate, void *C, void *ws) {
    if (run(e, &e->algo, k, A, B, accumulate, C, ws)) return 1;
    n_refused++;
    if (++e->refused >= REFUSALS_MAX) e->gemm_ex = 1;
    cublasLtMatmulAlgo_t own;
    return choose(e, k, &own) && run(e, &own, k, A, B, accumulate, C, ws);
}

// The product by cuBLASLt, with the class's kept algorithm (asked for on the class's first
// call): 1 when done, 0 when it is cublasGemmEx's.
static int lt_try(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                  int accumulate, void *C, int c16, int ldc, void *ws, size_t ws_bytes) {
    Class c = {transA, transB, c16, accumulate, log2_up(M), log2_up(N), log2_up(K), lda, ldb, ldc,
               align_of(A), align_of(B), align_of(C), ws ? (long)ws_bytes : 0};
    Kept *e = kept ? find(&c) : NULL;
    if ((e && e->gemm_ex) || (!e && nkept == KEPT_MAX)) return 0;
    if (!handle) LT_MUST(lt.create(&handle));
    if (!kept) kept = (Kept *)calloc(KEPT_MAX, sizeof(Kept));
    if (!kept) { fprintf(stderr, "meshmoe: out of host memory (cuBLASLt's kept algorithms)\n"); exit(1); }
    Call k = call_make(transA, transB, M, N, K, lda, ldb, c16, ldc);
    if (!e) {   // (a new entry: calloc's zeros, never used before)
        e = &kept[nkept++];
        e->c = c;
        e->gemm_ex = !choose(e, &k, &e->algo);
    }
    int done = !e->gemm_ex && lt_run(e, &k, A, B, accumulate, C, ws);
    call_free(&k);
    return done;
}

int lt_gemm16(int transA, int transB, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
              int accumulate, void *C, int c16, int ldc, void *ws, size_t ws_bytes) {
    if (!lt_on || M <= 0 || N <= 0 || K <= 0 || (c16 && accumulate)) return 0;
    int done = lt_try(transA, transB, M, N, K, A, lda, B, ldb, accumulate, C, c16, ldc, ws, ws_bytes);
    if (done) n_run++;
    else n_gemm_ex++;
    return done;
}

void gpu_lt_report(int device) {
    if (!n_run && !n_gemm_ex) return;
    printf("device %d: cuBLASLt ran %ld of its 16-bit products, cublasGemmEx %ld; its heuristic asked %ld times, "
           "%ld calls refused a kept algorithm\n", device, n_run, n_gemm_ex, n_asked, n_refused);
    fflush(stdout);
    n_run = n_asked = n_refused = n_gemm_ex = 0;
}
#else
void gpu_lt_report(int) {}   // (HIP: no cuBLAS)
#endif
