// gpu/gpu.h: the one portability header of the GPU backend, so that the very same sources
// build with nvcc (CUDA) and with hipcc (HIP, AMD). The sources are written in CUDA's
// names; under hipcc this header maps each one to its HIP twin, the way a vendor's
// porting header does. Nothing else in gpu/ may test for the compiler.
//
// Also here: the warp width, a warp shuffle, the bf16 rounding on the device, and GPU_CHECK,
// which wraps every runtime call and names the file, the line and the error string.
#ifndef MESHMOE_GPU_GPU_H
#define MESHMOE_GPU_GPU_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>   // pause

#if defined(GPU_EMULATE)
// The CPU emulation of the tests (gpu/emu.h): the backend's kernels run on the CPU.
#include "gpu/emu.h"
static inline float warp_shfl_xor(float v, int lane_mask) { return emu_shfl_xor(v, lane_mask); }
#elif defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorCudartUnloading hipErrorDeinitialized
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMallocHost hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemsetAsync hipMemsetAsync
#define cudaMallocAsync hipMallocAsync
#define cudaFreeAsync hipFreeAsync
#define cudaStream_t hipStream_t
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamDestroy hipStreamDestroy
#define cudaSetDevice hipSetDevice
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaMemcpyDefault hipMemcpyDefault
#define cudaMemGetInfo hipMemGetInfo
#define cudaMemPool_t hipMemPool_t
#define cudaDeviceGetDefaultMemPool hipDeviceGetDefaultMemPool
#define cudaMemPoolGetAttribute hipMemPoolGetAttribute
#define cudaMemPoolAttrUsedMemHigh hipMemPoolAttrUsedMemHigh
#define cudaMemPoolSetAttribute hipMemPoolSetAttribute
#define cudaMemPoolAttrReleaseThreshold hipMemPoolAttrReleaseThreshold
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaDeviceProp hipDeviceProp_t
#define cudaEvent_t hipEvent_t
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventDefault hipEventDefault
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventRecord hipEventRecord
#define cudaEventQuery hipEventQuery
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventDestroy hipEventDestroy
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaErrorNotReady hipErrorNotReady
#define cudaGetDeviceProperties hipGetDeviceProperties
#define GPU_BACKEND_NAME "hip"
// Debian's HIP has no hipBLAS: the ordered GEMM (gpu/gemm.cu) is the only matrix product.
#define GPU_HAVE_CUBLAS 0
// No warp matrix products (nvcuda::wmma; AMD's are rocWMMA, which Debian does not package):
// gpu_attention=tensor_cores is CUDA's.
#define GPU_HAVE_WMMA 0
#define GPU_HAVE_CUDNN 0   // (gpu_attention=cudnn is CUDA's)
// AMD's data-centre GPUs (gfx90a, gfx940) run wavefronts of 64 lanes.
#define WARP_SIZE 64
__device__ static inline float warp_shfl_xor(float v, int lane_mask) { return __shfl_xor(v, lane_mask); }
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>
#define GPU_BACKEND_NAME "cuda"
#define GPU_HAVE_CUBLAS 1
#define GPU_HAVE_WMMA 1   // nvcuda::wmma's bf16 products (sm_80 and later)
// cuDNN's fused flash attention (gpu/attn_cudnn.cu): built where the Makefile found cuDNN's
// frontend headers, which define MESHMOE_CUDNN.
#if defined(MESHMOE_CUDNN)
#define GPU_HAVE_CUDNN 1
#else
#define GPU_HAVE_CUDNN 0
#endif
#define WARP_SIZE 32
__device__ static inline float warp_shfl_xor(float v, int lane_mask) {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
// Copies from device to shared memory that run while the thread goes on (cp.async, sm_80 and
// later; the emulation's, which checks their use, in gpu/emu.h): cp_async16 (cp_async4) copies
// 16 (4) aligned bytes, or writes zeros there where valid is 0 (src is then not read);
// cp_async_commit closes the group of this thread's copies issued since the last one;
// cp_async_wait<N> waits until at most the N groups closed last are still under way. Another
// thread may read a copy's bytes after a barrier that follows the wait.
__device__ static inline void cp_async16(void *dst, const void *src, int valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ static inline void cp_async4(void *dst, const void *src, int valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ static inline void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ static inline void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// kernel<<<grid, block, smem, stream>>>(args), written GPU_LAUNCH(kernel, grid, block, smem)(args)
// on the thread's stream by the kernels that the CPU emulation also runs (gpu/attention.cu,
// gpu/attn_tiles.cu, gpu/attn_mma.cu); GPU_SHARED(type, name): the block's dynamic shared
// memory as `name`, aligned to 128 bytes (warp matrix loads want 32).
#if !defined(GPU_EMULATE)
#define GPU_LAUNCH(kernel, grid, block, smem) kernel<<<grid, block, smem, gpu_stream()>>>
#define GPU_SHARED(type, name) extern __shared__ __align__(128) type name[]
#endif

// hipcc compiles each file twice, for the host and for the GPU, and its GPU pass would also
// emit a family's table (a constant of host function pointers, which that pass cannot
// resolve). So each table is defined inside `#if GPU_HOST_PASS`.
#if defined(__HIP_DEVICE_COMPILE__)
#define GPU_HOST_PASS 0
#else
#define GPU_HOST_PASS 1
#endif

// GPU_CHECK(call): a runtime call that fails stops the program with one line naming where
// and why, e.g. "meshmoe: GPU error at gpu/norm.cu:80: out of memory (cudaMalloc(...))".
#define GPU_CHECK(call) gpu_check((call), #call, __FILE__, __LINE__)
static inline void gpu_check(cudaError_t err, const char *what, const char *file, int line) {
    if (err == cudaSuccess) return;
    // Another thread is ending the program (its exit unloads the runtime under this one):
    // that thread's message is the one that counts, so this one waits for the end, silent.
    if (err == cudaErrorCudartUnloading)
        for (;;) pause();
    fprintf(stderr, "meshmoe: GPU error at %s:%d: %s (%s)\n", file, line, cudaGetErrorString(err), what);
    exit(1);
}
// After a kernel launch: a bad launch configuration is reported by the next runtime call.
#define GPU_CHECK_LAUNCH() GPU_CHECK(cudaGetLastError())

// The blocks of `threads` needed to cover n items, one item per thread.
static inline unsigned blocks_for(size_t n, unsigned threads) {
    return (unsigned)((n + threads - 1) / threads);
}
// The threads of a one-dimensional launch; 256 is a good default on every GPU we target.
enum { GPU_THREADS = 256 };
// The whole quads of n elements that a pass four elements a thread may take (16-byte loads
// and stores): n / 4 when every array it touches is 16-byte aligned (`addresses`: their
// addresses or'ed together), else 0, the pass then one element at a time throughout.
__host__ __device__ static inline size_t quads_of(size_t n, uintptr_t addresses) { return addresses % 16 ? 0 : n / 4; }

// The stream this host thread launches on (gpu/runtime.cu): one per thread, created on first use.
cudaStream_t gpu_stream(void);
// Host offload's copies on the thread's copy stream (gpu/offload.cu): the event that marks
// the end of the thread's copy in flight from p (the caller now owns it), or NULL; the
// host waiting for the copies; the copy stream's end (the thread's end).
cudaEvent_t gpu_copy_reading(const void *p);
void gpu_copies_wait(void);
void gpu_copies_end(void);

// One float rounded to bfloat16, round to nearest even, NaN kept a quiet NaN: the same bits
// as kernels/bf16.h:bf16_bits on the host.
__device__ static inline float bf16_round_dev(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(((u >> 16) | 0x40u) << 16);
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xffff0000u);
}
__device__ static inline uint16_t bf16_bits_dev(float f) {
    return (uint16_t)(__float_as_uint(bf16_round_dev(f)) >> 16);
}
// Four floats' bf16 bits in one 8-byte word, the first in the low half (the order of four
// consecutive uint16_t in memory).
__device__ static inline uint2 bf16_bits4_dev(float4 v) {
    return make_uint2(bf16_bits_dev(v.x) | (uint32_t)bf16_bits_dev(v.y) << 16,
                      bf16_bits_dev(v.z) | (uint32_t)bf16_bits_dev(v.w) << 16);
}
// And back: bf16 bits as a float (exact), one or four from an 8-byte word.
__device__ static inline float bf16_float_dev(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ static inline float4 bf16_float4_dev(uint2 b) {
    return make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xffff0000u), __uint_as_float(b.y << 16),
                       __uint_as_float(b.y & 0xffff0000u));
}

#endif
