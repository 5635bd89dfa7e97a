// gpu/backend.cu: the GPU backend, one table per kernel family (kernels/kernels.h), the
// twins of kernels/cpu/backend.c.
#include "gpu/gpu.h"
#include "gpu/backend.h"

// to_host: the stream's work first, then the copy (the one synchronisation a layer asks for).
static void to_host(void *host, const void *src, size_t bytes) { gpu_download(host, src, bytes); }

#if GPU_HOST_PASS
// Device memory for the tagged allocator (kernels/kernels.h MemoryOps): one cudaMalloc per
// buffer for now (a per-device pool is still to come: docs/gpu.md), pinned host memory for
// offload; zero, fill and the device-to-device copy are queued on the calling thread's
// stream, the copies to and from the host wait for it.
static void *mem_alloc(size_t bytes) { return gpu_alloc(bytes); }
static void mem_free(void *p, size_t bytes) { (void)bytes; gpu_free(p); }
static void mem_free_host(void *p, size_t bytes) { (void)bytes; gpu_free_host(p); }
static void mem_zero(void *p, size_t bytes) { gpu_fill_bytes(p, 0, bytes); }
extern "C" const MemoryOps memory_cuda = {
    mem_alloc,
    mem_free,
    gpu_alloc_host,
    mem_free_host,
    mem_zero,
    gpu_fill_bytes,
    gpu_copy,
    gpu_download,
    gpu_upload,
};

extern "C" const Backend backend_cuda = {
    GPU_BACKEND_NAME,
    to_host,
    &memory_cuda,
    &matmul_cuda,
    &norm_cuda,
    &rope_cuda,
    &embedding_cuda,
    &attention_cuda,
    &mla_cuda,
    &router_cuda,
    &moe_cuda,
    &mlp_cuda,
    &loss_cuda,
    &cast_cuda,
    &sum_cuda,
    &optim_cuda,
    &init_cuda,
};
#endif
