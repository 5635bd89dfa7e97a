// base/hostmem.h: host memory behind the device buffers (base/hostmem.c says how it is kept).
#ifndef MESHMOE_BASE_HOSTMEM_H
#define MESHMOE_BASE_HOSTMEM_H
#include <stddef.h>

void *host_alloc(size_t bytes);           // 64-byte aligned; a kept block of this size if there is one
void host_free(void *raw, size_t bytes);  // bytes: what host_alloc was asked for

#endif
