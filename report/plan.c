// report/plan.c: the planner's report and the memory trace (see plan.h).
#include "report/plan.h"
#include "core/common.h"
#include "base/paths.h"
#include "base/net.h"

#define PLAN_TOP 6   // largest live buffers shown at the peak

typedef struct {
    signed char sign;        // +1 alloc, -1 free, 0 phase change
    unsigned char tag;
    size_t bytes;
    const char *name;        // buffer names are string literals; phases are copied
    size_t live[MEM_NTAGS];  // live bytes by tag after the event
} Event;

typedef struct {
    int trace;               // keep every event
    Event *ev;
    size_t n, cap;
    char **phases;           // copies of the phase names (freed with the watch)
    size_t nphases;
    // The largest live buffers when the total peak was reached.
    int ntop;
    const char *top_name[PLAN_TOP];
    MemTag top_tag[PLAN_TOP];
    size_t top_bytes[PLAN_TOP];
} Watch;

static void push(Watch *w, const Device *d, int sign, MemTag tag, size_t bytes, const char *name) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->ev = realloc(w->ev, w->cap * sizeof(Event));
        if (!w->ev) die("host out of memory recording the memory trace");
    }
    Event *e = &w->ev[w->n++];
    e->sign = (signed char)sign;
    e->tag = (unsigned char)tag;
    e->bytes = bytes;
    e->name = name;
    memcpy(e->live, d->live, sizeof e->live);
}

static void on_event(Device *d, int sign, MemTag tag, size_t bytes, const char *name) {
    Watch *w = (Watch *)d->hook_ctx;
    // A new total peak was just reached by this allocation: remember the largest buffers.
    if (sign > 0 && d->live_total == d->peak_total && d->peak_name == name)
        w->ntop = mem_largest_live(d, PLAN_TOP, w->top_name, w->top_tag, w->top_bytes);
    if (!w->trace) return;
    if (sign == 0) {   // the phase string changes later: keep a copy
        w->phases = realloc(w->phases, (w->nphases + 1) * sizeof(char *));
        name = w->phases[w->nphases++] = strdup(name);
    }
    push(w, d, sign, tag, bytes, name);
}

void plan_watch_begin(Device *d, int trace) {
    Watch *w = calloc(1, sizeof *w);
    w->trace = trace;
    w->ntop = mem_largest_live(d, PLAN_TOP, w->top_name, w->top_tag, w->top_bytes);
    if (trace) push(w, d, 0, MEM_TEMP, 0, "start of the step");
    d->hook_ctx = w;
    d->hook = on_event;
}

void plan_watch_end(Device *d) { d->hook = NULL; }

// "12345678901 B (11.50 GiB)"
static const char *both(size_t b, char *buf, size_t cap) {
    char h[32];
    snprintf(buf, cap, "%zu B (%s)", b, mem_fmt(b, h, sizeof h));
    return buf;
}

static void print_device(const Device *d, size_t capacity) {
    const Watch *w = (const Watch *)d->hook_ctx;
    char a[64], b[64];
    printf("device %d: peak %s\n", d->id, both(d->peak_total, a, sizeof a));
    printf("  at the peak, by tag:");
    for (int t = 0; t < MEM_NTAGS; t++) printf(" %s %s", MEM_TAG_NAMES[t], mem_fmt(d->at_peak[t], a, sizeof a));
    printf("\n  each tag's own peak: ");
    for (int t = 0; t < MEM_NTAGS; t++) printf(" %s %s", MEM_TAG_NAMES[t], mem_fmt(d->peak[t], a, sizeof a));
    printf("\n  the peak is reached by allocating '%s' during %s\n", d->peak_name ? d->peak_name : "?",
           d->peak_phase[0] ? d->peak_phase : "(no phase)");
    printf("  largest live buffers at the peak:\n");
    for (int k = 0; w && k < w->ntop; k++)
        printf("    %-52s %-12s %s\n", w->top_name[k], MEM_TAG_NAMES[w->top_tag[k]], both(w->top_bytes[k], a, sizeof a));
    if (!capacity) printf("  hbm_capacity: unlimited (0)\n");
    else if (d->peak_total <= capacity)
        printf("  FITS in hbm_capacity %s: %s to spare\n", both(capacity, a, sizeof a),
               both(capacity - d->peak_total, b, sizeof b));
    else
        printf("  DOES NOT FIT in hbm_capacity %s: over by %s\n", both(capacity, a, sizeof a),
               both(d->peak_total - capacity, b, sizeof b));
}

static int same_plan(const Device *x, const Device *y) {
    return x->peak_total == y->peak_total && !memcmp(x->peak, y->peak, sizeof x->peak);
}

int plan_print(const Mesh *mesh, size_t capacity) {
    // Devices with the same peaks (by tag) are shown once: the first of them in full, then
    // how many others share it.
    int fits = 1;
    for (int i = 0; i < mesh->ndev; i++) {
        const Device *d = &mesh->devices[i];
        if (capacity && d->peak_total > capacity) fits = 0;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = same_plan(&mesh->devices[j], d);
        if (seen) continue;
        int n = 0;
        for (int j = i; j < mesh->ndev; j++) n += same_plan(&mesh->devices[j], d);
        if (n > 1) printf("(%d devices have this plan: device %d and %d others with the same peaks by tag)\n", n, i, n - 1);
        print_device(d, capacity);
    }
    size_t worst = 0;
    for (int i = 0; i < mesh->ndev; i++) worst = MM_MAX(worst, mesh->devices[i].peak_total);
    char a[64], b[64];
    if (!capacity) printf("plan: largest device peak %s; no hbm_capacity given\n", both(worst, a, sizeof a));
    else if (fits) printf("plan: FITS: largest device peak %s <= hbm_capacity %s\n", both(worst, a, sizeof a), both(capacity, b, sizeof b));
    else printf("plan: DOES NOT FIT: largest device peak %s exceeds hbm_capacity %s by %zu bytes\n",
                both(worst, a, sizeof a), both(capacity, b, sizeof b), worst - capacity);
    return fits;
}

// Device i's rows of the trace, appended to f.
static void trace_rows(FILE *f, const Mesh *mesh, int i) {
    const Watch *w = (const Watch *)mesh->devices[i].hook_ctx;
    for (size_t k = 0; w && k < w->n; k++) {
        const Event *e = &w->ev[k];
        const char *ev = e->sign > 0 ? "alloc" : e->sign < 0 ? "free" : "phase";
        size_t tot = 0;
        fprintf(f, "%d,%zu,%s,%s,%zu", i, k, ev, e->sign ? MEM_TAG_NAMES[e->tag] : "", e->bytes);
        for (int t = 0; t < MEM_NTAGS; t++) { fprintf(f, ",%zu", e->live[t]); tot += e->live[t]; }
        fprintf(f, ",%zu,\"", tot);
        for (const char *c = e->name; *c; c++) fputc(*c == '"' ? '\'' : *c, f);   // the name, quoted, last
        fprintf(f, "\"\n");
    }
}

// Over several processes each formats its devices' rows, in its device order, and process 0
// gets them all (base/net.h) and writes every device's in id order.
static char **rows_of_every_device(const Mesh *mesh, size_t *len) {
    char *mine = NULL, *all = NULL;
    size_t nmine = 0, *each = calloc((size_t)mesh->nprocess, sizeof(size_t));
    size_t *mylen = calloc((size_t)mesh->nlocal, sizeof(size_t));
    FILE *m = open_memstream(&mine, &nmine);
    for (int k = 0; k < mesh->nlocal; k++) {
        long at = ftell(m);
        trace_rows(m, mesh, mesh_device_of(mesh, mesh->process, k));
        mylen[k] = (size_t)(ftell(m) - at);
    }
    fwrite(mylen, sizeof(size_t), (size_t)mesh->nlocal, m);   // the lengths, after the rows
    fclose(m);
    net_current()->gatherv(mine, nmine, &all, each);
    char **rows = NULL;
    if (mesh->process == 0) {
        rows = calloc((size_t)mesh->ndev, sizeof(char *));
        const char *at = all;
        size_t *lens = malloc(sizeof(size_t) * (size_t)mesh->nlocal);
        for (int p = 0; p < mesh->nprocess; at += each[p++]) {
            memcpy(lens, at + each[p] - sizeof(size_t) * (size_t)mesh->nlocal, sizeof(size_t) * (size_t)mesh->nlocal);
            const char *r = at;
            for (int k = 0; k < mesh->nlocal; r += lens[k++]) {
                int d = mesh_device_of(mesh, p, k);
                rows[d] = malloc(lens[k] + 1);
                memcpy(rows[d], r, lens[k]);
                len[d] = lens[k];
            }
        }
        free(lens);
    }
    free(mine); free(all); free(each); free(mylen);
    return rows;
}

void plan_trace_write(const Mesh *mesh, const char *path) {
    char **rows = NULL;
    size_t *len = calloc((size_t)mesh->ndev, sizeof(size_t));
    if (mesh->nprocess > 1) rows = rows_of_every_device(mesh, len);
    if (mesh->process == 0) {
        FILE *f = atomic_file_open(path);   // a partial CSV is never left (base/paths.h)
        fprintf(f, "device,index,event,tag,bytes");
        for (int t = 0; t < MEM_NTAGS; t++) fprintf(f, ",%s", MEM_TAG_NAMES[t]);
        fprintf(f, ",total,name\n");
        for (int i = 0; i < mesh->ndev; i++) {
            if (rows) fwrite(rows[i], 1, len[i], f);
            else trace_rows(f, mesh, i);
        }
        atomic_file_commit(f);   // dies naming the path and the reason if any write failed
    }
    for (int i = 0; rows && i < mesh->ndev; i++) free(rows[i]);
    free(rows);
    free(len);
}

void plan_free(const Mesh *mesh) {
    for (int i = 0; i < mesh->ndev; i++) {
        Watch *w = (Watch *)mesh->devices[i].hook_ctx;
        mesh->devices[i].hook_ctx = NULL;
        if (!w || (mesh->rep && mesh->rep[i] != i)) continue;   // a class's watch is its representative's
        for (size_t k = 0; k < w->nphases; k++) free(w->phases[k]);
        free(w->phases);
        free(w->ev);
        free(w);
    }
}
