// gpu/attn_cudnn.cu: the attention core by cuDNN's fused flash attention (config key
// gpu_attention=cudnn; dtype=bfloat16, CUDA builds that found cuDNN's frontend headers),
// behind the same kernel names as gpu/attn_mma.cu's own kernels, which stay the readable
// ones and take every call this file does not.
//
// What it takes: a whole causal call without a materialised mask, queries and keys at the
// same positions (q0 = 0: no context parallelism's earlier keys, no ring block), the backward
// of all rows at once, heads multiples of 8 up to 256 wide. For such a call it converts q, k, v
// (and o, dO) to bf16 (they hold bf16 values in bf16 training: exact), runs cuDNN's graph, and
// widens its bf16 results back into the float32 arrays the layers hand over. cuDNN computes
// what the CPU's bf16 attention computes within bf16 tolerances, not its bits: the scores in
// float32 (not rounded to bf16), the softmax merged in its own tiles, P and dS rounded to bf16
// for their products, dq, dk and dv rounded to bf16 once at the end.
//
// The statistics. cuDNN's forward keeps one number a row, the log of its sum of exponentials,
// LSE = m + log(l); stats (B,N,S,2) holds (m, l) (kernels/attention.h). The forward writes
// (LSE, 1), which is the same softmax (exp(s - LSE) / 1 = exp(s - m) / l), so the own
// kernels' backward reads it as well; the backward gives cuDNN m + log(l) from any forward.
//
// The graphs. One per call shape and direction, built on first use by cuDNN's frontend (the
// heuristics' first engine: cuDNN's own Hopper or Ampere flash kernels) and kept per host
// thread, with the thread's cuDNN handle (a mesh device is a host thread with its own
// stream). The backward asks for cuDNN's deterministic algorithm (the same dq every run)
// and takes the other where it is refused, saying so. A shape cuDNN refuses (its graph not
// built, its workspace not sized, its execution failed) is said once and left to the own
// kernels, as are all of a thread's calls when its handle cannot be made or given the stream;
// nothing is written before cuDNN has run, so a refused call starts again on the own kernels.
// What each thread's calls went through is said when it leaves the GPU (attn_cudnn_report).
// cuDNN is loaded with dlopen (libcudnn.so.9) when chosen, as cuBLAS is: the binaries run
// where there is none, and say so when gpu_attention=cudnn asks.
#include "gpu/gpu.h"
#include "gpu/attention.h"
#include "gpu/backend.h"

#if GPU_HAVE_CUDNN
// ---- the conversions ----

// The packing and the plain widening are gpu/cast.cu's (cast_cuda); cuDNN's dk and dv (and dq
// after a first piece) are added onto what the layer holds: dst += src widened.
// (The three kernels are not static, unlike the other files' kernels: the GPU architectures'
// passes see no caller of them, see below, and would warn of unused static functions.)
__global__ void attn_cudnn_add_bf16_kernel(float *dst, const uint16_t *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += bf16_float_dev(src[i]);
}
// Per row: stats (m, l) = (lse, 1), the forward's; and lse = m + log(l), the backward's.
__global__ void attn_cudnn_stats_of_lse_kernel(float *stats, const float *lse, size_t rows) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    stats[2 * r] = lse[r];
    stats[2 * r + 1] = 1.0f;
}
__global__ void attn_cudnn_lse_of_stats_kernel(float *lse, const float *stats, size_t rows) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) lse[r] = stats[2 * r] + logf(stats[2 * r + 1]);
}
// The rest is host code. nvcc reads a file once for the host and again for each GPU target of
// NVFLAGS; the targets' passes compile the three kernels above only, so that the frontend's
// headers (much C++) are read once (the object: 101 s of CPU where it took 240).
#ifndef __CUDA_ARCH__
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <pthread.h>
#include <memory>
#include <string>
#include <vector>

namespace fe = cudnn_frontend;
void *cudnn_frontend::cudnn_dlhandle = nullptr;   // where the frontend looks up cuDNN's functions

static void to_bf16(uint16_t *dst, const float *src, size_t n) { cast_cuda.pack_bf16(dst, src, n); }
// dst = src widened, or dst += it (add).
static void from_bf16(float *dst, const uint16_t *src, size_t n, int add) {
    if (!add) {
        cast_cuda.unpack_bf16(dst, src, n);
        return;
    }
    GPU_LAUNCH(attn_cudnn_add_bf16_kernel, blocks_for(n, GPU_THREADS), GPU_THREADS, 0)(dst, src, n);
    GPU_CHECK_LAUNCH();
}
static void stats_of_lse(float *stats, const float *lse, size_t rows) {
    GPU_LAUNCH(attn_cudnn_stats_of_lse_kernel, blocks_for(rows, GPU_THREADS), GPU_THREADS, 0)(stats, lse, rows);
    GPU_CHECK_LAUNCH();
}
static void lse_of_stats(float *lse, const float *stats, size_t rows) {
    GPU_LAUNCH(attn_cudnn_lse_of_stats_kernel, blocks_for(rows, GPU_THREADS), GPU_THREADS, 0)(lse, stats, rows);
    GPU_CHECK_LAUNCH();
}

// ---- loading cuDNN ----

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_tried = 0;
static char load_why[256];   // empty: loaded

static void load(void) {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *err = dlerror();
        snprintf(load_why, sizeof load_why, "libcudnn.so.9 could not be loaded (%s; cuDNN 9: put its folder on "
                 "LD_LIBRARY_PATH, e.g. the nvidia-cudnn-cu13 wheel's nvidia/cudnn/lib)", err ? err : "not found");
        return;
    }
    cudnn_frontend::cudnn_dlhandle = lib;
    // The frontend loads a CUDA runtime of its own for its calls, libcudart.so.12 first where
    // both are found; this build's is 13: that one, where it can be loaded (else its search).
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (rt) {
        setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", 0);
        dlclose(rt);
    }
    try {
        int64_t version = (int64_t)fe::detail::get_backend_version();
        if (version < 90000)
            snprintf(load_why, sizeof load_why, "cuDNN %lld found, 9.0 or later needed", (long long)version);
    } catch (const std::exception &e) {
        snprintf(load_why, sizeof load_why, "cuDNN could not be asked its version: %s", e.what());
    }
}
// NULL when cuDNN is there to use, else why not.
static const char *loaded(void) {
    pthread_mutex_lock(&load_lock);
    if (!load_tried) { load_tried = 1; load(); }
    pthread_mutex_unlock(&load_lock);
    return load_why[0] ? load_why : NULL;
}

// ---- the graphs ----

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

// A call's shape and direction; a graph built for it, or refused (graph NULL).
struct Entry {
    int backward, B, S, N, Nkv, Dqk, Dv;
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t workspace;
};
struct Thread {
    cudnnHandle_t handle = nullptr;
    bool unusable = false;   // the handle could not be made, or given the stream: said once
    std::vector<Entry> graphs;
    long ran = 0, declined = 0;   // this thread's calls run by cuDNN, and left to the own kernels
    ~Thread() {
        graphs.clear();   // (their plans before the handle they were built with)
        try {   // (the frontend throws where a library it loads is missing: never out of a destructor)
            if (handle) fe::detail::destroy_handle(handle);
        } catch (const std::exception &) {
        }
    }
};
static thread_local Thread thread_state;
static long calls_taken = 0;   // the calls cuDNN ran, all threads (attn_cudnn_calls)

static const char *status_text(cudnnStatus_t st) {
    try {
        return fe::detail::get_error_string(st);
    } catch (const std::exception &) {
        return "(no text)";
    }
}

// A (B, H, S, D) view of an array laid out (B,S,H,D), as the layers hold q, k, v and o.
static fe::graph::Tensor_attributes bshd(const char *name, int64_t uid, int64_t B, int64_t H, int64_t S, int64_t D) {
    return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, H, S, D}).set_stride(
        {S * H * D, D, H * D, 1});
}
static fe::graph::Tensor_attributes rows_of(const char *name, int64_t uid, int64_t B, int64_t N, int64_t S) {
    return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, N, S, 1}).set_stride(
        {N * S, S, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
}

static std::shared_ptr<fe::graph::Graph> new_graph(void) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

// O (B,S,N,Dv) and the rows' LSE from Q (B,S,N,Dqk), K (B,S,Nkv,Dqk), V (B,S,Nkv,Dv): causal,
// scale 1 (the layers scale q before the core).
static std::shared_ptr<fe::graph::Graph> forward_graph(const Entry &e) {
    auto g = new_graph();
    auto Q = g->tensor(bshd("q", UID_Q, e.B, e.N, e.S, e.Dqk));
    auto K = g->tensor(bshd("k", UID_K, e.B, e.Nkv, e.S, e.Dqk));
    auto V = g->tensor(bshd("v", UID_V, e.B, e.Nkv, e.S, e.Dv));
    auto opts = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_causal_mask(true)
                    .set_attn_scale(1.0f);
    auto [O, L] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(UID_O).set_dim({e.B, e.N, e.S, e.Dv}).set_stride(
        {(int64_t)e.S * e.N * e.Dv, e.Dv, (int64_t)e.N * e.Dv, 1});
    L->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim({e.B, e.N, e.S, 1})
        .set_stride({(int64_t)e.N * e.S, e.S, 1, 1});
    return g;
}

// dQ, dK, dV from Q, K, V, O, dO and the rows' LSE.
static std::shared_ptr<fe::graph::Graph> backward_graph(const Entry &e, bool deterministic) {
    auto g = new_graph();
    auto Q = g->tensor(bshd("q", UID_Q, e.B, e.N, e.S, e.Dqk));
    auto K = g->tensor(bshd("k", UID_K, e.B, e.Nkv, e.S, e.Dqk));
    auto V = g->tensor(bshd("v", UID_V, e.B, e.Nkv, e.S, e.Dv));
    auto O = g->tensor(bshd("o", UID_O, e.B, e.N, e.S, e.Dv));
    auto dO = g->tensor(bshd("do", UID_DO, e.B, e.N, e.S, e.Dv));
    auto L = g->tensor(rows_of("lse", UID_STATS, e.B, e.N, e.S));
    auto opts = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_causal_mask(true)
                    .set_attn_scale(1.0f).set_deterministic_algorithm(deterministic);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, L, opts);
    dQ->set_output(true).set_uid(UID_DQ).set_dim({e.B, e.N, e.S, e.Dqk}).set_stride(
        {(int64_t)e.S * e.N * e.Dqk, e.Dqk, (int64_t)e.N * e.Dqk, 1});
    dK->set_output(true).set_uid(UID_DK).set_dim({e.B, e.Nkv, e.S, e.Dqk}).set_stride(
        {(int64_t)e.S * e.Nkv * e.Dqk, e.Dqk, (int64_t)e.Nkv * e.Dqk, 1});
    dV->set_output(true).set_uid(UID_DV).set_dim({e.B, e.Nkv, e.S, e.Dv}).set_stride(
        {(int64_t)e.S * e.Nkv * e.Dv, e.Dv, (int64_t)e.Nkv * e.Dv, 1});
    return g;
}

// The graph built, or NULL with cuDNN's reason in why.
static std::shared_ptr<fe::graph::Graph> build(const Entry &e, bool deterministic, std::string &why) {
    try {
        auto g = e.backward ? backward_graph(e, deterministic) : forward_graph(e);
        auto err = g->build(thread_state.handle, {fe::HeurMode_t::A});
        if (err.is_good()) return g;
        why = err.get_message();
    } catch (const std::exception &x) {
        why = x.what();
    }
    return nullptr;
}

// The thread's graph for this call, built on first use; NULL when cuDNN refuses the shape.
// The thread's handle, on the thread's stream: 0 (said once) when cuDNN will not give one.
static int handle_ready(void) {
    Thread &t = thread_state;
    if (t.unusable) return 0;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    std::string why;
    try {   // (the frontend throws where a library or symbol it loads is missing)
        if (!t.handle) st = fe::detail::create_handle(&t.handle);
        if (st == CUDNN_STATUS_SUCCESS) st = fe::detail::set_stream(t.handle, gpu_stream());
        if (st == CUDNN_STATUS_SUCCESS) return 1;
        why = status_text(st);
    } catch (const std::exception &x) {
        why = x.what();
    }
    fprintf(stderr, "meshmoe: gpu_attention=cudnn: cuDNN's handle could not be made or given the stream (%s); "
            "this device's attention runs on the tensor-core kernels\n", why.c_str());
    t.unusable = true;
    return 0;
}

static void refuse(Entry &e, const char *what, const std::string &why) {
    fprintf(stderr, "meshmoe: gpu_attention=cudnn: cuDNN %s the %s of B=%d S=%d N=%d Nkv=%d Dqk=%d Dv=%d (%s); "
            "those calls run on the tensor-core kernels\n", what, e.backward ? "backward" : "forward", e.B, e.S, e.N,
            e.Nkv, e.Dqk, e.Dv, why.c_str());
    e.graph = nullptr;
}

static const Entry *graph_for(int backward, const Geom &G) {
    Thread &t = thread_state;
    for (const Entry &e : t.graphs)
        if (e.backward == backward && e.B == G.B && e.S == G.S && e.N == G.N && e.Nkv == G.Nkv && e.Dqk == G.Dqk &&
            e.Dv == G.Dv)
            return e.graph ? &e : NULL;
    Entry e = {backward, G.B, G.S, G.N, G.Nkv, G.Dqk, G.Dv, nullptr, 0};
    std::string why;
    e.graph = build(e, true, why);
    if (!e.graph && backward) {
        std::string why2;
        e.graph = build(e, false, why2);
        if (e.graph)
            fprintf(stderr, "meshmoe: gpu_attention=cudnn: no deterministic backward for B=%d S=%d N=%d Nkv=%d "
                    "Dqk=%d Dv=%d (%s); cuDNN's other one runs it\n", G.B, G.S, G.N, G.Nkv, G.Dqk, G.Dv, why.c_str());
        else
            why += "; without determinism: " + why2;
    }
    if (!e.graph)
        refuse(e, "refused", why);
    else if (!e.graph->get_workspace_size(e.workspace).is_good())
        refuse(e, "could not size the workspace of", "get_workspace_size failed");
    t.graphs.push_back(e);
    return t.graphs.back().graph ? &t.graphs.back() : NULL;
}

// The graph run on the thread's stream: 1 when cuDNN took it; 0 when it failed (said once, the
// shape refused from now on: the caller runs the own kernels, nothing having been written).
static int run(const Entry *e, std::unordered_map<int64_t, void *> &pack) {
    void *ws = NULL;
    // (the deterministic backward's workspace is about 0.5 GiB at the -medium presets' shapes,
    // outside the planner's figures: where the GPU has no room for it, the own kernels run)
    if (e->workspace > 0 && cudaMallocAsync(&ws, (size_t)e->workspace, gpu_stream()) != cudaSuccess) {
        cudaGetLastError();   // (cleared: the failed allocation is not a fault of the stream)
        refuse(*const_cast<Entry *>(e), "found no room for the workspace of",
               std::to_string((long long)e->workspace) + " bytes");
        return 0;
    }
    std::string why;
    bool good = false;
    try {
        auto err = e->graph->execute(thread_state.handle, pack, ws);
        good = err.is_good();
        if (!good) why = err.get_message();
    } catch (const std::exception &x) {
        why = x.what();
    }
    if (ws) GPU_CHECK(cudaFreeAsync(ws, gpu_stream()));
    if (!good) {
        GPU_CHECK(cudaGetLastError());   // (a fault of the GPU's own stops the run here)
        refuse(*const_cast<Entry *>(e), "failed to run", why);
        return 0;
    }
    __atomic_add_fetch(&calls_taken, 1, __ATOMIC_RELAXED);
    return 1;
}

// ran, counted: a call cuDNN failed to run goes to the own kernels.
static int counted(int ran) {
    if (ran) thread_state.ran++;
    else thread_state.declined++;
    return ran;
}

// Scratch for the bf16 copies: n arrays of the given element counts, each 256-byte aligned.
static uint16_t *carve(void **base, const size_t *count, uint16_t **out, int n) {
    size_t bytes = 0, at[8];
    for (int i = 0; i < n; i++) { at[i] = bytes; bytes += (count[i] * 2 + 255) / 256 * 256; }
    GPU_CHECK(cudaMallocAsync(base, bytes, gpu_stream()));
    for (int i = 0; i < n; i++) out[i] = (uint16_t *)((char *)*base + at[i]);
    return out[0];
}

// Whether a call is one cuDNN's graphs describe (see the top of the file).
static int fits(const Geom &G) {
    return !G.mask && G.rnd.out && G.q0 == 0 && G.k0 == 0 && G.W == G.S && G.S > 0 && G.N % G.Nkv == 0 &&
           G.Dqk % 8 == 0 && G.Dv % 8 == 0 && G.Dqk <= 256 && G.Dv <= 256;
}

// The graph for a call of this shape and direction, where cuDNN takes it; NULL (counted) where
// the own kernels run it.
static const Entry *taken(int backward, const Geom &G, int whole) {
    const Entry *e = whole && fits(G) && !loaded() && handle_ready() ? graph_for(backward, G) : NULL;
    if (!e) thread_state.declined++;
    return e;
}

int attn_cudnn_forward(float *o, float *stats, const float *q, const float *k, const float *v, Geom G, int begin,
                       int end) {
    const Entry *e = taken(0, G, begin && end);
    if (!e) return 0;
    size_t nq = (size_t)G.B * G.S * G.N, nk = (size_t)G.B * G.S * G.Nkv, rows = (size_t)G.B * G.N * G.S;
    size_t count[4] = {nq * G.Dqk, nk * G.Dqk, nk * G.Dv, nq * G.Dv};
    uint16_t *h[4];   // q, k, v, o as bf16
    void *base;
    carve(&base, count, h, 4);
    float *lse;
    GPU_CHECK(cudaMallocAsync((void **)&lse, sizeof(float) * rows, gpu_stream()));
    to_bf16(h[0], q, count[0]);
    to_bf16(h[1], k, count[1]);
    to_bf16(h[2], v, count[2]);
    std::unordered_map<int64_t, void *> pack = {
        {UID_Q, h[0]}, {UID_K, h[1]}, {UID_V, h[2]}, {UID_O, h[3]}, {UID_STATS, lse}};
    int ran = run(e, pack);
    if (ran) {
        from_bf16(o, h[3], count[3], 0);
        stats_of_lse(stats, lse, rows);
    }
    GPU_CHECK(cudaFreeAsync(lse, gpu_stream()));
    GPU_CHECK(cudaFreeAsync(base, gpu_stream()));
    return counted(ran);
}

int attn_cudnn_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, const float *stats, Geom G, int r0, int r1, int zero_dq) {
    const Entry *e = taken(1, G, r0 == 0 && r1 == G.S);
    if (!e) return 0;
    size_t nq = (size_t)G.B * G.S * G.N, nk = (size_t)G.B * G.S * G.Nkv, rows = (size_t)G.B * G.N * G.S;
    size_t count[8] = {nq * G.Dqk, nk * G.Dqk, nk * G.Dv, nq * G.Dv, nq * G.Dv, nq * G.Dqk, nk * G.Dqk, nk * G.Dv};
    uint16_t *h[8];   // q, k, v, o, dO in; dq, dk, dv out
    void *base;
    carve(&base, count, h, 8);
    float *lse;
    GPU_CHECK(cudaMallocAsync((void **)&lse, sizeof(float) * rows, gpu_stream()));
    const float *in[5] = {q, k, v, o, dout};
    for (int i = 0; i < 5; i++) to_bf16(h[i], in[i], count[i]);
    lse_of_stats(lse, stats, rows);
    std::unordered_map<int64_t, void *> pack = {{UID_Q, h[0]},  {UID_K, h[1]},  {UID_V, h[2]},
                                                {UID_O, h[3]},  {UID_DO, h[4]}, {UID_STATS, lse},
                                                {UID_DQ, h[5]}, {UID_DK, h[6]}, {UID_DV, h[7]}};
    int ran = run(e, pack);
    if (ran) {
        from_bf16(dq, h[5], count[5], !zero_dq);
        from_bf16(dk, h[6], count[6], 1);
        from_bf16(dv, h[7], count[7], 1);
    }
    GPU_CHECK(cudaFreeAsync(lse, gpu_stream()));
    GPU_CHECK(cudaFreeAsync(base, gpu_stream()));
    return counted(ran);
}

int gpu_attention_cudnn(const char **why) {
    const char *err = loaded();
    if (err) *why = err;
    return err == NULL;
}
long attn_cudnn_calls(void) { return __atomic_load_n(&calls_taken, __ATOMIC_RELAXED); }

void attn_cudnn_report(int device) {
    Thread &t = thread_state;
    if (!t.ran && !t.declined) return;
    printf("device %d: gpu_attention=cudnn: cuDNN ran %ld attention calls, the tensor-core kernels %ld\n", device,
           t.ran, t.declined);
    fflush(stdout);
    t.ran = t.declined = 0;
}

#endif  // !__CUDA_ARCH__
#else   // built without cuDNN's frontend (the emulation, HIP, or no headers found)

int attn_cudnn_forward(float *, float *, const float *, const float *, const float *, Geom, int, int) { return 0; }
int attn_cudnn_backward(float *, float *, float *, const float *, const float *, const float *, const float *,
                        const float *, const float *, Geom, int, int, int) {
    return 0;
}
int gpu_attention_cudnn(const char **why) {
    *why = "this build (" GPU_BACKEND_NAME ") has no cuDNN (make gpu builds it where cuDNN 9's headers, cudnn.h, "
           "are on the compiler's path and pip fetches cuDNN's frontend headers from PyPI: nvidia-cudnn-frontend)";
    return 0;
}
long attn_cudnn_calls(void) { return 0; }
void attn_cudnn_report(int) {}
#endif
