// kernels/strict.h: the strict mode (device=cpu_strict), the CPU kernels over device memory
// that host code cannot touch. What a GPU would do to a host access of device data (a crash,
// or garbage read) happens here on any machine, at once, with the buffer named.
//
// Device buffers are carved from one reservation of address space, a region per device,
// each PROT_NONE whenever no thread is inside one of its device's kernels or one of the
// backend's memory operations on it (zero, fill, copy, to_host, to_device): the first
// thread in opens it read-write, the last one out closes it (mprotect, under the region's
// mutex). A host read or write of a device buffer anywhere else faults, and the fault
// handler prints
//   meshmoe: device=cpu_strict: host code read device memory at 0x... (buffer "NAME", TAG,
//   offset N of M bytes) outside a kernel or the backend's copies
// after a backtrace, and the process exits with status 1. Host (offload) memory is the
// host's, open always. The limits: a device's region is open to every thread while one of
// its kernels runs, so a host access of that device's data made at that moment by another
// thread (a prefetch helper of the same device) is not caught; and devices beyond the 64th
// share regions (device d uses region d mod 64), each open while either one computes.
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

// The calling thread works for device `device` (-1: none): its buffers come from, and its
// kernels open, that device's region (base/memory.c:mem_set_device calls it; without the
// strict mode it only records the number).
void strict_bind_device(int device);

#endif
