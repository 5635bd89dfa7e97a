// gpu/backend.cu: the GPU backend, one table per kernel family (kernels/kernels.h), the
// twins of kernels/cpu/backend.c.
#include "gpu/gpu.h"
#include "gpu/backend.h"

// to_host: the stream's work first, then the copy (the one synchronisation a layer asks for).
static void to_host(void *host, const void *src, size_t bytes) { gpu_download(host, src, bytes); }

#if GPU_HOST_PASS
extern "C" const Backend backend_cuda = {
    GPU_BACKEND_NAME,
    to_host,
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
