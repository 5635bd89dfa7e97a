// kernels/cpu/memory.c: the CPU backend's device memory (kernels/kernels.h MemoryOps). A CPU
// device's memory is the host's, and so is its offload memory: both from kernels/cpu/hostmem.c
// (which keeps freed large blocks for reuse), and every copy, whichever way, is a memcpy.
#include "kernels/kernels.h"
#include "kernels/cpu/hostmem.h"
#include <string.h>

static void *alloc(size_t bytes) { return host_alloc(bytes); }
static void release(void *p, size_t bytes) { host_free(p, bytes); }
static void zero(void *p, size_t bytes) { memset(p, 0, bytes); }
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
