// kernels/profile.c: the profile (kernels/profile.h), a watcher of the kernels
// (kernels/watch.h): the clock read before each kernel, and after it the time, the call
// and the kernel's work added to its family's counters.
#include "kernels/profile.h"
#include <string.h>
#include <time.h>

static _Thread_local ProfileCounts counts[FAMILY_COUNT];
static _Thread_local double started;   // when the kernel now running began (kernels do not nest)
static _Thread_local ProfileProduct products[PROFILE_PRODUCTS];
static _Thread_local int nproducts;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// On a GPU a kernel call returns once the kernel is queued: both ends wait for the device's
// queue (kern_sync; nothing on the CPU), so a kernel's time is its execution, not its launch,
// and the work queued before it is not counted in it.
static void enter(int family) {
    (void)family;
    kern_sync();
    started = now_ms();
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

static void widen(ProfileProduct *p, const ProfileProduct *q) {
    if (q->mlo < p->mlo) p->mlo = q->mlo;
    if (q->mhi > p->mhi) p->mhi = q->mhi;
    if (q->klo < p->klo) p->klo = q->klo;
    if (q->khi > p->khi) p->khi = q->khi;
}

static void leave(int family, double flops, double bytes) {
    kern_sync();
    double ms = now_ms() - started;
    add_counts(&counts[family], 1, ms, flops, bytes);
    if (family != FAMILY_MATMUL) return;
    const WatchProduct *w = &watch_product;
    ProfileProduct key = {w->form, w->N, log2_floor(w->M), log2_floor(w->K), w->M, w->M, w->K, w->K, {0}};
    ProfileProduct *p = product_class(products, &nproducts, &key);
    widen(p, &key);
    add_counts(&p->c, 1, ms, flops, bytes);
}

const Backend *profile_backend(const Backend *timed) {
    return watch_backend(timed, NULL, (WatchHooks){enter, leave});
}

void profile_take(ProfileCounts *acc) {
    for (int f = 0; acc && f < FAMILY_COUNT; f++) {
        acc[f].calls += counts[f].calls;
        acc[f].ms += counts[f].ms;
        acc[f].flops += counts[f].flops;
        acc[f].bytes += counts[f].bytes;
    }
    memset(counts, 0, sizeof counts);
}

void profile_take_products(ProfileProduct *acc, int *n) {
    for (int i = 0; acc && i < nproducts; i++) {
        ProfileProduct *p = product_class(acc, n, &products[i]);
        widen(p, &products[i]);
        add_counts(&p->c, products[i].c.calls, products[i].c.ms, products[i].c.flops, products[i].c.bytes);
    }
    nproducts = 0;
}

const char *profile_family_name(int family) {
    static const char *names[FAMILY_COUNT] = {"matmul", "norm",   "rope", "embedding", "attention",
                                              "mla",    "router", "moe",  "mlp",       "loss",
                                              "cast",   "sum",    "optim", "init"};
    return family >= 0 && family < FAMILY_COUNT ? names[family] : "?";
}
