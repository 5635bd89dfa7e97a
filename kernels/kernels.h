// kernels/kernels.h: the seam between the layers and the arithmetic.
//
// A kernel is a function of pointers and integer dimensions only (shapes in the comment
// beside it, llm.c style): it reads no Config and no mesh state and allocates nothing.
// The layers (model/*.c) orchestrate: they read their dimensions and switches once,
// allocate from the tagged allocator, and call kernels and collectives.
//
// Kernels are grouped in families. Each family is a table of function pointers declared in
// its own header (kernels/norm.h, ...); a backend is one table per family:
//   cpu  kernels/cpu/*.c   the arithmetic (the bits every test pins)
//   dry  kernels/dry.c     the planner (dry_run=true): every kernel returns at once, so the
//                          layers allocate exactly as in a real run and nothing is computed
//   a GPU backend adds its twins under gpu/ with the same kernel names and argument order.
// One backend wraps another (kernels/watch.h): every kernel called through a twin that
// calls watchers before and after it: the profile (profile=true, kernels/profile.h) and the
// strict mode (device=cpu_strict, kernels/strict.h: device memory the host cannot touch
// outside a kernel or the memory operations below).
// The backend is chosen once at start-up (kern_use_default; a device thread may choose its
// own with kern_use); layers reach it by kern():
//     kern()->norm->rmsnorm_forward(out, rstd, x, scale, 0, T, D, eps, bf16);
//
// A backend also says where its device buffers live (MemoryOps): allocate, free, zero,
// fill, copy on the device, the host memory it offloads to, and the copies between the two. The tagged allocator
// (base/memory.c) is their one caller for allocation: it takes device memory from the
// backend and keeps its records (tag, size, name) on the host, in a table keyed by the
// buffer's address, never in front of the data, so a buffer may be GPU memory. Its
// mem_zero / mem_copy / mem_transfer are the layers' way to these operations. The CPU's
// memory is the host's (kernels/cpu/memory.c); the planner's too (its large buffers are
// address space the allocator reserves itself, its small ones are real); the GPU's is
// cudaMalloc'd (gpu/runtime.cu).
#ifndef MESHMOE_KERNELS_H
#define MESHMOE_KERNELS_H
#include <stddef.h>            // size_t
#include "kernels/matmul.h"    // the GEMM and the matmul layer's products
#include "kernels/matmul16.h"  // the same products on 16-bit (bf16) operands
#include "kernels/norm.h"      // RMSNorm
#include "kernels/rope.h"      // rotary position embedding
#include "kernels/embedding.h" // token lookup (gather or one-hot)
#include "kernels/attention.h" // the attention core: dot product, flash, ring blocks
#include "kernels/mla.h"       // MLA's copies, scale and k_rope sum
#include "kernels/router.h"    // routing: scores, top-k, groups
#include "kernels/moe.h"       // the experts' dispatch and combine
#include "kernels/mlp.h"       // SwiGLU
#include "kernels/loss.h"      // cross-entropy and its vocabulary tiles
#include "kernels/cast.h"      // bf16 rounding and packing
#include "kernels/sum.h"       // tree-sum merges and residual adds
#include "kernels/optim.h"     // optimizer updates, clipping, EMA
#include "kernels/init.h"      // parameter initialisation

// Device memory. Sizes are in bytes; the allocator asks for whole 64-byte lines.
typedef struct MemoryOps {
    void *(*alloc)(size_t bytes);                                 // 64-byte aligned, contents undefined; NULL if none left
    void (*free)(void *p, size_t bytes);                          // p from alloc, bytes as asked for
    void *(*alloc_host)(size_t bytes);                            // host memory for offload (pinned on a GPU)
    void (*free_host)(void *p, size_t bytes);                     // p from alloc_host, bytes as asked for
    void (*zero)(void *p, size_t bytes);                          // p[0..bytes) = 0
    void (*fill)(void *p, int byte, size_t bytes);                // every byte = byte (the sanitizer builds' poison)
    void (*copy)(void *dst, const void *src, size_t bytes);       // device to device (the same device)
    void (*to_host)(void *host, const void *src, size_t bytes);   // device to host, after the work queued before
    void (*to_device)(void *dst, const void *host, size_t bytes); // host to device
    // Host offload's copies (base/memory.c's moves: mem_to_host, mem_to_device) between the
    // device and its host memory: they may return before the copy is done (a GPU's copy
    // stream, gpu/offload.cu), ordered after the work queued before them and, to the
    // device, before the work queued after them. The source may be freed at once (its memory
    // is kept until the copy is done); the host reads such data only through to_host /
    // to_device, which wait for them. NULL: to_host and to_device above.
    void (*to_host_async)(void *host, const void *src, size_t bytes);
    void (*to_device_async)(void *dst, const void *host, size_t bytes);
} MemoryOps;
extern const MemoryOps memory_cpu;    // kernels/cpu/memory.c: host memory (both kinds), memset and memcpy

typedef struct Backend {
    const char *name;                 // "cpu", "dry"
    // Where its device buffers live (above). Its to_host is the one way host code reads
    // device data (base/memory.h mem_download): a GPU backend synchronises there.
    const MemoryOps *mem;
    // The families, in the order a decoder layer meets them.
    const MatmulKernels *matmul;      // matrix products (kernels/matmul.h)
    const Matmul16Kernels *matmul16;  // the same on bf16 operands, float32 sums (kernels/matmul16.h)
    const NormKernels *norm;          // RMSNorm (kernels/norm.h)
    const RopeKernels *rope;          // RoPE tables and rotation (kernels/rope.h)
    const EmbeddingKernels *embedding;   // token embedding (kernels/embedding.h)
    const AttentionKernels *attention;   // softmax attention: dot product, flash, ring (kernels/attention.h)
    const MlaKernels *mla;            // MLA's latent splits and query scale (kernels/mla.h)
    const RouterKernels *router;      // MoE routing, capacity, load-balance loss (kernels/router.h)
    const MoeKernels *moe;            // MoE row layout, gather, combine (kernels/moe.h)
    const MlpKernels *mlp;            // SwiGLU (kernels/mlp.h)
    const LossKernels *loss;          // cross-entropy, vocabulary tiles (kernels/loss.h)
    const CastKernels *cast;          // bf16 rounding and packing (kernels/cast.h)
    const SumKernels *sum;            // tree-sum merges and residual adds (kernels/sum.h)
    const OptimKernels *optim;        // optimizer updates, clipping, EMA, sums of squares (kernels/optim.h)
    const InitKernels *init;          // parameter initialisation (kernels/init.h)
    // A device thread and its accelerator (NULL on the CPU, where a thread is its device;
    // called through kern_bind / kern_sync / kern_unbind below):
    void (*bind)(int device, int slot); // at a thread's start: mesh device `device` (its memory pool) on its
                                        // host's GPU number slot mod the GPUs there, a stream
    void (*sync)(void);               // wait until the work this thread queued is done
    void (*unbind)(void);             // at a thread's end: its stream (and, last, its device's pool) given back
    // GPU-only scratch of a library the kernels call (cuBLAS's workspace; NULL on the CPU):
    // the bytes the calling thread's products want (0: none), and the buffer they get (NULL:
    // taken back, after the thread's work is done). The device thread allocates it from the
    // tagged allocator (MEM_WORKSPACE, base/mesh.c), so the memory report counts it.
    size_t (*workspace_bytes)(void);
    void (*set_workspace)(void *p, size_t bytes);
    // The profile's device clock (profile=true; NULL on the CPU, whose kernels the profile
    // times with the host's clock): mark queues a time stamp on the thread's stream, behind
    // the work queued so far, and returns it; elapsed_ms waits for b and gives the device's
    // time from a to b; marks_release hands back every mark the thread made.
    void *(*mark)(void);
    double (*elapsed_ms)(const void *a, const void *b);
    void (*marks_release)(void);
} Backend;

extern const Backend backend_cpu;     // kernels/cpu/backend.c
// backend_cpu with the plain GEMM and attention's per-row loops (matmul_impl=plain; same bits).
const Backend *backend_cpu_plain(void);
extern const Backend backend_dry;     // kernels/dry.c
// The library workspace the planner counts on each device (backend_dry's workspace_bytes):
// a dry run of device=gpu with cuBLAS's products plans cublas_workspace_bytes(9), Hopper's
// (train.c); 0, the default, for the CPU and the ordered GEMM.
void dry_plan_workspace(size_t bytes);
// cuBLAS's workspace as its documentation recommends it (cublasSetWorkspace) for a GPU of
// compute capability cc_major: 32 MiB on Hopper (9) and later, 4 MiB before (gpu/matmul.cu).
static inline size_t cublas_workspace_bytes(int cc_major) { return (size_t)(cc_major >= 9 ? 32 : 4) << 20; }

// The backend of the calling device (thread), or the process's default when the thread
// has not chosen one.
const Backend *kern(void);
// Choose the process's default backend (train.c, once, before the devices start).
void kern_use_default(const Backend *b);
// Choose the calling device's backend (for a device thread that differs from the default).
void kern_use(const Backend *b);

// The calling thread works for mesh device `device` (base/mesh.c, sharding/overlap.c), whose
// place among the devices of its host is `slot` (base/mesh.h:mesh_gpu_slot): the backend's
// bind, if it has one. kern_unbind at the thread's end.
void kern_bind(int device, int slot);
void kern_unbind(void);
// Wait for the work the calling thread queued (a GPU's stream; nothing on the CPU): before
// another thread reads what it wrote (base/collectives.c, every barrier).
void kern_sync(void);

// The GPU backend of this binary, or NULL with the reason in *why: backend_cuda (HIP's in
// ./train_hip) in ./train_gpu, after checking that a GPU can run it (gpu/select.cu), with its
// products by cuBLAS when use_cublas is 1 (config key gpu_matmul=cublas; 2: cublas_bf16, the
// forward weight products on tensor cores), else the ordered GEMM; its attention core by the
// kernels attention_kind names (config key gpu_attention: 0 rows, 1 tiles, 2 tensor_cores, 3 cudnn;
// gpu/backend.h); none in ./train, which links kernels/no_gpu.c instead.
const Backend *backend_gpu(int use_cublas, int attention_kind, const char **why);

#endif
