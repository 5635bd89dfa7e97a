// model/precision.h: bfloat16 mode (dtype=bfloat16), docs/model.md#bf16-cast-points.
//
// Master weights, gradients and optimizer state stay float32 (weight_dtype, grad_dtype).
// Activations are bf16: every value is rounded to bf16 (round to nearest even) where the
// JAX reference rounds it, listed below, and each layer keeps what its backward pass
// needs as 16-bit numbers, so saved activations really take half the bytes. Matmuls take
// bf16-valued operands and accumulate in float32 (a product of two bf16 values is exact in
// float32), then round their output. Statistics (RMSNorm's mean of squares, softmax's max
// and sum, the loss) stay float32.
//
// Where a value is rounded (the numbers are the cast points of tests/parity/reference.py):
//  1 weights: a rounded copy of each unit's master weights is used by forward and backward
//    (model.c unit_acquire); the gate kernel stays float32 with float32_gate_logits
//  2 embedding rows (already bf16 through 1)
//  3 RMSNorm: y = rb(x * rstd), out = rb(y * scale)            (rmsnorm.c)
//  4 every matmul's output                                     (layers, after the product)
//  5 gate logits, unless float32_gate_logits                   (moe.c)
//  6 RoPE: sin, cos and the rotated output                     (rope.c)
//  7 MLA query scale: q = rb(q * rb(scale))                    (mla.c)
//  8 attention scores, unless float32_qk_product              (attn_core.c)
//  9 attention exp weights and e@v, unless float32_logits; out = rb(num / l)
// 10 residual adds                                             (model.c)
// 11 SwiGLU: rb(silu(a) * b)                                   (mlp.c)
// 12 Mixtral routing weights; 13 DeepSeek sigmoid scores, bias, selection scores (gate
//    rounding as 5) and weights                              (moe.c)
// 14 MoE combine: float32_weight_sum sums in float32 then rounds once; otherwise every
//    product and partial sum is rounded, experts in ascending order (moe.c)
// 15 shared experts: rb(routed + shared)                       (moe.c)
// 16 logits: point 4, then read as float32 by the loss (cast_logits_to_fp32)
// The backward pass runs in float32 on the bf16 values it saved (the reference's autodiff
// also rounds each cotangent to bf16 where the forward rounded; the parity table reports
// that difference in the gradients without a bound).
#ifndef MESHMOE_PRECISION_H
#define MESHMOE_PRECISION_H
#include <stddef.h>
#include <string.h>
#include "base/config.h"
#include "kernels/bf16.h"   // bf16_bits, bf16_float, bf16_round

static inline int cfg_bf16(const Config *c) { return c->dtype == DTYPE_BFLOAT16; }

// x[0..n) = rb(x) when `on` (a rounding point that a flag may switch off), else unchanged
// (the kernel: kernels/cast.h).
void round_bf16(float *x, size_t n, int on);
// The same, when c is in bfloat16 mode.
static inline void prec_round(const Config *c, float *x, size_t n) { round_bf16(x, n, cfg_bf16(c)); }
// out[0..n) = rb(x) when `on`, else a copy of x: one pass (kernels/cast.h), the same bits as a
// copy rounded in place.
void round_copy_bf16(float *out, const float *x, size_t n, int on);

// Saved activations as 16-bit numbers. act_pack replaces the float buffer *p (n floats,
// every one already bf16-valued) by a buffer of n bf16 values (half the bytes, the same
// tag); act_unpack turns it back into floats just before the backward pass reads it. Both
// do nothing in float32 mode or on NULL. A packed pointer must not be read as floats.
void act_pack(const Config *c, float **p, size_t n);
void act_unpack(const Config *c, float **p, size_t n);
// act_unpack unless *p already holds n floats (a tensor that is either fresh from a
// forward or a 16-bit saved copy, as a remat recomputation finds it).
void act_unpack_if_packed(const Config *c, float **p, size_t n);
// act_pack unless *p is already 16-bit (packed by an earlier forward, kept for a recomputation).
void act_pack_if_float(const Config *c, float **p, size_t n);
// A saved activation that in the backward pass only products read (the pre-attention norm's
// output n1 and the final norm's nf, model/model.c): where act_pack left it as n 16-bit
// numbers and under packed_operands, handed to the products as those numbers
// (model/matmul.h: matmul_packed, read in place; matmul_packed_free ends it); elsewhere as
// act_unpack_if_packed, floats.
void act_for_products(const Config *c, float **p, size_t n);

// 1 in bf16 mode under bf16_storage, whose products read 16-bit operands
// (model/weights16.h): then the arrays that only products read, and those that the layers
// keep for their backward pass, are made as 16-bit numbers where they are made (SwiGLU's,
// model/mlp.h; the experts' gathered input rows, model/moe.c), where float32 arrays were
// rounded, then packed (docs/bf16-storage.md, step 3).
int packed_operands(const Config *c);
// An array of n elements that is kept so (MEM_ACTIVATIONS, named `name`, zeroed where asked):
// floats, or under packed_operands 16-bit numbers, held in a float pointer as act_pack's
// arrays are and never read as floats; and p from its element i on.
float *packed_alloc(const Config *c, size_t n, int zeroed, const char *name);
float *packed_at(const Config *c, float *p, size_t i);
// h (n) = a product's output hf (n floats) rounded in bf16 (cast point 4): under
// packed_operands packed from hf into h; else (hf NULL: the product wrote h) rounded in place.
void packed_round(const Config *c, float *h, const float *hf, size_t n);

#endif
