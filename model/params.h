// model/params.h: the parameter structs. All trained parameters of the model live in one
// allocation (and the gradients and AdamW moments in three more of the same layout); these
// structs only point into it. The layout itself (names, shapes, order, init) is defined in
// one place: model/params.c:walk_layout.
// Kernels are stored as MaxText stores them, row-major, and used as x @ kernel.
#ifndef MESHMOE_PARAMS_H
#define MESHMOE_PARAMS_H

// Grouped-query attention (attention_type=global).
typedef struct {
    float *wq;   // (D, N*Dh)    query/kernel [D,N,Dh]; init std 1/sqrt(D) / sqrt(Dh)
    float *wk;   // (D, Nkv*Dh)  key/kernel
    float *wv;   // (D, Nkv*Dh)  value/kernel
    float *wo;   // (N*Dh, D)    out/kernel [N,Dh,D]
} AttentionParams;

// DeepSeek multi-head latent attention (attention_type=mla). Qk = qk_nope + qk_rope.
typedef struct {
    float *wq_a;    // (D, q_lora_rank)            q_lora_rank > 0 only
    float *q_norm;  // (q_lora_rank)                RMSNorm scale
    float *wq_b;    // (q_lora_rank, N*Qk)
    float *wq;      // (D, N*Qk)                    q_lora_rank == 0 only
    float *wkv_a;   // (D, kv_lora_rank + qk_rope)  latent first, then the shared k_rope
    float *kv_norm; // (kv_lora_rank)
    float *wkv_b;   // (kv_lora_rank, N*(qk_nope + v_head_dim))  per head: k_nope then v
    float *wo;      // (N*v_head_dim, D)
} MLAParams;

// SwiGLU feed-forward: (silu(x wi_0) * (x wi_1)) wo.
typedef struct {
    float *wi_0;    // (D, F)
    float *wi_1;    // (D, F)
    float *wo;      // (F, D)
} MlpParams;

// Mixture of experts: a gate and E SwiGLU experts of width H, plus DeepSeek's shared experts.
typedef struct {
    float *gate;    // (D, E)      gate/kernel
    float *wi_0;    // (E, D, H)
    float *wi_1;    // (E, D, H)
    float *wo;      // (E, H, D)
    MlpParams shared;  // width shared_experts*H; NULL pointers when shared_experts == 0
} MoeParams;

typedef struct {
    float *pre_norm;    // (D) pre_self_attention_layer_norm/scale
    AttentionParams attn;
    MLAParams mla;
    float *post_norm;   // (D) post_self_attention_layer_norm/scale
    MlpParams mlp;      // dense FFN layers
    MoeParams moe;      // MoE layers
} LayerParams;

typedef struct {
    float *embedding;   // (V, D)  token_embedder/embedding
    LayerParams *layers;// (L)
    float *final_norm;  // (D)     decoder_norm/scale
    float *logits;      // (D, V)  logits_dense/kernel
} Params;

#endif
