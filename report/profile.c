// report/profile.c: profile=true's table (report/profile.h).
#include "report/profile.h"
#include <stdio.h>

void step_profile_add(StepProfile *p, double step_ms) {
    profile_take(p->fam);
    p->step_ms += step_ms;
    p->steps++;
}

void step_profile_print(const StepProfile *p) {
    if (p->steps == 0) {
        printf("profile: no step counted (the first step is not: it touches every buffer first); run steps >= 2\n");
        return;
    }
    double n = p->steps, step = p->step_ms / n, kern_ms = 0;
    printf("profile: device 0, mean of %d step%s after the first, %.2f ms per step\n", p->steps,
           p->steps > 1 ? "s" : "", step);
    printf("| kernel family | calls/step | ms/step | %% of step | GFLOP/step | GB/step | GFLOP/s | GB/s |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int f = 0; f < FAMILY_COUNT; f++) {
        const ProfileCounts *c = &p->fam[f];
        if (c->calls == 0) continue;
        double ms = c->ms / n, s = c->ms / 1e3;
        kern_ms += ms;
        printf("| %s | %.0f | %.2f | %.1f%% | %.4f | %.4f | %.1f | %.1f |\n", profile_family_name(f), c->calls / n, ms,
               100 * ms / step, c->flops / n / 1e9, c->bytes / n / 1e9, s > 0 ? c->flops / s / 1e9 : 0,
               s > 0 ? c->bytes / s / 1e9 : 0);
    }
    printf("| all kernels | | %.2f | %.1f%% | | | | |\n", kern_ms, 100 * kern_ms / step);
    printf("| between kernels | | %.2f | %.1f%% | | | | |\n", step - kern_ms, 100 * (step - kern_ms) / step);
}
