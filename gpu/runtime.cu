// gpu/runtime.cu: the GPU backend's runtime plumbing: which GPU a mesh device runs on, one
// stream per host thread, device memory, and the copies between host and device
// (gpu/backend.h). The per-device pool of the allocator's buffers is gpu/pool.cu.
#include "gpu/gpu.h"
#include "gpu/backend.h"

// Each host thread (a mesh device) launches on its own non-blocking stream, so that two
// devices sharing one GPU do not serialise on the legacy default stream. A mesh device's
// thread makes it in gpu_bind; another thread (a test's) on first use.
static thread_local cudaStream_t stream;
static thread_local int made;
static thread_local int bound = -1;   // the mesh device this thread works for (gpu_bind)

cudaStream_t gpu_stream(void) {
    if (!made) {
        GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        made = 1;
    }
    return stream;
}

// The number of GPUs, or 0 with the runtime's reason in *why (no device, no driver, a
// driver older than the runtime): on a GPU machine it is the first thing to fix.
extern "C" int gpu_devices(const char **why) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorCudartUnloading) GPU_CHECK(err);   // another thread is ending the program: wait
    if (err != cudaSuccess) {
        *why = cudaGetErrorString(err);
        (void)cudaGetLastError();
        return 0;
    }
    if (n == 0) *why = "the runtime found no GPU";
    return n;
}

extern "C" int gpu_device_count(void) {
    const char *why = NULL;
    int n = gpu_devices(&why);
    if (n == 0) fprintf(stderr, "meshmoe: no GPU available: %s\n", why);
    return n;
}

// Mesh device d runs on GPU slot mod (number of GPUs), slot being d's place among the
// devices of its host's processes (base/mesh.h:mesh_gpu_slot; d itself in one process): one
// GPU holds every device of the mesh (each with its own stream and pool), several GPUs share
// them out, and the processes of a host take its GPUs in turn. With several GPUs a
// collective copies from another device's buffer, maybe on another GPU: peer access lets
// such a copy (and a kernel) reach it directly; without it (GPUs on different PCIe roots)
// cudaMemcpyAsync still works, through the host. cudaMemcpyDefault lets the runtime tell
// the GPUs apart by address (unified addressing, every 64-bit CUDA platform).
static void enable_peers(int gpu, int n) {
    for (int g = 0; g < n; g++) {
        int can = 0;
        if (g == gpu) continue;
        GPU_CHECK(cudaDeviceCanAccessPeer(&can, gpu, g));
        if (!can) continue;
        cudaError_t err = cudaDeviceEnablePeerAccess(g, 0);
        if (err == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();   // another device thread did
        else GPU_CHECK(err);
    }
}

extern "C" void gpu_bind(int device, int slot) {
    const char *why = NULL;
    int n = gpu_devices(&why);
    if (n == 0) { fprintf(stderr, "meshmoe: device %d: no GPU available: %s\n", device, why); exit(1); }
    int gpu = slot % n;
    if (made) {   // a stream this thread used before (on its GPU of then): done and gone first
        GPU_CHECK(cudaStreamSynchronize(stream));
        GPU_CHECK(cudaStreamDestroy(stream));
        made = 0;
    }
    gpu_copies_end();   // its copy stream too (gpu/offload.cu: made again on first use)
    GPU_CHECK(cudaSetDevice(gpu));
    enable_peers(gpu, n);
    (void)gpu_stream();   // created on `gpu`
    pool_attach(device, gpu);
    bound = device;
}

// Everything this thread queued (kernels, copies) is done.
extern "C" void gpu_sync(void) {
    if (made) GPU_CHECK(cudaStreamSynchronize(stream));
}

// The profile's marks: this thread's events, made as needed and used again after each release.
static thread_local cudaEvent_t *marks;
static thread_local size_t nmarks, capmarks;

extern "C" void *gpu_mark(void) {
    if (nmarks == capmarks) {
        size_t cap = capmarks ? 2 * capmarks : 1024;
        cudaEvent_t *more = (cudaEvent_t *)realloc(marks, sizeof(cudaEvent_t) * cap);
        if (!more) { fprintf(stderr, "meshmoe: out of host memory (the profile's %zu marks)\n", cap); exit(1); }
        marks = more;
        for (size_t i = capmarks; i < cap; i++) GPU_CHECK(cudaEventCreateWithFlags(&marks[i], cudaEventDefault));
        capmarks = cap;
    }
    cudaEvent_t e = marks[nmarks++];
    GPU_CHECK(cudaEventRecord(e, gpu_stream()));
    return (void *)e;
}

extern "C" double gpu_elapsed_ms(const void *a, const void *b) {
    float ms = 0.0f;
    GPU_CHECK(cudaEventSynchronize((cudaEvent_t)b));
    GPU_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return ms;
}

extern "C" void gpu_marks_release(void) { nmarks = 0; }

static void marks_destroy(void) {
    for (size_t i = 0; i < capmarks; i++) GPU_CHECK(cudaEventDestroy(marks[i]));
    free(marks);
    marks = NULL;
    nmarks = capmarks = 0;
}

extern "C" void gpu_unbind(void) {
    gpu_sync();
    marks_destroy();
    gpu_matmul_bf16_report();
    gpu_lt_report(bound);
    attn_cudnn_report(bound);
    gpu_copies_end();
    pool_detach();
    if (made) GPU_CHECK(cudaStreamDestroy(stream));
    made = 0;
}

extern "C" const char *gpu_device_name(void) {
    static cudaDeviceProp prop;
    GPU_CHECK(cudaGetDeviceProperties(&prop, 0));
    return prop.name;
}

extern "C" void *gpu_alloc(size_t bytes) {
    void *p = NULL;
    GPU_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

extern "C" void gpu_free(void *p) { GPU_CHECK(cudaFree(p)); }

// Pinned host memory: the copies to and from the device run at the link's full speed from
// it (and may be asynchronous), which pageable memory does not allow.
extern "C" void *gpu_alloc_host(size_t bytes) {
    void *p = NULL;
    GPU_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
}

extern "C" void gpu_free_host(void *p) { GPU_CHECK(cudaFreeHost(p)); }

// The host's own copies wait for the offload copies in flight too (gpu/offload.cu): the
// host may read or write a buffer that one of them moves. The "device" side may be a
// device's host (offload) memory, pinned: a checkpoint of offloaded optimizer state reads
// it so; cudaMemcpyDefault lets the runtime tell the two kinds apart by address.
extern "C" void gpu_upload(void *dst, const void *host, size_t bytes) {
    gpu_copies_wait();
    GPU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyDefault, gpu_stream()));
    GPU_CHECK(cudaStreamSynchronize(gpu_stream()));
}

// The stream's kernels finish first (the copy is ordered after them on the same stream).
extern "C" void gpu_download(void *host, const void *src, size_t bytes) {
    gpu_copies_wait();
    GPU_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDefault, gpu_stream()));
    GPU_CHECK(cudaStreamSynchronize(gpu_stream()));
}

// Device to device, queued on the stream after its kernels (no wait).
// (Default: dst and src may be on two GPUs, enable_peers above.)
extern "C" void gpu_copy(void *dst, const void *src, size_t bytes) {
    GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, gpu_stream()));
}

extern "C" void gpu_fill_bytes(void *dst, int byte, size_t bytes) {
    GPU_CHECK(cudaMemsetAsync(dst, byte, bytes, gpu_stream()));
}
