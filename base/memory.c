// base/memory.c: the per-device allocator with tags, live bytes and peaks.
// Buffers come from the current backend's memory (kern()->mem, kernels/kernels.h): device
// buffers from its alloc, host (offload) buffers from its alloc_host. Each allocation has a small record
// (size, tag, name, list links) kept on the host, in a table keyed by the buffer's address,
// never in front of the data: a device buffer (GPU memory) cannot carry a host header.
// Freeing finds the record to know what to uncount, and an out-of-memory message lists
// the largest live buffers from the records.
#include "base/memory.h"
#include "kernels/kernels.h"   // MemoryOps: where the backend's device buffers live
#include "kernels/strict.h"    // strict_bind_device: the strict mode's region of the calling device
#include "core/common.h"
#include "base/net.h"           // the run's processes on this host share its memory
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

const char *const MEM_TAG_NAMES[MEM_NTAGS] = {"params", "grads", "optimizer", "activations", "temp", "comm",
                                              "workspace"};

#define ALIGN 64    // every buffer starts on a 64-byte boundary (a cache line, an AVX-512 vector)

struct MemBlock {
    void *data;           // the buffer
    const MemoryOps *ops; // the backend memory it came from
    size_t bytes;
    MemTag tag;
    Device *dev;
    const char *name;
    unsigned char host;   // 1: in the device's host memory (not counted in its HBM)
    unsigned char held;   // 1: kept until mem_release_held (mem_hold)
    MemBlock *prev, *next;
    unsigned slot;       // dry run: 1 + its slot in the void (below), 0 for real memory
    unsigned seq;        // the device's allocation count when it was made: orders equal sizes
};

// The bytes behind a buffer of `bytes` (what the memory is asked for): whole 64-byte lines, at least one (so that every
// buffer, even an empty one, has an address of its own).
static size_t host_bytes(size_t bytes) { return bytes ? (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1) : ALIGN; }

static _Thread_local Device *current;
static int dry;   // dry_run (set once before the devices start)

#define DRY_REAL_BELOW (1u << 16)   // dry run: buffers under 64 KiB are real memory

// A dry run's large buffers all point into one reservation of address space, "the void",
// each at its own 64-byte step, so they overlap and nothing backs them: whatever the plan's
// size, the void costs no memory and one mapping. Their records are in the table like any other. A buffer that is written anyway (control data is real memory, below
// 64 KiB) touches the void's pages that all buffers share, so the memory stays bounded.
// The void asks for 4 TiB of address space (one buffer of a large model on few devices can
// be terabytes) and takes less where the system refuses that much (a sanitizer's address
// layout, a strict overcommit policy): down to 64 GiB, enough for the tiny presets.
#define VOID_SLOTS (1u << 22)               // large buffers live at once, all devices
#define VOID_MOST ((size_t)1 << 42)
#define VOID_LEAST ((size_t)1 << 36)
static char *void_base;
static size_t void_bytes;                   // the address space reserved
static unsigned *void_free, void_nfree;     // a stack of the free slots
static pthread_mutex_t void_lock = PTHREAD_MUTEX_INITIALIZER;

void mem_set_dry(int on) {
    dry = on;
    if (!on || void_base) return;
    for (void_bytes = VOID_MOST; void_bytes >= VOID_LEAST; void_bytes /= 2) {
        void_base = mmap(NULL, void_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (void_base != MAP_FAILED) break;
    }
    if (void_base == MAP_FAILED) {
        void_base = NULL;
        die("dry run: cannot reserve even %zu bytes of address space", VOID_LEAST);
    }
    void_free = malloc(VOID_SLOTS * sizeof *void_free);
    if (!void_free) die("dry run: host out of memory");
    for (unsigned i = 0; i < VOID_SLOTS; i++) void_free[i] = VOID_SLOTS - 1 - i;
    void_nfree = VOID_SLOTS;
}

// The records, found by the buffer's address: one table for every device (a buffer may be
// freed by another thread than the one that made it), open addressing with linear probing,
// kept at most half full, a removal closing its gap by moving later entries back.
static MemBlock **table;
static size_t table_cap, table_n;   // slots (a power of two), records in it
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const void *p, size_t cap) {
    return (size_t)(((uint64_t)(uintptr_t)p / ALIGN * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static void table_put(MemBlock **t, size_t cap, MemBlock *m) {
    size_t i = slot_of(m->data, cap);
    while (t[i]) i = (i + 1) & (cap - 1);
    t[i] = m;
}

static void table_add(MemBlock *m) {
    pthread_mutex_lock(&table_lock);
    if (2 * (table_n + 1) > table_cap) {   // grow: twice the slots, every record placed again
        size_t cap = table_cap ? 2 * table_cap : 1024;
        MemBlock **t = calloc(cap, sizeof *t);
        if (!t) die("host out of memory growing the allocator's table to %zu records", cap);
        for (size_t i = 0; i < table_cap; i++) if (table[i]) table_put(t, cap, table[i]);
        free(table);
        table = t;
        table_cap = cap;
    }
    table_put(table, table_cap, m);
    table_n++;
    pthread_mutex_unlock(&table_lock);
}

// The slot that holds p's record, or table_cap when there is none (the caller holds the lock).
static size_t table_find(const void *p) {
    if (table_cap)
        for (size_t i = slot_of(p, table_cap); table[i]; i = (i + 1) & (table_cap - 1))
            if (table[i]->data == p) return i;
    return table_cap;
}

// The record of buffer p; dies on a pointer the allocator did not hand out (after the
// lock is given back: die may return to a caller's jump buffer).
static MemBlock *block_of(const void *p) {
    pthread_mutex_lock(&table_lock);
    size_t i = table_find(p);
    MemBlock *m = i < table_cap ? table[i] : NULL;
    pthread_mutex_unlock(&table_lock);
    if (!m) die("internal: %p is not a buffer of the allocator", p);
    return m;
}

// Remove m's record: the entries after it in its run move back into the gap when their
// home slot does not lie between the gap and them.
static void table_remove(MemBlock *m) {
    pthread_mutex_lock(&table_lock);   // m is in the table: block_of found it
    size_t mask = table_cap - 1, gap = table_find(m->data);
    for (size_t j = (gap + 1) & mask; table[j]; j = (j + 1) & mask) {
        size_t home = slot_of(table[j]->data, table_cap);
        if (((j - home) & mask) >= ((j - gap) & mask)) {
            table[gap] = table[j];
            gap = j;
        }
    }
    table[gap] = NULL;
    table_n--;
    pthread_mutex_unlock(&table_lock);
}

int mem_describe_address(const void *addr, const char **name, const char **tag, size_t *offset, size_t *bytes) {
    // A fault handler calls this, so it never blocks; but another device's handler may hold
    // the lock for its own lookup (devices that fault at once, as a planted copy in a
    // collective makes them), which takes microseconds: so it tries for a while first.
    for (long tries = 0; pthread_mutex_trylock(&table_lock) != 0; tries++)
        if (tries == 10000000) return 0;
    const char *a = addr;
    int found = 0;
    for (size_t i = 0; i < table_cap && !found; i++) {
        const MemBlock *m = table[i];
        if (!m || m->slot || a < (const char *)m->data || a >= (const char *)m->data + host_bytes(m->bytes)) continue;
        *name = m->name;
        *tag = MEM_TAG_NAMES[m->tag];
        *offset = (size_t)(a - (const char *)m->data);
        *bytes = m->bytes;
        found = 1;
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

static void *void_alloc(MemBlock *m, size_t bytes, const char *name) {
    if (bytes > void_bytes - (size_t)VOID_SLOTS * 64)
        die("dry run: '%s' (%zu bytes) is larger than the planner's address space (%zu bytes)", name, bytes, void_bytes);
    pthread_mutex_lock(&void_lock);
    if (!void_nfree) die("dry run: more than %u large buffers live at once", VOID_SLOTS);
    unsigned slot = void_free[--void_nfree];
    pthread_mutex_unlock(&void_lock);
    m->slot = slot + 1;
    return void_base + (size_t)slot * 64;
}
int mem_dry(void) { return dry; }

int mem_in_void(const void *p) {
    const char *c = (const char *)p;
    return void_base && c >= void_base && c < void_base + void_bytes;
}

void mem_phase(const char *fmt, ...) {
    Device *d = mem_device();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->phase, sizeof d->phase, fmt, ap);
    va_end(ap);
    if (d->hook) d->hook(d, 0, MEM_TEMP, 0, d->phase);
}

void device_init(Device *d, int id, size_t capacity) {
    memset(d, 0, sizeof(*d));
    d->id = id;
    d->capacity = capacity;
}

// The strict mode keeps each device's buffers in a region of its own (kernels/strict.h).
void mem_set_device(Device *d) {
    current = d;
    strict_bind_device(d ? d->id : -1);
}

Device *mem_device(void) {
    if (!current) die("internal: no device set for this thread (call mem_set_device)");
    return current;
}

const char *mem_fmt(size_t bytes, char *buf, size_t cap) {
    if (bytes >= (1u << 30)) snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= (1u << 20)) snprintf(buf, cap, "%.2f MiB", bytes / 1048576.0);
    else if (bytes >= 1024) snprintf(buf, cap, "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, cap, "%zu B", bytes);
    return buf;
}

// Out of memory: name the device, the buffer, and the largest live buffers by tag.
static void die_oom(Device *d, MemTag tag, size_t bytes, const char *name) {
    char a[32], b[32], c[32];
    // The details first, then the one-line message (die) that says what happened; claimed
    // first, so that devices that run out at once do not interleave their reports.
    die_claim();
    fprintf(stderr, "  live by tag on device %d:", d->id);
    for (int t = 0; t < MEM_NTAGS; t++) fprintf(stderr, " %s %s", MEM_TAG_NAMES[t], mem_fmt(d->live[t], a, sizeof a));
    fprintf(stderr, "\n  largest live buffers:\n");
    const char *nm[5];
    MemTag tg[5];
    size_t by[5];
    int n = mem_largest_live(d, 5, nm, tg, by);
    for (int k = 0; k < n; k++) fprintf(stderr, "    %-40s %-12s %s\n", nm[k], MEM_TAG_NAMES[tg[k]], mem_fmt(by[k], a, sizeof a));
    die("device %d out of memory: '%s' (%s, %s) does not fit: %s live of %s capacity (largest buffers "
        "above); raise hbm_capacity, or shard more (fsdp, tensor, expert), or lower per_device_batch_size",
        d->id, name, MEM_TAG_NAMES[tag], mem_fmt(bytes, a, sizeof a), mem_fmt(d->live_total, b, sizeof b),
        mem_fmt(d->capacity, c, sizeof c));
}

int mem_largest_live(const Device *d, int k, const char **name, MemTag *tag, size_t *bytes) {
    // Pick the largest after the last one picked, in the order (bytes, allocation) descending:
    // of equal sizes the later allocation first (no sorting of the list). Host-memory blocks
    // are not the device's.
    const MemBlock *last = NULL;
    int n = 0;
    for (; n < k; n++) {
        const MemBlock *best = NULL;
        for (const MemBlock *m = d->head; m; m = m->next) {
            int after = !last || m->bytes < last->bytes || (m->bytes == last->bytes && m->seq < last->seq);
            if (!m->host && after && (!best || m->bytes > best->bytes || (m->bytes == best->bytes && m->seq > best->seq)))
                best = m;
        }
        if (!best) break;
        name[n] = best->name; tag[n] = best->tag; bytes[n] = best->bytes;
        last = best;
    }
    return n;
}

// The bytes all devices hold in this host's memory (the CPU backend's device buffers and every
// device's host buffers), against this process's share of the host's physical memory: Linux
// hands out memory it does not have, and a run whose buffers outgrow it would be ended by the
// kernel's out-of-memory killer without a word, so it stops here naming the buffer.
static _Atomic size_t host_held;

size_t mem_host_share(int *nproc) {
    static _Atomic size_t known;
    size_t n = known;
    if (!n) {
        const char *env = getenv("MESHMOE_HOST_MEMORY");
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (env && *env) {   // (tests set it: a byte count, nothing else)
            char *end;
            errno = 0;
            unsigned long long v = strtoull(env, &end, 10);
            if (*env < '0' || *env > '9' || *end || errno || v == 0)
                die("MESHMOE_HOST_MEMORY='%.64s' is not a byte count (a positive whole number of bytes)", env);
            n = (size_t)v;
        } else {
            n = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
        }
        known = n = n ? n : SIZE_MAX;
    }
    const Net *net = net_current();
    int k = net && net->host_nprocess > 1 ? net->host_nprocess : 1;
    *nproc = k;
    return n == SIZE_MAX ? n : n / (size_t)k;
}

const char *mem_host_share_text(char *buf, size_t cap) {
    int k;
    char b[32];
    const char *share = mem_fmt(mem_host_share(&k), b, sizeof b);
    if (k > 1)
        snprintf(buf, cap, "%s, this process's 1/%d of this host's memory (%d processes of the run share it)", share, k,
                 k);
    else
        snprintf(buf, cap, "this host's %s of memory", share);
    return buf;
}

static void host_take(size_t bytes, MemTag tag, const char *name) {
    size_t held = atomic_fetch_add(&host_held, bytes) + bytes;
    int k;
    if (held <= mem_host_share(&k)) return;
    atomic_fetch_sub(&host_held, bytes);
    char a[32], b[32], limit[160];
    mem_host_share_text(limit, sizeof limit);
    die("host out of memory: '%s' (%s, %s) would bring what the devices hold in this host's memory to %s, more "
        "than %s (the simulated devices are threads sharing it); lower per_device_batch_size or "
        "eval_per_device_batch_size, or plan the run with dry_run=true", name, MEM_TAG_NAMES[tag],
        mem_fmt(bytes, a, sizeof a), mem_fmt(held, b, sizeof b), limit);
}

// A buffer handed out unzeroed (mem_alloc_uninit) is filled with 0xff bytes in the
// sanitizer builds and under MESHMOE_POISON_UNINIT: every float a NaN, every int -1, so a
// read before the first write turns the loss non-finite and the run stops on it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(MESHMOE_POISON_UNINIT)
#define POISON_UNINIT 1
#else
#define POISON_UNINIT 0
#endif


// One block of `bytes` on the device (host = 0) or in its host memory (host = 1), zeroed
// unless zero is 0 (a dry run zeroes its real memory always: the kernels, which would
// write it, return at once there).
static void *alloc_block(MemTag tag, size_t bytes, const char *name, int host, int zero) {
    Device *d = mem_device();
    if (!host && d->capacity && d->live_total + bytes > d->capacity) die_oom(d, tag, bytes, name);
    size_t rounded = host_bytes(bytes);
    int in_void = dry && bytes >= DRY_REAL_BELOW;
    const MemoryOps *ops = kern()->mem;
    if (!in_void && (host || ops == &memory_cpu)) host_take(rounded, tag, name);
    MemBlock *m = malloc(sizeof *m);
    char *data = in_void ? NULL : host ? ops->alloc_host(rounded) : ops->alloc(rounded);
    if (!m || (!in_void && !data))
        die("%s out of memory allocating %zu bytes for '%s'", host || ops == &memory_cpu ? "host" : "device", bytes, name);
    *m = (MemBlock){data, ops, bytes, tag, d, name, (unsigned char)host, 0, NULL, d->head, 0, (unsigned)d->nallocs};
    if (in_void) data = m->data = void_alloc(m, bytes, name);
    table_add(m);
    int fill = zero || dry ? 0 : POISON_UNINIT ? 0xff : -1;   // the byte to write, -1 none
    if (in_void || fill < 0) {}
    else if (host) memset(data, fill, rounded);   // host memory: the host writes it
    else if (fill == 0) ops->zero(data, rounded);
    else ops->fill(data, fill, rounded);
    if (d->head) d->head->prev = m;
    d->head = m;
    d->nallocs++;
    if (host) {   // the host account: its own live and peak, per tag and in all
        d->host_live[tag] += bytes;
        d->host_live_total += bytes;
        if (d->host_live[tag] > d->host_peak[tag]) d->host_peak[tag] = d->host_live[tag];
        if (d->host_live_total > d->host_peak_total) d->host_peak_total = d->host_live_total;
        return data;
    }
    d->live[tag] += bytes;
    d->live_total += bytes;
    if (d->live[tag] > d->peak[tag]) d->peak[tag] = d->live[tag];
    if (tag == MEM_TEMP && d->live[tag] > d->temp_hw) d->temp_hw = d->live[tag];
    if (d->live[tag] > d->mark[tag]) d->mark[tag] = d->live[tag];
    if (d->live_total > d->mark_total) d->mark_total = d->live_total;
    if (d->live_total > d->peak_total) {
        d->peak_total = d->live_total;
        memcpy(d->at_peak, d->live, sizeof d->live);
        memcpy(d->peak_phase, d->phase, sizeof d->phase);
        d->peak_name = name;
    }
    if (d->hook) d->hook(d, 1, tag, bytes, name);
    return data;
}

void *mem_alloc(MemTag tag, size_t bytes, const char *name) { return alloc_block(tag, bytes, name, 0, 1); }
void *mem_alloc_uninit(MemTag tag, size_t bytes, const char *name) { return alloc_block(tag, bytes, name, 0, 0); }
void *mem_alloc_host(MemTag tag, size_t bytes, const char *name) { return alloc_block(tag, bytes, name, 1, 1); }

int mem_is_host(const void *p) { return p && block_of(p)->host; }

// Copy between two buffers; async: across host and device by the backend's offload copies
// (MemoryOps.to_host_async, to_device_async, where it has them), which may return first.
static void transfer(void *dst, const void *src, size_t bytes, int async) {
    MemBlock *d = block_of(dst), *s = block_of(src);
    // A dry run copies only real memory: the small control buffers (routing plans) that
    // offloading moves must arrive with their contents; the void has none.
    if (!dry || (!d->slot && !s->slot)) {
        const MemoryOps *sm = s->ops, *dm = d->ops;
        if (d->host && !s->host) (async && sm->to_host_async ? sm->to_host_async : sm->to_host)(dst, src, bytes);
        else if (!d->host && s->host) (async && dm->to_device_async ? dm->to_device_async : dm->to_device)(dst, src, bytes);
        else if (!d->host) dm->copy(dst, src, bytes);
        else memcpy(dst, src, bytes);   // host to host
    }
    if (d->host && !s->host) d->dev->to_host_bytes += bytes;
    if (!d->host && s->host) d->dev->to_device_bytes += bytes;
}

void mem_transfer(void *dst, const void *src, size_t bytes) { transfer(dst, src, bytes, 0); }

void mem_upload(void *dst, const void *host, size_t n) { kern()->mem->to_device(dst, host, n); }
void mem_download(void *host, const void *src, size_t n) { kern()->mem->to_host(host, src, n); }
void *mem_host_copy(const void *src, size_t n) {
    void *host = malloc(n ? n : 1);
    if (!host) die("host out of memory for a %zu-byte copy of device data", n);
    mem_download(host, src, n);
    return host;
}

void mem_zero(void *p, size_t n) { if (!dry) kern()->mem->zero(p, n); }
void mem_copy(void *dst, const void *src, size_t n) { if (!dry) kern()->mem->copy(dst, src, n); }

// Copy a buffer to the other memory kind and free the original. The copy may still be in
// flight when this returns (a GPU's copy stream): the backend keeps the original's memory
// until it is done, and orders the kernels that use the moved buffer after it.
static void *move_block(void *p, int host) {
    if (!p || block_of(p)->host == host) return p;
    MemBlock *m = block_of(p);
    void *q = alloc_block(m->tag, m->bytes, m->name, host, 0);   // overwritten whole below
    transfer(q, p, m->bytes, 1);
    mem_free(p);
    return q;
}
void *mem_to_host(void *p) { return move_block(p, 1); }
void *mem_to_device(void *p) { return move_block(p, 0); }

const char *mem_name(const void *p) {
    return block_of(p)->name;
}

size_t mem_size(const void *p) { return block_of(p)->bytes; }

float *mem_floats(MemTag tag, size_t n, const char *name) {
    return (float *)mem_alloc(tag, n * sizeof(float), name);
}

float *mem_floats_uninit(MemTag tag, size_t n, const char *name) {
    return (float *)mem_alloc_uninit(tag, n * sizeof(float), name);
}

// Give block m back: uncount it, unlink it, tell the hook.
static void free_block(MemBlock *m) {
    Device *d = m->dev;
    if (m->host) {
        d->host_live[m->tag] -= m->bytes;
        d->host_live_total -= m->bytes;
    } else {
        d->live[m->tag] -= m->bytes;
        d->live_total -= m->bytes;
    }
    if (m->prev) m->prev->next = m->next; else d->head = m->next;
    if (m->next) m->next->prev = m->prev;
    if (d->hook) d->hook(d, -1, m->tag, m->bytes, m->name);
    table_remove(m);   // before its slot in the void can be handed out again
    if (!m->slot && (m->host || m->ops == &memory_cpu)) atomic_fetch_sub(&host_held, host_bytes(m->bytes));
    if (m->slot) {
        pthread_mutex_lock(&void_lock);
        void_free[void_nfree++] = m->slot - 1;
        pthread_mutex_unlock(&void_lock);
    } else if (m->host) {
        m->ops->free_host(m->data, host_bytes(m->bytes));
    } else {
        m->ops->free(m->data, host_bytes(m->bytes));
    }
    free(m);
}

void mem_free(void *p) {
    if (!p) return;
    free_block(block_of(p));
}

void mem_temp_hw_reset(void) {
    Device *d = mem_device();
    d->temp_hw = d->live[MEM_TEMP];
}
size_t mem_temp_live(void) { return mem_device()->live[MEM_TEMP]; }
size_t mem_temp_hw(void) { return mem_device()->temp_hw; }

void mem_hold(void *p) { if (p) block_of(p)->held = 1; }

void mem_release_held(void) {
    Device *d = mem_device();
    MemBlock *m = d->head;
    while (m) {
        MemBlock *next = m->next;
        if (m->held) free_block(m);
        m = next;
    }
}

void device_release_all(Device *d) {
    while (d->head) free_block(d->head);
}

void mem_reset_peak(Device *d) {
    memcpy(d->peak, d->live, sizeof d->live);
    d->peak_total = d->live_total;
    memcpy(d->at_peak, d->live, sizeof d->live);
    memcpy(d->peak_phase, d->phase, sizeof d->phase);
    d->peak_name = "(live at the start of the step)";
    memcpy(d->host_peak, d->host_live, sizeof d->host_live);
    d->host_peak_total = d->host_live_total;
    d->to_host_bytes = d->to_device_bytes = 0;
}

void mem_mark_reset(Device *d) {
    memcpy(d->mark, d->live, sizeof d->live);
    d->mark_total = d->live_total;
}

void mem_print_report(const Device *d) {
    char a[32];
    printf("device %d peak %s:", d->id, mem_fmt(d->peak_total, a, sizeof a));
    for (int t = 0; t < MEM_NTAGS; t++)
        if (d->peak[t]) printf(" %s %s", MEM_TAG_NAMES[t], mem_fmt(d->peak[t], a, sizeof a));
    if (d->host_peak_total) {   // offload: the host memory, and the copies of the last step
        printf(" | host peak %s:", mem_fmt(d->host_peak_total, a, sizeof a));
        for (int t = 0; t < MEM_NTAGS; t++)
            if (d->host_peak[t]) printf(" %s %s", MEM_TAG_NAMES[t], mem_fmt(d->host_peak[t], a, sizeof a));
        printf(" | copied to host %s,", mem_fmt(d->to_host_bytes, a, sizeof a));
        printf(" to device %s", mem_fmt(d->to_device_bytes, a, sizeof a));
    }
    size_t net_sent = 0, net_recv = 0;   // over several processes: what crossed between them
    for (int k = 0; k < 8; k++) { net_sent += d->net_sent[k]; net_recv += d->net_recv[k]; }
    if (net_sent || net_recv) {
        printf(" | between processes: sent %s,", mem_fmt(net_sent, a, sizeof a));
        printf(" received %s", mem_fmt(net_recv, a, sizeof a));
    }
    printf("\n");
}
