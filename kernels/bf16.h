// kernels/bf16.h: one float rounded to bfloat16 and back (docs/model.md#bf16-cast-points),
// for the kernels and the layers alike.
#ifndef MESHMOE_KERNELS_BF16_H
#define MESHMOE_KERNELS_BF16_H
#include <stdint.h>
#include <string.h>

// float -> bf16 bits, round to nearest even (NaN stays NaN); bf16 bits -> float (exact).
static inline uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float bf16_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float bf16_round(float f) { return bf16_float(bf16_bits(f)); }

#endif
