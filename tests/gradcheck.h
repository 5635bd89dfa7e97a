// tests/gradcheck.h: finite-difference checks of hand-written backward passes.
//
// For an op y = f(p) and a fixed random projection R, the scalar L(p) = sum(y * R) has
// gradient dL/dp = backward(dout = R). We compare the analytic gradient with central
// differences (L(p + h d) - L(p - h d)) / 2h, both along a random direction d (checks
// every coordinate at once) and coordinate by coordinate on the largest entries.
// L is accumulated in double so the difference quotient is not drowned in float32 noise;
// h is chosen relative to the parameter scale. The relative error is printed and bounded.
#ifndef MESHMOE_GRADCHECK_H
#define MESHMOE_GRADCHECK_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "tests/test.h"

static inline uint64_t gc_next(uint64_t *s) {   // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float gc_uniform(uint64_t *s) { return (float)((gc_next(s) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static inline void gc_fill(float *x, long n, uint64_t *seed, float scale) {
    for (long i = 0; i < n; i++) x[i] = scale * gc_uniform(seed);
}
static inline double gc_dot(const float *a, const float *b, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// loss(ctx) must run the forward pass from the current parameter values and return
// sum(y * R) in double. grad is the analytic gradient of that loss w.r.t. p (n floats).
// Returns the worst relative error found; checks it against tol.
static double gradcheck(const char *name, float *p, long n, const float *grad,
                        double (*loss)(void *), void *ctx, double h, double tol) {
    uint64_t seed = 12345;
    double worst = 0;
    // 1. Along a random direction d.
    float *saved = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) saved[i] = p[i];
    gc_fill(d, n, &seed, 1.0f);
    for (long i = 0; i < n; i++) p[i] = saved[i] + (float)h * d[i];
    double lp = loss(ctx);
    for (long i = 0; i < n; i++) p[i] = saved[i] - (float)h * d[i];
    double lm = loss(ctx);
    for (long i = 0; i < n; i++) p[i] = saved[i];
    double num = (lp - lm) / (2 * h), ana = gc_dot(grad, d, n);
    double err = fabs(num - ana) / fmax(fabs(num) + fabs(ana), 1e-6);
    if (!(err <= worst)) worst = err;   // (a NaN is kept: fmax would drop it)
    printf("  gradcheck %-28s direction: analytic %+.6e numeric %+.6e rel err %.2e\n", name, ana, num, err);
    // 2. The three largest-|grad| coordinates.
    double gmax = 0;
    for (long i = 0; i < n; i++) gmax = fmax(gmax, fabs(grad[i]));
    long picked[3] = {-1, -1, -1};
    for (int k = 0; k < 3 && k < n; k++) {
        long best = -1;
        for (long i = 0; i < n; i++) {
            if (i == picked[0] || i == picked[1]) continue;
            if (best < 0 || fabs(grad[i]) > fabs(grad[best])) best = i;
        }
        picked[k] = best;
        float x0 = p[best];
        p[best] = x0 + (float)h; lp = loss(ctx);
        p[best] = x0 - (float)h; lm = loss(ctx);
        p[best] = x0;
        // the float32 step actually taken is (x0+h)-(x0-h) as rounded
        double step = (double)(x0 + (float)h) - (double)(x0 - (float)h);
        num = (lp - lm) / step;
        err = fabs(num - grad[best]) / fmax(fabs(num) + fabs(grad[best]), 1e-3 * gmax + 1e-9);
        if (!(err <= worst)) worst = err;
    }
    long nonfinite = 0;   // (a NaN gradient is neither the largest nor the direction's whole sum)
    for (long i = 0; i < n; i++) nonfinite += !isfinite(grad[i]);
    CHECK(nonfinite == 0, "gradcheck %s: %ld gradient entries are not finite", name, nonfinite);
    printf("  gradcheck %-28s largest coords: worst rel err %.2e\n", name, worst);
    CHECK(worst <= tol, "gradcheck %s: relative error %.3e > %.1e", name, worst, tol);
    free(saved); free(d);
    return worst;
}
#endif
