// kernels/cpu/memory.c: the CPU backend's device memory (kernels/kernels.h MemoryOps). A CPU
// device's memory is the host's, and so is its offload memory: both from kernels/cpu/hostmem.c
// (which keeps freed large blocks for reuse), and every copy, whichever way, is a memcpy.
#include "kernels/kernels.h"
#include "kernels/cpu/hostmem.h"
#include <string.h>

static void *alloc(size_t bytes) { return host_alloc(bytes); }
static void release(void *p, size_t bytes) { host_free(p, bytes); }
// Large buffers (a step's gradient) are cleared in ZERO_PARTS contiguous parts shared by
// the device's OpenMP threads: where one core cannot use the memory's whole bandwidth it is
// faster (an Intel Xeon, Emerald Rapids: 205 MiB in 21.6-22.9 ms on one thread, 11.0-11.5
// on two). A build without OpenMP clears the parts in turn.
enum { ZERO_SPLIT = 4 << 20, ZERO_PARTS = 16 };   // bytes from which the threads share it; parts
static void zero(void *p, size_t bytes) {
    int parts = bytes >= ZERO_SPLIT ? ZERO_PARTS : 1;
    #pragma omp parallel for schedule(static) if (parts > 1)
    for (int i = 0; i < parts; i++) {
        size_t a = bytes * (size_t)i / (size_t)parts, b = bytes * (size_t)(i + 1) / (size_t)parts;
        memset((char *)p + a, 0, b - a);
    }
}
static void fill(void *p, int byte, size_t bytes) { memset(p, byte, bytes); }
static void copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

const MemoryOps memory_cpu = {
    .alloc = alloc,
    .free = release,
    .alloc_host = alloc,
    .free_host = release,
    .zero = zero,
    .fill = fill,
    .copy = copy,
    .to_host = copy,
    .to_device = copy,
};
