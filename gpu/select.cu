// gpu/select.cu: device=gpu in ./train_gpu and ./train_hip (kernels/kernels.h backend_gpu):
// the GPU backend, once the runtime has found a GPU to run it. ./train links
// kernels/no_gpu.c in this file's place, which always answers no.
//
// Asked in train.c's config checks, before any work: with no GPU, no driver, or a driver
// older than the runtime linked in (CUDA 13 needs the 580 series), the run stops there with
// the runtime's own reason and the driver's version.
#include "gpu/gpu.h"
#include "gpu/backend.h"

extern "C" const Backend *backend_gpu(int use_cublas, int attention_kind, const char **why) {
    static char reason[512];
    const char *err = NULL;
    if (gpu_devices(&err) > 0) {
        if (!gpu_matmul_use_cublas(use_cublas, &err)) {   // (cuBLAS is loaded here, before any work)
            snprintf(reason, sizeof reason, "gpu_matmul=%s: %s", use_cublas == 2 ? "cublas_bf16" : "cublas", err);
            *why = reason;
            return NULL;
        }
        if (attention_kind == GPU_ATTENTION_KIND_CUDNN && !gpu_attention_cudnn(&err)) {
            snprintf(reason, sizeof reason, "gpu_attention=cudnn: %s; gpu_attention=tensor_cores runs the "
                     "attention core on the backend's own tensor-core kernels", err);
            *why = reason;
            return NULL;
        }
        if (attention_kind == GPU_ATTENTION_KIND_TENSOR_CORES && !gpu_attention_tensor_cores()) {
            *why = "gpu_attention=tensor_cores: this build (" GPU_BACKEND_NAME ") has no warp matrix products; "
                   "gpu_attention=tiles runs the attention core on its CUDA or stream cores";
            return NULL;
        }
        gpu_attention_use(attention_kind);
        return &backend_cuda;
    }
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);   // 0 when there is no driver at all
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    if (driver == 0)   // the runtime then says "driver version is insufficient": there is none
        snprintf(reason, sizeof reason, "no GPU can run the %s backend here: no GPU driver is installed (the %s "
                 "runtime, version %d, reports: %s)", GPU_BACKEND_NAME, GPU_BACKEND_NAME, runtime, err);
    else   // (CUDA's versions read 1000 * major + 10 * minor: 13000 is 13.0)
        snprintf(reason, sizeof reason, "no GPU can run the %s backend here: %s (driver version %d, runtime "
                 "version %d)", GPU_BACKEND_NAME, err, driver, runtime);
    *why = reason;
    return NULL;
}
