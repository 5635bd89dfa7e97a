// report/profile.h: profile=true's table, where a device's training steps went by kernel
// family (kernels/profile.h counts them).
#ifndef MESHMOE_REPORT_PROFILE_H
#define MESHMOE_REPORT_PROFILE_H
#include "kernels/profile.h"

typedef struct StepProfile {
    ProfileCounts fam[FAMILY_COUNT];   // summed over the counted steps
    ProfileProduct prod[PROFILE_PRODUCTS];   // the matmul family's calls by product
    int nprod;
    ProfileKernel kern[PROFILE_KERNELS];     // the calls by kernel
    int nkern;
    double step_ms;                     // their wall time
    int steps;
} StepProfile;

// After a step of step_ms: the calling device's kernel counts since the step began added in.
void step_profile_add(StepProfile *p, double step_ms);
// Per step, for each family that ran: calls, ms, share of the step, GFLOP and GB, GFLOP/s
// and GB/s; then the kernels' total and the time between kernels (collectives, the
// allocator, the layers' own loops). Then the products that took longest, by form and
// shape (kernels/profile.h:ProfileProduct): where the matmul family's time goes.
void step_profile_print(const StepProfile *p);
void step_profile_print_products(const StepProfile *p);
// The kernels that took longest, each with its family, calls, ms, GFLOP/s and GB/s: where a
// family's time goes (attention's forward or backward, a norm's rows or its scale's leaves).
void step_profile_print_kernels(const StepProfile *p);

#endif
