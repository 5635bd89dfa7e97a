// kernels/cpu/hostmem.h: host memory behind the CPU backend's device buffers (kernels/cpu/hostmem.c
// says how it is kept; kernels/cpu/memory.c hands it to the allocator).
#ifndef MESHMOE_KERNELS_CPU_HOSTMEM_H
#define MESHMOE_KERNELS_CPU_HOSTMEM_H
#include <stddef.h>

void *host_alloc(size_t bytes);           // 64-byte aligned; a kept block of this size if there is one
void host_free(void *raw, size_t bytes);  // bytes: what host_alloc was asked for

#endif
