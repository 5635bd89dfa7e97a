// gpu/backend.cu: the GPU backend, one table per kernel family (kernels/kernels.h), the
// twins of kernels/cpu/backend.c.
#include "gpu/gpu.h"
#include "gpu/backend.h"

#if GPU_HOST_PASS
// Device memory for the tagged allocator (kernels/kernels.h MemoryOps): the device's pool
// (gpu/pool.cu), pinned host memory for offload (cached there too); zero, fill and the
// device-to-device copy are queued on the calling thread's stream, the copies to and from
// the host wait for it, offload's copies run on the thread's copy stream (gpu/offload.cu).
static void mem_zero(void *p, size_t bytes) { gpu_fill_bytes(p, 0, bytes); }
extern "C" const MemoryOps memory_cuda = {
    pool_alloc,
    pool_free,
    pinned_alloc,
    pinned_free,
    mem_zero,
    gpu_fill_bytes,
    gpu_copy,
    gpu_download,
    gpu_upload,
    gpu_to_host_async,
    gpu_to_device_async,
};

extern "C" const Backend backend_cuda = {
    GPU_BACKEND_NAME,
    &memory_cuda,
    &matmul_cuda,
    &matmul16_cuda,
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
    gpu_bind,
    gpu_sync,
    gpu_unbind,
    gpu_matmul_workspace_bytes,
    gpu_matmul_set_workspace,
    gpu_mark,
    gpu_elapsed_ms,
    gpu_marks_release,
};
#endif
