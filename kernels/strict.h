// kernels/strict.h: the strict mode (device=cpu_strict), the CPU kernels over device memory
// that host code cannot touch. What a GPU would do to a host access of device data (a crash,
// or garbage read) happens here on any machine, at once, with the buffer named.
//
// Device buffers are carved from one reservation of address space that is PROT_NONE
// whenever no device thread is inside a kernel or one of the backend's memory operations
// (zero, fill, copy, to_host, to_device): the first thread in opens it read-write, the last
// one out closes it (mprotect, under a mutex). A host read or write of a device buffer
// anywhere else faults, and the fault handler prints
//   meshmoe: device=cpu_strict: host code read device memory at 0x... (buffer "NAME", TAG,
//   offset N of M bytes) outside a kernel or the backend's copies
// with a backtrace, and the process exits with status 1. Host (offload) memory is the
// host's, open always. The limit: the memory is one region for every device thread, so
// while one device is inside a kernel, another device's host access is not caught: a
// 1-device run catches every one, a multi-device run the ones that fall between kernels.
#ifndef MESHMOE_KERNELS_STRICT_H
#define MESHMOE_KERNELS_STRICT_H
#include "kernels/kernels.h"

// Who owns an address: the buffer's name, tag, the offset into it and its size; 0 when
// unknown. Called from the fault handler, so it must not wait on a lock (base/memory.c's
// mem_describe_address tries its lock once).
typedef int (*StrictDescribe)(const void *addr, const char **name, const char **tag, size_t *offset, size_t *bytes);

// The strict mode over the CPU backend `inner` (backend_cpu or its plain twin), with its
// memory and fault handler: once, before the devices start. Dies with a message when no
// address space can be reserved.
const Backend *strict_backend(const Backend *inner, StrictDescribe describe);

#endif
