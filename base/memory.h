// base/memory.h: the per-device allocator. Every buffer meshmoe uses comes from here,
// tagged with what it holds, so that each device's live and peak bytes are measured, not
// estimated (the dry-run planner walks the same allocations). A device is the thread that owns the allocator; the
// thread's current device is set with mem_set_device().
#ifndef MESHMOE_MEMORY_H
#define MESHMOE_MEMORY_H
#include <stddef.h>
#include <string.h>

typedef enum {
    MEM_PARAMS,       // model weights (and non-trained state such as the routing bias)
    MEM_GRADS,        // gradients
    MEM_OPTIMIZER,    // AdamW moments, adafactor state
    MEM_ACTIVATIONS,  // activations saved by the forward pass for the backward pass
    MEM_TEMP,         // temporaries that live inside one layer call
    MEM_COMM,         // buffers of collectives
    MEM_WORKSPACE,    // GPU-only scratch a library needs (cuBLAS's workspace); 0 bytes on the CPU
    MEM_NTAGS
} MemTag;

extern const char *const MEM_TAG_NAMES[MEM_NTAGS];

typedef struct MemBlock MemBlock;   // one live allocation's record (kept on the host, base/memory.c)

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
    size_t net_sent[8], net_recv[8];  // of those, the bytes that crossed between processes
                                      // (base/span.c says which device counts them)
    // Host memory, the device's second memory kind (offload): counted per tag on its own,
    // never in live_total / peak_total nor against capacity; and the bytes copied each way.
    size_t host_live[MEM_NTAGS], host_peak[MEM_NTAGS];
    size_t host_live_total, host_peak_total;
    size_t to_host_bytes, to_device_bytes;
    MemBlock *head;                   // live blocks, most recent first
    size_t temp_hw;                   // highest live MEM_TEMP bytes since mem_temp_hw_reset
    // The planner and the memory trace (report/plan.h): what the device is doing now (a
    // phase such as "forward layer 3"), where the total peak was reached, and a hook called
    // after every allocation (+1), free (-1) and phase change (0).
    char phase[48];
    char peak_phase[48];              // the phase of the allocation that made peak_total
    const char *peak_name;            // and that buffer's name
    void (*hook)(struct Device *d, int sign, MemTag tag, size_t bytes, const char *name);
    void *hook_ctx;
    struct FreshGrads *fresh;         // gradient blocks known to hold zeros (base/fresh.h)
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
// The same, counted the same, without the zeroing: for a buffer whose every element that
// is read is written first (a product's output, a gather's rows). Its other bytes are
// undefined (0xff in the sanitizer builds, so that a read before a write shows as NaN).
void *mem_alloc_uninit(MemTag tag, size_t bytes, const char *name);
float *mem_floats_uninit(MemTag tag, size_t n, const char *name);
void mem_free(void *p);
// Unrolled layers (scan_layers=false, model/model.c), on the current device: the live
// MEM_TEMP bytes now, and their high-water mark since mem_temp_hw_reset (a layer's set of
// temporaries is the high-water minus the live bytes at its start); mem_hold(p) marks
// buffer p to be freed by the next mem_release_held(), which frees every marked buffer.
size_t mem_temp_live(void);
void mem_temp_hw_reset(void);
size_t mem_temp_hw(void);
void mem_hold(void *p);
void mem_release_held(void);
// The bytes of this host's memory that this process's devices may hold: its physical memory
// (MESHMOE_HOST_MEMORY, in bytes, stands in for it), shared out equally among the run's
// processes on this host (./train_mpi; each runs a slice of as many devices). *nproc gets
// the number of processes sharing it.
size_t mem_host_share(int *nproc);
// What mem_host_share's bytes are, for a message: "this host's 1.86 GiB of memory", or
// "1.86 GiB, this process's 1/2 of this host's memory (2 processes of the run share it)".
const char *mem_host_share_text(char *buf, size_t cap);
// The same in the device's host memory (pinned host RAM next to the accelerator).
void *mem_alloc_host(MemTag tag, size_t bytes, const char *name);
// Move a buffer to host memory / back to the device: a new buffer of the same tag, name and
// size on the other side, the bytes copied (counted in to_host_bytes / to_device_bytes), the
// old one freed. Returns the new pointer; a buffer already on that side is returned as is.
// The copy is the backend's offload copy (on a GPU asynchronous: kernels/kernels.h
// MemoryOps.to_host_async); the host reads moved data only through mem_download.
void *mem_to_host(void *p);
void *mem_to_device(void *p);
int mem_is_host(const void *p);
// Copy between two whole allocator buffers (pointers as returned by the allocator); bytes
// that cross between host and device are counted. Skipped in a dry run like mem_copy.
void mem_transfer(void *dst, const void *src, size_t bytes);
// The buffer that holds address addr (anywhere inside it): its name, tag name, addr's offset
// into it and its size; 0 when no live buffer holds it, or when the records stay locked
// (it never blocks on their lock, only tries it for a while: the strict mode's fault
// handler calls it, perhaps while another device's handler holds it).
int mem_describe_address(const void *addr, const char **name, const char **tag, size_t *offset, size_t *bytes);
// The name a buffer was allocated with, and its size in bytes.
const char *mem_name(const void *p);
size_t mem_size(const void *p);
// Dry run (dry_run=true, the planner): allocations are counted exactly as in a real run,
// but large buffers get address space without memory behind it (untouched pages cost
// nothing) and the compute kernels return at once when mem_dry() is set, so nothing
// touches them. Small buffers (< 64 KiB) are real: routing counts and plans live there.
void mem_set_dry(int on);
int mem_dry(void);
// 1 if p lies in a dry run's void (a large buffer that holds nothing; base/memory.c).
int mem_in_void(const void *p);
// Zero n bytes of device data at p, copy n bytes of device data (both on the calling
// device), by the backend's memory operations (kern()->mem: memset and memcpy on the CPU);
// skipped in a dry run (nothing to move).
void mem_zero(void *p, size_t n);
void mem_copy(void *dst, const void *src, size_t n);
// The host's one way into and out of device data (any pointer into a device buffer, and host
// memory of its own): host bytes copied to the device (the backend's to_device), device bytes
// copied to the host (the backend's to_host: on a GPU after the work queued before it, the
// one synchronisation a layer asks for). Not skipped in a dry run: the small buffers there are
// real and hold what the host reads back (routing counts); the void's pages read as zeros.
void mem_upload(void *dst, const void *host, size_t n);
void mem_download(void *host, const void *src, size_t n);
// A host copy of n bytes of device data (malloc'd: the caller frees it), by mem_download.
void *mem_host_copy(const void *src, size_t n);
// Name the phase the device is in (printf format), for the planner and the memory trace.
void mem_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The k largest live buffers (name, tag, bytes), largest first; returns how many.
int mem_largest_live(const Device *d, int k, const char **name, MemTag *tag, size_t *bytes);
// Reset the peak counters to the live figures and the transfer counts to zero (e.g. to
// measure one step).
void mem_reset_peak(Device *d);
// Start measuring one phase (a forward pass, an eval, the init): the mark counters restart
// from the live figures and follow the peak until the next reset; the step's peak is untouched.
void mem_mark_reset(Device *d);
// Print the device's peak per tag and total.
void mem_print_report(const Device *d);
// Human-readable byte count into buf ("12.3 MiB").
const char *mem_fmt(size_t bytes, char *buf, size_t cap);

#endif
