// model/precision.c: bf16 rounding and the 16-bit storage of saved activations.
#include "model/precision.h"
#include "sharding/memory.h"
#include "common.h"

void round_bf16(float *x, size_t n, int on) {
    if (!on || mem_dry()) return;
    #pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

void act_pack(const Config *c, float **p, size_t n) {
    if (!cfg_bf16(c) || !*p) return;
    uint16_t *h = (uint16_t *)mem_alloc(MEM_ACTIVATIONS, sizeof(uint16_t) * MM_MAX(n, 1), mem_name(*p));
    for (size_t i = 0; i < (mem_dry() ? 0 : n); i++) h[i] = bf16_bits((*p)[i]);   // exact: the values are bf16 already
    mem_free(*p);
    *p = (float *)(void *)h;
}

void act_unpack(const Config *c, float **p, size_t n) {
    if (!cfg_bf16(c) || !*p) return;
    const uint16_t *h = (const uint16_t *)(void *)*p;
    float *f = mem_floats(MEM_ACTIVATIONS, MM_MAX(n, 1), mem_name(*p));
    for (size_t i = 0; i < (mem_dry() ? 0 : n); i++) f[i] = bf16_float(h[i]);
    mem_free(*p);
    *p = f;
}

void act_unpack_if_packed(const Config *c, float **p, size_t n) {
    if (*p && mem_size(*p) < sizeof(float) * MM_MAX(n, 1)) act_unpack(c, p, n);
}

void act_pack_if_float(const Config *c, float **p, size_t n) {
    if (*p && mem_size(*p) >= sizeof(float) * MM_MAX(n, 1)) act_pack(c, p, n);
}
