// model/mla.c: DeepSeek multi-head latent attention (docs/model.md#mla).
// Keys and values are made from a small per-token latent instead of full heads:
//     query:  q = x Wq                               (q_lora_rank == 0)
//             q = RMSNorm_q(x Wq_a) Wq_b             (q_lora_rank  > 0)
//             per head q = [q_nope (Dn), q_rope (Dr)]
//     kv:     [latent (R), k_rope (Dr)] = x Wkv_a    (k_rope: one head, shared by all heads)
//             per head [k_nope (Dn), v (Dv)] = RMSNorm_kv(latent) Wkv_b
//     RoPE on q_rope (every head) and on k_rope;  k = [k_nope, k_rope]  (broadcast over heads)
//     q *= (Dn + Dr)^-0.5  (after RoPE)
//     o = causal softmax attention (model/attn_core.c) with N kv heads;  out = o Wo
// Tensor parallelism (base/tensor.h): N is this device's heads (ld, model/dims.h);
// Wq/Wq_b and Wkv_b are column-parallel, Wo row-parallel; the low-rank Wq_a, Wkv_a and
// the norms are replicated (every tensor device computes them whole).
// Context parallelism (base/context.h): S is this device's part of each sequence, at
// positions p0 = rank*S ..; the assembled per-head keys (k_nope with the shared k_rope)
// and values of all parts are gathered for attention, and their gradients sent back.
#include "model/mla.h"
#include "kernels/kernels.h"
#include "model/attn_core.h"
#include "model/attn_parts.h"
#include "model/rmsnorm.h"
#include "model/rope.h"
#include "model/precision.h"
#include "model/matmul.h"      // matmul_share: x and the gradients read by several products
#include "base/treesum.h"
#include "base/tensor.h"
#include "model/tensor_parallel.h"
#include "base/context.h"
#include "base/memory.h"
#include "core/common.h"

// The runtime query scale: MaxText's `self.qk_head_dim ** -0.5` is a Python double,
// rounded once to float32 when it multiplies the float32 query. Past the original context
// (max_position_embeddings > original_max_position_embeddings, whatever rope_type) DeepSeek
// and MaxText multiply it by mscale^2, mscale = 0.1 * mscale * ln(rope_factor) + 1, in
// doubles too.
static float mla_scale(const Config *c) {
    double d = pow((double)(c->qk_nope_head_dim + c->qk_rope_head_dim), -0.5);
    if (c->max_position_embeddings > c->original_max_position_embeddings) {
        double m = 0.1 * c->mscale * log(c->rope_factor) + 1.0;
        d = d * m * m;
    }
    float s = (float)d;
    return cfg_bf16(c) ? bf16_round(s) : s;   // bf16: the constant meets a bf16 array (cast point 7)
}

// The epsilon of the query and key-value latents' RMSNorms: mla_norm_epsilon where it is set
// (DeepSeek's own code and transformers take 1e-6 there whatever rms_norm_eps is), else the
// layers' normalization_layer_epsilon, as MaxText has it.
static float latent_eps(const Config *c) {
    return c->mla_norm_epsilon > 0 ? c->mla_norm_epsilon : c->normalization_layer_epsilon;
}

// The buffers' names in the memory report.
static const AttnPartsNames names = {"mla k, all parts", "mla v, all parts", "mla o", "mla stats",
                                     "mla d q", "mla d k", "mla d v"};

void mla_forward(const Config *c, const LocalDims *ld, const MLAParams *p, MLASaved *s, float *out, const float *x,
                 int B, int S) {
    mla_proj_forward(c, ld, p, s, x, B, S);
    mla_core_forward(c, ld, p, s, out, B, S);
}

void mla_proj_forward(const Config *c, const LocalDims *ld, const MLAParams *p, MLASaved *s, const float *x,
                      int B, int S) {
    int T = B * S, D = c->base_emb_dim, N = ld->num_query_heads;
    int Q = c->q_lora_rank, R = c->kv_lora_rank;
    int Dn = c->qk_nope_head_dim, Dr = c->qk_rope_head_dim, Dv = c->v_head_dim, Qk = Dn + Dr;
    int p0 = cp_rank() * S;   // global position of this device's first token
    memset(s, 0, sizeof(*s));

    // ---- query: q (T, N*Qk) ----
    // (Every buffer below is written whole by the product, norm, copy or assembly that fills it.)
    matmul_share(x, (size_t)T * D);   // read by the query's and the keys' first products
    s->q = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * N * Qk, "mla q");   // (B,S,N,Qk)
    if (Q > 0) {
        s->qa = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * Q, "mla q down");          // (T,Q)
        s->qa_rstd = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T, "mla q_norm rstd");    // (T)
        s->qn = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * Q, "mla q_norm out");      // (T,Q)
        attn_matmul_forward(s->qa, x, p->wq_a, B, S, D, Q);
        prec_round(c, s->qa, (size_t)T * Q);
        s->qn_scale = rmsnorm_forward_eps(c, latent_eps(c), s->qn, s->qa_rstd, s->qa, p->q_norm, T, Q);
        attn_matmul_forward(s->q, s->qn, p->wq_b, B, S, Q, N * Qk);
    } else {
        attn_matmul_forward(s->q, x, p->wq, B, S, D, N * Qk);
    }
    prec_round(c, s->q, (size_t)T * N * Qk);
    // RoPE on the last Dr entries of every head (the q_rope part), then the scale (bf16:
    // the constant is rounded too, cast point 7).
    rope_forward(c, s->q + Dn, B, S, p0, N, Qk, Dr);
    float scale = mla_scale(c);
    kern()->mla->mla_apply_scale(s->q, (size_t)T * N * Qk, scale);
    prec_round(c, s->q, (size_t)T * N * Qk);

    // ---- keys and values ----
    // ckv (T, R+Dr) = x Wkv_a: per token the latent, then the shared k_rope.
    float *ckv = mem_floats_uninit(MEM_TEMP, (size_t)T * (R + Dr), "mla kv down");   // (T,R+Dr)
    attn_matmul_forward(ckv, x, p->wkv_a, B, S, D, R + Dr);
    matmul_unshare(x, (size_t)T * D);
    prec_round(c, ckv, (size_t)T * (R + Dr));
    rope_forward(c, ckv + R, B, S, p0, 1, R + Dr, Dr);   // one rope head per token
    // The latent is strided inside ckv: copy it out so RMSNorm sees contiguous rows.
    s->latent = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * R, "mla latent");       // (T,R)
    s->kv_rstd = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T, "mla kv_norm rstd");    // (T)
    s->latn = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * R, "mla kv_norm out");    // (T,R)
    kern()->mla->mla_copy_cols(s->latent, R, ckv, R + Dr, T, R);
    s->kvn_scale = rmsnorm_forward_eps(c, latent_eps(c), s->latn, s->kv_rstd, s->latent, p->kv_norm, T, R);
    // kv (T, N*(Dn+Dv)) = latn Wkv_b: per head k_nope then v.
    float *kv = mem_floats_uninit(MEM_TEMP, (size_t)T * N * (Dn + Dv), "mla kv up");   // (T,N,Dn+Dv)
    attn_matmul_forward(kv, s->latn, p->wkv_b, B, S, R, N * (Dn + Dv));
    prec_round(c, kv, (size_t)T * N * (Dn + Dv));
    // Assemble k = [k_nope, k_rope] per head and v.
    s->k = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * N * Qk, "mla k");   // (B,S,N,Qk)
    s->v = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * N * Dv, "mla v");   // (B,S,N,Dv)
    kern()->mla->mla_assemble_kv(s->k, s->v, kv, ckv, T, N, Dn, Dr, Dv, R);
    mem_free(ckv);
    mem_free(kv);
}

void mla_core_forward(const Config *c, const LocalDims *ld, const MLAParams *p, MLASaved *s, float *out, int B, int S) {
    int T = B * S, D = c->base_emb_dim, N = ld->num_query_heads;
    int Q = c->q_lora_rank, R = c->kv_lora_rank, Dv = c->v_head_dim, Qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    // bf16 mode, recomputation: q, k, v saved as 16-bit numbers (exact) back to floats.
    act_unpack_if_packed(c, &s->q, (size_t)T * N * Qk);
    act_unpack_if_packed(c, &s->k, (size_t)T * N * Qk);
    act_unpack_if_packed(c, &s->v, (size_t)T * N * Dv);

    // ---- attention (every query head has its own kv head) and the out projection ----
    // o = softmax(mask(q k^T)) v over every part of the sequence (model/attn_parts.h).
    attn_parts_forward(c, &s->o, &s->stats, s->q, s->k, s->v, B, S, N, N, Qk, Dv, &names);
    if (out) {   // (NULL: a recomputation that needs o alone, attention_core_forward)
        tp_rowpar_forward(c, out, s->o, p->wo, T, N * Dv, D);   // a sum over heads (tensor-split)
        prec_round(c, out, (size_t)T * D);
    }
    // What the backward pass reads, kept as 16-bit numbers in bf16 mode (the low-rank
    // intermediates are 16-bit already when this is a recomputation from them).
    act_pack_if_float(c, &s->qa, (size_t)T * Q);
    act_pack_if_float(c, &s->qn, (size_t)T * Q);
    act_pack_if_float(c, &s->latent, (size_t)T * R);
    act_pack_if_float(c, &s->latn, (size_t)T * R);
    act_pack(c, &s->q, (size_t)T * N * Qk);
    act_pack(c, &s->k, (size_t)T * N * Qk);
    act_pack(c, &s->v, (size_t)T * N * Dv);
    act_pack(c, &s->o, (size_t)T * N * Dv);
}

// The shared k_rope's gradient: the sum over heads of dk_rope, a sum over the tensor-split
// heads, so it is cut into the pieces of base/tensor.h (each a run of heads, added in head
// order) added along the tree, then over the tensor axis; written into dckv's k_rope slot.
static void mla_k_rope_backward(const Config *c, float *dckv, const float *dk, int T, int N) {
    int R = c->kv_lora_rank, Dn = c->qk_nope_head_dim, Dr = c->qk_rope_head_dim;
    int pieces = tp_local_chunks(c), hp = N / pieces;
    float *dk_rope = mem_floats(MEM_TEMP, (size_t)T * Dr, "mla d k_rope");   // (T,Dr)
    TreeSum ts;
    treesum_begin(&ts, (size_t)T * Dr, MEM_TEMP, "mla d k_rope piece");
    for (int r = 0; r < pieces; r++) {
        float *piece = treesum_leaf(&ts);   // (T,Dr): heads r*hp .. (r+1)*hp-1
        kern()->mla->mla_k_rope_grad_leaf(piece, dk, T, N, Dn, Dr, r * hp, (r + 1) * hp);
        treesum_push(&ts);
    }
    treesum_end(&ts, dk_rope);
    tp_all_reduce(dk_rope, (size_t)T * Dr);
    kern()->mla->mla_copy_cols(dckv + R, R + Dr, dk_rope, Dr, T, Dr);
    mem_free(dk_rope);
}

// The keys' and values' backward, from the core's dk (B,S,N,Qk) and dv (B,S,N,Dv), both
// freed here: dx += through Wkv_b, RMSNorm_kv and Wkv_a.
static void mla_kv_backward(const Config *c, const LocalDims *ld, const MLAParams *p, MLAParams *g, MLASaved *s,
                            float *dx, float *dk, float *dv, const float *x, int B, int S) {
    int T = B * S, D = c->base_emb_dim, N = ld->num_query_heads, p0 = cp_rank() * S, R = c->kv_lora_rank;
    int Dn = c->qk_nope_head_dim, Dr = c->qk_rope_head_dim, Dv = c->v_head_dim;
    Leaves leaf = leaves_of(c, B, S);
    // dkv (T,N,Dn+Dv) = per head [dk_nope, dv]; the shared k_rope's gradient goes into
    // dckv (T,R+Dr) after the latent's slot.
    float *dkv = mem_floats(MEM_TEMP, (size_t)T * N * (Dn + Dv), "mla d kv up");   // (T,N,Dn+Dv)
    float *dckv = mem_floats(MEM_TEMP, (size_t)T * (R + Dr), "mla d kv down");     // (T,R+Dr)
    kern()->mla->mla_split_dkv(dkv, dk, dv, T, N, Dn, Dr, Dv);
    mla_k_rope_backward(c, dckv, dk, T, N);
    mem_free(dk);
    mem_free(dv);
    rope_backward(c, dckv + R, B, S, p0, 1, R + Dr, Dr);
    // kv = latn Wkv_b, latn = RMSNorm_kv(latent)
    float *dlatn = mem_floats(MEM_TEMP, (size_t)T * R, "mla d kv_norm out");   // (T,R)
    matmul_share(dkv, (size_t)T * N * (Dn + Dv));   // read by both products
    attn_matmul_backward(NULL, g->wkv_b, dkv, s->latn, p->wkv_b, B, S, R, N * (Dn + Dv), leaf);
    tp_colpar_dinp(c, dlatn, dkv, p->wkv_b, T, R, N * (Dn + Dv));   // a sum over heads (tensor-split)
    matmul_unshare(dkv, (size_t)T * N * (Dn + Dv));
    prec_round(c, dlatn, (size_t)T * R);
    mem_free(dkv);
    float *dlat = mem_floats(MEM_TEMP, (size_t)T * R, "mla d latent");         // (T,R)
    rmsnorm_backward_cfg(c, dlat, g->kv_norm, dlatn, s->latent, p->kv_norm, s->kvn_scale, s->kv_rstd, T, R, leaf);
    kern()->mla->mla_copy_cols(dckv, R + Dr, dlat, R, T, R);
    mem_free(dlatn);
    mem_free(dlat);
    // ckv = x Wkv_a (bf16: ckv was rounded, so is its gradient)
    prec_round(c, dckv, (size_t)T * (R + Dr));
    attn_matmul_backward(dx, g->wkv_a, dckv, x, p->wkv_a, B, S, D, R + Dr, leaf);
    mem_free(dckv);
}

// The query's backward from the core's dq (B,S,N,Qk), freed here: dx += through the scale,
// RoPE and Wq (or Wq_b, RMSNorm_q and Wq_a).
static void mla_query_backward(const Config *c, const LocalDims *ld, const MLAParams *p, MLAParams *g,
                               MLASaved *s, float *dx, float *dq, const float *x, int B, int S) {
    int T = B * S, D = c->base_emb_dim, N = ld->num_query_heads, p0 = cp_rank() * S, Q = c->q_lora_rank;
    int Dn = c->qk_nope_head_dim, Dr = c->qk_rope_head_dim, Qk = Dn + Dr;
    Leaves leaf = leaves_of(c, B, S);
    // q = [q_nope, RoPE(q_rope)] * scale: undo the scale, then the rotation.
    kern()->mla->mla_apply_scale(dq, (size_t)T * N * Qk, mla_scale(c));
    prec_round(c, dq, (size_t)T * N * Qk);   // bf16: the rotated and projected q were rounded
    rope_backward(c, dq + Dn, B, S, p0, N, Qk, Dr);
    prec_round(c, dq, (size_t)T * N * Qk);
    matmul_share(dq, (size_t)T * N * Qk);   // read by its weight's and its input's products
    if (Q > 0) {
        // q = qn Wq_b, qn = RMSNorm_q(qa), qa = x Wq_a
        float *dqn = mem_floats(MEM_TEMP, (size_t)T * Q, "mla d q_norm out");   // (T,Q)
        attn_matmul_backward(NULL, g->wq_b, dq, s->qn, p->wq_b, B, S, Q, N * Qk, leaf);
        tp_colpar_dinp(c, dqn, dq, p->wq_b, T, Q, N * Qk);   // a sum over heads (tensor-split)
        matmul_unshare(dq, (size_t)T * N * Qk);
        float *dqa = mem_floats(MEM_TEMP, (size_t)T * Q, "mla d q down");       // (T,Q)
        prec_round(c, dqn, (size_t)T * Q);
        rmsnorm_backward_cfg(c, dqa, g->q_norm, dqn, s->qa, p->q_norm, s->qn_scale, s->qa_rstd, T, Q, leaf);
        prec_round(c, dqa, (size_t)T * Q);
        attn_matmul_backward(dx, g->wq_a, dqa, x, p->wq_a, B, S, D, Q, leaf);
        mem_free(dqn);
        mem_free(dqa);
    } else {
        attn_matmul_backward(NULL, g->wq, dq, x, p->wq, B, S, D, N * Qk, leaf);
        tp_colpar_dinp(c, dx, dq, p->wq, T, D, N * Qk);   // a sum over heads (tensor-split)
        matmul_unshare(dq, (size_t)T * N * Qk);
    }
    mem_free(dq);
}

void mla_backward(const Config *c, const LocalDims *ld, const MLAParams *p, MLAParams *g, MLASaved *s,
                  float *dx, const float *dout, const float *x, int B, int S) {
    int T = B * S, D = c->base_emb_dim, N = ld->num_query_heads;
    int Q = c->q_lora_rank, R = c->kv_lora_rank, Dv = c->v_head_dim;
    int Qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    act_unpack(c, &s->qa, (size_t)T * Q);
    act_unpack(c, &s->qn, (size_t)T * Q);
    act_unpack(c, &s->latent, (size_t)T * R);
    act_unpack(c, &s->latn, (size_t)T * R);
    act_unpack(c, &s->q, (size_t)T * N * Qk);
    act_unpack(c, &s->k, (size_t)T * N * Qk);
    act_unpack(c, &s->v, (size_t)T * N * Dv);
    act_unpack(c, &s->o, (size_t)T * N * Dv);

    // out = o Wo
    float *dO = mem_floats(MEM_TEMP, (size_t)T * N * Dv, "mla d o");   // (B,S,N,Dv)
    attn_matmul_backward(dO, g->wo, dout, s->o, p->wo, B, S, N * Dv, D, leaves_of(c, B, S));
    prec_round(c, dO, (size_t)T * N * Dv);   // bf16: where the forward rounded, so is the gradient

    // Attention core -> dq, dk, dv (per head), this device's part (model/attn_parts.h).
    float *dq, *dk, *dv;
    attn_parts_backward(c, &dq, &dk, &dv, dO, s->q, s->k, s->v, s->o, s->stats, B, S, N, N, Qk, Dv, &names);
    prec_round(c, dq, (size_t)T * N * Qk);
    prec_round(c, dk, (size_t)T * N * Qk);
    prec_round(c, dv, (size_t)T * N * Dv);
    // q, k, v, o and the statistics are no longer needed.
    mem_free(s->q); mem_free(s->k); mem_free(s->v); mem_free(s->o); mem_free(s->stats);
    s->q = s->k = s->v = s->o = s->stats = NULL;

    matmul_share(x, (size_t)T * D);   // read by both weight gradients below
    mla_kv_backward(c, ld, p, g, s, dx, dk, dv, x, B, S);   // dx  = d(x Wkv_a)
    mla_query_backward(c, ld, p, g, s, dx, dq, x, B, S);    // dx += d(x Wq), or d(x Wq_a)
    matmul_unshare(x, (size_t)T * D);
    mla_saved_free(s);
}

void mla_saved_free(MLASaved *s) {
    mem_free(s->qa); mem_free(s->qa_rstd); mem_free(s->qn);
    mem_free(s->latent); mem_free(s->kv_rstd); mem_free(s->latn);
    mem_free(s->qn_scale); mem_free(s->kvn_scale);
    mem_free(s->q); mem_free(s->k); mem_free(s->v); mem_free(s->o); mem_free(s->stats);
    memset(s, 0, sizeof(*s));
}
