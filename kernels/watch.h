// kernels/watch.h: the watched backend, the one place that wraps every kernel. Each kernel
// of the backend it wraps is called through a twin of the same name and arguments (written
// once, in kernels/watch.c) that calls each watcher's enter hook before the kernel and its
// leave hook after, with the kernel's family and the least work its contract implies. Two
// watchers use it: the profile (profile=true, kernels/profile.c: time and counts) and the
// strict mode (device=cpu_strict, kernels/strict.c: device memory open only inside a
// kernel). Both may watch at once.
#ifndef MESHMOE_KERNELS_WATCH_H
#define MESHMOE_KERNELS_WATCH_H
#include "kernels/kernels.h"

// The families in the order of the Backend table (kernels/kernels.h).
enum {
    FAMILY_MATMUL, FAMILY_NORM, FAMILY_ROPE, FAMILY_EMBEDDING, FAMILY_ATTENTION, FAMILY_MLA, FAMILY_ROUTER,
    FAMILY_MOE, FAMILY_MLP, FAMILY_LOSS, FAMILY_CAST, FAMILY_SUM, FAMILY_OPTIM, FAMILY_INIT, FAMILY_COUNT
};

typedef struct WatchHooks {
    void (*enter)(int family);                                // before a kernel of family
    void (*leave)(int family, double flops, double bytes);    // after it: its floating-point operations and bytes moved
} WatchHooks;

// The product a matmul kernel's twin is about to run, set before its enter hook, so that a
// watcher can file the call under its form and shape (the profile's table of products).
// form names the operands: "x @ w" (matmul_forward), "dy @ w^T" (the input gradient),
// "x^T @ dy" (the weight gradient), "x^T @ dy, leaves" (its leaves and their tree), "A @ B"
// and its transposes (gemm), "A @ B, pieces" (gemm_chunked). C (M,N) = op(A) (M,K) @ op(B) (K,N).
typedef struct WatchProduct {
    const char *form;
    int M, N, K;
} WatchProduct;
extern _Thread_local WatchProduct watch_product;

// The kernel a twin is about to run (its name, the twin's own: __func__), set before the
// enter hook, for the profile's table by kernel.
extern _Thread_local const char *watch_kernel;

#define WATCH_MOST 2   // watchers at once: the strict mode and the profile

// The process's one watched backend (set up before the devices start): the first call wraps
// b (and takes its name), a later one passes the watched backend as b and adds its hooks.
// mem, when not NULL, replaces the backend's memory (the strict mode's).
const Backend *watch_backend(const Backend *b, const MemoryOps *mem, WatchHooks hooks);

#endif
