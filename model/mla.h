// model/mla.h: DeepSeek multi-head latent attention, docs/model.md#mla.
#ifndef MESHMOE_MLA_H
#define MESHMOE_MLA_H
#include "base/config.h"
#include "model/params.h"
#include "model/dims.h"

// Saved by mla_forward (MEM_ACTIVATIONS), freed by mla_backward. T = B*S tokens,
// Qk = qk_nope_head_dim + qk_rope_head_dim, Dv = v_head_dim, R = kv_lora_rank, Q = q_lora_rank.
typedef struct {
    float *qa;       // (T,Q)     x @ wq_a, the input of q_norm          (q_lora_rank > 0 only)
    float *qa_rstd;  // (T)       q_norm's 1/rms                          (q_lora_rank > 0 only)
    float *qn;       // (T,Q)     q_norm output, the input of wq_b        (q_lora_rank > 0 only)
    float *latent;   // (T,R)     the latent part of x @ wkv_a, the input of kv_norm
    float *kv_rstd;  // (T)       kv_norm's 1/rms
    float *latn;     // (T,R)     kv_norm output, the input of wkv_b
    float *qn_scale, *kvn_scale;   // the norms' broadcast scales, rmsnorm_fused_scale=false only (model/rmsnorm.h)
    float *q;        // (B,S,N,Qk)  [q_nope, RoPE(q_rope)] * Qk^-0.5
    float *k;        // (B,S,N,Qk)  [k_nope, RoPE(k_rope) broadcast to every head]
    float *v;        // (B,S,N,Dv)
    float *o;        // (B,S,N,Dv)  attention output before the out projection
    float *stats;    // (B,N,S,2)   per query row: max score m and sum of exp(s - m)
} MLASaved;

// out (B*S, D) = MLA(x); x (B*S, D) is the normed layer input (kept by the caller).
// ld: this device's heads (model/dims.h); c: the switches and the unsplit dimensions.
void mla_forward(const Config *c, const LocalDims *ld, const MLAParams *p, MLASaved *s, float *out, const float *x,
                 int B, int S);
// The forward's two parts, mla_forward = proj then core (see attention_proj_forward):
// proj: everything up to the per-head q, k, v (the low-rank intermediates qa .. kvn_scale
// included: the projections' backward reads them); core: o, stats and out = o Wo from
// s->q, s->k, s->v (floats, or 16-bit as a bf16-mode forward saved them), then saves.
void mla_proj_forward(const Config *c, const LocalDims *ld, const MLAParams *p, MLASaved *s, const float *x,
                      int B, int S);
void mla_core_forward(const Config *c, const LocalDims *ld, const MLAParams *p, MLASaved *s, float *out, int B, int S);
// dx (B*S, D) += d/dx; g->* += weight gradients (canonical leaf tree); frees s.
void mla_backward(const Config *c, const LocalDims *ld, const MLAParams *p, MLAParams *g, MLASaved *s,
                  float *dx, const float *dout, const float *x, int B, int S);
// Free whatever s still holds and clear it (safe after mla_backward, or on a zeroed struct).
void mla_saved_free(MLASaved *s);
#endif
