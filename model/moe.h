// model/moe.h: the mixture-of-experts block: router (Mixtral or DeepSeek) and experts
// (dense path or sparse grouped path), MODEL_SPEC.md "MoE block" and "Load-balance loss".
#ifndef MESHMOE_MOE_H
#define MESHMOE_MOE_H
#include "model/config.h"
#include "model/params.h"
#include "model/mlp.h"

typedef struct {
    // Routing, kept for the backward pass and for the parity dump.
    int *top_idx;      // (T,K) chosen experts, in top-k order
    float *top_w;      // (T,K) routing weights (before capacity dropping)
    float *scores;     // (T,E) selection scores (softmax router: gate logits; sigmoid: s + bias)
    float *logits;     // (T,E) gate logits
    // Everything else the implementation keeps (expert activations, sort order, ...).
    void *bufs[16];
    MlpSaved shared;   // the shared experts' saved activations (DeepSeek)
} MoeSaved;

// out (T,D) = MoE(x (T,D)), T = B*S. bias (E) is the DeepSeek selection bias or NULL.
// lb_coef: coefficient of sum_{b,e} f*Pbar in the total loss (0 = no load-balance loss);
// lb_seq (B) = this block's load-balance loss per sequence, lb_coef * sum_e f[b,e]*Pbar[b,e]
// (written when lb_coef > 0; the caller adds sequences along the canonical tree);
// expert_counts (E) += (token, slot) assignments per expert (for the aux-loss-free bias
// update), or NULL.
void moe_forward(const Config *c, const MoeParams *p, const float *bias, MoeSaved *s, float *out,
                 const float *x, int B, int S, float lb_coef, double *lb_seq, long *expert_counts);
// dx (T,D) += ; g->* += gradients (canonical tree); frees s's buffers except the routing
// arrays, which stay until moe_saved_free().
void moe_backward(const Config *c, const MoeParams *p, MoeParams *g, MoeSaved *s, float *dx,
                  const float *dout, const float *x, int B, int S, float lb_coef);
void moe_saved_free(MoeSaved *s);

// Routing alone (tested by hand-computed cases): fills top_idx, top_w, scores for T tokens
// from gate logits (T,E).
void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K);
void route_deepseek(const Config *c, int *top_idx, float *top_w, float *scores, const float *logits,
                    const float *bias, int T);
// Capacity dropping on the dense path: keep[t*K+k] = 1 if assignment (t,k) fits its
// expert's capacity within its sequence (s-major priority), else 0.
int moe_capacity(const Config *c);
void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity);
#endif
