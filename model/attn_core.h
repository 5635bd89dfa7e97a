// model/attn_core.h: the part both attention kinds share: causal softmax attention given
// q, k, v (projected, RoPE applied, any scaling already folded in), for any head widths and
// a grouped kv-head mapping. GQA (model/attention.c) and MLA (model/mla.c) call it.
//
// The math (docs/model.md#gqa-attention), per sequence b and query head h,
// with g = h / (N/Nkv) the kv head it reads:
//     s[i][j] = q[b,i,h] . k[b,j,g]                (no 1/sqrt(d) here)
//     s[i][j] = -0.7 * FLT_MAX  where j > i        (the causal mask, by replacement)
//     m[i]    = max_j s[i][j],   e[i][j] = exp(s[i][j] - m[i]),   l[i] = sum_j e[i][j]
//     o[b,i,h] = (sum_j e[i][j] v[b,j,g]) / l[i]   (the division after the product with v)
// Probabilities are never stored: the backward pass recomputes them from q, k and the
// per-row statistics (m, l), so memory grows with S, not S*S.
//
// Context parallelism (base/context.h): a device holds S positions q0 .. q0+S-1 of
// every sequence (its part; q0 = 0 on one device) and runs its queries against the keys
// and values of all P parts, gathered from the context group: k (P,B,S,Nkv,Dqk), part p
// holding positions p*S .. p*S+S-1 (P = 1 is the plain (B,S,Nkv,Dqk)). The mask compares
// global positions: key j is visible to the query at position q0+i when j <= q0+i.
#ifndef MESHMOE_ATTN_CORE_H
#define MESHMOE_ATTN_CORE_H
#include "kernels/attention.h"
#include "base/config.h"
#include "base/context.h"

// The bf16 rounding points of the config (AttnRounding, kernels/attention.h; docs/model.md#bf16-cast-points,
// cast points 8 and 9): all 0 in float32 mode; float32_qk_product and float32_logits switch
// the scores' and the probabilities' rounding off.
AttnRounding attn_rounding(const Config *c);

// implicit_causal_mask (docs/optimizations.md#implicit_causal_mask): NULL, the mask comes from comparing
// positions (j <= q0+i); or, with implicit_causal_mask=false, a materialised boolean mask
// (B,1,S,q0+S) (MEM_TEMP, 1 byte per entry) as MaxText builds it, which both passes read
// to decide which keys a query sees. The same keys either way, so the same bits. Free with mem_free.
unsigned char *attn_causal_mask(const Config *c, int B, int S, int q0);

// o (B,S,N,Dv) and stats (B,N,S,2) (per query row: m and l) are written.
// q (B,S,N,Dqk) at positions q0.., k (P,B,S,Nkv,Dqk), v (P,B,S,Nkv,Dv) with P*S > q0 (the
// parts after the queries' own are never read). N must be a multiple of Nkv.
void attn_core_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                       const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                       AttnRounding rnd);

// Backward of attn_core_forward given dout = dL/do (B,S,N,Dv) and what the forward saw and
// wrote. dq (B,S,N,Dqk), dk (P,B,S,Nkv,Dqk), dv (P,B,S,Nkv,Dv) are overwritten (not +=):
// dk and dv hold this device's contribution to the keys of every part (0 where its queries
// do not see them). A key's gradient sums over the query rows that see it: the rows are
// cut into chunks of `chunk` rows (the reduce chunks of base/context.h); within a chunk
// the rows are added in (head of the group, row) order, and the chunks along the pairwise
// tree, on one device too, so that the reduce-scatter over the context group (a tree over
// the devices' whole subtrees of chunks) gives the same bits as one device. dq sums over
// keys in position order. Nothing depends on the number of threads.
// The probabilities are recomputed with the forward's rounding (rnd).
void attn_core_backward(float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *o, const float *stats,
                        const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd);

// Dies unless N is a multiple of Nkv.
void attn_check_heads(int N, int Nkv);

// The projections of both attention kinds. With a row-independent product (the ordered
// GEMM, the default: model/matmul.h matmul_rows_independent) a row's result never depends
// on the rows beside it, so they run as one GEMM over all B*S rows. Under
// matmul_impl=openblas or gpu_matmul=cublas(_bf16), whose kernels add a row's products in an order
// that depends on how many rows are left in the GEMM (tests/test_attention.c, check 6),
// they run as one GEMM per sequence: every token's projection stays a function of its own
// sequence, never of the batch size or of how the batch is split over devices
// (docs/model.md#summation-order).
// out (B*S, OC) = inp (B*S, C) @ w (C, OC)
void attn_matmul_forward(float *out, const float *inp, const float *w, int B, int S, int C, int OC);
// dinp (B*S, C) += dout @ w^T, one GEMM per sequence (dinp may be NULL);
// dw (C, OC) += inp^T dout along the canonical leaf tree (model/matmul.c does it; may be NULL).
void attn_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          int B, int S, int C, int OC, Leaves leaf);
#endif
