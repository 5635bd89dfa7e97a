// model/attention.c: causal grouped-query attention (Mixtral),
// docs/model.md#gqa-attention:
//     q = RoPE(x Wq)  (T,N,Dh)      k = RoPE(x Wk)  (T,Nkv,Dh)      v = x Wv  (T,Nkv,Dh)
//     o = causal softmax attention (model/attn_core.c), query head h reads kv head h/(N/Nkv)
//     out = o Wo  (T,D)
// No runtime 1/sqrt(Dh): MaxText folds it into the initialisation of Wq (model/params.c).
// Tensor parallelism (base/tensor.h): N and Nkv are this device's heads (ld, model/dims.h);
// Wq, Wk, Wv are column-parallel and Wo row-parallel.
// Context parallelism (base/context.h): S is this device's part of each sequence, at
// positions p0 = rank*S ..; its queries attend to the keys and values of all parts.
#include "model/attention.h"
#include "model/attn_core.h"
#include "model/attn_parts.h"
#include "model/rope.h"
#include "model/precision.h"
#include "model/matmul.h"          // matmul_share: x and each gradient read by several products
#include "base/tensor.h"
#include "model/tensor_parallel.h"
#include "base/context.h"
#include "base/memory.h"
#include "core/common.h"

// The buffers' names in the memory report.
static const AttnPartsNames names = {"attention k, all parts", "attention v, all parts", "attention o",
                                     "attention stats", "attention d q", "attention d k", "attention d v"};

void attention_forward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionSaved *s,
                       float *out, const float *x, int B, int S) {
    attention_proj_forward(c, ld, p, s, x, B, S);
    attention_core_forward(c, ld, p, s, out, B, S);
}

void attention_proj_forward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionSaved *s,
                            const float *x, int B, int S) {
    int T = B * S, D = c->base_emb_dim;
    int N = ld->num_query_heads, Nkv = ld->num_kv_heads, Dh = c->head_dim;

    // Projections, one GEMM per sequence (see attn_matmul_forward in model/attn_core.h), all
    // three reading x (model/matmul.h: matmul_share).
    s->q = mem_floats(MEM_ACTIVATIONS, (size_t)T * N * Dh, "attention q");     // (B,S,N,Dh)
    s->k = mem_floats(MEM_ACTIVATIONS, (size_t)T * Nkv * Dh, "attention k");   // (B,S,Nkv,Dh)
    s->v = mem_floats(MEM_ACTIVATIONS, (size_t)T * Nkv * Dh, "attention v");   // (B,S,Nkv,Dh)
    matmul_share(x, (size_t)T * D);
    attn_matmul_forward(s->q, x, p->wq, B, S, D, N * Dh);
    attn_matmul_forward(s->k, x, p->wk, B, S, D, Nkv * Dh);
    attn_matmul_forward(s->v, x, p->wv, B, S, D, Nkv * Dh);
    matmul_unshare(x, (size_t)T * D);
    prec_round(c, s->q, (size_t)T * N * Dh);     // bf16 matmul outputs (model/precision.h)
    prec_round(c, s->k, (size_t)T * Nkv * Dh);
    prec_round(c, s->v, (size_t)T * Nkv * Dh);
    // Rotary position embedding over the whole head (Dr = Dh), on queries and keys, at the
    // global positions of this device's part.
    int p0 = cp_rank() * S;
    rope_forward(c, s->q, B, S, p0, N, Dh, Dh);
    rope_forward(c, s->k, B, S, p0, Nkv, Dh, Dh);
}

void attention_core_forward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionSaved *s,
                            float *out, int B, int S) {
    int T = B * S, D = c->base_emb_dim;
    int N = ld->num_query_heads, Nkv = ld->num_kv_heads, Dh = c->head_dim;
    // bf16 mode, recomputation: q, k, v saved as 16-bit numbers (exact: bf16 values) back
    // to floats; straight from attention_proj_forward they are floats already.
    act_unpack_if_packed(c, &s->q, (size_t)T * N * Dh);
    act_unpack_if_packed(c, &s->k, (size_t)T * Nkv * Dh);
    act_unpack_if_packed(c, &s->v, (size_t)T * Nkv * Dh);

    // o = softmax(mask(q k^T)) v over every part of the sequence (model/attn_parts.h),
    // keeping only per-row statistics for the backward pass.
    attn_parts_forward(c, &s->o, &s->stats, s->q, s->k, s->v, B, S, N, Nkv, Dh, Dh, &names);

    // out = o Wo, Wo (N*Dh, D): a sum over heads, split over the tensor axis (out NULL: a
    // recomputation for a backward that kept the block's output needs o alone)
    if (out) {
        tp_rowpar_forward(c, out, s->o, p->wo, T, N * Dh, D);
        prec_round(c, out, (size_t)T * D);
    }
    // What the backward pass reads, kept as 16-bit numbers in bf16 mode.
    act_pack(c, &s->q, (size_t)T * N * Dh);
    act_pack(c, &s->k, (size_t)T * Nkv * Dh);
    act_pack(c, &s->v, (size_t)T * Nkv * Dh);
    act_pack(c, &s->o, (size_t)T * N * Dh);
}

// A column-parallel projection's backward: dw += x^T d and dx += d w^T (a sum over the
// projection's tensor-split columns), both reading d (T,OC).
static void projection_backward(const Config *c, float *dx, float *dw, const float *d, const float *x, const float *w,
                                int B, int S, int D, int OC, Leaves leaf) {
    matmul_share(d, (size_t)B * S * OC);
    attn_matmul_backward(NULL, dw, d, x, w, B, S, D, OC, leaf);
    tp_colpar_dinp(c, dx, d, w, B * S, D, OC);
    matmul_unshare(d, (size_t)B * S * OC);
}

void attention_backward(const Config *c, const LocalDims *ld, const AttentionParams *p, AttentionParams *g,
                        AttentionSaved *s, float *dx, const float *dout, const float *x, int B, int S) {
    int T = B * S, D = c->base_emb_dim, p0 = cp_rank() * S;
    int N = ld->num_query_heads, Nkv = ld->num_kv_heads, Dh = c->head_dim;
    Leaves leaf = leaves_of(c, B, S);
    act_unpack(c, &s->q, (size_t)T * N * Dh);
    act_unpack(c, &s->k, (size_t)T * Nkv * Dh);
    act_unpack(c, &s->v, (size_t)T * Nkv * Dh);
    act_unpack(c, &s->o, (size_t)T * N * Dh);

    // out = o Wo:  do = dout Wo^T,  dWo += o^T dout
    float *dO = mem_floats(MEM_TEMP, (size_t)T * N * Dh, "attention d o");   // (B,S,N,Dh)
    attn_matmul_backward(dO, g->wo, dout, s->o, p->wo, B, S, N * Dh, D, leaf);
    prec_round(c, dO, (size_t)T * N * Dh);   // bf16: o was rounded, so is its gradient

    // Through the softmax attention to dq, dk, dv (dk, dv summed over each group's heads;
    // (B,S,Nkv,Dh), this device's part of the sequence, model/attn_parts.h).
    float *dq, *dk, *dv;
    attn_parts_backward(c, &dq, &dk, &dv, dO, s->q, s->k, s->v, s->o, s->stats, B, S, N, Nkv, Dh, Dh, &names);
    attention_saved_free(s);   // q, k, v, o are no longer needed: free them before the weight grads

    // RoPE was applied after the projections: rotate the gradients back first (bf16: the
    // rotated outputs and the projections were rounded, so are their gradients).
    prec_round(c, dq, (size_t)T * N * Dh);
    prec_round(c, dk, (size_t)T * Nkv * Dh);
    prec_round(c, dv, (size_t)T * Nkv * Dh);
    rope_backward(c, dq, B, S, p0, N, Dh, Dh);
    rope_backward(c, dk, B, S, p0, Nkv, Dh, Dh);
    prec_round(c, dq, (size_t)T * N * Dh);
    prec_round(c, dk, (size_t)T * Nkv * Dh);

    // q = x Wq, k = x Wk, v = x Wv:  dW += x^T d(.),  dx += dq Wq^T + dk Wk^T + dv Wv^T
    // (each a sum over heads, split over the tensor axis)
    matmul_share(x, (size_t)T * D);
    projection_backward(c, dx, g->wq, dq, x, p->wq, B, S, D, N * Dh, leaf);
    projection_backward(c, dx, g->wk, dk, x, p->wk, B, S, D, Nkv * Dh, leaf);
    projection_backward(c, dx, g->wv, dv, x, p->wv, B, S, D, Nkv * Dh, leaf);
    matmul_unshare(x, (size_t)T * D);
    mem_free(dq);
    mem_free(dk);
    mem_free(dv);
}

void attention_saved_free(AttentionSaved *s) {
    mem_free(s->q);
    mem_free(s->k);
    mem_free(s->v);
    mem_free(s->o);
    mem_free(s->stats);
    memset(s, 0, sizeof(*s));
}
