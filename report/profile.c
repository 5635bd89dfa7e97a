// report/profile.c: profile=true's table (report/profile.h).
#include "report/profile.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void step_profile_add(StepProfile *p, double step_ms) {
    profile_take(p->fam);
    profile_take_products(p->prod, &p->nprod);
    profile_take_kernels(p->kern, &p->nkern);
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

// A copy of the n rows at rows (each `size` bytes) sorted by cmp; NULL when memory is short.
static void *sorted_copy(const void *rows, int n, size_t size, int (*cmp)(const void *, const void *)) {
    void *sorted = malloc(size * (size_t)n);
    if (!sorted) return NULL;
    memcpy(sorted, rows, size * (size_t)n);
    qsort(sorted, (size_t)n, size, cmp);
    return sorted;
}

static void add_rest(ProfileCounts *rest, const ProfileCounts *c) {
    rest->calls += c->calls;
    rest->ms += c->ms;
    rest->flops += c->flops;
    rest->bytes += c->bytes;
}

enum { PRODUCT_ROWS = 16 };   // the products listed; the rest are added up in one row

static int by_time(const void *a, const void *b) {
    double x = ((const ProfileProduct *)a)->c.ms, y = ((const ProfileProduct *)b)->c.ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

// "lo" or "lo-hi"
static const char *range(char *buf, size_t size, int lo, int hi) {
    if (lo == hi) snprintf(buf, size, "%d", lo);
    else snprintf(buf, size, "%d-%d", lo, hi);
    return buf;
}

static void product_row(const char *what, const char *m, int N, const char *k, const ProfileCounts *c, double n,
                        double matmul_ms) {
    double ms = c->ms / n, s = c->ms / 1e3;
    char nb[16] = "";
    if (N > 0) snprintf(nb, sizeof nb, "%d", N);
    printf("| %s | %s | %s | %s | %.0f | %.2f | %.1f%% | %.1f |\n", what, m, nb, k, c->calls / n, ms,
           matmul_ms > 0 ? 100 * ms / matmul_ms : 0, s > 0 ? c->flops / s / 1e9 : 0);
}

void step_profile_print_products(const StepProfile *p) {
    if (p->steps == 0 || p->nprod == 0) return;
    double n = p->steps, matmul_ms = p->fam[FAMILY_MATMUL].ms / n;
    ProfileProduct *sorted = sorted_copy(p->prod, p->nprod, sizeof *sorted, by_time);
    if (!sorted) return;
    printf("products: the matmul family by form and shape, C (M,N) = op(A) (M,K) @ op(B) (K,N), M and K as seen\n");
    printf("| product | M | N | K | calls/step | ms/step | %% of matmul | GFLOP/s |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    ProfileCounts rest = {0};
    for (int i = 0; i < p->nprod; i++) {
        const ProfileProduct *q = &sorted[i];
        if (i >= PRODUCT_ROWS) {
            add_rest(&rest, &q->c);
            continue;
        }
        char m[32], k[32];
        product_row(q->form, range(m, sizeof m, q->mlo, q->mhi), q->N, range(k, sizeof k, q->klo, q->khi), &q->c, n,
                    matmul_ms);
    }
    if (p->nprod > PRODUCT_ROWS) product_row("the other products", "", 0, "", &rest, n, matmul_ms);
    free(sorted);
}

enum { KERNEL_ROWS = 20 };   // the kernels listed; the rest are added up in one row

static int kernel_by_time(const void *a, const void *b) {
    double x = ((const ProfileKernel *)a)->c.ms, y = ((const ProfileKernel *)b)->c.ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void kernel_row(const char *name, const char *family, const ProfileCounts *c, double n, double step) {
    double ms = c->ms / n, s = c->ms / 1e3;
    printf("| %s | %s | %.0f | %.2f | %.1f%% | %.1f | %.1f |\n", name, family, c->calls / n, ms, 100 * ms / step,
           s > 0 ? c->flops / s / 1e9 : 0, s > 0 ? c->bytes / s / 1e9 : 0);
}

void step_profile_print_kernels(const StepProfile *p) {
    if (p->steps == 0 || p->nkern == 0) return;
    double n = p->steps, step = p->step_ms / n;
    ProfileKernel *sorted = sorted_copy(p->kern, p->nkern, sizeof *sorted, kernel_by_time);
    if (!sorted) return;
    printf("kernels: the calls by kernel (kernels/kernels.h's names), longest first\n"
           "| kernel | family | calls/step | ms/step | %% of step | GFLOP/s | GB/s |\n|---|---|---|---|---|---|---|\n");
    ProfileCounts rest = {0};
    for (const ProfileKernel *k = sorted; k < sorted + p->nkern; k++) {
        if (k - sorted < KERNEL_ROWS) kernel_row(k->name, profile_family_name(k->family), &k->c, n, step);
        else add_rest(&rest, &k->c);
    }
    if (p->nkern > KERNEL_ROWS) kernel_row("the other kernels", "", &rest, n, step);
    free(sorted);
}
