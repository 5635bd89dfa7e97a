// kernels/cpu/vec16.h: 16 floats in vector lanes (GCC's vector extensions), for the CPU
// kernels that work lane by lane: SwiGLU, expf16. The compiler maps them to one AVX-512
// register, two AVX2 ones, or scalar code; in long loops with many live vectors its AVX2
// split goes through the stack, so the attention tiles use the machine's own width instead
// (kernels/cpu/attn_tiles.c: VN).
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

#endif
