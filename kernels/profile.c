// kernels/profile.c: the profile (kernels/profile.h), a watcher of the kernels
// (kernels/watch.h): the clock read before each kernel, and after it the time, the call
// and the kernel's work added to its family's counters.
#include "kernels/profile.h"
#include <string.h>
#include <time.h>

static _Thread_local ProfileCounts counts[FAMILY_COUNT];
static _Thread_local double started;   // when the kernel now running began (kernels do not nest)

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

static void leave(int family, double flops, double bytes) {
    kern_sync();
    ProfileCounts *c = &counts[family];
    c->calls++;
    c->ms += now_ms() - started;
    c->flops += flops;
    c->bytes += bytes;
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

const char *profile_family_name(int family) {
    static const char *names[FAMILY_COUNT] = {"matmul", "norm",   "rope", "embedding", "attention",
                                              "mla",    "router", "moe",  "mlp",       "loss",
                                              "cast",   "sum",    "optim", "init"};
    return family >= 0 && family < FAMILY_COUNT ? names[family] : "?";
}
