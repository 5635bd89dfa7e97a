// kernels/cpu/expf16.h: expf on 16 floats at once, bit for bit the C library's expf.
//
// The kernels' softmaxes and SwiGLU call expf once per element; a call of the C library
// costs about 20x a vector multiply. expf16 computes the same function in vector lanes: the
// same algorithm as glibc's expf (x * 32/ln2 split into k + r, 2^(k/32) from a 32-entry
// table, a cubic in r, all in double, rounded once to float), with the same fused
// multiply-adds that glibc's FMA build uses, so every lane gives the library's bits.
// tests/test_expf16.c compares it with expf on all 2^32 inputs.
//
// Bits are what this project pins, so the lanes are trusted only where they were shown to
// agree: at start-up, expf16 is compared with this process's expf on a sample of inputs
// (every exponent, every table index, the edges of the special cases); if one differs (a
// C library with another expf, a CPU without FMA), expf16 calls expf lane by lane.
#ifndef MESHMOE_KERNELS_CPU_EXPF16_H
#define MESHMOE_KERNELS_CPU_EXPF16_H

// y[i] = expf(x[i]) for i = 0..15; y may be x. (Arrays, not a 64-byte vector by value,
// whose calling convention differs between builds with and without AVX-512.)
void expf16(float *y, const float *x);
// y[i] = expf(x[i]) for i < n, 16 at a time as expf16 and the rest by expf; y may be x. One
// call for a run of elements: no call and check per 16, so the loop around it pipelines.
void expf_n(float *y, const float *x, long n);
// 1 if expf16 computes in vector lanes, 0 if it calls expf lane by lane (the start-up check
// found a difference, or the build has no FMA).
int expf16_vectorised(void);

#endif
