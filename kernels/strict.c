// kernels/strict.c: the strict mode (kernels/strict.h): its memory, carved from one
// reservation, a region per device; the opening and closing of a device's region around
// each of its kernels (a watcher, kernels/watch.h) and every memory operation; and the
// fault handler that names the buffer.
#include "kernels/strict.h"
#include "kernels/watch.h"
#include "kernels/cpu/hostmem.h"   // offload memory: the host's
#include "core/common.h"
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

// The reservation: 1 TiB of address space without memory behind it (MAP_NORESERVE; a page
// is backed when first written), less where the system refuses that much, down to 4 GiB.
#define RESERVE_MOST ((size_t)1 << 40)
#define RESERVE_LEAST ((size_t)1 << 32)
#define LINE 64   // every buffer on a 64-byte boundary, as the CPU backend's
// The memory is asked for in huge pages (2 MiB, where the kernel gives them: madvise), and
// opened and closed in whole huge pages: an mprotect then changes one entry per 2 MiB
// instead of one per 4 KiB page, which is most of its cost (measured: ~50x faster steps).
#define HUGE ((size_t)2 << 20)

static char *base;
static size_t reserved;              // bytes reserved: REGIONS regions of region_bytes
static size_t region_bytes;
static const Backend *cpu;           // the kernels (backend_cpu or its plain twin)
static StrictDescribe describe;

// A freed buffer is kept for the next request of exactly its size, so that a training loop,
// which asks for the same sizes every step, reuses its buffers and the bump stops growing.
typedef struct { size_t bytes; char **free; size_t n, cap; } SizeClass;

// One region per device: its buffers, and the threads inside one of its kernels or memory
// operations now (the region is open while that is not 0). Devices beyond REGIONS share
// regions (device d uses region d mod REGIONS), and with them the limit of a shared region.
#define REGIONS 64
typedef struct {
    size_t used, top;        // the bump: bytes handed out; [0, top): its pages in use, whole huge pages
    int inside;
    pthread_mutex_t lock;
    SizeClass *classes;
    size_t nclasses, classes_cap;
} Region;
static Region regions[REGIONS];
static _Thread_local int bound;   // 1 + the region of the device the calling thread works for; 0: region 0

static Region *own_region(void) { return &regions[bound ? bound - 1 : 0]; }
static char *start_of(const Region *g) { return base + (size_t)(g - regions) * region_bytes; }
// The region that holds p, or NULL for host memory.
static Region *region_of(const void *p) {
    const char *c = p;
    return base && c >= base && c < base + reserved ? &regions[(size_t)(c - base) / region_bytes] : NULL;
}

void strict_bind_device(int device) { bound = device < 0 ? 0 : 1 + device % REGIONS; }

// The pages above top stay PROT_NONE from the mmap on, and an mprotect costs by the range it
// walks. The caller holds the region's lock.
static void protect_range(Region *g, size_t from, size_t to, int prot) {
    if (to > from && mprotect(start_of(g) + from, to - from, prot) != 0)
        die("device=cpu_strict: mprotect of the device memory failed");
}
static void open_region(Region *g) {
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    if (g->inside++ == 0) protect_range(g, 0, g->top, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&g->lock);
}
static void close_region(Region *g) {
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    if (--g->inside == 0) protect_range(g, 0, g->top, PROT_NONE);
    pthread_mutex_unlock(&g->lock);
}

// ---- the watcher: a kernel runs with its device's region open (its operands are that
// device's buffers, or host memory)
static void enter(int family) {
    (void)family;
    open_region(own_region());
}
static void leave(int family, double flops, double bytes) {
    (void)family, (void)flops, (void)bytes;
    close_region(own_region());
}

// ---- memory (kernels/kernels.h MemoryOps)
static SizeClass *class_of(Region *g, size_t bytes) {   // the caller holds the region's lock
    for (size_t i = 0; i < g->nclasses; i++)
        if (g->classes[i].bytes == bytes) return &g->classes[i];
    if (g->nclasses == g->classes_cap) {
        g->classes_cap = g->classes_cap ? 2 * g->classes_cap : 64;
        g->classes = realloc(g->classes, g->classes_cap * sizeof *g->classes);
        if (!g->classes) die("device=cpu_strict: host out of memory for the free lists");
    }
    g->classes[g->nclasses] = (SizeClass){bytes, NULL, 0, 0};
    return &g->classes[g->nclasses++];
}

static void *alloc(size_t bytes) {
    size_t rounded = (bytes + LINE - 1) & ~(size_t)(LINE - 1);
    Region *g = own_region();
    pthread_mutex_lock(&g->lock);
    SizeClass *k = class_of(g, rounded);
    char *p = NULL;
    if (k->n) p = k->free[--k->n];
    else if (rounded <= region_bytes - g->used) {
        p = start_of(g) + g->used;
        g->used += rounded;
        size_t new_top = (g->used + HUGE - 1) / HUGE * HUGE;
        if (g->inside) protect_range(g, g->top, new_top, PROT_READ | PROT_WRITE);   // open now: the new pages too
        if (new_top > g->top) g->top = new_top;
    }
    pthread_mutex_unlock(&g->lock);
    return p;   // NULL: the region is spent (the allocator says out of memory)
}

// Back to the free list of the region it came from (whichever thread frees it).
static void release(void *p, size_t bytes) {
    size_t rounded = (bytes + LINE - 1) & ~(size_t)(LINE - 1);
    Region *g = region_of(p);
    pthread_mutex_lock(&g->lock);
    SizeClass *k = class_of(g, rounded);
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 8;
        k->free = realloc(k->free, k->cap * sizeof *k->free);
        if (!k->free) die("device=cpu_strict: host out of memory for the free lists");
    }
    k->free[k->n++] = p;
    pthread_mutex_unlock(&g->lock);
}

// Each operation is the CPU's, with the regions of its device operands open around it (a
// collective copies between two devices' buffers).
static void zero(void *p, size_t bytes) {
    Region *g = region_of(p);
    open_region(g);
    cpu->mem->zero(p, bytes);
    close_region(g);
}
static void fill(void *p, int byte, size_t bytes) {
    Region *g = region_of(p);
    open_region(g);
    cpu->mem->fill(p, byte, bytes);
    close_region(g);
}
static void copy(void *dst, const void *src, size_t bytes) {
    Region *d = region_of(dst), *s = region_of(src);
    open_region(d);
    if (s != d) open_region(s);
    cpu->mem->copy(dst, src, bytes);
    if (s != d) close_region(s);
    close_region(d);
}
static void to_host(void *host, const void *src, size_t bytes) {
    Region *g = region_of(src);
    open_region(g);
    cpu->mem->to_host(host, src, bytes);
    close_region(g);
}
static void to_device(void *dst, const void *host, size_t bytes) {
    Region *g = region_of(dst);
    open_region(g);
    cpu->mem->to_device(dst, host, bytes);
    close_region(g);
}
static void *alloc_host(size_t bytes) { return host_alloc(bytes); }
static void free_host(void *p, size_t bytes) { host_free(p, bytes); }

static const MemoryOps memory_strict = {
    .alloc = alloc,
    .free = release,
    .alloc_host = alloc_host,
    .free_host = free_host,
    .zero = zero,
    .fill = fill,
    .copy = copy,
    .to_host = to_host,
    .to_device = to_device,
};

// ---- the fault handler
// A fault inside the reservation is a host access of device memory: say where and who, and
// exit. Any other fault is not ours: the default action, by returning to the faulting
// instruction with the handler removed. snprintf is not on POSIX's async-signal-safe list
// but takes no lock in glibc; the process is ending either way.
static void on_fault(int sig, siginfo_t *si, void *context) {
    char *a = si->si_addr;
    if (!base || a < base || a >= base + reserved) {
        signal(sig, SIG_DFL);
        return;
    }
    const char *what = "touched";
#if defined(__x86_64__)
    // The page fault's error code: bit 1 set for a write.
    what = ((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2 ? "wrote" : "read";
#else
    (void)context;
#endif
    const char *name = NULL, *tag = NULL;
    size_t offset = 0, bytes = 0;
    char msg[512];
    int n;
    if (describe && describe(a, &name, &tag, &offset, &bytes))
        n = snprintf(msg, sizeof msg, "meshmoe: device=cpu_strict: host code %s device memory at %p (buffer \"%s\", %s, "
                     "offset %zu of %zu bytes) outside a kernel or the backend's copies\n", what, (void *)a, name, tag,
                     offset, bytes);
    else
        n = snprintf(msg, sizeof msg, "meshmoe: device=cpu_strict: host code %s device memory at %p (no live buffer "
                     "there, or its record is busy) outside a kernel or the backend's copies\n", what, (void *)a);
    // The stack first, the message last (where a run's last line says why it stopped).
    static const char how[] = "\nthe host code's stack (addr2line -f -e ./train +0x... names a frame):\n";
    if (write(2, how, sizeof how - 1) < 0) _exit(1);
    void *frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
    if (write(2, msg, n > 0 && n < (int)sizeof msg ? (size_t)n : strlen(msg)) < 0) _exit(1);
    _exit(1);
}

static void install_handler(void) {
    void *warm[1];
    backtrace(warm, 1);   // loads the unwinder now: it may allocate, which a handler must not
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0 || sigaction(SIGBUS, &sa, NULL) != 0)
        die("device=cpu_strict: cannot install the fault handler");
}

const Backend *strict_backend(const Backend *inner, StrictDescribe describe_address) {
    cpu = inner;
    describe = describe_address;
    for (reserved = RESERVE_MOST; reserved >= RESERVE_LEAST; reserved /= 2) {
        base = mmap(NULL, reserved + HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base != MAP_FAILED) break;
    }
    if (base == MAP_FAILED) {
        base = NULL;
        die("device=cpu_strict: cannot reserve even %zu bytes of address space for the device memory",
            (size_t)RESERVE_LEAST);
    }
    base = (char *)(((uintptr_t)base + HUGE - 1) & ~(uintptr_t)(HUGE - 1));   // on a huge-page boundary
    madvise(base, reserved, MADV_HUGEPAGE);   // a hint: without huge pages it works, slower
    region_bytes = reserved / REGIONS;         // a power of two, whole huge pages
    for (int i = 0; i < REGIONS; i++) pthread_mutex_init(&regions[i].lock, NULL);
    install_handler();
    return watch_backend(inner, &memory_strict, (WatchHooks){enter, leave});
}
