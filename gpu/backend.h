// gpu/backend.h: the GPU backend as C code sees it: the Backend table (kernels/kernels.h),
// its family tables, the choice of matrix-product library, and the device memory that the
// conformance test (tests/test_conformance.c) moves its arrays through.
//
// Every array argument of a GPU kernel is a device pointer (loss_leaf_sum's sum and
// squares_add's sum and flag included), except the small shape arrays of param_init and of
// Adafactor's kernels (shape, lindex, gshape), which are host values.
#ifndef MESHMOE_GPU_BACKEND_H
#define MESHMOE_GPU_BACKEND_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {   // the C side's declarations too (backend_gpu is defined in gpu/select.cu)
#endif
#include "kernels/kernels.h"

extern const Backend backend_cuda;   // gpu/backend.cu (built by nvcc, or by hipcc for AMD)

extern const MatmulKernels matmul_cuda;        // gpu/matmul.cu
extern const Matmul16Kernels matmul16_cuda;    // gpu/matmul16.cu
extern const NormKernels norm_cuda;            // gpu/norm.cu
extern const RopeKernels rope_cuda;            // gpu/rope.cu
extern const EmbeddingKernels embedding_cuda;  // gpu/embedding.cu
extern const AttentionKernels attention_cuda;  // gpu/attention.cu
extern const MlaKernels mla_cuda;              // gpu/mla.cu
extern const RouterKernels router_cuda;        // gpu/router.cu
extern const MoeKernels moe_cuda;              // gpu/moe.cu
extern const MlpKernels mlp_cuda;              // gpu/mlp.cu
extern const LossKernels loss_cuda;            // gpu/loss.cu
extern const CastKernels cast_cuda;            // gpu/cast.cu
extern const SumKernels sum_cuda;              // gpu/sum.cu
extern const OptimKernels optim_cuda;          // gpu/optim.cu
extern const InitKernels init_cuda;            // gpu/init.cu

// Matrix products: 0 the ordered GEMM (gpu/gemm.cu, the default: the CPU's bits), 1 cuBLAS
// (CUDA only, loaded when chosen; faster, not row-stable), 2 cuBLAS with the forward weight
// products on tensor cores in bf16 (dtype=bfloat16 only: gpu/matmul.cu). Returns 0 when
// cuBLAS cannot be had (a HIP build, or no libcublas on the machine), with the reason in *why.
int gpu_matmul_use_cublas(int on, const char **why);
// Attention (config key gpu_attention): ROWS every call by the per-row kernels
// (gpu/attention.cu); TILES the calls that fit on tiles in shared memory (gpu/attn_tiles.cu, the
// default; the same bits); TENSOR_CORES the bf16 calls that fit with their products on tensor
// cores (gpu/attn_mma.cu; CUDA only), the others as TILES; CUDNN the calls that fit by cuDNN's
// fused flash attention (gpu/attn_cudnn.cu; CUDA only), the others as TENSOR_CORES.
enum { GPU_ATTENTION_KIND_ROWS, GPU_ATTENTION_KIND_TILES, GPU_ATTENTION_KIND_TENSOR_CORES, GPU_ATTENTION_KIND_CUDNN };
void gpu_attention_use(int kind);
int gpu_attention_tensor_cores(void);   // 1: this build has TENSOR_CORES (CUDA's warp matrix products)
// 1 when CUDNN can run here (this build has it and cuDNN 9 loads), else 0 with the reason in *why;
// and the calls cuDNN has run in this process (the conformance test checks that it took some).
int gpu_attention_cudnn(const char **why);
long attn_cudnn_calls(void);
// cuBLAS's workspace (Backend.workspace_bytes, set_workspace): the bytes the calling thread's
// products want (0 with the ordered GEMM), and the device buffer they use (NULL: taken back).
size_t gpu_matmul_workspace_bytes(void);
void gpu_matmul_set_workspace(void *p, size_t bytes);
// MESHMOE_CHECK_BF16=1 with gpu_matmul=cublas_bf16: the operand values converted to bf16 so
// far on this thread's GPU, and how many were not bf16-valued, printed (gpu/matmul.cu).
void gpu_matmul_bf16_report(void);
// What the calling thread's work went through, a line each on stdout for mesh device `device`
// where it had any (gpu_unbind): its 16-bit products by cuBLASLt or by cublasGemmEx, with the
// heuristic's queries and the refusals of kept algorithms (gpu/matmul_lt.cu); its attention
// calls by cuDNN or by the own kernels under gpu_attention=cudnn (gpu/attn_cudnn.cu).
void gpu_lt_report(int device);
void attn_cudnn_report(int device);

// Device memory (gpu/runtime.cu): what the conformance test and the allocator use.
int gpu_devices(const char **why);          // the GPUs there are; 0 with the runtime's reason in *why
int gpu_device_count(void);                 // the same, the reason printed when 0
const char *gpu_device_name(void);          // of device 0, for the log
void *gpu_alloc(size_t bytes);              // dies with the reason when it cannot
void gpu_free(void *p);
void *gpu_alloc_host(size_t bytes);         // pinned host memory; dies with the reason when it cannot
void gpu_free_host(void *p);
void gpu_upload(void *dst, const void *host, size_t bytes);     // host -> device, synchronous
void gpu_download(void *host, const void *src, size_t bytes);   // device -> host, after the stream's work
void gpu_copy(void *dst, const void *src, size_t bytes);       // device -> device, on the stream
void gpu_fill_bytes(void *dst, int byte, size_t bytes);         // memset on the device
// Offload's copies (gpu/offload.cu), between pinned host memory and the device, on the
// thread's copy stream: they return at once (MemoryOps.to_host_async, to_device_async).
void gpu_to_host_async(void *host, const void *src, size_t bytes);
void gpu_to_device_async(void *dst, const void *host, size_t bytes);
void *pinned_alloc(size_t bytes);           // pinned host memory from a cache (gpu/pool.cu)
void pinned_free(void *p, size_t bytes);    // back to the cache, kept until a copy from it is done
extern const MemoryOps memory_cuda;         // gpu/backend.cu: the above as the allocator's MemoryOps

// A mesh device's thread (gpu/runtime.cu; Backend.bind, sync, unbind): device d runs on GPU
// slot mod (number of GPUs), slot being d's place among its host's devices (d in one process),
// on a stream of the thread's own, with the device's pool.
void gpu_bind(int device, int slot);
void gpu_sync(void);                        // the thread's stream has finished its work
void gpu_unbind(void);                      // waits, leaves the pool, destroys the stream
// The profile's device clock (kernels/kernels.h: Backend.mark): CUDA events of the calling
// thread, recorded on its stream, reused after marks_release.
void *gpu_mark(void);
double gpu_elapsed_ms(const void *a, const void *b);
void gpu_marks_release(void);
// Each mesh device's memory pool (gpu/pool.cu): what the allocator's buffers come from.
void pool_attach(int device, int gpu);      // the calling thread allocates from device's pool
void pool_detach(void);                     // the last thread of a device returns its memory (and prints it)
void *pool_alloc(size_t bytes);             // 256-byte aligned; NULL when the GPU has no more
void pool_free(void *p, size_t bytes);      // bytes as asked for

#ifdef __cplusplus
}
#endif
#endif
