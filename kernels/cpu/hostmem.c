// kernels/cpu/hostmem.c: how the C library's malloc treats the device buffers' host memory.
//
// The simulated devices allocate and free their activations and temporaries (megabytes
// each) many times per step. By default glibc returns a freed large block to the kernel
// (munmap, or trimming the heap) and the next allocation of the same size gets fresh pages:
// a page fault and a page cleared for every 4 KiB, every time. Measured on mixtral-small
// (3 steps): 1.83 million page faults and 28.2 s of CPU; with the settings below 0.29
// million and 25.1 s. Freed blocks up to 32 MiB (glibc's largest mmap threshold) stay
// in the process and are reused (larger ones are kept by the allocator itself,
// host_free below). This changes no number the trainer computes or reports:
// device memory is counted by the tagged allocator (base/memory.c), not by the host's.
//
// Every thread allocates from the one heap (M_ARENA_MAX 1). glibc gives each new thread,
// so each simulated device but the first, an arena of its own: heaps of 64 MiB that are
// unmapped whole as soon as their blocks are all free, whatever the trim threshold says, so
// a device's activations took fresh pages again every step. mixtral-small on data=2
// (max_target_length=256, batch 4 per device) faulted 33,600 pages a step that way and
// none in one arena, and its step took 1708-1713 ms against 1774-1797 (tests/scaling.sh,
// two runs of each build in turn, AMD Zen 4, 2026-11-29). The devices' threads then share
// one lock for their allocations, which are few (packing buffers, a layer's activations),
// and the process holds a little more memory: peak RSS 2.13 GB against 2.09 on that run,
// 3.18 against 3.07 on 8 devices (fsdp=4 x data=2).
#include "kernels/cpu/hostmem.h"
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void hostmem_keep_freed_blocks(void) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);   // blocks below 32 MiB come from the heap ...
    mallopt(M_TRIM_THRESHOLD, 1 << 30);    // ... and the heap keeps up to 1 GiB of free space
    mallopt(M_ARENA_MAX, 1);               // ... one heap for every thread
}

// Host blocks of 32 MiB and more: glibc maps each one afresh and unmaps it on free (32 MiB
// is its largest mmap threshold, above), so each use of such a buffer would pay a
// page fault and a cleared page per 4 KiB: a step's all-reduce staging, every step. The
// last few freed are kept here and handed to the next request of the same size. Only the
// host's memory is reused: the device's figures count each allocation as before.
#define KEEP_MIN ((size_t)32 << 20)
#define KEEP_BLOCKS 8
#define KEEP_BYTES ((size_t)1 << 30)
static struct { void *raw; size_t bytes; } kept[KEEP_BLOCKS];
static int nkept;
static size_t kept_bytes;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

void *host_alloc(size_t bytes) {
    if (bytes >= KEEP_MIN) {
        pthread_mutex_lock(&kept_lock);
        for (int i = nkept - 1; i >= 0; i--)
            if (kept[i].bytes == bytes) {
                void *raw = kept[i].raw;
                kept_bytes -= bytes;
                kept[i] = kept[--nkept];
                pthread_mutex_unlock(&kept_lock);
                return raw;
            }
        pthread_mutex_unlock(&kept_lock);
    }
    return aligned_alloc(64, bytes);
}

// Keep a large block (dropping the oldest kept ones to make room), or free it.
void host_free(void *raw, size_t bytes) {
    if (bytes < KEEP_MIN || bytes > KEEP_BYTES) { free(raw); return; }
    pthread_mutex_lock(&kept_lock);
    while (nkept == KEEP_BLOCKS || kept_bytes + bytes > KEEP_BYTES) {
        free(kept[0].raw);
        kept_bytes -= kept[0].bytes;
        memmove(kept, kept + 1, sizeof kept[0] * (size_t)--nkept);
    }
    kept[nkept].raw = raw;
    kept[nkept++].bytes = bytes;
    kept_bytes += bytes;
    pthread_mutex_unlock(&kept_lock);
}
