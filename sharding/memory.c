// sharding/memory.c: the per-device allocator with tags, live bytes and peaks.
// Each allocation carries a small header (size, tag, name, list links) in front of the
// data, so that freeing knows what to uncount and an out-of-memory message can list
// the largest live buffers.
#include "sharding/memory.h"
#include "common.h"
#include <stdarg.h>
#include <sys/mman.h>

const char *const MEM_TAG_NAMES[MEM_NTAGS] = {"params", "grads", "optimizer", "activations", "temp", "comm"};

#define HEADER 64   // bytes in front of every buffer; keeps the data 64-byte aligned

struct MemBlock {
    size_t bytes;
    MemTag tag;
    Device *dev;
    const char *name;
    MemBlock *prev, *next;
    int mapped;          // dry run: address space from mmap, no memory behind it
};
_Static_assert(sizeof(MemBlock) <= HEADER, "header must fit in front of the data");

static _Thread_local Device *current;
static int dry;   // dry_run (set once before the devices start)

#define DRY_REAL_BELOW (1u << 20)   // dry run: buffers under 1 MiB are real memory

void mem_set_dry(int on) { dry = on; }
int mem_dry(void) { return dry; }

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

void mem_set_device(Device *d) { current = d; }

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
    // The details first, then the one-line message (die) that says what happened.
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
    // Pick the largest after the last one picked, in the order (bytes, address) descending
    // (no sorting of the list).
    const MemBlock *last = NULL;
    int n = 0;
    for (; n < k; n++) {
        const MemBlock *best = NULL;
        for (const MemBlock *m = d->head; m; m = m->next) {
            int after = !last || m->bytes < last->bytes || (m->bytes == last->bytes && m < last);
            if (after && (!best || m->bytes > best->bytes || (m->bytes == best->bytes && m > best))) best = m;
        }
        if (!best) break;
        name[n] = best->name; tag[n] = best->tag; bytes[n] = best->bytes;
        last = best;
    }
    return n;
}

void *mem_alloc(MemTag tag, size_t bytes, const char *name) {
    Device *d = mem_device();
    if (d->capacity && d->live_total + bytes > d->capacity) die_oom(d, tag, bytes, name);
    size_t rounded = (bytes + 63) & ~(size_t)63;
    int mapped = dry && bytes >= DRY_REAL_BELOW;
    char *raw = mapped ? mmap(NULL, HEADER + rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                       : aligned_alloc(64, HEADER + rounded);
    if (mapped && raw == MAP_FAILED) raw = NULL;
    if (!raw) die("host out of memory allocating %zu bytes for '%s'", bytes, name);
    if (!mapped) memset(raw + HEADER, 0, rounded);   // (fresh mapped pages are zero already)
    MemBlock *m = (MemBlock *)raw;
    *m = (MemBlock){bytes, tag, d, name, NULL, d->head, mapped};
    if (d->head) d->head->prev = m;
    d->head = m;
    d->live[tag] += bytes;
    d->live_total += bytes;
    if (d->live[tag] > d->peak[tag]) d->peak[tag] = d->live[tag];
    if (d->live_total > d->peak_total) {
        d->peak_total = d->live_total;
        memcpy(d->at_peak, d->live, sizeof d->live);
        memcpy(d->peak_phase, d->phase, sizeof d->phase);
        d->peak_name = name;
    }
    d->nallocs++;
    if (d->hook) d->hook(d, 1, tag, bytes, name);
    return raw + HEADER;
}

const char *mem_name(const void *p) {
    return ((const MemBlock *)((const char *)p - HEADER))->name;
}

float *mem_floats(MemTag tag, size_t n, const char *name) {
    return (float *)mem_alloc(tag, n * sizeof(float), name);
}

void mem_free(void *p) {
    if (!p) return;
    MemBlock *m = (MemBlock *)((char *)p - HEADER);
    Device *d = m->dev;
    d->live[m->tag] -= m->bytes;
    d->live_total -= m->bytes;
    if (m->prev) m->prev->next = m->next; else d->head = m->next;
    if (m->next) m->next->prev = m->prev;
    if (d->hook) d->hook(d, -1, m->tag, m->bytes, m->name);
    if (m->mapped) munmap(m, HEADER + ((m->bytes + 63) & ~(size_t)63));
    else free(m);
}

void device_release_all(Device *d) {
    while (d->head) mem_free((char *)d->head + HEADER);
}

void mem_reset_peak(Device *d) {
    memcpy(d->peak, d->live, sizeof d->live);
    d->peak_total = d->live_total;
    memcpy(d->at_peak, d->live, sizeof d->live);
    memcpy(d->peak_phase, d->phase, sizeof d->phase);
    d->peak_name = "(live at the start of the step)";
}

void mem_print_report(const Device *d) {
    char a[32];
    printf("device %d peak %s:", d->id, mem_fmt(d->peak_total, a, sizeof a));
    for (int t = 0; t < MEM_NTAGS; t++)
        if (d->peak[t]) printf(" %s %s", MEM_TAG_NAMES[t], mem_fmt(d->peak[t], a, sizeof a));
    printf("\n");
}
