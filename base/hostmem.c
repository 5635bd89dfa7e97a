// base/hostmem.c: how the C library's malloc treats the device buffers' host memory.
//
// The simulated devices allocate and free their activations and temporaries (megabytes
// each) many times per step. By default glibc returns a freed large block to the kernel
// (munmap, or trimming the heap) and the next allocation of the same size gets fresh pages:
// a page fault and a page cleared for every 4 KiB, every time. Measured on mixtral-small
// (3 steps): 1.83 million page faults and 28.2 s of CPU; with the settings below 0.29
// million and 25.1 s. Freed blocks up to 32 MiB (glibc's largest mmap threshold) stay
// in the process and are reused (larger ones are kept by the allocator itself,
// base/memory.c:raw_free). This changes no number the trainer computes or reports:
// device memory is counted by the tagged allocator (base/memory.c), not by the host's.
#include <malloc.h>

__attribute__((constructor)) static void hostmem_keep_freed_blocks(void) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);   // blocks below 32 MiB come from the heap ...
    mallopt(M_TRIM_THRESHOLD, 1 << 30);    // ... and the heap keeps up to 1 GiB of free space
}
