// kernels/cpu/expf16.c: expf on 16 floats at once (kernels/cpu/expf16.h).
#include "kernels/cpu/expf16.h"
#include "kernels/cpu/vec16.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

typedef double D8 __attribute__((vector_size(64)));
typedef int64_t L8 __attribute__((vector_size(64)));

// 2^(i/32) for i = 0..31 as double bits, less i << 47 (the table index's share of the
// exponent field, which the caller adds back with k): glibc's table for expf and exp2f.
static const uint64_t TAB[32] __attribute__((aligned(64))) = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
static const double INV_LN2_32 = 0x1.71547652b82fep+0 * 32;   // 32 / ln 2
static const double SHIFT = 0x1.8p+52;                         // adding it rounds to an integer
// The cubic's coefficients, scaled for r in units of 1/32: 2^(r/32) ~ C0 r^3 + C1 r^2 + C2 r + 1.
static const double C0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, C1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                    C2 = 0x1.62e42ff0c52d6p-1 / 32;

// r = a * b + c with one rounding, lane by lane (pointers: a 64-byte vector passed by value
// has another calling convention on a build without AVX-512).
static inline void fma_lanes(D8 *r, const D8 *a, const D8 *b, const D8 *c) {
#if defined(__AVX512F__)
    *r = (D8)_mm512_fmadd_pd((__m512d)*a, (__m512d)*b, (__m512d)*c);
#elif defined(__FMA__)
    const __m256d *a4 = (const __m256d *)a, *b4 = (const __m256d *)b, *c4 = (const __m256d *)c;
    __m256d *r4 = (__m256d *)r;
    r4[0] = _mm256_fmadd_pd(a4[0], b4[0], c4[0]);
    r4[1] = _mm256_fmadd_pd(a4[1], b4[1], c4[1]);
#else
    for (int i = 0; i < 8; i++) (*r)[i] = fma((*a)[i], (*b)[i], (*c)[i]);
#endif
}
#define fma8(a, b, c) __extension__({ D8 a_ = (a), b_ = (b), c_ = (c), r_; fma_lanes(&r_, &a_, &b_, &c_); r_; })

// TAB[k mod 32] of each lane: on AVX-512 two 16-entry permutes of the table held in four
// registers, chosen by bit 4 of k; elsewhere a load per lane.
static inline __attribute__((always_inline)) void table_lanes(L8 *t, const L8 *k) {
#if defined(__AVX512F__)
    const __m512i *tab = (const __m512i *)TAB;
    __m512i lo = _mm512_permutex2var_epi64(tab[0], (__m512i)*k, tab[1]);
    __m512i hi = _mm512_permutex2var_epi64(tab[2], (__m512i)*k, tab[3]);
    __mmask8 upper = _mm512_test_epi64_mask((__m512i)*k, _mm512_set1_epi64(16));
    *t = (L8)_mm512_mask_blend_epi64(upper, lo, hi);
#else
    for (int i = 0; i < 8; i++) (*t)[i] = (int64_t)TAB[(*k)[i] & 31];
#endif
}
#define table(k) __extension__({ L8 k_ = (k), t_; table_lanes(&t_, &k_); t_; })

// expf of 8 lanes held in double, for |x| small enough that 2^k stays a normal double:
// x * 32/ln2 = k + r (k the nearest integer), exp(x) = 2^(k/32) * 2^(r/32).
static inline __attribute__((always_inline)) void exp8(D8 *out, const D8 *in) {
    D8 x = *in;
    D8 shift = (D8){0} + SHIFT, kd = fma8((D8){0} + INV_LN2_32, x, shift);
    L8 ki = (L8)kd;   // k in the low bits (the shift made them an integer)
    kd -= shift;
    D8 r = fma8((D8){0} + INV_LN2_32, x, -kd);
    L8 t = table(ki) + (L8)((uint64_t __attribute__((vector_size(64))))ki << 47);
    D8 s = (D8)t;   // 2^(k/32)
    D8 z = fma8((D8){0} + C0, r, (D8){0} + C1), r2 = r * r;
    D8 y = fma8((D8){0} + C2, r, (D8){0} + 1.0);
    y = fma8(z, r2, y);
    *out = y * s;
}

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
// exp8's operations on 4 lanes, in AVX2 registers: GCC lowers the 8-double vectors to AVX2
// through the stack, which made SwiGLU 5x slower on an x86-64-v3 build than on AVX-512.
// The table by a gather of TAB[k mod 32].
static inline __m256d exp4(__m256d x) {
    const __m256d shift = _mm256_set1_pd(SHIFT), inv = _mm256_set1_pd(INV_LN2_32);
    __m256d kd = _mm256_fmadd_pd(inv, x, shift);
    __m256i ki = _mm256_castpd_si256(kd);   // k in the low bits
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmadd_pd(inv, x, _mm256_xor_pd(kd, _mm256_set1_pd(-0.0)));
    __m256i tab = _mm256_i64gather_epi64((const long long *)TAB, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(tab, _mm256_slli_epi64(ki, 47)));   // 2^(k/32)
    __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(C0), r, _mm256_set1_pd(C1)), r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(C2), r, _mm256_set1_pd(1.0));
    return _mm256_mul_pd(_mm256_fmadd_pd(z, r2, y), s);
}

// lanes' vector path on AVX2, 8 floats at a time, the same special cases.
static void lanes_avx2(float *out, const float *in) {
    for (int h = 0; h < 16; h += 8) {
        __m256 x = _mm256_loadu_ps(in + h);
        __m128 lo = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
        __m128 hi = _mm256_cvtpd_ps(exp4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
        __m256 y = _mm256_set_m128(hi, lo);
        y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ));
        y = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ), y);
        y = _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        _mm256_storeu_ps(out + h, y);
    }
}
#endif

// out (16) = expf (in (16)), in vector lanes, or by the C library's expf when !vector.
static void lanes(float *out, const float *in, int vector) {
    if (!vector) {
        for (int i = 0; i < 16; i++) out[i] = expf(in[i]);
        return;
    }
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
    lanes_avx2(out, in);
#else
    V16 x;
    memcpy(&x, in, sizeof x);
    // The halves split and joined in registers: through memory, two 32-byte stores read
    // back as one 64-byte load wait for the stores to retire.
    typedef float F8 __attribute__((vector_size(32)));
    F8 lo = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7);
    F8 hi = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
    D8 dlo = __builtin_convertvector(lo, D8), dhi = __builtin_convertvector(hi, D8);
    exp8(&dlo, &dlo);
    exp8(&dhi, &dhi);
    F8 ylo = __builtin_convertvector(dlo, F8), yhi = __builtin_convertvector(dhi, F8);
    V16 y = __builtin_shufflevector(ylo, yhi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    // Where glibc's expf leaves its main path: above log(2^128) +inf, below log(2^-150) +0,
    // a NaN quieted by x + x (the main path is computed there too, and discarded).
    I16 over = x > 0x1.62e42ep6f, under = x < -0x1.9fe368p6f, nan = x != x;
    V16 inf = (V16){0} + INFINITY;
    y = (V16)(((I16)y & ~over) | ((I16)inf & over));
    y = (V16)((I16)y & ~under);
    y = (V16)(((I16)y & ~nan) | ((I16)(x + x) & nan));
    memcpy(out, &y, sizeof y);
#endif
}

// The start-up check: 0 until run, then 1 (vector lanes agree) or 2 (use expf).
static int state;

// Inputs that exercise every part of the computation: every float exponent with several
// mantissas (every table index and rounding of k comes up), and the special cases' edges.
static int agrees(void) {
#if !defined(__AVX512F__) && !defined(__FMA__)
    return 0;   // no FMA instruction: the C library's expf does not fuse either
#else
    const float edges[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1.62e42ep6f, 0x1.62e430p6f, -0x1.9fe368p6f,
                           -0x1.9fe366p6f, 88.0f, -88.0f, 0x1.04845ep+5f, -0x1.f8cbb2p+5f};
    float x[16] = {0};
    int n = 0;
    for (uint32_t e = 0; e < 256; e++)
        for (uint32_t m = 0; m < 1024 + sizeof edges / sizeof edges[0]; m++) {
            uint32_t u = (e << 23) | ((m * 2654435761u) & 0x7fffff) | ((m & 1) << 31);
            float v;
            memcpy(&v, &u, 4);
            if (m >= 1024) v = edges[m - 1024];
            x[n++] = v;
            if (n < 16) continue;
            float y[16];
            lanes(y, x, 1);
            for (int i = 0; i < 16; i++) {
                float want = expf(x[i]);
                if (memcmp(&want, &y[i], 4) != 0 && !(want != want && y[i] != y[i])) return 0;
            }
            n = 0;
        }
    return 1;
#endif
}

int expf16_vectorised(void) {
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s == 0) {   // the first call (any thread: each computes the same answer)
        s = agrees() ? 1 : 2;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s == 1;
}

void expf16(float *y, const float *x) { lanes(y, x, expf16_vectorised()); }

void expf_n(float *y, const float *x, long n) {
    int vector = expf16_vectorised();
    long i = 0;
    for (; i + 16 <= n; i += 16) lanes(y + i, x + i, vector);
    for (; i < n; i++) y[i] = expf(x[i]);
}
