// kernels/cast.h: casts and bf16 rounding over arrays (docs/model.md#bf16-cast-points); the
// layer, which decides where a value is rounded and which saved activations are stored as
// 16-bit numbers, is model/precision.c.
#ifndef MESHMOE_KERNELS_CAST_H
#define MESHMOE_KERNELS_CAST_H
#include <stddef.h>
#include <stdint.h>

typedef struct CastKernels {
    // x (n) = rb(x), rounded to the nearest bf16 value (ties to even), in place.
    void (*round_to_bf16)(float *x, size_t n);
    // out (n) = rb(x (n)), x unchanged: a rounded copy in one pass (the weights' bf16 copy).
    void (*round_copy_bf16)(float *out, const float *x, size_t n);
    // h (n) = the bf16 bits of x (n); exact when every x is bf16-valued already.
    void (*pack_bf16)(uint16_t *h, const float *x, size_t n);
    // x (n) = the floats of the bf16 bits h (n) (exact).
    void (*unpack_bf16)(float *x, const uint16_t *h, size_t n);
} CastKernels;

extern const CastKernels cast_cpu;   // kernels/cpu/cast.c

#endif
