// gpu/pool.cu: each mesh device's GPU memory pool. A cudaMalloc costs tens of microseconds
// and may synchronise the whole GPU, more than a step's kernels at the tiny presets, and a
// step allocates and frees its temporaries by the hundred. So each device takes GPU memory
// in large chunks and hands out pieces of them:
//
//   alloc(bytes): rounded up to its size class (piece_bytes: 256 bytes, and above 64 KiB
//                 a sixteenth of the power of two below it); a freed piece of that class
//                 if there is one (the last freed first); for a request larger than a chunk,
//                 else the smallest freed piece of up to twice its size (lent: see below);
//                 else the next bytes of the newest chunk, else a new chunk (POOL_CHUNK, or
//                 the request itself when larger);
//   free(p, bytes): the piece is kept for the next request of the same size, or of its own
//                 size if it was lent (once the offload copy that reads it, if one does, is
//                 done: gpu/offload.cu);
//   the device's end: every chunk goes back to the driver.
//
// A step asks for the same sizes in the same order every time, so after the first step
// every request is met by a freed piece. Not quite the same sizes: an expert's temporaries
// hold its rows, which change from step to step, and a pool that kept a freed piece for its
// exact size only would take new memory for them at every step (the experts' 16-bit
// activations under bf16_storage=kept on an H200: steps of 583, 386, 348, 346 and 294 ms
// where the default's were flat; emulated, the pool's chunks grew with the steps). The
// classes bound the sizes there are, at a cost of at most a sixteenth of a buffer's bytes.
// Above a chunk's size each class is still a cudaMalloc of its own, which waits for the whole
// GPU: mixtral-medium's experts' 16-bit temporaries (up to 117 MB, their rows changing with the
// routing) under bf16_storage=kept took steps of 698, 336, 320, 191, 181, 220, 204 and 188 ms
// on an H200 where the float32 ones' were flat. So such a request takes a larger freed piece,
// up to twice its size, before it takes new memory; the pool remembers what it lent
// (Pool.lent) so that the piece is kept under its own size when it comes back.
// The pool keeps no header in the memory it hands out: the allocator's records (tag, size,
// name) are on the host (base/memory.c), and the pool's own (its chunks and freed pieces)
// are host arrays here.
//
// One pool per mesh device (pool_attach at the thread's start, gpu/runtime.cu); a device's
// FSDP prefetch thread (sharding/overlap.c) shares it, hence the lock. A thread that was
// never bound to a device (a test's main thread) uses one pool of its own.
//
// MESHMOE_GPU_POOL=off in the environment: one cudaMalloc per buffer, and cudaFree at once,
// so that compute-sanitizer's memcheck sees each buffer's bounds (inside a chunk it sees
// only the chunk's); tests/gpu.sh runs memcheck so.
#include "gpu/gpu.h"
#include "gpu/backend.h"
#include <pthread.h>
#include <string.h>

enum { POOL_ALIGN = 256, POOL_DEVICES = 256 };   // base/mesh.c runs at most 256 device threads
static const size_t POOL_CHUNK = (size_t)64 << 20;   // 64 MiB: a tiny preset's device fits in one

typedef struct { char *base; size_t size, used; } Chunk;   // used: bytes handed out from base on
typedef struct { char *p; size_t bytes; cudaEvent_t done; } Piece;   // a freed piece, free once done
                                                                        // (NULL: now) has happened

typedef struct {
    pthread_mutex_t lock;
    int users;                       // threads bound to this device now
    int device, gpu;                 // the mesh device, the GPU it runs on
    Chunk *chunks; int nchunks;
    Piece *freed; int nfreed, capfreed;
    Piece *lent; int nlent, caplent;  // pieces handed out for a smaller request, with their own size
    size_t reserved;                 // bytes taken from the driver
    size_t in_use, high;             // bytes handed out now, and at most
} Pool;

static Pool pools[POOL_DEVICES + 1];   // the last: the threads never bound
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static int bound;                      // threads attached to a mesh device's pool, all devices
static void pinned_release(void);
static thread_local Pool *mine;

static int pool_off_env(void) {
    const char *v = getenv("MESHMOE_GPU_POOL");
    return v && !strcmp(v, "off");
}
static int pool_off(void) {
    static const int off = pool_off_env();   // read once (C++ makes the first call's set-up thread-safe)
    return off;
}

static Pool *current(void) {
    if (!mine) pool_attach(POOL_DEVICES, 0);   // an unbound thread: the shared pool, on the current GPU
    return mine;
}

// The stream-ordered allocator (cudaMallocAsync, the kernels' scratch) keeps what it holds
// between synchronisations: by default it gives everything back to the driver at each one,
// and the next cudaMallocAsync maps memory again, which every MoE layer's read-back of its
// expert counts (a synchronisation) would cost. It holds no more than its high-water mark.
static void keep_async_scratch(int gpu) {
    cudaMemPool_t async_pool;
    unsigned long long keep = ~0ull;   // cuuint64_t: never give back
    GPU_CHECK(cudaDeviceGetDefaultMemPool(&async_pool, gpu));
    GPU_CHECK(cudaMemPoolSetAttribute(async_pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

extern "C" void pool_attach(int device, int gpu) {
    if (device < 0 || device > POOL_DEVICES) { fprintf(stderr, "meshmoe: internal: pool of device %d\n", device); exit(1); }
    pthread_mutex_lock(&pools_lock);
    Pool *p = &pools[device];
    if (device < POOL_DEVICES) bound++;
    if (p->users++ == 0) {
        pthread_mutex_init(&p->lock, NULL);
        p->device = device;
        p->gpu = gpu;
        keep_async_scratch(gpu);
    }
    pthread_mutex_unlock(&pools_lock);
    mine = p;
}

// A new chunk of at least `bytes`; 0 when the GPU has no more.
static int grow(Pool *p, size_t bytes) {
    size_t size = bytes > POOL_CHUNK ? bytes : POOL_CHUNK;
    void *base = NULL;
    if (cudaMalloc(&base, size) != cudaSuccess) {
        (void)cudaGetLastError();   // out of memory: the allocator says so, naming the buffer
        return 0;
    }
    p->chunks = (Chunk *)realloc(p->chunks, sizeof(Chunk) * (p->nchunks + 1));
    if (!p->chunks) { fprintf(stderr, "meshmoe: out of host memory (GPU pool records)\n"); exit(1); }
    p->chunks[p->nchunks++] = (Chunk){(char *)base, size, 0};
    p->reserved += size;
    return 1;
}

// A freed piece is free once the offload copy that read it (if any) is done.
static int piece_free(Piece *f) {
    if (!f->done) return 1;
    cudaError_t q = cudaEventQuery(f->done);
    if (q == cudaErrorNotReady) return 0;
    GPU_CHECK(q);
    GPU_CHECK(cudaEventDestroy(f->done));
    f->done = NULL;
    return 1;
}

// Piece i of n taken out of the list (the last one moves into its place).
static char *take_piece(Piece *list, int *n, int i) {
    char *at = list[i].p;
    list[i] = list[--*n];
    return at;
}

// Keep a freed piece; the list grows as needed.
static void keep_piece(Piece **list, int *n, int *cap, Piece piece) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *list = (Piece *)realloc(*list, sizeof(Piece) * *cap);
        if (!*list) { fprintf(stderr, "meshmoe: out of host memory (GPU pool records)\n"); exit(1); }
    }
    (*list)[(*n)++] = piece;
}

// The smallest freed piece of more than `bytes` and at most twice as many, or -1.
static int best_larger(Pool *p, size_t bytes) {
    int best = -1;
    for (int i = 0; i < p->nfreed; i++) {
        size_t b = p->freed[i].bytes;
        if (b > bytes && b / 2 <= bytes && (best < 0 || b < p->freed[best].bytes) && piece_free(&p->freed[i]))
            best = i;
    }
    return best;
}

// A piece of `bytes` (a size class: piece_bytes), from the freed ones or a chunk; *got: its
// size, more than `bytes` when a larger freed piece was lent (then recorded in p->lent).
static void *take(Pool *p, size_t bytes, size_t *got) {
    *got = bytes;
    for (int i = p->nfreed - 1; i >= 0; i--)
        if (p->freed[i].bytes == bytes && piece_free(&p->freed[i])) return take_piece(p->freed, &p->nfreed, i);
    int i = bytes > POOL_CHUNK ? best_larger(p, bytes) : -1;
    if (i >= 0) {
        *got = p->freed[i].bytes;
        char *at = take_piece(p->freed, &p->nfreed, i);
        keep_piece(&p->lent, &p->nlent, &p->caplent, (Piece){at, *got, NULL});
        return at;
    }
    Chunk *c = p->nchunks ? &p->chunks[p->nchunks - 1] : NULL;
    if (!c || c->size - c->used < bytes) {
        if (!grow(p, bytes)) return NULL;
        c = &p->chunks[p->nchunks - 1];
    }
    void *at = c->base + c->used;
    c->used += bytes;
    return at;
}

// The bytes of the piece that meets a request of `bytes`: a multiple of POOL_ALIGN, and
// above POOL_EXACT a multiple of 1/16 of the largest power of two not over the request.
static const size_t POOL_EXACT = (size_t)64 << 10;
static size_t piece_bytes(size_t bytes) {
    size_t step = POOL_ALIGN;
    if (bytes > POOL_EXACT) {
        size_t top = POOL_EXACT;
        while (top <= bytes / 2) top *= 2;   // the largest power of two <= bytes
        step = top / 16;
    }
    size_t n = (bytes + step - 1) / step * step;
    return n ? n : (size_t)POOL_ALIGN;
}

extern "C" void *pool_alloc(size_t bytes) {
    Pool *p = current();
    size_t n = piece_bytes(bytes);
    void *at = NULL;
    pthread_mutex_lock(&p->lock);
    if (pool_off()) {
        if (cudaMalloc(&at, n) != cudaSuccess) { (void)cudaGetLastError(); at = NULL; }
    } else {
        at = take(p, n, &n);
    }
    if (at) {
        p->in_use += n;
        if (p->in_use > p->high) p->high = p->in_use;
    }
    pthread_mutex_unlock(&p->lock);
    return at;
}

extern "C" void pool_free(void *at, size_t bytes) {
    Pool *p = current();
    size_t n = piece_bytes(bytes);
    cudaEvent_t done = gpu_copy_reading(at);   // an offload copy from it still in flight?
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->nlent; i++)
        if (p->lent[i].p == (char *)at) {   // a larger piece, lent: kept under its own size
            n = p->lent[i].bytes;
            take_piece(p->lent, &p->nlent, i);
            break;
        }
    p->in_use -= n;
    if (pool_off()) {
        if (done) { GPU_CHECK(cudaEventSynchronize(done)); GPU_CHECK(cudaEventDestroy(done)); }
        GPU_CHECK(cudaFree(at));
    } else {
        keep_piece(&p->freed, &p->nfreed, &p->capfreed, (Piece){(char *)at, n, done});
    }
    pthread_mutex_unlock(&p->lock);
}

static double mib(size_t b) { return b / 1048576.0; }

// The device's figures beside the driver's, once, when its last thread leaves: what the
// pool took and handed out, the most the stream-ordered allocator held at once
// (cudaMallocAsync: the kernels' own scratch, e.g. gpu/matmul.cu's partial sums and bf16
// copies, which neither this pool nor the tagged allocator sees; one figure for the GPU,
// every device sharing it), and what cudaMemGetInfo says of the whole GPU (cuBLAS's
// workspace and the CUDA context included). The allocator's peak of the same device is in
// its report (base/memory.c:mem_print_report).
static void report(const Pool *p) {
    size_t free_b = 0, total = 0;
    unsigned long long scratch = 0;   // cuuint64_t
    cudaMemPool_t async_pool;
    GPU_CHECK(cudaMemGetInfo(&free_b, &total));
    GPU_CHECK(cudaDeviceGetDefaultMemPool(&async_pool, p->gpu));
    GPU_CHECK(cudaMemPoolGetAttribute(async_pool, cudaMemPoolAttrUsedMemHigh, &scratch));
    printf("device %d GPU memory: GPU %d, pool %.1f MiB in %d chunk%s, at most %.1f MiB handed out%s; "
           "kernels' scratch at most %.1f MiB; driver: %.1f MiB used, %.1f MiB free of %.1f MiB\n", p->device,
           p->gpu, mib(p->reserved), p->nchunks, p->nchunks == 1 ? "" : "s", mib(p->high),
           pool_off() ? " (MESHMOE_GPU_POOL=off)" : "", mib((size_t)scratch), mib(total - free_b), mib(free_b),
           mib(total));
}

// The calling thread leaves its pool; the last to leave gives every chunk back. The
// caller has waited for its stream, so no kernel still uses the memory.
extern "C" void pool_detach(void) {
    Pool *p = mine;
    if (!p) return;
    mine = NULL;
    pthread_mutex_lock(&pools_lock);
    if (p->device < POOL_DEVICES && --bound == 0) pinned_release();   // the mesh's last thread: the pinned cache too
    if (--p->users == 0 && p->device < POOL_DEVICES) {   // (the unbound threads' pool stays)
        report(p);
        for (int i = 0; i < p->nfreed; i++) if (p->freed[i].done) GPU_CHECK(cudaEventDestroy(p->freed[i].done));
        for (int i = 0; i < p->nchunks; i++) GPU_CHECK(cudaFree(p->chunks[i].base));
        free(p->chunks);
        free(p->freed);
        free(p->lent);
        pthread_mutex_destroy(&p->lock);
        memset(p, 0, sizeof *p);
    }
    pthread_mutex_unlock(&pools_lock);
}

// Pinned host memory (offload's buffers) from a cache shared by every device thread:
// cudaMallocHost pins pages (slow: it walks every page) and cudaFreeHost may wait for the
// whole GPU, while a step moves the same sizes out and back every time. So a freed buffer
// is kept for the next request of its exact size, once the copy that reads it (a move back
// to the device, queued just before the free) is done. The cache keeps what it holds until
// the mesh's last device thread leaves (pool_detach): about the host memory's peak, which
// the allocator's report shows.
// MESHMOE_GPU_POOL=off: cudaMallocHost and cudaFreeHost each time, as for device memory.
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;
static Piece *pinned;
static int npinned, cappinned;

extern "C" void *pinned_alloc(size_t bytes) {
    void *at = NULL;
    if (!pool_off()) {
        pthread_mutex_lock(&pinned_lock);
        for (int i = npinned - 1; i >= 0 && !at; i--)
            if (pinned[i].bytes == bytes && piece_free(&pinned[i])) at = take_piece(pinned, &npinned, i);
        pthread_mutex_unlock(&pinned_lock);
    }
    return at ? at : gpu_alloc_host(bytes);
}

extern "C" void pinned_free(void *at, size_t bytes) {
    cudaEvent_t done = gpu_copy_reading(at);
    if (pool_off()) {
        if (done) { GPU_CHECK(cudaEventSynchronize(done)); GPU_CHECK(cudaEventDestroy(done)); }
        gpu_free_host(at);
        return;
    }
    pthread_mutex_lock(&pinned_lock);
    keep_piece(&pinned, &npinned, &cappinned, (Piece){(char *)at, bytes, done});
    pthread_mutex_unlock(&pinned_lock);
}

// Every cached piece back to the driver, each once its copy is done (the mesh's threads have
// waited for their copy streams: gpu_unbind; the caller holds pools_lock).
static void pinned_release(void) {
    pthread_mutex_lock(&pinned_lock);
    for (int i = 0; i < npinned; i++) {
        cudaEvent_t done = pinned[i].done;
        if (done) { GPU_CHECK(cudaEventSynchronize(done)); GPU_CHECK(cudaEventDestroy(done)); }
        gpu_free_host(pinned[i].p);
    }
    free(pinned);
    pinned = NULL;
    npinned = cappinned = 0;
    pthread_mutex_unlock(&pinned_lock);
}
