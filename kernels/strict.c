// kernels/strict.c: the strict mode (kernels/strict.h): its memory, carved from one
// reservation; the opening and closing of that memory around every kernel (a watcher,
// kernels/watch.h) and every memory operation; and the fault handler that names the buffer.
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
static size_t reserved, used;        // bytes reserved; the bump: bytes ever handed out
static const Backend *cpu;           // the kernels (backend_cpu or its plain twin)
static StrictDescribe describe;

// A freed buffer is kept for the next request of exactly its size, so that a training loop,
// which asks for the same sizes every step, reuses its buffers and the bump stops growing.
typedef struct { size_t bytes; char **free; size_t n, cap; } SizeClass;
static SizeClass *classes;
static size_t nclasses, classes_cap;

// Threads inside a kernel or a memory operation now; the memory is open while it is not 0.
static int inside;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

// The pages handed out so far, [base, base + top): the rest of the reservation stays
// PROT_NONE from the mmap on, and an mprotect costs by the range it walks.
static size_t top;
static void protect_range(size_t from, size_t to, int prot) {
    if (to > from && mprotect(base + from, to - from, prot) != 0)
        die("device=cpu_strict: mprotect of the device memory failed");
}
static void protect(int prot) { protect_range(0, top, prot); }
static void open_memory(void) {
    pthread_mutex_lock(&lock);
    if (inside++ == 0) protect(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&lock);
}
static void close_memory(void) {
    pthread_mutex_lock(&lock);
    if (--inside == 0) protect(PROT_NONE);
    pthread_mutex_unlock(&lock);
}

// ---- the watcher: every kernel runs with the memory open
static void enter(int family) {
    (void)family;
    open_memory();
}
static void leave(int family, double flops, double bytes) {
    (void)family, (void)flops, (void)bytes;
    close_memory();
}

// ---- memory (kernels/kernels.h MemoryOps)
static SizeClass *class_of(size_t bytes) {   // the caller holds the lock
    for (size_t i = 0; i < nclasses; i++)
        if (classes[i].bytes == bytes) return &classes[i];
    if (nclasses == classes_cap) {
        classes_cap = classes_cap ? 2 * classes_cap : 64;
        classes = realloc(classes, classes_cap * sizeof *classes);
        if (!classes) die("device=cpu_strict: host out of memory for the free lists");
    }
    classes[nclasses] = (SizeClass){bytes, NULL, 0, 0};
    return &classes[nclasses++];
}

static void *alloc(size_t bytes) {
    size_t rounded = (bytes + LINE - 1) & ~(size_t)(LINE - 1);
    pthread_mutex_lock(&lock);
    SizeClass *k = class_of(rounded);
    char *p = NULL;
    if (k->n) p = k->free[--k->n];
    else if (rounded <= reserved - used) {
        p = base + used;
        used += rounded;
        size_t new_top = (used + HUGE - 1) / HUGE * HUGE;
        if (inside) protect_range(top, new_top, PROT_READ | PROT_WRITE);   // open now: the new pages too
        if (new_top > top) top = new_top;
    }
    pthread_mutex_unlock(&lock);
    return p;   // NULL: the reservation is spent (the allocator says out of memory)
}

static void release(void *p, size_t bytes) {
    size_t rounded = (bytes + LINE - 1) & ~(size_t)(LINE - 1);
    pthread_mutex_lock(&lock);
    SizeClass *k = class_of(rounded);
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 8;
        k->free = realloc(k->free, k->cap * sizeof *k->free);
        if (!k->free) die("device=cpu_strict: host out of memory for the free lists");
    }
    k->free[k->n++] = p;
    pthread_mutex_unlock(&lock);
}

// Each operation is the CPU's, with the memory open around it.
static void zero(void *p, size_t bytes) { open_memory(); cpu->mem->zero(p, bytes); close_memory(); }
static void fill(void *p, int byte, size_t bytes) { open_memory(); cpu->mem->fill(p, byte, bytes); close_memory(); }
static void copy(void *dst, const void *src, size_t bytes) {
    open_memory();
    cpu->mem->copy(dst, src, bytes);
    close_memory();
}
static void to_host(void *host, const void *src, size_t bytes) {
    open_memory();
    cpu->mem->to_host(host, src, bytes);
    close_memory();
}
static void to_device(void *dst, const void *host, size_t bytes) {
    open_memory();
    cpu->mem->to_device(dst, host, bytes);
    close_memory();
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
    install_handler();
    return watch_backend(inner, &memory_strict, (WatchHooks){enter, leave});
}
