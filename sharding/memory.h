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
    size_t mark[MEM_NTAGS], mark_total; // highest live bytes since mem_mark_reset: one phase's peak
    long nallocs;                     // allocations made (for the planner)
    double flops;                     // floating-point operations done by this device's matmuls
    size_t comm_sent[8], comm_recv[8];// bytes sent / received, per kind of collective (CollKind)
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
// The name a buffer was allocated with.
const char *mem_name(const void *p);
// Reset the peak counters to the live figures (e.g. to measure one step's peak).
void mem_reset_peak(Device *d);
// Start measuring one phase (a forward pass, an eval, the init): the mark counters restart
// from the live figures and follow the peak until the next reset; the step's peak is untouched.
void mem_mark_reset(Device *d);
// Print the device's peak per tag and total.
void mem_print_report(const Device *d);
// Human-readable byte count into buf ("12.3 MiB").
const char *mem_fmt(size_t bytes, char *buf, size_t cap);

#endif
