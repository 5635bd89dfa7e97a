// sharding/memory.h: the per-device allocator. Every buffer meshmoe uses comes from here,
// tagged with what it holds, so that each device's live and peak bytes are measured, not
// estimated (DESIGN.md principle 1). A device is the thread that owns the allocator; the
// thread's current device is set with mem_set_device().
#ifndef MESHMOE_MEMORY_H
#define MESHMOE_MEMORY_H
#include <stddef.h>

typedef enum {
    MEM_PARAMS,       // model weights (and non-trained state such as the routing bias)
    MEM_GRADS,        // gradients
    MEM_OPTIMIZER,    // AdamW moments
    MEM_ACTIVATIONS,  // activations saved by the forward pass for the backward pass
    MEM_TEMP,         // temporaries that live inside one layer call
    MEM_COMM,         // buffers of collectives
    MEM_NTAGS
} MemTag;

extern const char *const MEM_TAG_NAMES[MEM_NTAGS];

typedef struct MemBlock MemBlock;   // one live allocation (header in front of the data)

typedef struct Device {
    int id;
    size_t capacity;                  // bytes; 0 = unlimited (hbm_capacity)
    size_t live[MEM_NTAGS];           // bytes live now, per tag
    size_t peak[MEM_NTAGS];           // highest live bytes seen, per tag
    size_t live_total, peak_total;    // all tags together
    size_t at_peak[MEM_NTAGS];        // per-tag breakdown at the moment of peak_total
    long nallocs;                     // allocations made (for the planner)
    double flops;                     // floating-point operations done by this device's matmuls
    size_t comm_sent[8], comm_recv[8];// bytes sent / received, per kind of collective (CollKind)
    // Host memory, the device's second memory kind (offload): counted per tag on its own,
    // never in live_total / peak_total nor against capacity; and the bytes copied each way.
    size_t host_live[MEM_NTAGS], host_peak[MEM_NTAGS];
    size_t host_live_total, host_peak_total;
    size_t to_host_bytes, to_device_bytes;
    MemBlock *head;                   // live blocks, most recent first
} Device;

void device_init(Device *d, int id, size_t capacity);
// Frees every live block (end of run) and checks nothing leaked if asked to.
void device_release_all(Device *d);

// The device of the calling thread (a thread-local pointer).
void mem_set_device(Device *d);
Device *mem_device(void);

// A zeroed, 64-byte aligned buffer of `bytes`, charged to the current device under `tag`.
// `name` says what it is (shown by the out-of-memory message). Dies on out-of-memory.
void *mem_alloc(MemTag tag, size_t bytes, const char *name);
float *mem_floats(MemTag tag, size_t n, const char *name);
void mem_free(void *p);
// The same in the device's host memory (pinned host RAM next to the accelerator).
void *mem_alloc_host(MemTag tag, size_t bytes, const char *name);
// Move a buffer to host memory / back to the device: a new buffer of the same tag, name and
// size on the other side, the bytes copied (counted in to_host_bytes / to_device_bytes), the
// old one freed. Returns the new pointer; a buffer already on that side is returned as is.
void *mem_to_host(void *p);
void *mem_to_device(void *p);
int mem_is_host(const void *p);
// memcpy between two allocator buffers; bytes that cross between host and device are counted.
void mem_copy(void *dst, const void *src, size_t bytes);
// The name a buffer was allocated with, and its size in bytes.
const char *mem_name(const void *p);
size_t mem_size(const void *p);
// Reset the peak counters to the live figures and the transfer counts to zero (e.g. to
// measure one step).
void mem_reset_peak(Device *d);
// Print the device's peak per tag and total.
void mem_print_report(const Device *d);
// Human-readable byte count into buf ("12.3 MiB").
const char *mem_fmt(size_t bytes, char *buf, size_t cap);

#endif
