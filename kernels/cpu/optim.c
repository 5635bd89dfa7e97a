// kernels/cpu/optim.c: the optimizer's arithmetic on the CPU (kernels/optim.h).
#include "kernels/optim.h"
#include "kernels/bf16.h"
#include <math.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// g as the update reads it: clipped (kernels/optim.h GradClip) or as it is. The clipped and
// the plain update are separate loops: a branch inside one keeps GCC from vectorising it for
// AVX2 (the division cannot be done speculatively without AVX-512's masks).
#define CLIPPED(g, c) (((g) / (c).norm) * (c).threshold)

// AdamW's constants for one call: the step size, the decays (b1m: b1 rounded to bf16), the
// bias corrections c1 = 1 - b1^t and c2 = 1 - b2^t, epsilon and eps_root, the weight decay.
// nesterov: c1n = 1 - b1^(t+1), the first moment used b1 m / c1n + (1 - b1) g / c1.
typedef struct { float lr, b1, b1m, b2, c1, c2, eps, eps_root, wd, c1n; int nesterov; } AdamWConst;

// AdamW on element i with the gradient gi; decayed is b1 times the old first moment (a
// float32 product, or for a bf16 moment a bf16 one, kernels/optim.h). Returns the new moment.
static inline float adamw_element(float *p, float *v, size_t i, float gi, float decayed, AdamWConst k) {
    float mi = (1.0f - k.b1) * gi + decayed;
    v[i] = (1.0f - k.b2) * (gi * gi) + k.b2 * v[i];
    float mhat = k.nesterov ? k.b1 * (mi / k.c1n) + (1.0f - k.b1) * (gi / k.c1) : mi / k.c1, vhat = v[i] / k.c2;
    float u = mhat / (sqrtf(vhat + k.eps_root) + k.eps);   // scale_by_adam
    u = u + k.wd * p[i];                      // add_decayed_weights
    p[i] = p[i] + (-k.lr) * u;                // scale_by_learning_rate, apply_updates
    return mi;
}

// A float32 first moment m[i]: b1 m[i] a float32 product.
static inline void adamw_m32(float *p, float *m, float *v, size_t i, float gi, AdamWConst k) {
    m[i] = adamw_element(p, v, i, gi, k.b1 * m[i], k);
}
// A bf16 first moment m16[i]: b1 m16[i] a bf16 product, the new moment stored rounded.
static inline void adamw_m16(float *p, uint16_t *m16, float *v, size_t i, float gi, AdamWConst k) {
    m16[i] = bf16_bits(adamw_element(p, v, i, gi, bf16_round(k.b1m * bf16_float(m16[i])), k));
}

static void adamw_update(float *p, uint16_t *p16, const float *g, float *m, uint16_t *m16, float *v, size_t n,
                         AdamWParams h, GradClip clip) {
    float c1 = h.uncorrected ? 1.0f : 1.0f - powf(h.b1, (float)h.t);   // (dividing by 1.0f changes no bit)
    float c2 = h.uncorrected ? 1.0f : 1.0f - powf(h.b2, (float)h.t);
    AdamWConst k = {h.lr, h.b1, bf16_round(h.b1), h.b2, c1, c2, h.eps, h.eps_root, h.weight_decay,
                    1.0f - powf(h.b1, (float)(h.t + 1)), h.nesterov};
    // Element by element, so vector instructions (IEEE division and square root, exactly
    // rounded like the scalar ones) give the scalar loop's bits; the Makefile builds this
    // file with -fno-math-errno so that sqrtf needs no errno branch (its argument is >= 0).
    if (m16 && clip.on) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) adamw_m16(p, m16, v, i, CLIPPED(g[i], clip), k);
    } else if (m16) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) adamw_m16(p, m16, v, i, g[i], k);
    } else if (clip.on) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) adamw_m32(p, m, v, i, CLIPPED(g[i], clip), k);
    } else {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) adamw_m32(p, m, v, i, g[i], k);
    }
    if (p16) {   // the updated weights' 16-bit copy (a second pass here; the GPU's is one)
        #pragma omp parallel for if (n > 65536)
        for (size_t i = 0; i < n; i++) p16[i] = bf16_bits(p[i]);
    }
}

static void sgd_update(float *p, const float *g, size_t n, float lr, GradClip clip) {
    if (clip.on) {   // scale_by_learning_rate, apply_updates
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) p[i] = p[i] + (-lr) * CLIPPED(g[i], clip);
    } else {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) p[i] = p[i] + (-lr) * g[i];
    }
}

static void clip_scale(float *g, size_t n, float norm, float threshold) {
    #pragma omp parallel for simd if (n > 65536)   // (IEEE division in vectors: the same bits)
    for (size_t i = 0; i < n; i++) g[i] = (g[i] / norm) * threshold;   // optax's order of operations
}

static void ema_update(float *ema, const float *p, size_t n, float d) {
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) ema[i] = d * ema[i] + (1.0f - d) * p[i];
}

// Each square, x^2 * 2^64 (exact in double: 48 significant bits and a power-of-two scale),
// is truncated to an integer V < 2^100 and split as V = hi * 2^64 + mid * 2^32 + low, each
// part below 2^36 and summed in 64-bit integers, which cannot overflow in a block of 2^27
// elements. The integer total is the same in any order: in vector lanes, over threads,
// over devices; the same integer as adding the C library's (fixed128)sq one by one. A
// square that is non-finite or >= 2^100 (|x| >= 2^18, or NaN) is flagged, not added.
enum { SQUARES_BLOCK = 1 << 27, SQUARES_RUN = 1 << 16 };

// The vector lanes: 8 doubles on AVX-512, 4 on AVX2; the arithmetic is GCC's vector
// extensions, the loads and the truncation the instruction set's own.
#if defined(__AVX512F__)
#define SQ_LANES 8
#elif defined(__AVX2__)
#define SQ_LANES 4
#endif
#ifdef SQ_LANES
typedef double SqV __attribute__((vector_size(8 * SQ_LANES)));
#define TOWARD_ZERO (_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)

// The SQ_LANES floats at x in double lanes, a flagged one (|x| >= 2^18 or NaN: one
// comparison of floats) as 0; *bad = 1 if one was.
static inline SqV sq_load(const float *x, int *bad) {
#if defined(__AVX512F__)
    __m256 xf = _mm256_loadu_ps(x);
    __mmask8 ok = _mm256_cmp_ps_mask(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), xf), _mm256_set1_ps(0x1p18f), _CMP_LT_OQ);
    *bad |= ok != 0xff;
    return (SqV)_mm512_maskz_cvtps_pd(ok, xf);
#else
    __m128 xf = _mm_loadu_ps(x);
    __m128 ok = _mm_cmp_ps(_mm_andnot_ps(_mm_set1_ps(-0.0f), xf), _mm_set1_ps(0x1p18f), _CMP_LT_OQ);
    *bad |= _mm_movemask_ps(ok) != 0xf;
    return (SqV)_mm256_cvtps_pd(_mm_and_ps(xf, ok));
#endif
}
// Each lane truncated toward 0.
static inline SqV sq_trunc(SqV v) {
#if defined(__AVX512F__)
    return (SqV)_mm512_roundscale_pd((__m512d)v, TOWARD_ZERO);
#else
    return (SqV)_mm256_round_pd((__m256d)v, TOWARD_ZERO);
#endif
}
#endif

// part[0..2] += the hi, mid and low parts of x (n)'s squares; *bad = 1 if one is flagged.
static void squares_run(unsigned long long part[3], int *bad, const float *x, size_t n) {
    size_t k = 0;
#ifdef SQ_LANES
    // With y = x^2 (no scale): hi = trunc(y), f = y - hi (its fraction, exact), mid =
    // trunc(f * 2^32), low = trunc((f * 2^32 - mid) * 2^32) (each difference exact). The
    // parts are whole numbers below 2^36, so a lane's sum over a run (at most 2^14 of them)
    // stays a whole number below 2^53: exact in double, converted to an integer once per run.
    SqV hi = {0}, mid = {0}, low = {0};
    for (; k + SQ_LANES <= n; k += SQ_LANES) {
        SqV d = sq_load(x + k, bad), y = d * d, h = sq_trunc(y), f = (y - h) * 0x1p32, m = sq_trunc(f);
        hi += h;
        mid += m;
        low += sq_trunc((f - m) * 0x1p32);
    }
    for (int i = 0; i < SQ_LANES; i++) {
        part[0] += (unsigned long long)hi[i];
        part[1] += (unsigned long long)mid[i];
        part[2] += (unsigned long long)low[i];
    }
#endif
    unsigned long long h1 = 0, m1 = 0, l1 = 0;   // the rest (all of it without AVX2), one by one
    int bad1 = 0;
    for (; k < n; k++) {
        double sq = (double)x[k] * x[k] * SQUARES_SCALE;
        int ok = sq < 0x1p100;
        bad1 |= !ok;
        sq = ok ? sq : 0.0;
        unsigned long long h = (unsigned long long)(sq * 0x1p-64);
        unsigned long long r = (unsigned long long)(sq - (double)h * 0x1p64);   // = mid * 2^32 + low
        h1 += h;
        m1 += r >> 32;
        l1 += r & 0xffffffffull;
    }
    part[0] += h1;
    part[1] += m1;
    part[2] += l1;
    *bad |= bad1;
}

static void squares_add(fixed128 *sum, int *bad, const float *x, size_t n) {
    for (size_t k0 = 0; k0 < n; k0 += SQUARES_BLOCK) {
        size_t len = n - k0 < SQUARES_BLOCK ? n - k0 : SQUARES_BLOCK, nruns = (len + SQUARES_RUN - 1) / SQUARES_RUN;
        unsigned long long hi = 0, mid = 0, low = 0;
        int any_bad = 0;
        #pragma omp parallel for reduction(+ : hi, mid, low) reduction(| : any_bad) schedule(static) if (nruns > 1)
        for (size_t j = 0; j < nruns; j++) {
            size_t a = k0 + j * SQUARES_RUN, b = a + SQUARES_RUN < k0 + len ? a + SQUARES_RUN : k0 + len;
            unsigned long long part[3] = {0, 0, 0};
            squares_run(part, &any_bad, x + a, b - a);
            hi += part[0];
            mid += part[1];
            low += part[2];
        }
        *sum += (fixed128)(((unsigned __int128)hi << 64) + ((unsigned __int128)mid << 32) + low);
        *bad |= any_bad;
    }
}

// Element k of a factored tensor (row-major over shape): its leading index (over the dims
// other than drow and dcol, in order), row and column.
static void element_coords(size_t k, const int *shape, int ndim, int drow, int dcol,
                           size_t *lead, size_t *r, size_t *col) {
    size_t rest = k, coord[4];
    for (int d = ndim - 1; d >= 0; d--) {
        coord[d] = rest % (size_t)shape[d];
        rest /= (size_t)shape[d];
    }
    size_t l = 0;
    for (int d = 0; d < ndim; d++)
        if (d != drow && d != dcol) l = l * (size_t)shape[d] + coord[d];
    *lead = l;
    *r = coord[drow];
    *col = coord[dcol];
}

static void adafactor_factored_moments(float *vrow, float *vcol, double *rs, double *cs, const float *g,
                                       const int *shape, int ndim, int drow, int dcol, float decay, float eps) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    size_t R = (size_t)shape[drow], C = (size_t)shape[dcol], L = n / (R * C);
    memset(rs, 0, sizeof(double) * L * R);
    memset(cs, 0, sizeof(double) * L * C);
    for (size_t k = 0; k < n; k++) {
        size_t l, r, col;
        element_coords(k, shape, ndim, drow, dcol, &l, &r, &col);
        float sq = g[k] * g[k] + eps;
        rs[l * R + r] += sq;
        cs[l * C + col] += sq;
    }
    for (size_t j = 0; j < L * R; j++) vrow[j] = decay * vrow[j] + (1.0f - decay) * (float)(rs[j] / (double)C);
    for (size_t j = 0; j < L * C; j++) vcol[j] = decay * vcol[j] + (1.0f - decay) * (float)(cs[j] / (double)R);
}

static void adafactor_factors(float *f, const float *vrow, const float *vcol, size_t L, size_t R, size_t C) {
    for (size_t l = 0; l < L; l++) {
        double s = 0.0;
        for (size_t r = 0; r < R; r++) s += vrow[l * R + r];
        float mean = (float)(s / (double)R);
        for (size_t r = 0; r < R; r++) f[l * R + r] = 1.0f / sqrtf(vrow[l * R + r] / mean);
    }
    for (size_t j = 0; j < L * C; j++) f[L * R + j] = 1.0f / sqrtf(vcol[j]);
}

static void adafactor_scale_factored(float *g, const float *f, size_t k0, size_t n, const int *shape, int ndim,
                                     int drow, int dcol) {
    size_t size = 1;
    for (int d = 0; d < ndim; d++) size *= (size_t)shape[d];
    size_t R = (size_t)shape[drow], C = (size_t)shape[dcol], L = size / (R * C);
    for (size_t j = 0; j < n; j++) {
        size_t l, r, col;
        element_coords(k0 + j, shape, ndim, drow, dcol, &l, &r, &col);
        g[j] = g[j] * f[l * R + r] * f[L * R + l * C + col];
    }
}

static void adafactor_scale_full(float *g, float *v, size_t n, float decay, float eps) {
    for (size_t j = 0; j < n; j++) {
        v[j] = decay * v[j] + (1.0f - decay) * (g[j] * g[j] + eps);
        g[j] = g[j] * (1.0f / sqrtf(v[j]));
    }
}

static void adafactor_apply(float *p, const float *g, size_t n, float clip, float lr, float ps) {
    for (size_t j = 0; j < n; j++) {
        float u = g[j] / clip;   // clip_by_block_rms
        u = u * lr;              // scale_by_learning_rate
        u = u * ps;              // scale_by_param_block_rms
        p[j] = p[j] - u;         // scale(-1), apply_updates
    }
}

// ---- Muon

// Element i's Nesterov moment from its new momentum m and its (clipped) gradient gi.
static inline float muon_hat(float m, float gi, float beta, float c1, float c1n) {
    return beta * (m / c1n) + (1.0f - beta) * (gi / c1);
}
// A float32 momentum: beta mu[i] a float32 product (optax.tree.update_moment, order 1).
static inline float muon_m32(float *mu, size_t i, float gi, float beta, float c1, float c1n) {
    mu[i] = (1.0f - beta) * gi + beta * mu[i];
    return muon_hat(mu[i], gi, beta, c1, c1n);
}
// A bf16 momentum: beta mu16[i] a bf16 product (betam: beta rounded to bf16), stored rounded.
static inline float muon_m16(uint16_t *mu16, size_t i, float gi, float beta, float betam, float c1, float c1n) {
    float m = (1.0f - beta) * gi + bf16_round(betam * bf16_float(mu16[i]));
    mu16[i] = bf16_bits(m);
    return muon_hat(m, gi, beta, c1, c1n);
}

static void muon_moment(float *mu, uint16_t *mu16, float *mu_hat, const float *g, size_t n, float beta, int t,
                        GradClip clip) {
    float c1 = 1.0f - powf(beta, (float)t), c1n = 1.0f - powf(beta, (float)(t + 1)), betam = bf16_round(beta);
    if (mu16 && clip.on) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) mu_hat[i] = muon_m16(mu16, i, CLIPPED(g[i], clip), beta, betam, c1, c1n);
    } else if (mu16) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) mu_hat[i] = muon_m16(mu16, i, g[i], beta, betam, c1, c1n);
    } else if (clip.on) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) mu_hat[i] = muon_m32(mu, i, CLIPPED(g[i], clip), beta, c1, c1n);
    } else {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) mu_hat[i] = muon_m32(mu, i, g[i], beta, c1, c1n);
    }
}

static void muon_divide(float *x, size_t n, float d) {
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] = x[i] / d;
}

static void muon_axpy(float *out, float a, const float *x, const float *y, size_t n) {
    if (y) {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) out[i] = a * x[i] + y[i];
    } else {
        #pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) out[i] = a * x[i];
    }
}

static void muon_apply(float *p, const float *o, size_t n, float scale, float weight_decay, float lr) {
    #pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float u = scale * o[i];          // scale_by_shape
        u = u + weight_decay * p[i];     // add_decayed_weights
        p[i] = p[i] + u * (-lr);         // scale_by_learning_rate, apply_updates
    }
}

const OptimKernels optim_cpu = {adamw_update, sgd_update, clip_scale, ema_update, squares_add,
                                adafactor_factored_moments, adafactor_factors, adafactor_scale_factored,
                                adafactor_scale_full, adafactor_apply, muon_moment, muon_divide, muon_axpy,
                                muon_apply};
