// base/fresh.c: gradient memory known to hold zeros (base/fresh.h). The claimed blocks are
// kept sorted by address and disjoint, so a claim is a binary search and an insertion: a
// step claims a few thousand blocks at most (deepseek-small: a block per expert matrix).
#include "base/fresh.h"
#include "base/memory.h"
#include "kernels/kernels.h"   // kern()->mem->to_host, for the check
#include "core/common.h"       // die
#include <stdlib.h>
#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(MESHMOE_POISON_UNINIT)
#define FRESH_CHECK 1
#else
#define FRESH_CHECK 0
#endif

typedef struct { uintptr_t lo, hi; } Span;   // [lo, hi) in bytes

struct FreshGrads {
    Span armed;
    Span *claims;   // sorted by lo, disjoint
    size_t n, cap;
};

void fresh_arm(float *p, size_t n) {
    Device *d = mem_device();
    if (!d->fresh) {
        d->fresh = calloc(1, sizeof *d->fresh);
        if (!d->fresh) die("out of host memory for the gradients' fresh-block records");
    }
    d->fresh->armed = (Span){(uintptr_t)p, (uintptr_t)(p + n)};
    d->fresh->n = 0;
}

void fresh_disarm(void) {
    Device *d = mem_device();
    if (!d->fresh) return;
    free(d->fresh->claims);
    free(d->fresh);
    d->fresh = NULL;
}

// The first claim whose end lies above lo (claims[i].hi > lo), or n.
static size_t first_after(const struct FreshGrads *f, uintptr_t lo) {
    size_t a = 0, b = f->n;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (f->claims[m].hi > lo) b = m;
        else a = m + 1;
    }
    return a;
}

// The block read back: every float +0.0f or -0.0f, else the claim was wrong.
static void check_zeros(const float *p, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    if (!h) die("out of host memory to check a fresh gradient block of %zu floats", n);
    kern()->mem->to_host(h, p, sizeof(float) * n);
    for (size_t i = 0; i < n; i++)
        if (h[i] != 0.0f) die("internal: a gradient block claimed as fresh holds %g at element %zu of %zu", h[i], i, n);
    free(h);
}

// Records [s.lo, s.hi) among the claims: 1 if it overlapped none (a new claim), 0 if it
// overlapped some (merged with them into one).
static int record(struct FreshGrads *f, Span s) {
    size_t i = first_after(f, s.lo);
    if (i < f->n && f->claims[i].lo < s.hi) {   // overlaps claim i: widen it over the new block
        if (s.lo < f->claims[i].lo) f->claims[i].lo = s.lo;
        if (s.hi > f->claims[i].hi) f->claims[i].hi = s.hi;
        while (i + 1 < f->n && f->claims[i + 1].lo < f->claims[i].hi) {   // and merge those it now reaches
            if (f->claims[i + 1].hi > f->claims[i].hi) f->claims[i].hi = f->claims[i + 1].hi;
            memmove(f->claims + i + 1, f->claims + i + 2, sizeof(Span) * (f->n - i - 2));
            f->n--;
        }
        return 0;
    }
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 256;
        f->claims = realloc(f->claims, sizeof(Span) * f->cap);
        if (!f->claims) die("out of host memory for the gradients' fresh-block records");
    }
    memmove(f->claims + i + 1, f->claims + i, sizeof(Span) * (f->n - i));
    f->claims[i] = s;
    f->n++;
    return 1;
}

// The armed device's record of [p, p + n floats), if the block lies in its armed region.
static struct FreshGrads *armed_for(float *p, size_t n, Span *s) {
    struct FreshGrads *f = mem_device()->fresh;
    *s = (Span){(uintptr_t)p, (uintptr_t)(p + n)};
    return f && n && s->lo >= f->armed.lo && s->hi <= f->armed.hi ? f : NULL;
}

int fresh_claim(float *p, size_t n) {
    Span s;
    struct FreshGrads *f = armed_for(p, n, &s);
    if (!f || !record(f, s)) return 0;
    if (FRESH_CHECK && !mem_dry()) check_zeros(p, n);
    return 1;
}

void fresh_touch(float *p, size_t n) {
    Span s;
    struct FreshGrads *f = armed_for(p, n, &s);
    if (f) record(f, s);
}
