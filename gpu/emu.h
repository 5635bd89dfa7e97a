// gpu/emu.h: the part of CUDA that the GPU backend (gpu/*.cu) uses, run on the CPU, so
// that its kernels can be tested on a machine without a GPU (tests/test_gpu_attention.cpp, and
// build/conformance_emu: the conformance test against the emulated backend). gpu/gpu.h
// includes it in place of the CUDA runtime when GPU_EMULATE is defined; nothing else does.
//
// A launch runs the grid's blocks one after another. A block's threads are fibers on the
// calling thread: each runs until it reaches __syncthreads, __syncwarp or its end, then the
// next one runs, so no thread passes a barrier before every thread of its block (of its
// warp, for __syncwarp) has reached it.
// Between two barriers the threads run one after another, in the order emu_order says
// (ascending or descending thread index): a kernel whose threads read what another thread
// writes between the same two barriers gives different results in the two orders, which is
// how the tests find such a race (GPU_EMU_ORDER below). Shared memory is one buffer per block, filled with NaNs
// before the block starts (a read of what no thread wrote shows); device memory is host
// memory; streams and events are ignored (every call is done when it returns), and so is
// atomicity (the threads of a launch run one at a time). Every thread of a block must reach
// the same __syncthreads, and of a warp the same __syncwarp (a block whose threads wait at
// barriers that can never all be met stops the program). A
// kernel whose first block reached no barrier runs its other blocks' threads one after
// another without fibers (kernels here reach their barriers whatever the data).
#ifndef MESHMOE_GPU_EMU_H
#define MESHMOE_GPU_EMU_H
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum {
    cudaSuccess = 0, cudaErrorCudartUnloading = 4, cudaErrorNotReady = 600, cudaErrorPeerAccessAlreadyEnabled = 704
};
static inline const char *cudaGetErrorString(cudaError_t) { return "emulated"; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
#define __global__
#define __device__
#define __launch_bounds__(...)   // (a register budget for the compiler: nothing to do here)
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local   // one block at a time on each host thread

// ---- the runtime: host memory, streams and events that are always done ----
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2 };
// 256-byte aligned, as the driver's, and of exactly n bytes (AddressSanitizer sees an access
// past them, as compute-sanitizer's memcheck does on a GPU).
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    if (posix_memalign(p, 256, n ? n : 1)) *p = NULL;
    return *p ? 0 : 2;
}
static inline cudaError_t cudaFree(void *p) { free(p); return 0; }
static inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
static inline cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
// The stream's scratch comes poisoned (every byte 0xff: a NaN as float32 or bf16), so that a
// kernel reading what no kernel wrote shows it.
static inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
    cudaError_t e = cudaMalloc(p, n);
    if (!e) memset(*p, 0xff, n);
    return e;
}
template <class T> static inline cudaError_t cudaMallocAsync(T **p, size_t n, cudaStream_t s) {
    return cudaMallocAsync((void **)p, n, s);   // (CUDA's typed overload)
}
static inline cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return cudaFree(p); }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memmove(d, s, n); return 0; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t) {
    return cudaMemcpy(d, s, n, k);
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
template <class T> static inline cudaError_t cudaMemcpyFromSymbol(void *d, const T &sym, size_t n) {
    memcpy(d, &sym, n);
    return 0;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = malloc(1); return 0; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return 0; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return 0; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = malloc(1); return 0; }
static inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = 0) { return 0; }
static inline cudaError_t cudaEventQuery(cudaEvent_t) { return 0; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return 0; }
enum { cudaEventDefault = 0 };
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) { *ms = 0.0f; return 0; }
static inline cudaError_t cudaSetDevice(int) { return 0; }
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return 0; }
static inline cudaError_t cudaDeviceCanAccessPeer(int *can, int, int) { *can = 1; return 0; }
static inline cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return 0; }
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) { *free_b = *total = (size_t)16 << 30; return 0; }
// The stream-ordered allocator's pool: the emulation's cudaMallocAsync is cudaMalloc, which
// keeps no high-water mark, so it reads 0.
typedef void *cudaMemPool_t;
enum { cudaMemPoolAttrReleaseThreshold = 4, cudaMemPoolAttrUsedMemHigh = 8 };
static inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int) { *pool = NULL; return 0; }
static inline cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, int, void *value) {
    *(unsigned long long *)value = 0;
    return 0;
}
static inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, int, void *) { return 0; }
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
};
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    strcpy(p->name, "emulated GPU (gpu/emu.h)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->major = 9;
    p->multiProcessorCount = 1;
    return 0;
}
template <class T> static inline T atomicAdd(T *p, T v) { T old = *p; *p += v; return old; }
template <class T> static inline T atomicOr(T *p, T v) { T old = *p; *p |= v; return old; }
#define GPU_BACKEND_NAME "emulated"
#define GPU_HAVE_CUBLAS 1   // (gpu/emu_cublas.h)
#define GPU_HAVE_WMMA 1
#define GPU_HAVE_CUDNN 0   // (cuDNN has no emulation: gpu_attention=cudnn is a GPU's)
#define WARP_SIZE 32

static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// The running fiber's coordinates (fibers share one OS thread: set before each switch).
inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
// 0: threads in ascending index between barriers, 1: descending; -1, every host thread's
// start: as the environment says (GPU_EMU_ORDER=descending: 1). Initialised by a constant, as
// emu_here below is, for the same reason.
inline int emu_order_from_env(void) {
    const char *o = getenv("GPU_EMU_ORDER");
    return o && !strcmp(o, "descending");
}
inline const int emu_order_env = emu_order_from_env();
inline thread_local int emu_order = -1;
static inline int emu_descending(void) { return emu_order < 0 ? emu_order_env : emu_order; }

// A fiber's state: not started, waiting at __syncthreads or at __syncwarp, let through its
// barrier (to resume), ended.
enum { EMU_NEW, EMU_AT_BLOCK, EMU_ENDED, EMU_AT_WARP, EMU_GO };
// Storage on 128 bytes, as a GPU aligns a block's dynamic shared memory (gpu/gpu.h's
// GPU_SHARED), of exactly the size asked (AddressSanitizer sees an access past it).
template <class T> struct EmuAligned {
    typedef T value_type;
    EmuAligned() = default;
    template <class U> EmuAligned(const EmuAligned<U> &) {}
    T *allocate(size_t n) { return (T *)::operator new(n * sizeof(T), std::align_val_t(128)); }
    void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(128)); }
    template <class U> bool operator==(const EmuAligned<U> &) const { return true; }
    template <class U> bool operator!=(const EmuAligned<U> &) const { return false; }
};
// A fiber switch saves where a fiber waits (emu_setjmp) and jumps to where another waits
// (emu_jump); ucontext only gives each fiber its stack and first entry. It is GCC's
// __builtin_setjmp/__builtin_longjmp: the frame, stack pointer and resume address only (the
// compiler keeps every other register in memory across the setjmp), where the C library's
// _setjmp/_longjmp also walk the thread's cleanup handlers on every jump (a fifth of an
// emulated training run's time).
#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer a jump that does not return (_longjmp's interceptor, and the call GCC
// adds before any call that does not return, __builtin_longjmp too) asks the kernel for the
// signal stack (sigaltstack) to clear the shadow of the frames it leaves: a system call every
// switch, a third of the emulated conformance run's time under ASan. A fiber's frames are not
// left but resumed later, their shadow still right; so a switch calls the C library's own
// _longjmp, through a pointer whose type says nothing of not returning.
#include <dlfcn.h>
typedef jmp_buf EmuJmp;
typedef void (*EmuJump)(struct __jmp_buf_tag *, int);
inline EmuJump emu_libc_longjmp(void) {
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void *f = libc ? dlsym(libc, "_longjmp") : nullptr;
    return f ? (EmuJump)f : (EmuJump)_longjmp;
}
inline const EmuJump emu_longjmp = emu_libc_longjmp();
#define emu_setjmp(b) _setjmp(b)
static inline void emu_jump(EmuJmp to) { emu_longjmp(to, 1); }
#else
typedef void *EmuJmp[5];
#define emu_setjmp(b) __builtin_setjmp(b)
#define emu_jump(b) __builtin_longjmp(b, 1)
#endif
// A fiber, once made, lives as long as its host thread: at the end of a block's thread it
// parks, and the same fiber runs that thread of every later block of any launch (making one
// costs getcontext, makecontext and setcontext, two system calls, a block's thread each).
struct EmuBlock {
    std::vector<ucontext_t> start;        // each fiber's first entry
    struct Jump { EmuJmp jb; };
    std::vector<Jump> at;                 // where each fiber waits at a barrier, or parks
    std::vector<std::vector<char>> stack;
    std::vector<int> made;                // 1: fiber t exists (and parks between blocks)
    std::vector<int> state;               // EMU_* below
    EmuJmp scheduler;
    int current = 0, fibers = 0, barriers = 0;   // barriers: some thread reached one
    std::vector<float> swap;                     // warp shuffles' values, one per thread
    std::vector<float> mma;                      // warp matrix products' operands, 3 tiles a warp
    struct Copy { void *dst; const void *src; int bytes, group; };
    std::vector<std::vector<Copy>> copies;       // each thread's asynchronous copies not yet made
    std::vector<int> commits;                    // and how many groups of them it has closed
    void (*body)(void *) = nullptr;
    void *arg = nullptr;
    std::vector<float, EmuAligned<float>> shared;
};
// The block this host thread runs, made at its first launch (emu_run). Reached through a
// pointer with a constant initial value: a thread_local object with a constructor, such as
// EmuBlock, is checked for its initialisation by a call at every use (a fiber switch, a
// warp's shuffle and product), a tenth of an emulated training run's time.
inline thread_local EmuBlock *emu_here = nullptr;
struct EmuBlockOwner {   // frees the thread's block when the thread ends
    EmuBlock *block = nullptr;
    ~EmuBlockOwner() { delete block; }
};
inline thread_local EmuBlockOwner emu_owner;

static inline void emu_wait(int state) {
    EmuBlock &e = *emu_here;
    if (!e.fibers) {
        fprintf(stderr, "gpu/emu.h: a barrier in a block after the first reached none (run without fibers)\n");
        exit(1);
    }
    e.barriers = 1;
    e.state[e.current] = state;
    if (!emu_setjmp(e.at[e.current].jb)) emu_jump(e.scheduler);
}
static inline void __syncthreads(void) { emu_wait(EMU_AT_BLOCK); }
// A warp's barrier: the threads of this one warp (those that have not ended) wait for each
// other; the block's other warps go their own ways.
static inline void __syncwarp(void) { emu_wait(EMU_AT_WARP); }
static inline void emu_copies_check(int t);
// A fiber's life: each time it is resumed in state EMU_NEW, one thread of a block.
static inline void emu_fiber_start(void) {
    for (;;) {
        emu_here->body(emu_here->arg);
        emu_copies_check(emu_here->current);
        emu_here->state[emu_here->current] = EMU_ENDED;
        if (!emu_setjmp(emu_here->at[emu_here->current].jb)) emu_jump(emu_here->scheduler);
    }
}
static inline void *emu_shared(void) { return emu_here->shared.data(); }
// A warp shuffle (every thread of the warp calls it at the same point): each thread's value
// through the exchange buffer, with a warp barrier before the reads and one after.
static inline float emu_shfl_xor(float v, int lane_mask) {
    EmuBlock &e = *emu_here;
    int t = (int)threadIdx.x;
    e.swap[t] = v;
    __syncwarp();
    float r = e.swap[t ^ lane_mask];
    __syncwarp();
    return r;
}

// Asynchronous copies from device to shared memory (cp.async: gpu/gpu.h's cp_async16,
// cp_async4, cp_async_commit, cp_async_wait). A GPU may make a copy at any time between its
// issue and the wait that covers it; the emulation makes it at the latest, in that wait, and
// fills its destination with NaNs at the issue, so that a kernel reading a buffer before its
// wait (or before the barrier after another thread's wait) reads NaNs, and one writing it
// early loses the write. A copy with valid = 0 writes zeros (cp.async's zero fill). A thread
// that ends with copies not waited for stops the program.
static inline int emu_thread(void) {
    return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
// An access a GPU refuses as misaligned (cp.async's source and destination on their size, a
// warp matrix load or store on 32 bytes with rows a multiple of 16 bytes apart) stops the
// program, naming it.
static inline void emu_aligned(const void *p, size_t to, size_t row_bytes, const char *what) {
    if ((uintptr_t)p % to == 0 && row_bytes % 16 == 0) return;
    fprintf(stderr, "emulated GPU: %s at %p (rows %zu bytes apart) is not aligned as a GPU requires\n", what, p,
            row_bytes);
    exit(1);
}
static inline void emu_cp_async(void *dst, const void *src, int bytes, int valid) {
    EmuBlock &e = *emu_here;
    int t = emu_thread();
    emu_aligned(dst, bytes, 16, "an asynchronous copy's destination");
    emu_aligned(src, bytes, 16, "an asynchronous copy's source");
    memset(dst, 0xff, bytes);
    e.copies[t].push_back(EmuBlock::Copy{dst, valid ? src : nullptr, bytes, e.commits[t]});
}
static inline void cp_async_commit(void) { emu_here->commits[emu_thread()]++; }
template <int N> static inline void cp_async_wait(void) {
    EmuBlock &e = *emu_here;
    int t = emu_thread();
    std::vector<EmuBlock::Copy> &c = e.copies[t], left;
    for (const EmuBlock::Copy &x : c) {
        if (x.group >= e.commits[t] - N) {
            left.push_back(x);
            continue;
        }
        if (x.src) memcpy(x.dst, x.src, x.bytes);
        else memset(x.dst, 0, x.bytes);
    }
    c.swap(left);
}
static inline void cp_async16(void *dst, const void *src, int valid) { emu_cp_async(dst, src, 16, valid); }
static inline void cp_async4(void *dst, const void *src, int valid) { emu_cp_async(dst, src, 4, valid); }
static inline void emu_copies_check(int t) {
    if (emu_here->copies[t].empty()) return;
    fprintf(stderr, "gpu/emu.h: block (%u,%u,%u) thread %d ended with %zu asynchronous copies not waited for\n",
            blockIdx.x, blockIdx.y, blockIdx.z, t, emu_here->copies[t].size());
    exit(1);
}

// Fiber t with its stack, to start at emu_fiber_start (apart: getcontext returns twice).
// The fibers' stacks are 128 KiB apart, so their tops would share cache sets and fall at the
// same offset of their pages: each starts 1088 bytes (17 cache lines) lower than the one
// before, in 32 steps (at most 33 KiB lower; the deepest a kernel here goes is about 6 KiB,
// measured over the conformance test and emulated training runs). An emulated run is about
// a fifth faster so.
__attribute__((noinline)) static void emu_fiber_init(int t) {
    EmuBlock &e = *emu_here;
    e.stack[t].resize(1 << 17);
    getcontext(&e.start[t]);
    e.start[t].uc_stack.ss_sp = e.stack[t].data();
    e.start[t].uc_stack.ss_size = e.stack[t].size() - (size_t)(t % 32) * 1088;
    e.start[t].uc_link = nullptr;
    makecontext(&e.start[t], emu_fiber_start, 0);
}

// Runs fiber t until its next barrier or its end (apart, so that no local of the scheduler's
// loop lives across the jump).
__attribute__((noinline)) static void emu_resume(int t) {
    EmuBlock &e = *emu_here;
    e.current = t;
    if (!emu_setjmp(e.scheduler)) {
        if (e.state[t] == EMU_GO || e.made[t]) {   // at a barrier, or parked
            emu_jump(e.at[t].jb);
        } else {
            e.made[t] = 1;
            setcontext(&e.start[t]);
        }
    }
}

// Warp w's threads (w0 .. w1-1), each that may run, to its next barrier or its end, in
// emu_order; again while they all (those not ended) then wait at __syncwarp, let through it.
// So a warp runs as far as it can before the next one starts, the order of warps in which a
// race between them shows (the two orders of the tests, one warp first or last).
static inline void emu_run_warp(int w0, int w1, dim3 block) {
    EmuBlock &e = *emu_here;
    for (;;) {
        for (int s = w0; s < w1; s++) {
            int t = emu_descending() ? w1 - 1 - (s - w0) : s;
            if (e.state[t] != EMU_NEW && e.state[t] != EMU_GO) continue;
            threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
            emu_resume(t);
        }
        int waiting = 0, stopped = 0;
        for (int t = w0; t < w1; t++) {
            waiting += e.state[t] == EMU_AT_WARP;
            stopped += e.state[t] != EMU_AT_WARP && e.state[t] != EMU_ENDED;
        }
        if (!waiting || stopped) return;
        for (int t = w0; t < w1; t++)
            if (e.state[t] == EMU_AT_WARP) e.state[t] = EMU_GO;
    }
}

// After every warp has run as far as it can: lets the block through __syncthreads when every
// thread waits there and returns 1; returns 0 when every thread has ended; else (some ended
// while others wait, or a warp's threads wait at different barriers) stops the program.
static inline int emu_release(dim3 b, int n) {
    EmuBlock &e = *emu_here;
    int ended = 0, at_block = 0;
    for (int t = 0; t < n; t++) {
        ended += e.state[t] == EMU_ENDED;
        at_block += e.state[t] == EMU_AT_BLOCK;
    }
    if (ended == n) return 0;
    if (at_block == n) {
        for (int t = 0; t < n; t++) e.state[t] = EMU_GO;
        return 1;
    }
    fprintf(stderr, "gpu/emu.h: block (%u,%u,%u): %d threads ended, %d wait at __syncthreads, %d at __syncwarp: "
            "the barriers can never all be met\n", b.x, b.y, b.z, ended, at_block, n - ended - at_block);
    exit(1);
}

// Runs body(arg) as every thread of every block of the grid: the first block's threads as
// fibers, and so the others' too if a thread of the first reached a barrier; else one after
// another on this stack.
static inline void emu_run(dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *arg) {
    if (!emu_here) emu_here = emu_owner.block = new EmuBlock();
    EmuBlock &e = *emu_here;
    int n = (int)(block.x * block.y * block.z);
    e.fibers = 1;
    e.barriers = 0;
    e.swap.assign(n, 0.0f);
    e.mma.assign((size_t)(n + WARP_SIZE - 1) / WARP_SIZE * 3 * 256, 0.0f);
    e.copies.assign(n, {});
    e.commits.assign(n, 0);
    if ((int)e.made.size() < n) {   // (never fewer: the fibers beyond n live on)
        e.start.resize(n);
        e.at.resize(n);
        e.stack.resize(n);
        e.made.resize(n, 0);
    }
    e.body = body;
    e.arg = arg;
    gridDim = grid;
    blockDim = block;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = dim3(bx, by, bz);
                if (!e.fibers) {
                    for (int s = 0; s < n; s++) {
                        int t = emu_descending() ? n - 1 - s : s;
                        threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
                        body(arg);
                        emu_copies_check(t);
                    }
                    continue;
                }
                e.shared.assign((smem + sizeof(float) - 1) / sizeof(float), NAN);   // (exactly: ASan sees past it)
                for (int t = 0; t < n; t++)
                    if (!e.made[t]) emu_fiber_init(t);
                e.state.assign(n, EMU_NEW);   // each block's threads start anew
                int warps = (n + WARP_SIZE - 1) / WARP_SIZE;
                do {   // one round: each warp as far as it can, to __syncthreads or its end
                    for (int s = 0; s < warps; s++) {
                        int w0 = (emu_descending() ? warps - 1 - s : s) * WARP_SIZE;
                        emu_run_warp(w0, w0 + WARP_SIZE < n ? w0 + WARP_SIZE : n, block);
                    }
                } while (emu_release(blockIdx, n));
                if (!e.barriers) e.fibers = 0;
            }
}

// CUDA's vectors, aligned as CUDA declares them (a misaligned access is a fault on a GPU;
// here UBSan's, in the sanitizer builds). Four floats: a 16-byte load or store.
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
// And of four unsigned ints: 16 bytes of any data.
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
// And of two: 8 bytes (four bf16 values).
struct alignas(8) uint2 {
    unsigned x, y;
};
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }

// bf16 as the GPU's __nv_bfloat16: a float rounded to nearest even (NaN kept a quiet NaN).
struct __nv_bfloat16 {
    uint16_t bits;
};
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((uint32_t)h.bits << 16); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }

// The warp matrix products (CUDA's nvcuda::wmma) of 16 x 16 x 16 tiles: bf16 operands, float32
// sums. Each fragment is spread over the warp's 32 threads as on sm_80 and sm_90 (two of
// mma.sync's 16 x 8 tiles side by side): element e of lane L at row L / 4 + 8 ((e / 2) % 2)
// and column 2 (L % 4) + e % 2 + 8 (e / 4), the layout the kernels' element-wise code assumes
// (gpu/attn_mma.h) and checks on a GPU; every kind of fragment here, matrix_b's and
// col_major's too, holds its tile so (the GPU's own layouts of those, which the kernels never
// read element by element, may differ). A product gathers the warp's fragments into shared
// scratch between two warp barriers, each lane then making its own 8 sums, each its tile's
// c plus the 16 products a b in k order: every lane of the warp must reach it, as on a GPU.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static constexpr int num_elements = 8;
    T x[8];
};
static inline int emu_lane(void) { return (int)threadIdx.x % WARP_SIZE; }
static inline int emu_frag_row(int e) { return emu_lane() / 4 + 8 * (e / 2 % 2); }
static inline int emu_frag_col(int e) { return emu_lane() % 4 * 2 + e % 2 + 8 * (e / 4); }
static inline float emu_value(float x) { return x; }
static inline float emu_value(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class Use, class T, class L> static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, float v) {
    for (int e = 0; e < 8; e++) f.x[e] = (T)v;
}
template <class Use, class L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, float v) {
    for (int e = 0; e < 8; e++) f.x[e] = __float2bfloat16(v);
}
template <class Use, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p,
                                    unsigned ldm) {
    const bool col = std::is_same<L, col_major>::value;
    emu_aligned(p, 32, ldm * sizeof *p, "a warp matrix load");
    for (int e = 0; e < 8; e++) {
        int r = emu_frag_row(e), c = emu_frag_col(e);
        f.x[e] = col ? p[c * ldm + r] : p[r * ldm + c];
    }
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                                    layout_t l) {
    emu_aligned(p, 32, ldm * sizeof *p, "a warp matrix load");
    for (int e = 0; e < 8; e++) {
        int r = emu_frag_row(e), c = emu_frag_col(e);
        f.x[e] = l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
    }
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                                     layout_t l) {
    emu_aligned(p, 32, ldm * sizeof *p, "a warp matrix store");
    for (int e = 0; e < 8; e++) {
        int r = emu_frag_row(e), c = emu_frag_col(e);
        (l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[e];
    }
}
// This lane's elements of fragment f into its warp's 16 x 16 tile t.
template <class F> static inline void emu_spread(float *t, const F &f) {
    for (int e = 0; e < 8; e++) t[emu_frag_row(e) * 16 + emu_frag_col(e)] = emu_value(f.x[e]);
}
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    float *t = emu_here->mma.data() + (size_t)threadIdx.x / WARP_SIZE * 3 * 256, *ta = t, *tb = t + 256, *tc = t + 512;
    emu_spread(ta, a);
    emu_spread(tb, b);
    emu_spread(tc, c);
    __syncwarp();
    for (int e = 0; e < 8; e++) {
        int r = emu_frag_row(e), col = emu_frag_col(e);
        float s = tc[r * 16 + col];
        for (int k = 0; k < 16; k++) s += ta[r * 16 + k] * tb[k * 16 + col];
        d.x[e] = s;
    }
    __syncwarp();   // (every lane has read the scratch before the next product writes it)
}
}  // namespace wmma
}  // namespace nvcuda

// The opt-in for more than 48 KiB of dynamic shared memory a block, as a GPU checks it: a
// launch asking more than its kernel was opted into (48 KiB without), or an opt-in past an
// H100's 227 KiB, fails. Kept per host thread (each emulated device launches from its own,
// setting the attribute before the launch).
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum { EMU_SMEM_DEFAULT = 48 * 1024, EMU_SMEM_MOST = 227 * 1024 };
struct EmuOptIn {
    const void *kernel;
    int bytes;
};
static thread_local std::vector<EmuOptIn> emu_optins;
static inline int emu_smem_allowed(const void *kernel) {
    for (const EmuOptIn &o : emu_optins)
        if (o.kernel == kernel) return o.bytes > EMU_SMEM_DEFAULT ? o.bytes : EMU_SMEM_DEFAULT;
    return EMU_SMEM_DEFAULT;
}
enum cudaDeviceAttr {
    cudaDevAttrMaxSharedMemoryPerBlockOptin,
    cudaDevAttrComputeCapabilityMajor,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor
};
template <class F> static inline cudaError_t cudaFuncSetAttribute(F f, cudaFuncAttribute, int bytes) {
    if (bytes < 0 || bytes > EMU_SMEM_MOST) return 1;   // (cudaErrorInvalidValue)
    for (EmuOptIn &o : emu_optins)
        if (o.kernel == (const void *)f) {
            o.bytes = bytes;
            return cudaSuccess;
        }
    emu_optins.push_back({(const void *)f, bytes});
    return cudaSuccess;
}
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    if (a == cudaDevAttrComputeCapabilityMajor) *v = 9;   // (an H100's)
    else *v = a == cudaDevAttrMaxSharedMemoryPerMultiprocessor ? 228 * 1024 : 227 * 1024;
    return cudaSuccess;
}

// kernel<<<grid, block, smem, stream>>>(args) as GPU_LAUNCH(kernel, grid, block, smem)(args).
template <class... P> struct EmuLaunch {
    dim3 grid, block;
    size_t smem;
    void (*kernel)(P...);
    template <class... A> void operator()(A... a) const {
        auto run = [](void *p) {
            auto *c = static_cast<std::pair<void (*)(P...), std::tuple<A...>> *>(p);
            std::apply([&](A... x) { c->first(x...); }, c->second);
        };
        if (smem > (size_t)emu_smem_allowed((const void *)kernel)) {
            fprintf(stderr, "emulated GPU: a launch asks %zu bytes of dynamic shared memory, more than its kernel "
                    "may have (%d: cudaFuncSetAttribute's opt-in, or 48 KiB): a GPU refuses it\n", smem,
                    emu_smem_allowed((const void *)kernel));
            exit(1);
        }
        std::pair<void (*)(P...), std::tuple<A...>> call(kernel, std::tuple<A...>(a...));
        emu_run(grid, block, smem, run, &call);
    }
};
template <class... P> EmuLaunch<P...> emu_launch(dim3 grid, dim3 block, size_t smem, void (*kernel)(P...)) {
    return EmuLaunch<P...>{grid, block, smem, kernel};
}
#define GPU_LAUNCH(kernel, grid, block, smem) emu_launch(grid, block, smem, kernel)
#define GPU_SHARED(type, name) type *name = (type *)emu_shared()   // (on 128 bytes: EmuAligned)

#endif
