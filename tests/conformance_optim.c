// tests/conformance_optim.c: the conformance tests (tests/conformance.h) of the optimizer's
// kernels and of the parameters' initialisation.
#include "tests/conformance.h"
#include "kernels/bf16.h"   // bf16_bits: the 16-bit copy AdamW may write
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- optim
// The device's 16-bit array dev (n) against want: each value as an int, compare_ints's check.
static void check_dev_bits16(const char *kernel, const char *shape, const uint16_t *want, const uint16_t *dev,
                             size_t n) {
    uint16_t *got = dev_fetch(dev, sizeof(uint16_t) * n);
    int *w = malloc(sizeof(int) * n), *g = malloc(sizeof(int) * n);
    for (size_t i = 0; i < n; i++) w[i] = want[i], g[i] = got[i];
    compare_ints(kernel, shape, w, g, n);
    free(got); free(w); free(g);
}

static void test_optim_elementwise(void) {
    size_t n = 3000;
    float *p0 = rand_floats(n, -1, 1), *g = rand_floats(n, -1, 1), *m0 = rand_floats(n, -0.1f, 0.1f);
    float *v0 = rand_floats(n, 0, 0.01f), *p = copy_of(p0, sizeof(float) * n), *m = copy_of(m0, sizeof(float) * n);
    float *v = copy_of(v0, sizeof(float) * n), *sgd = copy_of(p0, sizeof(float) * n);
    float *clip = copy_of(g, sizeof(float) * n);
    // The same updates reading g clipped (GradClip: norm 3.5, threshold 1): pc, mc, vc, sgdc.
    float *pc = copy_of(p0, sizeof(float) * n), *mc = copy_of(m0, sizeof(float) * n);
    float *vc = copy_of(v0, sizeof(float) * n), *sgdc = copy_of(p0, sizeof(float) * n);
    GradClip off = {0, 0.0f, 0.0f}, on = {1, 3.5f, 1.0f};
    float *ema = copy_of(m0, sizeof(float) * n), *af_p = copy_of(p0, sizeof(float) * n);
    float *af_g = copy_of(g, sizeof(float) * n), *af_v = copy_of(v0, sizeof(float) * n);
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    int t = 7;
    AdamWParams h = {lr, t, b1, b2, eps, 0.0f, wd, 0, 0};
    if (ORACLE) {
        const OptimKernels *o = ORACLE->optim;
        o->adamw_update(p, NULL, g, m, NULL, v, n, h, off);
        o->sgd_update(sgd, g, n, lr, off);
        o->adamw_update(pc, NULL, g, mc, NULL, vc, n, h, on);
        o->sgd_update(sgdc, g, n, lr, on);
        o->clip_scale(clip, n, 3.5f, 1.0f);
        o->ema_update(ema, p0, n, 0.99f);
        o->adafactor_scale_full(af_g, af_v, n, 0.8f, 1e-30f);
        o->adafactor_apply(af_p, g, n, 1.3f, lr, 0.7f);
    } else {
        float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
        for (size_t i = 0; i < n; i++) {
            m[i] = (1.0f - b1) * g[i] + b1 * m[i];
            v[i] = (1.0f - b2) * (g[i] * g[i]) + b2 * v[i];
            float u = (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
            u = u + wd * p[i];
            p[i] = p[i] + (-lr) * u;
            sgd[i] = sgd[i] + (-lr) * g[i];
            float gc = (g[i] / 3.5f) * 1.0f;   // clip_scale's operations, then the same updates
            mc[i] = (1.0f - b1) * gc + b1 * mc[i];
            vc[i] = (1.0f - b2) * (gc * gc) + b2 * vc[i];
            float uc = (mc[i] / c1) / (sqrtf(vc[i] / c2) + eps);
            uc = uc + wd * pc[i];
            pc[i] = pc[i] + (-lr) * uc;
            sgdc[i] = sgdc[i] + (-lr) * gc;
            clip[i] = (clip[i] / 3.5f) * 1.0f;
            ema[i] = 0.99f * ema[i] + (1.0f - 0.99f) * p0[i];
            af_v[i] = 0.8f * af_v[i] + (1.0f - 0.8f) * (af_g[i] * af_g[i] + 1e-30f);
            af_g[i] = af_g[i] * (1.0f / sqrtf(af_v[i]));
            af_p[i] = af_p[i] - g[i] / 1.3f * lr * 0.7f;
        }
    }
    const OptimKernels *u = UNDER_TEST->optim;
    float *d_p = dev_copy(p0, sizeof(float) * n), *d_g = dev_copy(g, sizeof(float) * n);
    float *d_m = dev_copy(m0, sizeof(float) * n), *d_v = dev_copy(v0, sizeof(float) * n);
    float *d_sgd = dev_copy(p0, sizeof(float) * n), *d_clip = dev_copy(g, sizeof(float) * n);
    float *d_ema = dev_copy(m0, sizeof(float) * n), *d_p0 = dev_copy(p0, sizeof(float) * n);
    float *d_af_p = dev_copy(p0, sizeof(float) * n), *d_af_g = dev_copy(g, sizeof(float) * n);
    float *d_af_v = dev_copy(v0, sizeof(float) * n);
    float *d_pc = dev_copy(p0, sizeof(float) * n), *d_mc = dev_copy(m0, sizeof(float) * n);
    float *d_vc = dev_copy(v0, sizeof(float) * n), *d_sgdc = dev_copy(p0, sizeof(float) * n);
    u->adamw_update(d_p, NULL, d_g, d_m, NULL, d_v, n, h, off);
    u->sgd_update(d_sgd, d_g, n, lr, off);
    uint16_t *d_pc16 = dev_poisoned(sizeof(uint16_t) * n);   // (the clipped update also writes the 16-bit copy)
    u->adamw_update(d_pc, d_pc16, d_g, d_mc, NULL, d_vc, n, h, on);
    u->sgd_update(d_sgdc, d_g, n, lr, on);
    u->clip_scale(d_clip, n, 3.5f, 1.0f);
    u->ema_update(d_ema, d_p0, n, 0.99f);
    u->adafactor_scale_full(d_af_g, d_af_v, n, 0.8f, 1e-30f);
    u->adafactor_apply(d_af_p, d_g, n, 1.3f, lr, 0.7f);
    const char *shape = "n=3000";
    check_dev_floats("adamw_update p", shape, p, d_p, n, 0, 0);
    check_dev_floats("adamw_update m", shape, m, d_m, n, 0, 0);
    check_dev_floats("adamw_update v", shape, v, d_v, n, 0, 0);
    check_dev_floats("sgd_update", shape, sgd, d_sgd, n, 0, 0);
    check_dev_floats("adamw_update clipped p", shape, pc, d_pc, n, 0, 0);
    check_dev_floats("adamw_update clipped m", shape, mc, d_mc, n, 0, 0);
    check_dev_floats("adamw_update clipped v", shape, vc, d_vc, n, 0, 0);
    uint16_t *pc16 = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) pc16[i] = bf16_bits(pc[i]);
    check_dev_bits16("adamw_update clipped p16 (the updated p's bf16 bits)", shape, pc16, d_pc16, n);
    free(pc16);
    dev_free(d_pc16);
    check_dev_floats("sgd_update clipped", shape, sgdc, d_sgdc, n, 0, 0);
    check_dev_floats("g untouched by the clipped updates", shape, g, d_g, n, 0, 0);
    // AdamW on parts: from element 1 (the arrays off 16 bytes: one element a thread) and from
    // element 4 with 3 left over past the quads; the elements around a part untouched.
    for (size_t first = 1; first <= 4; first += 3) {
        size_t len = n - first - 1;
        float *e_p = copy_of(p0, sizeof(float) * n), *e_m = copy_of(m0, sizeof(float) * n);
        float *e_v = copy_of(v0, sizeof(float) * n);
        memcpy(e_p + first, p + first, sizeof(float) * len);
        memcpy(e_m + first, m + first, sizeof(float) * len);
        memcpy(e_v + first, v + first, sizeof(float) * len);
        float *q_p = dev_copy(p0, sizeof(float) * n), *q_m = dev_copy(m0, sizeof(float) * n);
        float *q_v = dev_copy(v0, sizeof(float) * n);
        uint16_t *e16 = malloc(sizeof(uint16_t) * n);   // the copy: the part's bits, 0x7e57 around it
        for (size_t i = 0; i < n; i++) e16[i] = i >= first && i < first + len ? bf16_bits(e_p[i]) : 0x7e57;
        uint16_t *fill = malloc(sizeof(uint16_t) * n);
        for (size_t i = 0; i < n; i++) fill[i] = 0x7e57;
        uint16_t *q16 = dev_copy(fill, sizeof(uint16_t) * n);
        u->adamw_update(q_p + first, q16 + first, d_g + first, q_m + first, NULL, q_v + first, len, h, off);
        char part[48];
        snprintf(part, sizeof part, "n=%zu from %zu", len, first);
        check_dev_floats("adamw_update p", part, e_p, q_p, n, 0, 0);
        check_dev_floats("adamw_update m", part, e_m, q_m, n, 0, 0);
        check_dev_floats("adamw_update v", part, e_v, q_v, n, 0, 0);
        check_dev_bits16("adamw_update p16", part, e16, q16, n);
        free(e_p); free(e_m); free(e_v); free(e16); free(fill);
        dev_free(q16);
        dev_free(q_p); dev_free(q_m); dev_free(q_v);
    }
    check_dev_floats("clip_scale", shape, clip, d_clip, n, 0, 0);
    check_dev_floats("ema_update", shape, ema, d_ema, n, 0, 0);
    check_dev_floats("adafactor_scale_full g", shape, af_g, d_af_g, n, 0, 0);
    check_dev_floats("adafactor_scale_full v", shape, af_v, d_af_v, n, 0, 0);
    check_dev_floats("adafactor_apply", shape, af_p, d_af_p, n, 0, 0);
    free(p0); free(g); free(m0); free(v0); free(p); free(m); free(v); free(sgd); free(clip); free(ema); free(af_p);
    free(af_g); free(af_v); free(pc); free(mc); free(vc); free(sgdc);
    dev_free(d_pc); dev_free(d_mc); dev_free(d_vc); dev_free(d_sgdc);
    dev_free(d_p); dev_free(d_g); dev_free(d_m); dev_free(d_v); dev_free(d_sgd); dev_free(d_clip); dev_free(d_ema);
    dev_free(d_p0); dev_free(d_af_p); dev_free(d_af_g); dev_free(d_af_v);
}

// The sum of squares in fixed point: the exact integer, whatever the order (a long double
// sum of the exact squares is the reference: each square is exact in double, the scaled
// truncation is checked through (fixed128)). n = 10000, and a length past what one grid of
// the GPU's squares_kernel covers at once (1024 blocks of 256 threads), so that its threads
// run strided loops and the last block is partial; the infinite element sits near the end.
// The GPU takes four elements a load where x is 16-byte aligned: x starts `first` floats into
// its buffer (1: one at a time), and n not a multiple of 4 leaves a tail.
static void test_squares_n(size_t n, size_t first) {
    float *x = rand_floats(n, -3, 3);
    fixed128 want = 0, got = 5;   // got starts at 5: the kernel adds to it
    int want_bad = 0, got_bad = 0;
    if (ORACLE) ORACLE->optim->squares_add(&want, &want_bad, x, n);
    else for (size_t i = 0; i < n; i++) want += (fixed128)((double)x[i] * x[i] * SQUARES_SCALE);
    want += 5;
    // The sum and the flag are device memory, like x.
    float *d_buf = dev_poisoned(sizeof(float) * (n + first)), *d_x = d_buf + first;
    dev_upload(d_x, x, sizeof(float) * n);
    fixed128 *d_sum = dev_copy(&got, sizeof got);
    int *d_bad = dev_copy(&got_bad, sizeof got_bad);
    UNDER_TEST->optim->squares_add(d_sum, d_bad, d_x, n);
    dev_download(&got, d_sum, sizeof got);
    dev_download(&got_bad, d_bad, sizeof got_bad);
    check(got == want && !got_bad, "squares_add n=%zu from %zu: got %.17g (bad %d), want %.17g", n, first,
          (double)got / SQUARES_SCALE, got_bad, (double)want / SQUARES_SCALE);
    x[n - 3] = INFINITY;   // a non-finite square sets the flag
    dev_upload(d_x, x, sizeof(float) * n);
    UNDER_TEST->optim->squares_add(d_sum, d_bad, d_x, n);
    dev_download(&got_bad, d_bad, sizeof got_bad);
    check(got_bad, "squares_add n=%zu from %zu: an infinite element sets the flag", n, first);
    free(x);
    dev_free(d_buf);
    dev_free(d_sum);
    dev_free(d_bad);
}

static void test_squares(void) {
    test_squares_n(10000, 0);
    test_squares_n((size_t)2 * 1024 * 256 + 777, 0);
    test_squares_n(10001, 1);
    test_squares_n((size_t)4 * 1024 * 256 * 4 + 3, 0);   // every thread four quads and a tail
    test_squares_n((size_t)3 * 1024 * 256 * 4 + 5, 0);   // three quads a thread: two loads in flight, then one
}

// Adafactor's factored second moment over a 3-d tensor (L=3 leading, rows along dim 2,
// columns along dim 1), its factors, and the scaling of a slice of the elements.
static void test_adafactor_factored(void) {
    int shape[3] = {3, 7, 5}, ndim = 3, drow = 2, dcol = 1;
    size_t n = 105, L = 3, R = 5, C = 7, k0 = 11, len = 60;
    float *g = rand_floats(n, -1, 1), *vr0 = rand_floats(L * R, 0, 1), *vc0 = rand_floats(L * C, 0, 1);
    float *vr = copy_of(vr0, sizeof(float) * L * R), *vc = copy_of(vc0, sizeof(float) * L * C);
    double *rs = malloc(sizeof(double) * L * R), *cs = malloc(sizeof(double) * L * C);
    float *f = malloc(sizeof(float) * (L * R + L * C)), *gs = copy_of(g + k0, sizeof(float) * len);
    if (ORACLE) {
        ORACLE->optim->adafactor_factored_moments(vr, vc, rs, cs, g, shape, ndim, drow, dcol, 0.8f, 1e-30f);
        ORACLE->optim->adafactor_factors(f, vr, vc, L, R, C);
        ORACLE->optim->adafactor_scale_factored(gs, f, k0, len, shape, ndim, drow, dcol);
    } else {   // element k = (l, c, r) row-major: l = k / 35, c = k / 5 % 7, r = k % 5
        memset(rs, 0, sizeof(double) * L * R);
        memset(cs, 0, sizeof(double) * L * C);
        for (size_t k = 0; k < n; k++) {
            float sq = g[k] * g[k] + 1e-30f;
            rs[k / 35 * R + k % 5] += sq;
            cs[k / 35 * C + k / 5 % 7] += sq;
        }
        for (size_t j = 0; j < L * R; j++) vr[j] = 0.8f * vr[j] + (1.0f - 0.8f) * (float)(rs[j] / (double)C);
        for (size_t j = 0; j < L * C; j++) vc[j] = 0.8f * vc[j] + (1.0f - 0.8f) * (float)(cs[j] / (double)R);
        for (size_t l = 0; l < L; l++) {
            double s = 0.0;
            for (size_t r = 0; r < R; r++) s += vr[l * R + r];
            for (size_t r = 0; r < R; r++) f[l * R + r] = 1.0f / sqrtf(vr[l * R + r] / (float)(s / (double)R));
        }
        for (size_t j = 0; j < L * C; j++) f[L * R + j] = 1.0f / sqrtf(vc[j]);
        for (size_t j = 0; j < len; j++) {
            size_t k = k0 + j;
            gs[j] = gs[j] * f[k / 35 * R + k % 5] * f[L * R + k / 35 * C + k / 5 % 7];
        }
    }
    float *d_g = dev_copy(g, sizeof(float) * n), *d_vr = dev_copy(vr0, sizeof(float) * L * R);
    float *d_vc = dev_copy(vc0, sizeof(float) * L * C), *d_f = dev_poisoned(sizeof(float) * (L * R + L * C));
    double *d_rs = dev_poisoned(sizeof(double) * L * R), *d_cs = dev_poisoned(sizeof(double) * L * C);
    float *d_vr_want = dev_copy(vr, sizeof(float) * L * R), *d_vc_want = dev_copy(vc, sizeof(float) * L * C);
    float *d_f_want = dev_copy(f, sizeof(float) * (L * R + L * C)), *d_gs = dev_copy(g + k0, sizeof(float) * len);
    UNDER_TEST->optim->adafactor_factored_moments(d_vr, d_vc, d_rs, d_cs, d_g, shape, ndim, drow, dcol, 0.8f, 1e-30f);
    UNDER_TEST->optim->adafactor_factors(d_f, d_vr_want, d_vc_want, L, R, C);
    UNDER_TEST->optim->adafactor_scale_factored(d_gs, d_f_want, k0, len, shape, ndim, drow, dcol);
    const char *sh = "shape (3,7,5) rows dim 2 cols dim 1";
    check_dev_floats("adafactor_factored_moments vrow", sh, vr, d_vr, L * R, 0, 0);
    check_dev_floats("adafactor_factored_moments vcol", sh, vc, d_vc, L * C, 0, 0);
    check_dev_floats("adafactor_factors", sh, f, d_f, L * R + L * C, 0, 0);
    check_dev_floats("adafactor_scale_factored elements 11..70", sh, gs, d_gs, len, 0, 0);
    free(g); free(vr0); free(vc0); free(vr); free(vc); free(rs); free(cs); free(f); free(gs);
    dev_free(d_g); dev_free(d_vr); dev_free(d_vc); dev_free(d_f); dev_free(d_rs); dev_free(d_cs);
    dev_free(d_vr_want); dev_free(d_vc_want); dev_free(d_f_want); dev_free(d_gs);
}

// AdamW on elements [first, first + len) of n: its first moment float32, or (mu16) bf16 bits
// (mu_dtype=bfloat16); clipped or not; with the weights' 16-bit copy or without (copy);
// Nesterov's first moment or not (optax's adamw(nesterov=True)); eps_root (optax's, inside
// the square root) 0, or one of the size of the second moments here.
typedef struct { int mu16, copy, nesterov; float eps_root; GradClip clip; int uncorrected; } AdamWCase;

// One case (AdamWCase): p, v, the moment (its bits where bf16) and the copy's bits exact, the
// elements around the part untouched. The reference is optax's update as JAX runs it (without
// XLA's excess precision, as tests/parity/reference.py runs it); on a bf16 moment b1, a
// Python float, times the moment is a bf16 product (b1 rounded to bf16, the product rounded),
// added to (1 - b1) g in float32; the float32 moment makes the update, the bf16 one is kept.
// Nesterov's moment reads that float32 moment and g (clipped) with both bias corrections.
static void test_adamw_part(size_t n, size_t first, size_t len, AdamWCase c) {
    float *p = rand_floats(n, -1, 1), *g = rand_floats(n, -1, 1), *v = rand_floats(n, 0, 0.01f);
    float *m = rand_floats(n, -0.1f, 0.1f);
    uint16_t *m16 = malloc(sizeof(uint16_t) * n), *p16 = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) m16[i] = bf16_bits(m[i]), p16[i] = 0x7e57;
    float *d_p = dev_copy(p, sizeof(float) * n), *d_g = dev_copy(g, sizeof(float) * n);
    float *d_v = dev_copy(v, sizeof(float) * n), *d_m = dev_copy(m, sizeof(float) * n);
    uint16_t *d_m16 = dev_copy(m16, sizeof(uint16_t) * n), *d_p16 = dev_copy(p16, sizeof(uint16_t) * n);
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    int t = 3;
    AdamWParams h = {lr, t, b1, b2, eps, c.eps_root, wd, c.nesterov, c.uncorrected};
    if (ORACLE) {
        ORACLE->optim->adamw_update(p + first, c.copy ? p16 + first : NULL, g + first, c.mu16 ? NULL : m + first,
                                    c.mu16 ? m16 + first : NULL, v + first, len, h, c.clip);
    } else {
        float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t), c1n = 1.0f - powf(b1, (float)(t + 1));
        if (c.uncorrected) c1 = c2 = 1.0f;   // adam_pax: the moments as they are
        float b1_bf16 = bf16_float(bf16_bits(b1));   // 0.8984375
        for (size_t i = first; i < first + len; i++) {
            float gi = c.clip.on ? (g[i] / c.clip.norm) * c.clip.threshold : g[i];
            float mi = (1.0f - b1) * gi + (c.mu16 ? bf16_round(b1_bf16 * bf16_float(m16[i])) : b1 * m[i]);
            v[i] = (1.0f - b2) * (gi * gi) + b2 * v[i];
            float mhat = c.nesterov ? b1 * (mi / c1n) + (1.0f - b1) * (gi / c1) : mi / c1;
            float u = mhat / (sqrtf(v[i] / c2 + c.eps_root) + eps);
            p[i] = p[i] + (-lr) * (u + wd * p[i]);
            if (c.mu16) m16[i] = bf16_bits(mi);
            else m[i] = mi;
            if (c.copy) p16[i] = bf16_bits(p[i]);
        }
    }
    UNDER_TEST->optim->adamw_update(d_p + first, c.copy ? d_p16 + first : NULL, d_g + first,
                                    c.mu16 ? NULL : d_m + first, c.mu16 ? d_m16 + first : NULL, d_v + first, len, h,
                                    c.clip);
    char shape[96];
    snprintf(shape, sizeof shape, "n=%zu from %zu, mu %s, clip %d, copy %d, nesterov %d, uncorrected %d, eps_root %g",
             len, first, c.mu16 ? "bf16" : "f32", c.clip.on, c.copy, c.nesterov, c.uncorrected, c.eps_root);
    check_dev_floats("adamw_update p", shape, p, d_p, n, 0, 0);
    check_dev_floats("adamw_update v", shape, v, d_v, n, 0, 0);
    if (c.mu16) check_dev_bits16("adamw_update mu's bits", shape, m16, d_m16, n);
    else check_dev_floats("adamw_update mu", shape, m, d_m, n, 0, 0);
    check_dev_bits16("adamw_update p16", shape, p16, d_p16, n);
    check_dev_floats("adamw_update g untouched", shape, g, d_g, n, 0, 0);
    free(p); free(g); free(v); free(m); free(m16); free(p16);
    dev_free(d_p); dev_free(d_g); dev_free(d_v); dev_free(d_m); dev_free(d_m16); dev_free(d_p16);
}

// A bf16 moment: whole (four at a time on a GPU), off 16 bytes (one at a time), and with a
// tail of 3; eps_root on the second and fourth.
static void test_adamw_mu16(void) {
    GradClip off = {0, 0.0f, 0.0f}, on = {1, 3.5f, 1.0f};
    test_adamw_part(3000, 0, 3000, (AdamWCase){1, 0, 0, 0.0f, off, 0});
    test_adamw_part(3000, 0, 3000, (AdamWCase){1, 1, 0, 1e-3f, on, 0});
    test_adamw_part(3000, 1, 2998, (AdamWCase){1, 1, 0, 0.0f, off, 0});
    test_adamw_part(3000, 4, 2995, (AdamWCase){1, 0, 0, 1e-3f, on, 0});
}

// Nesterov's AdamW on either moment, clipped and not: 1030 elements (257 quads and a tail of
// 2 on a GPU), off 16 bytes (one at a time), and from 4 with a tail of 1. Then the flag is
// shown to matter: the same inputs with and without it give other weights almost everywhere,
// so a backend that ignored it could not pass the cases above.
static void test_adamw_nesterov(void) {
    GradClip off = {0, 0.0f, 0.0f}, on = {1, 3.5f, 1.0f};
    for (int mu16 = 0; mu16 < 2; mu16++) {
        test_adamw_part(1030, 0, 1030, (AdamWCase){mu16, 1, 1, 0.0f, off, 0});
        test_adamw_part(1030, 0, 1030, (AdamWCase){mu16, 0, 1, 1e-3f, on, 0});
        test_adamw_part(1030, 1, 1028, (AdamWCase){mu16, 1, 1, 0.0f, on, 0});
        test_adamw_part(1030, 4, 1025, (AdamWCase){mu16, 0, 1, 0.0f, off, 0});
    }
    size_t n = 1030, differ = 0;
    float *p = rand_floats(n, -1, 1), *g = rand_floats(n, -1, 1), *m = rand_floats(n, -0.1f, 0.1f);
    float *v = rand_floats(n, 0, 0.01f), *got[2];
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        AdamWParams h = {1e-3f, 3, 0.9f, 0.95f, 1e-8f, 0.0f, 0.1f, nesterov, 0};
        float *d_p = dev_copy(p, sizeof(float) * n), *d_g = dev_copy(g, sizeof(float) * n);
        float *d_m = dev_copy(m, sizeof(float) * n), *d_v = dev_copy(v, sizeof(float) * n);
        UNDER_TEST->optim->adamw_update(d_p, NULL, d_g, d_m, NULL, d_v, n, h, off);
        got[nesterov] = dev_fetch(d_p, sizeof(float) * n);
        dev_free(d_p); dev_free(d_g); dev_free(d_m); dev_free(d_v);
    }
    for (size_t i = 0; i < n; i++) differ += memcmp(&got[0][i], &got[1][i], sizeof(float)) != 0;
    check(differ > n * 9 / 10, "adamw_update nesterov=1 changes p: %zu of %zu elements differ from nesterov=0's",
          differ, n);
    free(p); free(g); free(m); free(v); free(got[0]); free(got[1]);
}

// The moments used as they are (adam_pax's update, its decays bias-corrected by the caller):
// whole, off 16 bytes, with a tail; clipped or not; with the weights' 16-bit copy.
static void test_adamw_uncorrected(void) {
    GradClip off = {0, 0.0f, 0.0f}, on = {1, 3.5f, 1.0f};
    test_adamw_part(1030, 0, 1030, (AdamWCase){0, 1, 0, 0.0f, off, 1});
    test_adamw_part(1030, 1, 1028, (AdamWCase){0, 0, 0, 1e-3f, on, 1});
    test_adamw_part(1030, 4, 1025, (AdamWCase){0, 1, 0, 0.0f, on, 1});
}

// Muon's momentum (muon_moment) on 1030 elements at update t, g clipped or not, kept as
// float32 or (mu16) as bf16 bits: the momentum (its bits) and mu_hat exact, g untouched. The
// reference: optax.tree.update_moment (order 1), on a bf16 momentum beta mu a bf16 product
// (beta rounded to bf16, the product rounded) added to (1 - beta) g in float32, then the
// Nesterov moment beta mu / (1 - beta^(t+1)) + (1 - beta) g / (1 - beta^t) from that float32
// sum; the bf16 momentum stored rounded.
static void test_muon_moment(int t, GradClip clip, int mu16) {
    size_t n = 1030;
    float beta = 0.95f;
    float *g = rand_floats(n, -1, 1), *mu = rand_floats(n, -0.1f, 0.1f), *mu_hat = malloc(sizeof(float) * n);
    uint16_t *m16 = malloc(sizeof(uint16_t) * n);
    for (size_t i = 0; i < n; i++) m16[i] = bf16_bits(mu[i]);
    float *d_g = dev_copy(g, sizeof(float) * n), *d_mu = dev_copy(mu, sizeof(float) * n);
    uint16_t *d_m16 = dev_copy(m16, sizeof(uint16_t) * n);
    float *d_hat = dev_poisoned(sizeof(float) * n);
    if (ORACLE) ORACLE->optim->muon_moment(mu16 ? NULL : mu, mu16 ? m16 : NULL, mu_hat, g, n, beta, t, clip);
    else {
        float c1 = 1.0f - powf(beta, (float)t), c1n = 1.0f - powf(beta, (float)(t + 1));
        float beta_bf16 = bf16_float(bf16_bits(beta));   // 0.94921875
        for (size_t i = 0; i < n; i++) {
            float gi = clip.on ? (g[i] / clip.norm) * clip.threshold : g[i];
            float m = (1.0f - beta) * gi + (mu16 ? bf16_round(beta_bf16 * bf16_float(m16[i])) : beta * mu[i]);
            if (mu16) m16[i] = bf16_bits(m);
            else mu[i] = m;
            mu_hat[i] = beta * (m / c1n) + (1.0f - beta) * (gi / c1);
        }
    }
    UNDER_TEST->optim->muon_moment(mu16 ? NULL : d_mu, mu16 ? d_m16 : NULL, d_hat, d_g, n, beta, t, clip);
    char shape[48];
    snprintf(shape, sizeof shape, "n=%zu, t=%d, clip %d, mu %s", n, t, clip.on, mu16 ? "bf16" : "f32");
    if (mu16) check_dev_bits16("muon_moment mu's bits", shape, m16, d_m16, n);
    else check_dev_floats("muon_moment mu", shape, mu, d_mu, n, 0, 0);
    check_dev_floats("muon_moment mu_hat", shape, mu_hat, d_hat, n, 0, 0);
    check_dev_floats("muon_moment g untouched", shape, g, d_g, n, 0, 0);
    free(g); free(mu); free(mu_hat); free(m16);
    dev_free(d_g); dev_free(d_mu); dev_free(d_hat); dev_free(d_m16);
}

// The Newton-Schulz iteration's element-wise steps and the update on 1030 elements, each
// exact: muon_divide; muon_axpy into a new array, in place on y (out == y) and without y;
// muon_apply. a is one of the iteration's coefficients (3.4445, -4.7750, 2.0315).
static void test_muon_steps(void) {
    size_t n = 1030, bytes = sizeof(float) * n;
    float d = 3.7f, a = -4.7750f, scale = 1.4142135f, wd = 0.1f, lr = 0.25f;   // (a large lr: p shows u's last bits)
    float *x = rand_floats(n, -1, 1), *y = rand_floats(n, -1, 1), *p = rand_floats(n, -1, 1);
    float *div = copy_of(x, bytes), *axpy = malloc(bytes), *inplace = copy_of(y, bytes), *ax = malloc(bytes);
    float *apply = copy_of(p, bytes);
    if (ORACLE) {
        const OptimKernels *o = ORACLE->optim;
        o->muon_divide(div, n, d);
        o->muon_axpy(axpy, a, x, y, n);
        o->muon_axpy(inplace, a, x, inplace, n);
        o->muon_axpy(ax, a, x, NULL, n);
        o->muon_apply(apply, x, n, scale, wd, lr);
    } else {
        for (size_t i = 0; i < n; i++) {
            div[i] = x[i] / d;
            axpy[i] = a * x[i] + y[i];
            inplace[i] = a * x[i] + inplace[i];
            ax[i] = a * x[i];
            float u = scale * x[i];   // scale_by_shape, add_decayed_weights, the learning rate
            u = u + wd * apply[i];
            apply[i] = apply[i] + u * (-lr);
        }
    }
    const OptimKernels *u = UNDER_TEST->optim;
    float *d_x = dev_copy(x, bytes), *d_y = dev_copy(y, bytes), *d_div = dev_copy(x, bytes);
    float *d_axpy = dev_poisoned(bytes), *d_inplace = dev_copy(y, bytes), *d_ax = dev_poisoned(bytes);
    float *d_apply = dev_copy(p, bytes);
    u->muon_divide(d_div, n, d);
    u->muon_axpy(d_axpy, a, d_x, d_y, n);
    u->muon_axpy(d_inplace, a, d_x, d_inplace, n);
    u->muon_axpy(d_ax, a, d_x, NULL, n);
    u->muon_apply(d_apply, d_x, n, scale, wd, lr);
    // Each device array against its expected values (the inputs x and y: untouched), then freed.
    struct { const char *kernel; const float *want; float *dev; } out[] = {
        {"muon_divide", div, d_div},           {"muon_axpy", axpy, d_axpy}, {"muon_axpy out == y", inplace, d_inplace},
        {"muon_axpy y NULL", ax, d_ax},        {"muon_apply", apply, d_apply},
        {"muon_axpy x untouched", x, d_x},     {"muon_axpy y untouched", y, d_y}};
    for (size_t k = 0; k < sizeof out / sizeof out[0]; k++) {
        check_dev_floats(out[k].kernel, "n=1030", out[k].want, out[k].dev, n, 0, 0);
        dev_free(out[k].dev);
    }
    free(x); free(y); free(p); free(div); free(axpy); free(inplace); free(ax); free(apply);
}

static void test_muon(void) {
    GradClip off = {0, 0.0f, 0.0f}, on = {1, 3.5f, 1.0f};
    for (int t = 1; t <= 3; t += 2) {
        for (int mu16 = 0; mu16 < 2; mu16++) {
            test_muon_moment(t, off, mu16);
            test_muon_moment(t, on, mu16);
        }
    }
    test_muon_steps();
}

void test_optim(void) {
    test_optim_elementwise();
    test_adamw_mu16();
    test_adamw_nesterov();
    test_adamw_uncorrected();
    test_muon();
    test_squares();
    test_adafactor_factored();
}

// ---------------------------------------------------------------- init
static uint64_t ref_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float ref_normal(uint64_t key, uint64_t i, uint64_t draw) {
    uint64_t a = ref_mix64(key ^ ref_mix64(i * 0x9E3779B97F4A7C15ull + draw * 2));
    uint64_t b = ref_mix64(key ^ ref_mix64(i * 0x9E3779B97F4A7C15ull + draw * 2 + 1));
    double u1 = ((a >> 11) + 1.0) / 9007199254740993.0, u2 = (b >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

// Piece (1, 0) of a (8,12) tensor cut in 2 x 3 pieces of (4,4); elements 3 .. 3+10 of it.
void test_init(void) {
    int shape[2] = {4, 4}, lindex[2] = {1, 0}, gshape[2] = {8, 12};
    size_t i0 = 3, n = 10;
    uint64_t hash = rng_next();
    int seed = rng_int(1000);
    for (int truncated = 0; truncated < 2; truncated++) {
        float want[10], *d_x = dev_poisoned(sizeof(float) * n);
        if (ORACLE) ORACLE->init->param_init(want, i0, n, hash, seed, 0.02f, 0.0f, truncated, shape, lindex, gshape, 2);
        else {
            uint64_t key = ref_mix64(hash ^ ref_mix64((uint64_t)seed + 0x1234567ull));
            for (size_t li = i0; li < i0 + n; li++) {
                size_t g = (size_t)(4 + li / 4) * 12 + li % 4;   // row 4 + r, column c of the whole
                float z = ref_normal(key, g, 0);
                for (uint64_t d = 1; truncated && fabsf(z) > 2.0f; d++) z = ref_normal(key, g, d);
                want[li - i0] = 0.02f * z;
            }
        }
        UNDER_TEST->init->param_init(d_x, i0, n, hash, seed, 0.02f, 0.0f, truncated, shape, lindex, gshape, 2);
        // the device's double log and cos: the float result off by 1 ulp at most, rarely
        check_dev_floats("param_init", truncated ? "(4,4) of (8,12) truncated" : "(4,4) of (8,12)", want, d_x, n,
                         tol(1), 0);
        dev_free(d_x);
    }
    // Tensors large enough that the CPU splits their elements over threads, every element
    // against the loop above: a (300,400) piece at (1,1) of a (600,800) tensor, and a whole
    // (300,400) tensor (each element's global index its own).
    for (int whole = 0; whole < 2; whole++) {
        int bshape[2] = {300, 400}, blindex[2] = {!whole, !whole}, bgshape[2] = {whole ? 300 : 600, whole ? 400 : 800};
        size_t bn = 300 * 400;
        float *want = malloc(sizeof(float) * bn), *d_x = dev_poisoned(sizeof(float) * bn);
        if (ORACLE) ORACLE->init->param_init(want, 0, bn, hash, seed, 0.02f, 0.0f, 1, bshape, blindex, bgshape, 2);
        else {
            uint64_t key = ref_mix64(hash ^ ref_mix64((uint64_t)seed + 0x1234567ull));
            for (size_t li = 0; li < bn; li++) {
                size_t g = whole ? li : (size_t)(300 + li / 400) * 800 + 400 + li % 400;
                float z = ref_normal(key, g, 0);
                for (uint64_t d = 1; fabsf(z) > 2.0f; d++) z = ref_normal(key, g, d);
                want[li] = 0.02f * z;
            }
        }
        UNDER_TEST->init->param_init(d_x, 0, bn, hash, seed, 0.02f, 0.0f, 1, bshape, blindex, bgshape, 2);
        const char *what = whole ? "(300,400) whole, truncated, over threads"
                                 : "(300,400) of (600,800) truncated, over threads";
        check_dev_floats("param_init", what, want, d_x, bn, tol(1), 0);
        dev_free(d_x);
        free(want);
    }
    float c[6], *d_c = dev_poisoned(sizeof c);
    for (int i = 0; i < 6; i++) c[i] = 1.0f;
    UNDER_TEST->init->param_init(d_c, 0, 6, hash, seed, 0.0f, 1.0f, 0, shape, lindex, gshape, 2);
    check_dev_floats("param_init constant", "6 elements", c, d_c, 6, 0, 0);
    dev_free(d_c);
}

