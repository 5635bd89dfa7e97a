// model/moe.h: the mixture-of-experts block: router (Mixtral or DeepSeek) and experts
// (dense path or sparse grouped path): docs/model.md#moe-routing, #expert-dispatch, #load-balance-loss.
#ifndef MESHMOE_MOE_H
#define MESHMOE_MOE_H
#include "base/config.h"
#include "model/params.h"
#include "model/mlp.h"
#include "model/dims.h"

// What moe_forward keeps (MEM_ACTIVATIONS). T = B*S tokens, A = T*K assignments
// (token t, slot k) numbered a = t*K + k. The experts' rows ("expert rows") are:
//   sparse path: the A assignments sorted by expert (then token, then slot), so expert e
//                owns rows [row_start[e], row_start[e+1]);
//   dense path:  every expert on every token, expert e owns rows [e*T, (e+1)*T).
typedef struct {
    // Routing (also read by the parity dump).
    float *logits;     // (T,E) gate logits
    float *scores;     // (T,E) selection scores: gate logits (""), softmax(logits) (softmax) or s + bias (sigmoid)
    int *top_idx;      // (T,K) chosen experts, in top-k order
    float *top_w;      // (T,K) routing weights (before capacity dropping)
    float *w_eff;      // (T,K) weights used by the combine: top_w, or 0 where dropped
    float *probs;      // (T,E) softmax(logits) for the load-balance loss, or NULL
    float *lb_f;       // (B,E) f[b,e]: share of sequence b's assignments that went to e, or NULL
    // Experts.
    int nrows;         // expert rows in total (A sparse, E*T dense)
    int *row_start;    // (E+1) first row of each expert
    int *row_token;    // (nrows) the token of each row
    int *assign_row;   // (A) the row of each assignment
    // Their host copies, read back once by the forward pass for the backward too (malloc'd):
    // the row starts (E+1), and the rows' tokens (nrows; NULL under expert parallelism,
    // whose plan holds the tokens of the rows each device runs).
    int *host_row_start, *host_row_token;
    float *h0, *h1;    // (nrows,H) x wi_0, x wi_1 per row
    float *y;          // (nrows,D) expert outputs
    MlpSaved shared;   // DeepSeek's shared experts
    // Expert parallelism (base/expert.h): the rows this device's experts ran on, and
    // the exchange plan; h0 and h1 above stay NULL then. NULL without expert parallelism.
    struct ExpertDispatch *ep;
} MoeSaved;

// out (T,D) = MoE(x (T,D)), T = B*S. bias (E) is the DeepSeek selection bias or NULL.
// out == NULL: only what the backward reads (routing, h0, h1 and the expert outputs y, which
// the routing weights' gradient needs), as a remat recomputation needs: no combine, and the
// shared experts' h0 and h1 without their wo.
// ld: this device's expert width (model/dims.h); the experts and routing are the Config's.
// lb_coef: coefficient of sum_{b,e} f*Pbar in the total loss (0 = no load-balance loss);
// lb_seq (B) = this block's load-balance loss per sequence, lb_coef * sum_e f[b,e]*Pbar[b,e]
// (written when lb_coef > 0; the caller adds sequences along the canonical tree);
// expert_counts (E) += (token, slot) assignments per expert (for the aux-loss-free bias
// update), or NULL.
void moe_forward(const Config *c, const LocalDims *ld, const MoeParams *p, const float *bias, MoeSaved *s, float *out,
                 const float *x, int B, int S, float lb_coef, double *lb_seq, long *expert_counts);
// moe_forward's out == NULL pass when remat kept the expert outputs y (nrows,D, in their
// saved form: MaxText's mlpwo under save_dot_except_mlpwi): the routing and the wi products
// run again, the wo products (and, under expert parallelism, the outputs' return) do not;
// s takes y.
void moe_recompute(const Config *c, const LocalDims *ld, const MoeParams *p, const float *bias, MoeSaved *s,
                   const float *x, int B, int S, float lb_coef, double *lb_seq, long *expert_counts, float *y);
// dx (T,D) += ; g->* += gradients (canonical tree); frees the experts' saved buffers. The
// routing arrays stay until moe_saved_free().
void moe_backward(const Config *c, const LocalDims *ld, const MoeParams *p, MoeParams *g, MoeSaved *s, float *dx,
                  const float *dout, const float *x, int B, int S, float lb_coef);
// Free everything s holds (safe on a cleared struct and after moe_backward).
void moe_saved_free(MoeSaved *s);

// Routing alone, from the config's switches to the kernels of kernels/router.h (tested by
// hand-computed cases).
// routed_score_func="" (Mixtral's rule): idx = top_k(logits, K) (ties: lower index first),
// w = softmax of the K chosen logits; scores = logits.
void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K);
// routed_score_func=softmax (MaxText's meaning): p = softmax(logits) over all experts
// (scores = p), idx = top_k(p, K); w = softmax of the K chosen p (decoder_block=mixtral) or
// the K chosen p times routed_scaling_factor (deepseek).
void route_softmax(const Config *c, int *top_idx, float *top_w, float *scores, const float *logits, int T);
// DeepSeek: s = sigmoid(logits), scores = s + bias (bias may be NULL), group-limited
// selection on the scores, weights from the unbiased s, normalised and scaled.
void route_deepseek(const Config *c, int *top_idx, float *top_w, float *scores, const float *logits,
                    const float *bias, int T);
// Capacity of one expert per sequence on the dense path: int(max(ceil(S*K/E) * cf, cf)).
int moe_capacity(const Config *c, int S);
// keep (B*S*K) = 1 if assignment (b,s,k) is within its expert's capacity in sequence b,
// counting assignments in (s, k) order; else 0. before (B,E): assignments of the earlier
// positions of each sequence (the earlier parts under context parallelism), or NULL.
void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity, const int *before);
#endif
