// model/weights16.h: the weights' compute copy as 16-bit numbers (bf16 mode under
// bf16_storage: step 2 of bf16 storage, docs/bf16-storage.md).
//
// In bf16 mode the layers compute with the weights rounded to bf16 (cast point 1 of
// model/precision.h). By default model_unit_acquire writes that copy as float32 and points
// the layers' weights at it. Under bf16_storage it writes the copy as 16-bit numbers,
// half the bytes, and records here, tensor by tensor, which 16-bit copy belongs to which
// float32 tensor; the layers' weight pointers stay on the float32 weights (the master, or
// FSDP's gathered unit), and what reads a weight asks for its copy:
//   - a product (model/matmul.c) runs on the copy, through the 16-bit kernels
//     (kernels/matmul16.h), its other operand packed to 16 bits for the call;
//   - the RMSNorm (model/rmsnorm.c) and the router's float32 backward take the copy widened
//     back to floats (the same values the float32 copy holds);
//   - the embedding's gather reads the float32 table and rounds the rows it gathers
//     (model/model.c:model_embed_forward), which rounding the table first would give; so
//     the table has a copy only for the one-hot embedding (use_iota_embed).
// A tensor with no copy is read as it is: the router's gate under float32_gate_logits.
// The records are the calling device's (each device is a thread), one unit's at a time.
#ifndef MESHMOE_WEIGHTS16_H
#define MESHMOE_WEIGHTS16_H
#include "base/config.h"   // Bf16Storage
#include <stddef.h>
#include <stdint.h>

// The config key bf16_storage (train.c, at start-up, bf16 mode only): kept, the copy kept from
// one update of the weights to the next where the device holds whole units (no FSDP, the
// weights in device memory: model/model.c), else made for each use of a unit; per_unit, made
// for each use of a unit always (the least memory: one unit's copy at a time).
void weights16_use(Bf16Storage mode);
int weights16_on(void);     // kept or per_unit
Bf16Storage weights16_mode(void);

// The tensor at w (n floats) has its 16-bit copy at h (n values).
void weights16_add(const float *w, size_t n, const uint16_t *h);
// Forget every record whose copy lies in [copy, copy + n): the unit's copy is being freed.
void weights16_drop(const uint16_t *copy, size_t n);
// The 16-bit copy of the n floats at w, when they lie in one recorded tensor; else NULL.
const uint16_t *weights16_find(const float *w, size_t n);
// The n floats at w as the copy holds them, widened into a new MEM_TEMP buffer the caller
// frees (mem_free), when they have a copy; else NULL (read w itself).
float *weights16_widened(const float *w, size_t n, const char *name);

#endif
