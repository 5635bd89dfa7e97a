// report/trace.c: a memory_trace CSV read back (see trace.h).
#include "report/trace.h"
#include "core/common.h"
#include <errno.h>

// A field that must be a whole decimal number (digits only): 1 and *x, or 0.
static int count_field(const char *s, unsigned long long *x) {
    if (!*s || strspn(s, "0123456789") != strlen(s)) return 0;
    errno = 0;
    *x = strtoull(s, NULL, 10);
    return errno == 0;
}

// One CSV line: device,index,event,tag,bytes,<tags...>,total,"name". Returns the device or -1
// (also for a count or device that is not a number).
static int parse_line(const char *line, TraceEvent *e) {
    // The 6 + MEM_NTAGS fields before the name, comma-separated (the tag is empty for phases).
    char field[6 + MEM_NTAGS][32];
    const char *p = line;
    for (int k = 0; k < 6 + MEM_NTAGS; k++) {
        const char *comma = strchr(p, ',');
        if (!comma || comma - p >= 32) return -1;
        memcpy(field[k], p, (size_t)(comma - p));
        field[k][comma - p] = '\0';
        p = comma + 1;
    }
    if (*p != '"') return -1;
    size_t k = 0;
    for (p++; *p && *p != '"' && k + 1 < sizeof e->name; p++) e->name[k++] = *p;
    e->name[k] = '\0';
    unsigned long long x, dev;
    for (int t = 0; t < MEM_NTAGS; t++) {
        if (!count_field(field[5 + t], &x)) return -1;
        e->live[t] = x;
    }
    if (!count_field(field[5 + MEM_NTAGS], &x) || !count_field(field[0], &dev) || dev > 1u << 20) return -1;
    e->total = x;
    e->ev = !strcmp(field[2], "alloc") ? 1 : !strcmp(field[2], "free") ? -1 : 0;
    return (int)dev;
}

void trace_read(Trace *t, const char *path) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen_regular(path, "plot");
    char line[1024];
    if (!fgets(line, sizeof line, f) || strncmp(line, "device,index,event", 18))
        die("plot: '%s' is not a memory_trace file (no 'device,index,event,...' header)", path);
    TraceDevice *d = NULL;
    for (long lineno = 2; fgets(line, sizeof line, f); lineno++) {
        TraceEvent e;
        int dev = parse_line(line, &e);
        if (dev < 0) die("plot: %s line %ld is not a trace row: %.80s", path, lineno, line);
        if (!d || d->device != dev) {   // the events of a device are contiguous in the file
            t->dev = realloc(t->dev, (size_t)(t->ndev + 1) * sizeof *t->dev);
            if (!t->dev) die("plot: out of memory reading '%s'", path);
            d = &t->dev[t->ndev++];
            memset(d, 0, sizeof *d);
            d->device = dev;
        }
        if (d->n == d->cap) {
            d->cap = d->cap ? 2 * d->cap : 4096;
            d->e = realloc(d->e, d->cap * sizeof *d->e);
            if (!d->e) die("plot: out of memory reading '%s'", path);
        }
        d->e[d->n++] = e;
    }
    fclose(f);
    if (!t->ndev) die("plot: '%s' holds no events", path);
}

void trace_free(Trace *t) {
    for (int i = 0; i < t->ndev; i++) free(t->dev[i].e);
    free(t->dev);
    memset(t, 0, sizeof *t);
}

size_t trace_peak(const TraceDevice *d) {
    size_t p = 0;
    for (size_t i = 0; i < d->n; i++)
        if (d->e[i].total > d->e[p].total) p = i;
    return p;
}

const TraceDevice *trace_highest(const Trace *t) {
    const TraceDevice *h = &t->dev[0];
    for (int i = 1; i < t->ndev; i++)
        if (t->dev[i].e[trace_peak(&t->dev[i])].total > h->e[trace_peak(h)].total) h = &t->dev[i];
    return h;
}
