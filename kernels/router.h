// kernels/router.h: the MoE router's kernels: scores and top-k for each routed_score_func,
// capacity dropping, the load-balance loss and the router's backward
// (docs/model.md#moe-routing, #load-balance-loss); the layer is model/moe.c.
//
// T tokens = B sequences of S tokens, E experts, K experts per token; an assignment
// (token t, slot k) is numbered a = t*K + k, A = T*K of them.
#ifndef MESHMOE_KERNELS_ROUTER_H
#define MESHMOE_KERNELS_ROUTER_H
#include <stddef.h>

typedef struct RouterKernels {
    // routed_score_func="" (Mixtral's rule): top_idx (T,K) = the K largest logits, largest
    // first (ties: lower index first); top_w (T,K) = softmax of those K logits;
    // scores (T,E) = logits (T,E).
    void (*route_mixtral)(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K);
    // routed_score_func=softmax: scores (T,E) = p = softmax(logits) over all E experts;
    // with G > 0 groups of E/G experts only the keep_groups groups with the best single p stay
    // eligible (DeepSeek-V2's group_limited_greedy); top_idx (T,K) = the K largest eligible p;
    // top_w (T,K) = softmax of the K chosen p, or (scaled=1, decoder_block=deepseek) the K
    // chosen p times routed_scaling_factor.
    void (*route_softmax)(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K,
                          int G, int keep_groups, int scaled, float routed_scaling_factor);
    // routed_score_func=sigmoid (DeepSeek): s = sigmoid(logits); scores (T,E) = s + bias
    // (bias (E) or NULL); with G > 0 groups of E/G experts only the keep_groups groups with
    // the best sums of their two best scores stay eligible (DeepSeek-V3's noaux_tc);
    // top_idx (T,K) = the K best eligible scores; top_w (T,K) = their unbiased s, normalised,
    // times routed_scaling_factor.
    // gate_round: s, the bias and the scores are rounded to bf16 (cast point 13); bf16: so is top_w.
    void (*route_deepseek)(int *top_idx, float *top_w, float *scores, const float *logits, const float *bias,
                           int T, int E, int K, int G, int keep_groups, float routed_scaling_factor,
                           int gate_round, int bf16);

    // counts (B,E) += assignments of each sequence to each expert; top_idx (B*S,K).
    void (*count_sequence_assignments)(int *counts, const int *top_idx, int B, int S, int E, int K);
    // keep (B*S*K) = 1 where assignment (b,s,k) is within its expert's capacity in sequence b,
    // counting in (s, k) order after before (B,E) (the earlier parts of each sequence), or
    // from zero when before is NULL; else 0.
    void (*capacity_mask)(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity, const int *before);
    // w (A) *= keep (A): a dropped assignment's combine weight becomes 0.
    void (*drop_weights)(float *w, const int *keep, size_t A);
    // counts (E) += assignments of each expert; top_idx (A).
    void (*count_experts)(long *counts, const int *top_idx, size_t A);

    // probs (T,E) = softmax(logits (T,E)) over the experts.
    void (*router_probs)(float *probs, const float *logits, int T, int E);
    // part (B,nchunks,2E) += per sequence and chunk of `chunk` tokens: the assignment count of
    // each expert (E), then the sum of probs of each expert (E), tokens in position order;
    // top_idx (B*S,K), probs (B*S,E), S = nchunks * chunk.
    void (*lb_chunk_sums)(double *part, const int *top_idx, const float *probs, int B, int S, int nchunks,
                          int chunk, int E, int K);
    // From tot (B,2E), the counts and probability sums over whole sequences of Sg tokens:
    // f (B,E) = count / Sg;  lb_seq (B) = lb_coef * sum_e f * (psum / Sg).
    void (*lb_loss)(float *f, double *lb_seq, const double *tot, int B, int E, int Sg, float lb_coef);
    // dlogits (B*S,E) += the softmax backward of dP[t,e] = lb_coef * f[b,e] / Sg;
    // probs (B*S,E), f (B,E).
    void (*lb_backward)(float *dlogits, const float *probs, const float *f, int B, int S, int Sg, int E, float lb_coef);

    // The routing weights' gradient dw (T,K) pulled back to dlogits (T,E) +=, one kernel per
    // routed_score_func. top_w (T,K) as the forward chose them; probs (T,E) = softmax(logits).
    void (*router_mixtral_backward)(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    int T, int E, int K);
    void (*router_softmax_backward)(float *dlogits, const float *dw, const int *top_idx, const float *top_w,
                                    const float *probs, int T, int E, int K, int scaled, float routed_scaling_factor);
    // logits (T,E) the gate logits; gate_round as in route_deepseek.
    void (*router_deepseek_backward)(float *dlogits, const float *dw, const int *top_idx, const float *logits,
                                     int T, int E, int K, float routed_scaling_factor, int gate_round);
} RouterKernels;

extern const RouterKernels router_cpu;   // kernels/cpu/router.c

#endif
