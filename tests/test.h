// tests/test.h: a tiny test harness. Each test binary includes it, calls CHECK* and
// ends with TEST_SUMMARY(), which prints "N passed, N failed" and returns non-zero on
// any failure. A check prints what it compared, so a reader sees the numbers.
#ifndef MESHMOE_TEST_H
#define MESHMOE_TEST_H
#include <stdio.h>
#include <math.h>

static int test_passed, test_failed;

#define CHECK(cond, ...) do {                                              \
    if (cond) { test_passed++; }                                           \
    else { test_failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__);      \
           printf(__VA_ARGS__); printf("\n"); }                            \
} while (0)

// CHECK_CLOSE: |got - want| <= tol, both printed on failure.
#define CHECK_CLOSE(got, want, tol, what) do {                             \
    double g_ = (got), w_ = (want);                                        \
    CHECK(fabs(g_ - w_) <= (tol), "%s: got %.9g want %.9g (tol %.3g)",     \
          (what), g_, w_, (double)(tol));                                  \
} while (0)

// The larger of a running maximum and a new difference, NaN kept once met (fmax drops a NaN,
// and a test `d > m` is false for one: a NaN result would pass a bound).
static inline double max_keep_nan(double m, double d) { return isnan(m) || isnan(d) ? NAN : fmax(m, d); }

// A test binary that checked nothing fails (a loop that ran zero times is no test).
#define TEST_SUMMARY() do {                                                \
    if (test_passed + test_failed == 0) { test_failed++; printf("FAIL: no check ran\n"); } \
    printf("%d passed, %d failed\n", test_passed, test_failed);            \
    return test_failed ? 1 : 0;                                            \
} while (0)

#endif
