// model/precision.c: where bf16 rounding applies and the 16-bit storage of saved
// activations; the loops over the values are kernels (kernels/cast.h).
#include "model/precision.h"
#include "model/weights16.h"
#include "model/matmul.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "core/common.h"

void round_bf16(float *x, size_t n, int on) {
    if (!on) return;
    kern()->cast->round_to_bf16(x, n);
}

void round_copy_bf16(float *out, const float *x, size_t n, int on) {
    if (on) kern()->cast->round_copy_bf16(out, x, n);
    else mem_copy(out, x, sizeof(float) * n);
}

void act_pack(const Config *c, float **p, size_t n) {
    if (!cfg_bf16(c) || !*p) return;
    uint16_t *h = (uint16_t *)mem_alloc(MEM_ACTIVATIONS, sizeof(uint16_t) * MM_MAX(n, 1), mem_name(*p));
    kern()->cast->pack_bf16(h, *p, n);   // exact: the values are bf16 already
    mem_free(*p);
    *p = (float *)(void *)h;
}

void act_unpack(const Config *c, float **p, size_t n) {
    if (!cfg_bf16(c) || !*p) return;
    const uint16_t *h = (const uint16_t *)(void *)*p;
    float *f = mem_floats(MEM_ACTIVATIONS, MM_MAX(n, 1), mem_name(*p));
    kern()->cast->unpack_bf16(f, h, n);
    mem_free(*p);
    *p = f;
}

// 1 when p holds its n elements as 16-bit numbers (act_pack's), 0 when as floats.
static int is_packed(const float *p, size_t n) { return mem_size(p) < sizeof(float) * MM_MAX(n, 1); }

void act_unpack_if_packed(const Config *c, float **p, size_t n) {
    if (*p && is_packed(*p, n)) act_unpack(c, p, n);
}

void act_pack_if_float(const Config *c, float **p, size_t n) {
    if (*p && !is_packed(*p, n)) act_pack(c, p, n);
}

int packed_operands(const Config *c) { return weights16_on() && cfg_bf16(c); }

void act_for_products(const Config *c, float **p, size_t n) {
    if (!*p || !is_packed(*p, n)) return;   // floats (a recomputation's)
    if (packed_operands(c)) *p = (float *)matmul_packed((uint16_t *)(void *)*p, n);
    else act_unpack(c, p, n);
}

static size_t element_bytes(const Config *c) { return packed_operands(c) ? sizeof(uint16_t) : sizeof(float); }

float *packed_alloc(const Config *c, size_t n, int zeroed, const char *name) {
    size_t bytes = element_bytes(c) * MM_MAX(n, 1);
    return zeroed ? mem_alloc(MEM_ACTIVATIONS, bytes, name) : mem_alloc_uninit(MEM_ACTIVATIONS, bytes, name);
}

float *packed_at(const Config *c, float *p, size_t i) { return (float *)(void *)((char *)p + element_bytes(c) * i); }

void packed_round(const Config *c, float *h, const float *hf, size_t n) {
    if (hf) kern()->cast->pack_bf16((uint16_t *)(void *)h, hf, n);   // (pack_bf16 rounds)
    else prec_round(c, h, n);
}
