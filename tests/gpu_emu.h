// tests/gpu_emu.h: the part of CUDA that gpu/attention.cu and gpu/attn_tiles.cu use, run on
// the CPU, so that their kernels can be tested on a machine without a GPU
// (tests/test_gpu_attention.cpp). gpu/gpu.h includes it in place of the CUDA runtime when
// GPU_EMULATE is defined; nothing else does.
//
// A launch runs the grid's blocks one after another. A block's threads are fibers on the
// calling thread: each runs until it reaches __syncthreads or its end, then the next one
// runs, so no thread passes a barrier before every thread of its block has reached it.
// Between two barriers the threads run one after another, in the order emu_order says
// (ascending or descending thread index): a kernel whose threads read what another thread
// writes between the same two barriers gives different results in the two orders, which is
// how the test finds such a race. Shared memory is one buffer per block, filled with NaNs
// before the block starts (a read of what no thread wrote shows); device memory is host
// memory; the stream is ignored. Every thread of a block must reach the same barriers
// (a block whose threads diverge at a barrier stops the program).
#ifndef MESHMOE_TESTS_GPU_EMU_H
#define MESHMOE_TESTS_GPU_EMU_H
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <tuple>
#include <utility>
#include <vector>

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum { cudaSuccess = 0, cudaErrorCudartUnloading = 4 };
static inline const char *cudaGetErrorString(cudaError_t) { return "emulated"; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define GPU_BACKEND_NAME "emulated"
#define GPU_HAVE_CUBLAS 0
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
inline dim3 threadIdx, blockIdx, blockDim, gridDim;
inline int emu_order = 0;   // 0: threads in ascending index between barriers, 1: descending

struct EmuBlock {
    std::vector<ucontext_t> start;        // each fiber's first entry
    struct Jump { jmp_buf jb; };
    std::vector<Jump> at;                 // where each fiber waits at a barrier
    std::vector<std::vector<char>> stack;
    std::vector<int> state;               // 0 not started, 1 waiting at a barrier, 2 ended
    jmp_buf scheduler;
    int current = 0, fibers = 0;
    void (*body)(void *) = nullptr;
    void *arg = nullptr;
    std::vector<float> shared;
};
inline EmuBlock emu_block;

// A fiber switch is _setjmp/_longjmp (no signal mask saved: no system call); ucontext only
// gives each fiber its stack and first entry.
static inline void __syncthreads(void) {
    EmuBlock &e = emu_block;
    if (!e.fibers) {
        fprintf(stderr, "gpu_emu: __syncthreads in a kernel launched without shared memory (run without fibers)\n");
        exit(1);
    }
    e.state[e.current] = 1;
    if (!_setjmp(e.at[e.current].jb)) _longjmp(e.scheduler, 1);
}
static inline void emu_fiber_start(void) {
    emu_block.body(emu_block.arg);
    emu_block.state[emu_block.current] = 2;
    _longjmp(emu_block.scheduler, 1);
}
static inline void *emu_shared(void) { return emu_block.shared.data(); }

// Runs fiber t until its next barrier or its end (apart, so that no local of the scheduler's
// loop lives across the jump).
__attribute__((noinline)) static void emu_resume(int t) {
    EmuBlock &e = emu_block;
    e.current = t;
    if (!_setjmp(e.scheduler)) {
        if (e.state[t] == 1) _longjmp(e.at[t].jb, 1);
        setcontext(&e.start[t]);
    }
}

// Runs body(arg) as every thread of every block of the grid. A launch without shared memory
// has no barriers to wait at (the kernels emulated here use dynamic shared memory where they
// use barriers): its threads run one after another on this stack.
static inline void emu_run(dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *arg) {
    EmuBlock &e = emu_block;
    int n = (int)(block.x * block.y * block.z);
    e.fibers = smem > 0;
    e.start.resize(n);
    e.at.resize(n);
    e.stack.resize(n);
    e.state.assign(n, 0);
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
                        int t = emu_order ? n - 1 - s : s;
                        threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
                        body(arg);
                    }
                    continue;
                }
                e.shared.assign(smem / sizeof(float) + 1, NAN);
                for (int t = 0; t < n; t++) {
                    e.stack[t].resize(1 << 17);
                    e.state[t] = 0;
                    getcontext(&e.start[t]);
                    e.start[t].uc_stack.ss_sp = e.stack[t].data();
                    e.start[t].uc_stack.ss_size = e.stack[t].size();
                    e.start[t].uc_link = nullptr;
                    makecontext(&e.start[t], emu_fiber_start, 0);
                }
                for (int finished = 0; finished < n;) {   // one round: every thread to its next barrier
                    int ended = 0, waiting = 0;
                    for (int s = 0; s < n; s++) {
                        int t = emu_order ? n - 1 - s : s;
                        if (e.state[t] == 2) continue;
                        threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
                        emu_resume(t);
                        if (e.state[t] == 2) ended++;
                        else waiting++;
                    }
                    if (ended && waiting) {
                        fprintf(stderr, "gpu_emu: block (%u,%u,%u): %d threads ended while %d wait at __syncthreads\n",
                                bx, by, bz, ended, waiting);
                        exit(1);
                    }
                    finished += ended;
                }
            }
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
        std::pair<void (*)(P...), std::tuple<A...>> call(kernel, std::tuple<A...>(a...));
        emu_run(grid, block, smem, run, &call);
    }
};
template <class... P> EmuLaunch<P...> emu_launch(dim3 grid, dim3 block, size_t smem, void (*kernel)(P...)) {
    return EmuLaunch<P...>{grid, block, smem, kernel};
}
#define GPU_LAUNCH(kernel, grid, block, smem) emu_launch(grid, block, smem, kernel)
#define GPU_SHARED(type, name) type *name = (type *)emu_shared()

#endif
