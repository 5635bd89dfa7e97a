// kernels/profile.h: where a step's time goes, kernel family by kernel family
// (profile=true). The profile is a watcher of the kernels (kernels/watch.h): each call adds
// its time (the host's clock on the CPU, the device's events on a GPU), its floating-point
// operations and the bytes it must move at least (each operand read once, each result
// written once) to the calling thread's counters. A device
// is one thread, so the counters are that device's; the OpenMP threads a kernel starts are
// inside the call and timed with it.
#ifndef MESHMOE_KERNELS_PROFILE_H
#define MESHMOE_KERNELS_PROFILE_H
#include "kernels/watch.h"

typedef struct ProfileCounts {
    long calls;
    double ms;      // time inside the family's kernels
    double flops;   // floating-point operations executed (attention: the visible causal part)
    double bytes;   // operands read once and results written once
} ProfileCounts;

// The matmul family's calls by product: form (kernels/watch.h:WatchProduct), N, and the
// power-of-two classes of M and K (the rows an expert gets change from step to step), with
// the smallest and largest M and K seen in the class.
typedef struct ProfileProduct {
    const char *form;
    int N, mclass, kclass;        // mclass, kclass: floor(log2) of M and K
    int mlo, mhi, klo, khi;
    ProfileCounts c;
} ProfileProduct;
enum { PROFILE_PRODUCTS = 96 };   // classes kept, the last "other shapes": the calls of any more go there

// Each kernel's calls (kernels/kernels.h's names, e.g. flash_forward, rmsnorm_dscale_leaf):
// where a family's time goes.
typedef struct ProfileKernel {
    const char *name;
    int family;
    ProfileCounts c;
} ProfileKernel;
enum { PROFILE_KERNELS = 128 };   // more than the Backend table has

// The profile over `timed` (backend_cpu, the plain one, or the strict mode's watched
// backend): the process's one profile, set up once before the devices start.
const Backend *profile_backend(const Backend *timed);

// The calling thread's counters added to acc (FAMILY_COUNT of them; NULL: dropped), then
// zeroed: what the thread's kernels did since the last take.
void profile_take(ProfileCounts *acc);
const char *profile_family_name(int family);
// The calling thread's products since the last take merged into acc (n of them, at most
// PROFILE_PRODUCTS; NULL: dropped), then zeroed.
void profile_take_products(ProfileProduct *acc, int *n);
// The same for the calls by kernel (n of them, at most PROFILE_KERNELS).
void profile_take_kernels(ProfileKernel *acc, int *n);
// Everything the calling thread counted since the last take dropped (kernels outside a step).
void profile_discard(void);

#endif
