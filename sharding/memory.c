// sharding/memory.c: the per-device allocator with tags, live bytes and peaks.
// Each allocation carries a small header (size, tag, name, list links) in front of the
// data, so that freeing knows what to uncount and an out-of-memory message can list
// the largest live buffers.
#include "sharding/memory.h"
#include "common.h"

const char *const MEM_TAG_NAMES[MEM_NTAGS] = {"params", "grads", "optimizer", "activations", "temp", "comm"};

#define HEADER 64   // bytes in front of every buffer; keeps the data 64-byte aligned

struct MemBlock {
    size_t bytes;
    MemTag tag;
    Device *dev;
    const char *name;
    int host;             // 1: in the device's host memory (not counted in its HBM)
    MemBlock *prev, *next;
};
_Static_assert(sizeof(MemBlock) <= HEADER, "header must fit in front of the data");

static _Thread_local Device *current;

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
    // Print the five largest without sorting the list: pick the largest below the last one.
    size_t below = (size_t)-1;
    for (int k = 0; k < 5; k++) {
        MemBlock *best = NULL;
        for (MemBlock *m = d->head; m; m = m->next)
            if (!m->host && m->bytes < below && (!best || m->bytes > best->bytes)) best = m;
        if (!best) break;
        fprintf(stderr, "    %-40s %-12s %s\n", best->name, MEM_TAG_NAMES[best->tag], mem_fmt(best->bytes, a, sizeof a));
        below = best->bytes;
    }
    die("device %d out of memory: '%s' (%s, %s) does not fit: %s live of %s capacity (largest buffers "
        "above); raise hbm_capacity, or shard more (fsdp, tensor, expert), or lower per_device_batch_size",
        d->id, name, MEM_TAG_NAMES[tag], mem_fmt(bytes, a, sizeof a), mem_fmt(d->live_total, b, sizeof b),
        mem_fmt(d->capacity, c, sizeof c));
}

// One block of `bytes` on the device (host = 0) or in its host memory (host = 1).
static void *alloc_block(MemTag tag, size_t bytes, const char *name, int host) {
    Device *d = mem_device();
    if (!host && d->capacity && d->live_total + bytes > d->capacity) die_oom(d, tag, bytes, name);
    size_t rounded = (bytes + 63) & ~(size_t)63;
    char *raw = aligned_alloc(64, HEADER + rounded);
    if (!raw) die("host out of memory allocating %zu bytes for '%s'", bytes, name);
    memset(raw + HEADER, 0, rounded);
    MemBlock *m = (MemBlock *)raw;
    *m = (MemBlock){bytes, tag, d, name, host, NULL, d->head};
    if (d->head) d->head->prev = m;
    d->head = m;
    d->nallocs++;
    if (host) {   // the host account: its own live and peak, per tag and in all
        d->host_live[tag] += bytes;
        d->host_live_total += bytes;
        if (d->host_live[tag] > d->host_peak[tag]) d->host_peak[tag] = d->host_live[tag];
        if (d->host_live_total > d->host_peak_total) d->host_peak_total = d->host_live_total;
        return raw + HEADER;
    }
    d->live[tag] += bytes;
    d->live_total += bytes;
    if (d->live[tag] > d->peak[tag]) d->peak[tag] = d->live[tag];
    if (d->live_total > d->peak_total) {
        d->peak_total = d->live_total;
        memcpy(d->at_peak, d->live, sizeof d->live);
    }
    return raw + HEADER;
}

void *mem_alloc(MemTag tag, size_t bytes, const char *name) { return alloc_block(tag, bytes, name, 0); }
void *mem_alloc_host(MemTag tag, size_t bytes, const char *name) { return alloc_block(tag, bytes, name, 1); }

static MemBlock *block_of(const void *p) { return (MemBlock *)((char *)p - HEADER); }

int mem_is_host(const void *p) { return p && block_of(p)->host; }

void mem_copy(void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    MemBlock *d = block_of(dst), *s = block_of(src);
    if (d->host && !s->host) d->dev->to_host_bytes += bytes;
    if (!d->host && s->host) d->dev->to_device_bytes += bytes;
}

// Copy a buffer to the other memory kind and free the original.
static void *move_block(void *p, int host) {
    if (!p || block_of(p)->host == host) return p;
    MemBlock *m = block_of(p);
    void *q = alloc_block(m->tag, m->bytes, m->name, host);
    mem_copy(q, p, m->bytes);
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

void mem_free(void *p) {
    if (!p) return;
    MemBlock *m = block_of(p);
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
    free(m);
}

void device_release_all(Device *d) {
    while (d->head) mem_free((char *)d->head + HEADER);
}

void mem_reset_peak(Device *d) {
    memcpy(d->peak, d->live, sizeof d->live);
    d->peak_total = d->live_total;
    memcpy(d->at_peak, d->live, sizeof d->live);
    memcpy(d->host_peak, d->host_live, sizeof d->host_live);
    d->host_peak_total = d->host_live_total;
    d->to_host_bytes = d->to_device_bytes = 0;
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
    printf("\n");
}
