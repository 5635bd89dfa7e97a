// kernels/cpu/vec16.h: floats in vector lanes (GCC's vector extensions), for the CPU kernels
// that work lane by lane. V16: 16 floats, for SwiGLU and expf16; the compiler maps them to
// one AVX-512 register, two AVX2 ones, or scalar code. VN: VW floats, the machine's own
// width (16 with AVX-512, 8 otherwise), for the attention tiles, whose long loops keep many
// vectors live: there GCC's split of a 16-float vector into AVX2 registers went through the
// stack.
#ifndef MESHMOE_KERNELS_CPU_VEC16_H
#define MESHMOE_KERNELS_CPU_VEC16_H
#include <stdint.h>

typedef float V16 __attribute__((vector_size(64), aligned(64)));
// A 16-float vector at any float address (rows of tensors are 4-byte aligned).
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t I16 __attribute__((vector_size(64)));   // lane masks: -1 or 0
// Macros, not functions: a function that passes a 64-byte vector by value has another ABI
// on a build without AVX-512, and GCC warns about it.
#define vld(p) (*(const V16u *)(p))
#define vst(p, x) (*(V16u *)(p) = (x))
// Lane by lane, a where the mask is set, else b.
#define vblend(mask, a, b) ((V16)(((I16)(a) & (mask)) | ((I16)(b) & ~(mask))))

#ifdef __AVX512F__
#define VW 16
#else
#define VW 8
#endif
typedef float VN __attribute__((vector_size(4 * VW)));
typedef float VNu __attribute__((vector_size(4 * VW), aligned(4), may_alias));   // at any float address
typedef int32_t IN __attribute__((vector_size(4 * VW)));                        // lane masks: -1 or 0
#define vldn(p) (*(const VNu *)(p))
#define vstn(p, x) (*(VNu *)(p) = (x))
#define vblendn(mask, a, b) ((VN)(((IN)(a) & (mask)) | ((IN)(b) & ~(mask))))   // a where the mask is set

#endif
