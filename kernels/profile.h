// kernels/profile.h: where a step's time goes, kernel family by kernel family
// (profile=true). The profile backend is another backend with every kernel timed: each call
// adds its wall time, its floating-point operations and the bytes it must move at least
// (each operand read once, each result written once) to the calling thread's counters. A
// device is one thread, so the counters are that device's; the OpenMP threads a kernel
// starts are inside the call and timed with it.
#ifndef MESHMOE_KERNELS_PROFILE_H
#define MESHMOE_KERNELS_PROFILE_H
#include "kernels/kernels.h"

// The families in the order of the Backend table (kernels/kernels.h).
enum {
    PROF_MATMUL, PROF_NORM, PROF_ROPE, PROF_EMBEDDING, PROF_ATTENTION, PROF_MLA, PROF_ROUTER, PROF_MOE,
    PROF_MLP, PROF_LOSS, PROF_CAST, PROF_SUM, PROF_OPTIM, PROF_INIT, PROF_FAMILIES
};

typedef struct ProfileCounts {
    long calls;
    double ms;      // wall time inside the family's kernels
    double flops;   // floating-point operations executed (attention: the visible causal part)
    double bytes;   // operands read once and results written once
} ProfileCounts;

// The profile backend over `timed` (backend_cpu, or the plain one): the process's one
// profile backend, set up once before the devices start.
const Backend *profile_backend(const Backend *timed);

// The calling thread's counters added to acc (PROF_FAMILIES of them; NULL: dropped), then
// zeroed: what the thread's kernels did since the last take.
void profile_take(ProfileCounts *acc);
const char *profile_family_name(int family);

#endif
