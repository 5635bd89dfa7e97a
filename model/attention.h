// model/attention.h: causal grouped-query attention (Mixtral), docs/model.md#gqa-attention.
#ifndef MESHMOE_ATTENTION_H
#define MESHMOE_ATTENTION_H
#include "base/config.h"
#include "model/params.h"
#include "model/dims.h"

// What the forward pass keeps for the backward pass (allocated by attention_forward from
// the current device, tag MEM_ACTIVATIONS; freed by attention_backward).
typedef struct {
    float *q;      // (B,S,N,Dh)   after RoPE
    float *k;      // (B,S,Nkv,Dh) after RoPE
    float *v;      // (B,S,Nkv,Dh)
    float *o;      // (B,S,N,Dh)   attention output before the out projection
    float *stats;  // (B,N,S,2)    per query row: max score m and sum of exp(s - m)
} AttentionSaved;

// out (B*S, D) = Attention(x); x (B*S, D) is the normed layer input (kept by the caller).
// ld: this device's heads (model/dims.h); c: the switches and the unsplit dimensions.
void attention_forward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionSaved *s,
                       float *out, const float *x, int B, int S);
// The forward's two parts, attention_forward = proj then core (remat_policy=save_qkv_proj
// keeps what the first leaves and runs the second again in the backward, model/remat.c):
// proj: s->q, s->k, s->v from x (the projections, RoPE applied; floats);
// core: s->o, s->stats and out (B*S, D) = o Wo from s->q, s->k, s->v (floats, or 16-bit
// as a bf16-mode forward saved them), gathering or passing round the other context parts'
// keys and values; then q, k, v, o are saved (16-bit in bf16 mode).
void attention_proj_forward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionSaved *s,
                            const float *x, int B, int S);
void attention_core_forward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionSaved *s,
                            float *out, int B, int S);
// dx (B*S, D) += d/dx; g->* += weight gradients (canonical leaf tree); frees s.
void attention_backward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionParams *g,
                        AttentionSaved *s, float *dx, const float *dout, const float *x, int B, int S);
// Free whatever s still holds and clear it (safe after attention_backward, or on a zeroed
// struct): drops the saved state of a forward pass that gets no backward (eval, sampling).
void attention_saved_free(AttentionSaved *s);
#endif
