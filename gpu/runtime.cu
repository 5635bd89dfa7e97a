// gpu/runtime.cu: the GPU backend's runtime plumbing: one stream per host thread, device
// memory, and the copies between host and device (gpu/backend.h).
#include "gpu/gpu.h"
#include "gpu/backend.h"

// Each host thread (a mesh device) launches on its own non-blocking stream, so that two
// devices sharing one GPU do not serialise on the legacy default stream.
cudaStream_t gpu_stream(void) {
    static thread_local cudaStream_t stream;
    static thread_local int made;
    if (!made) {
        GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        made = 1;
    }
    return stream;
}

// 0 when there is no GPU; the runtime's reason (no device, no driver, a driver older than
// the runtime) is printed, since on a GPU machine it is the first thing to fix.
extern "C" int gpu_device_count(void) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        fprintf(stderr, "meshmoe: no GPU available: %s\n", cudaGetErrorString(err));
        (void)cudaGetLastError();
        return 0;
    }
    return n;
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

extern "C" void gpu_upload(void *dst, const void *host, size_t bytes) {
    GPU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, gpu_stream()));
    GPU_CHECK(cudaStreamSynchronize(gpu_stream()));
}

// The stream's kernels finish first (the copy is ordered after them on the same stream).
extern "C" void gpu_download(void *host, const void *src, size_t bytes) {
    GPU_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, gpu_stream()));
    GPU_CHECK(cudaStreamSynchronize(gpu_stream()));
}

// Device to device, queued on the stream after its kernels (no wait).
extern "C" void gpu_copy(void *dst, const void *src, size_t bytes) {
    GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gpu_stream()));
}

extern "C" void gpu_fill_bytes(void *dst, int byte, size_t bytes) {
    GPU_CHECK(cudaMemsetAsync(dst, byte, bytes, gpu_stream()));
}
