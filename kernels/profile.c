// kernels/profile.c: the profile (kernels/profile.h), a watcher of the kernels
// (kernels/watch.h): a mark of the clock before each kernel and one after it, kept with the
// call's work; when the counters are taken, each call's time and work are added to its
// family's counters.
#include "kernels/profile.h"
#include "core/common.h"   // die
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local ProfileCounts counts[FAMILY_COUNT];
static _Thread_local ProfileProduct products[PROFILE_PRODUCTS];
static _Thread_local int nproducts;
static _Thread_local ProfileKernel kernels[PROFILE_KERNELS];
static _Thread_local int nkernels;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// The clock: a mark before each kernel and one after it. On a GPU a kernel call returns once
// its work is queued, so the marks are the device's (Backend.mark: events on the thread's
// stream) and a kernel's time is what the device spent between them, read when the counters
// are taken; nothing waits in between, so the profiled step runs as an unprofiled one. On the
// CPU a kernel is done when it returns: the marks are the host's clock.
static _Thread_local double *stamps;   // the host's marks, numbered from 1
static _Thread_local size_t nstamps, capstamps;
static void *host_mark(void) {
    if (nstamps == capstamps) {
        capstamps = capstamps ? 2 * capstamps : 1024;
        stamps = realloc(stamps, sizeof(double) * capstamps);
        if (!stamps) die("out of host memory for the profile's %zu marks", capstamps);
    }
    stamps[nstamps++] = now_ms();
    return (void *)(uintptr_t)nstamps;
}
static double host_elapsed_ms(const void *a, const void *b) {
    return stamps[(uintptr_t)b - 1] - stamps[(uintptr_t)a - 1];
}
static void host_marks_release(void) { nstamps = 0; }

static const Backend *timed_backend;   // the backend the profile watches (its clock, if it has one)
static void *mark(void) { return timed_backend->mark ? timed_backend->mark() : host_mark(); }

// A kernel call whose time is not read yet: its family, work and marks, and for a product its
// shape's class.
typedef struct {
    int family;
    const char *kernel;
    double flops, bytes;
    ProfileProduct key;
    void *start, *end;
} Pending;
static _Thread_local Pending *pending;
static _Thread_local size_t npending, cappending;
static _Thread_local void *started;   // the mark before the kernel now running (kernels do not nest)

static void resolve(void);
enum { PENDING_MOST = 1 << 16 };   // calls held before their times are read (a thread whose counters nobody takes)

// (The pending calls are read here, between kernels, when there are too many: resolve hands
// every mark back, the one before a running kernel too.)
static void enter(int family) {
    (void)family;
    if (npending == PENDING_MOST) resolve();
    started = mark();
}

static int log2_floor(int x) {
    int l = 0;
    while (x > 1) { x >>= 1; l++; }
    return l;
}

static void add_counts(ProfileCounts *c, long calls, double ms, double flops, double bytes) {
    c->calls += calls;
    c->ms += ms;
    c->flops += flops;
    c->bytes += bytes;
}

// The class of `from` in list (n entries, at most PROFILE_PRODUCTS), added if new; when the
// list has room for one more only, that last entry is "other shapes", where every product
// of a class not yet listed goes.
static ProfileProduct *product_class(ProfileProduct *list, int *n, const ProfileProduct *from) {
    static const char *const other = "other shapes";
    for (int i = 0; i < *n; i++) {
        ProfileProduct *p = &list[i];
        if (p->form == from->form && p->N == from->N && p->mclass == from->mclass && p->kclass == from->kclass) return p;
    }
    if (*n == PROFILE_PRODUCTS) return &list[*n - 1];
    ProfileProduct *p = &list[(*n)++];
    *p = *from;
    if (*n == PROFILE_PRODUCTS) *p = (ProfileProduct){other, 0, -1, -1, from->mlo, from->mhi, from->klo, from->khi, {0}};
    p->c = (ProfileCounts){0};
    return p;
}

// The entry of kernel `name` in list (n entries), added if new (names are the watched twins'
// __func__ strings: one pointer per kernel).
static ProfileKernel *kernel_entry(ProfileKernel *list, int *n, const char *name, int family) {
    for (int i = 0; i < *n; i++)
        if (list[i].name == name) return &list[i];
    if (*n == PROFILE_KERNELS) die("the profile has room for %d kernels", PROFILE_KERNELS);
    list[*n] = (ProfileKernel){name, family, {0}};
    return &list[(*n)++];
}

static void widen(ProfileProduct *p, const ProfileProduct *q) {
    if (q->mlo < p->mlo) p->mlo = q->mlo;
    if (q->mhi > p->mhi) p->mhi = q->mhi;
    if (q->klo < p->klo) p->klo = q->klo;
    if (q->khi > p->khi) p->khi = q->khi;
}

static void leave(int family, double flops, double bytes) {
    if (npending == cappending) {
        cappending = cappending ? 2 * cappending : 1024;
        pending = realloc(pending, sizeof(Pending) * cappending);
        if (!pending) die("out of host memory for the profile's %zu kernel calls", cappending);
    }
    Pending *k = &pending[npending++];
    *k = (Pending){family, watch_kernel, flops, bytes, {0}, started, mark()};
    if (family != FAMILY_MATMUL) return;
    const WatchProduct *w = &watch_product;
    k->key = (ProfileProduct){w->form, w->N, log2_floor(w->M), log2_floor(w->K), w->M, w->M, w->K, w->K, {0}};
}

// Each pending call's time read off its marks and added to its family's counters (and its
// product class's), the marks handed back.
static void resolve(void) {
    for (size_t i = 0; i < npending; i++) {
        const Pending *k = &pending[i];
        double ms = timed_backend->elapsed_ms ? timed_backend->elapsed_ms(k->start, k->end)
                                              : host_elapsed_ms(k->start, k->end);
        add_counts(&counts[k->family], 1, ms, k->flops, k->bytes);
        add_counts(&kernel_entry(kernels, &nkernels, k->kernel, k->family)->c, 1, ms, k->flops, k->bytes);
        if (k->family != FAMILY_MATMUL) continue;
        ProfileProduct *p = product_class(products, &nproducts, &k->key);
        widen(p, &k->key);
        add_counts(&p->c, 1, ms, k->flops, k->bytes);
    }
    npending = 0;
    if (timed_backend->marks_release) timed_backend->marks_release();
    else host_marks_release();
}

const Backend *profile_backend(const Backend *timed) {
    timed_backend = timed;
    return watch_backend(timed, NULL, (WatchHooks){enter, leave});
}

void profile_take(ProfileCounts *acc) {
    resolve();
    for (int f = 0; acc && f < FAMILY_COUNT; f++) {
        acc[f].calls += counts[f].calls;
        acc[f].ms += counts[f].ms;
        acc[f].flops += counts[f].flops;
        acc[f].bytes += counts[f].bytes;
    }
    memset(counts, 0, sizeof counts);
}

void profile_take_products(ProfileProduct *acc, int *n) {
    resolve();
    for (int i = 0; acc && i < nproducts; i++) {
        ProfileProduct *p = product_class(acc, n, &products[i]);
        widen(p, &products[i]);
        add_counts(&p->c, products[i].c.calls, products[i].c.ms, products[i].c.flops, products[i].c.bytes);
    }
    nproducts = 0;
}

void profile_take_kernels(ProfileKernel *acc, int *n) {
    resolve();
    for (int i = 0; acc && i < nkernels; i++) {
        const ProfileCounts *c = &kernels[i].c;
        add_counts(&kernel_entry(acc, n, kernels[i].name, kernels[i].family)->c, c->calls, c->ms, c->flops, c->bytes);
    }
    nkernels = 0;
}

void profile_discard(void) {
    profile_take(NULL);
    profile_take_products(NULL, NULL);
    profile_take_kernels(NULL, NULL);
}

const char *profile_family_name(int family) {
    static const char *names[FAMILY_COUNT] = {"matmul", "norm",   "rope", "embedding", "attention",
                                              "mla",    "router", "moe",  "mlp",       "loss",
                                              "cast",   "sum",    "optim", "init"};
    return family >= 0 && family < FAMILY_COUNT ? names[family] : "?";
}
