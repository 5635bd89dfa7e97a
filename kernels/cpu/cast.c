// kernels/cpu/cast.c: bf16 rounding and 16-bit packing on the CPU (kernels/cast.h).
#include "kernels/cast.h"
#include "kernels/bf16.h"

static void round_to_bf16(float *x, size_t n) {
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

static void round_copy_bf16(float *out, const float *x, size_t n) {
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = bf16_round(x[i]);
}

static void pack_bf16(uint16_t *h, const float *x, size_t n) {
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) h[i] = bf16_bits(x[i]);
}

static void unpack_bf16(float *x, const uint16_t *h, size_t n) {
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] = bf16_float(h[i]);
}

const CastKernels cast_cpu = {round_to_bf16, round_copy_bf16, pack_bf16, unpack_bf16};
