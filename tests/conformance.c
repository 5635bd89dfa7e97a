// tests/conformance.c: the conformance test's harness (tests/conformance.h).
#include "tests/conformance.h"
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef MESHMOE_CONFORMANCE_GPU
#include "gpu/backend.h"
const Backend *const UNDER_TEST = &backend_cuda;
const Backend *const ORACLE = &backend_cpu;
#else
const Backend *const UNDER_TEST = &backend_cpu;
const Backend *const ORACLE = NULL;
#endif

int tol(int ulps) { return ORACLE ? ulps : 0; }
int bf16_tol(int bf16, int ulps) { return tol(bf16 ? (ulps ? BF16_ULPS : 0) : ulps); }
float scale_tol(const float *want, size_t n, int ulps) {
    float top = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (isfinite(want[i]) && fabsf(want[i]) > top) top = fabsf(want[i]);
    return ORACLE ? ulps * FLT_EPSILON * top : 0.0f;
}

int checks_passed, checks_failed;
void check(int ok, const char *fmt, ...) {
    if (ok) { checks_passed++; return; }
    checks_failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("  FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

void skipped(const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (getenv("CONFORMANCE_NO_SKIP")) check(0, "%s (CONFORMANCE_NO_SKIP: every part must run here)", what);
    else printf("  %s\n", what);
}

float ref_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// ---- the memory of the backend under test: host buffers, or the GPU's ----
void *dev_alloc(size_t bytes) {
#ifdef MESHMOE_CONFORMANCE_GPU
    return gpu_alloc(bytes);
#else
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "conformance: out of memory\n"); exit(1); }
    return p;
#endif
}
void dev_free(void *p) {
#ifdef MESHMOE_CONFORMANCE_GPU
    gpu_free(p);
#else
    free(p);
#endif
}
void dev_upload(void *dev, const void *host, size_t bytes) {
#ifdef MESHMOE_CONFORMANCE_GPU
    gpu_upload(dev, host, bytes);
#else
    memcpy(dev, host, bytes);
#endif
}
void dev_download(void *host, const void *dev, size_t bytes) {
#ifdef MESHMOE_CONFORMANCE_GPU
    gpu_download(host, dev, bytes);
#else
    memcpy(host, dev, bytes);
#endif
}

// A device copy of host data, and a device array poisoned with all-ones bytes (a NaN as a
// float or a double, -1 as an int) so that an element the kernel does not write fails.
void *dev_copy(const void *host, size_t bytes) {
    void *d = dev_alloc(bytes);
    dev_upload(d, host, bytes);
    return d;
}
void *dev_poisoned(size_t bytes) {
    void *d = dev_alloc(bytes);
#ifdef MESHMOE_CONFORMANCE_GPU
    gpu_fill_bytes(d, 0xff, bytes);   // on the stream, before the kernel that runs next
#else
    memset(d, 0xff, bytes);
#endif
    return d;
}
// The device array's contents in a new host buffer (the caller frees it).
void *dev_fetch(const void *dev, size_t bytes) {
    void *host = malloc(bytes ? bytes : 1);
    dev_download(host, dev, bytes);
    return host;
}

// ---- random inputs: fresh each run, from a seed that is printed (CONFORMANCE_SEED repeats one) ----
static uint64_t rng_state;
uint64_t rng_next(void) {   // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (float)((rng_next() >> 40) * 0x1p-24); }
int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }
float *rand_floats(size_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
    return x;
}
int *rand_ints(size_t n, int lo, int hi) {   // uniform in [lo, hi)
    int *x = malloc(sizeof(int) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = lo + rng_int(hi - lo);
    return x;
}
void *copy_of(const void *x, size_t bytes) { return memcpy(malloc(bytes ? bytes : 1), x, bytes); }

// ---- comparisons ----
// The distance in units in the last place between two finite floats of any sign.
static int64_t ulp_distance(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    int64_t x = ia < 0 ? (int64_t)INT32_MIN - ia : ia, y = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return x > y ? x - y : y - x;
}

// got (n) against want (n): equal bits, or (ulps > 0) both finite and within ulps, or within
// abs_tol (for values that come out of a cancellation, where ulps of the result say little).
// One check per array; a failure names the kernel, the shape, the first bad index, both
// values and how many elements differ.
void compare_floats(const char *kernel, const char *shape, const float *want, const float *got, size_t n,
                           int ulps, float abs_tol) {
    size_t bad = 0, first = 0;
    int64_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        int same = !memcmp(&want[i], &got[i], 4);
        int64_t d = ulp_distance(want[i], got[i]);
        int finite = isfinite(want[i]) && isfinite(got[i]);
        int ok = same || (finite && ((ulps > 0 && d <= ulps) || fabsf(want[i] - got[i]) <= abs_tol));
        if (finite && d > worst) worst = d;
        if (!ok && bad++ == 0) first = i;
    }
    check(bad == 0, "%s %s: %zu of %zu differ (tolerance %d ulp, abs %g); first at [%zu]: want %.9g (%a) got %.9g (%a)",
          kernel, shape, bad, n, ulps, (double)abs_tol, first, n ? want[first] : 0.0f, n ? want[first] : 0.0f,
          n ? got[first] : 0.0f, n ? got[first] : 0.0f);   // (n = 0: nothing to read)
    if (bad == 0 && worst > 0) printf("  %s %s: within %lld ulp\n", kernel, shape, (long long)worst);
}

void compare_ints(const char *kernel, const char *shape, const int *want, const int *got, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i] && bad++ == 0) first = i;
    check(bad == 0, "%s %s: %zu of %zu differ; first at [%zu]: want %d got %d", kernel, shape, bad, n, first,
          n ? want[first] : 0, n ? got[first] : 0);
}

void compare_doubles(const char *kernel, const char *shape, const double *want, const double *got, size_t n,
                            double rel_tol) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = !memcmp(&want[i], &got[i], 8) || fabs(want[i] - got[i]) <= rel_tol * fabs(want[i]);
        if (!ok && bad++ == 0) first = i;
    }
    check(bad == 0, "%s %s: %zu of %zu differ (rel tolerance %g); first at [%zu]: want %.17g got %.17g", kernel, shape,
          bad, n, rel_tol, first, n ? want[first] : 0.0, n ? got[first] : 0.0);
}

// The device result of a float kernel against the expected host array; frees nothing.
void check_dev_floats(const char *kernel, const char *shape, const float *want, const float *dev, size_t n,
                             int ulps, float abs_tol) {
    float *got = dev_fetch(dev, sizeof(float) * n);
    compare_floats(kernel, shape, want, got, n, ulps, abs_tol);
    free(got);
}
void check_dev_ints(const char *kernel, const char *shape, const int *want, const int *dev, size_t n) {
    int *got = dev_fetch(dev, sizeof(int) * n);
    compare_ints(kernel, shape, want, got, n);
    free(got);
}

// Seeds the generator from CONFORMANCE_SEED or the clock, and says which.
void conformance_begin(void) {
    const char *s = getenv("CONFORMANCE_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_state = seed ? seed : 1;
    printf("conformance: backend %s against %s, seed %llu (CONFORMANCE_SEED=%llu repeats it)\n", UNDER_TEST->name,
           ORACLE ? ORACLE->name : "the test's plain loops", (unsigned long long)seed, (unsigned long long)seed);
}

