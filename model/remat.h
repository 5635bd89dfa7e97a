// model/remat.h: rematerialisation. What a decoder layer's forward keeps for its backward
// on the device, moves to host memory (offload), or drops to be recomputed in the backward
// (MaxText's remat_policy and its named checkpoints), and sqrt(L) nested checkpointing.
#ifndef MESHMOE_REMAT_H
#define MESHMOE_REMAT_H
#include "model/model.h"

typedef enum { KEEP_DEVICE, KEEP_HOST, RECOMPUTE } Keep;

// A layer's saved tensors in the groups a policy decides on. A group is recomputed as a
// whole: this trainer recomputes the attention block, its core (from kept q, k, v), or the
// FFN block, not single products.
typedef struct {
    Keep x;       // decoder_layer_input: the layer input (device or host: the remat boundary)
    Keep norms;   // the RMSNorm outputs n1, n2 and their 1/rms (device or recomputed)
    Keep qkv;     // query_proj, key_proj, value_proj: attention's q, k, v (MLA: and the low-rank
                  // intermediates of its projections, model/remat.c); == attn, or kept with attn remat
    Keep attn;    // context: attention's output o (before out_proj) and its softmax stats
    Keep h;       // out_proj: the residual after attention's out projection
    Keep ffn;     // mlpwi: the FFN's wi products and routing (and, when y == ffn, the rest)
    Keep y;       // mlpwo: a MoE layer's expert outputs, which the routing weights' gradient
                  // reads; == ffn, or kept with ffn remat (the recomputation skips wo)
    int block;    // remat_nested_block: layers per block (0 or 1: every layer input kept)
} RematPlan;

// The plan the config asks for (the one place remat_policy and its keys are read). Dies
// with one message on an unsupported combination (base/config.c refuses unknown names).
RematPlan remat_plan(const Config *c);
// Right after layer l's forward: drop or offload what the plan says.
void remat_after_forward(Model *m, int l, LayerActs *a);
// Inside layer l's backward (weights in place), just before each half needs its tensors:
// offloaded ones back to the device, 16-bit ones unpacked (but n1 under packed_operands,
// which the products read as it is: model/precision.h's act_for_products), dropped ones recomputed (no
// statistics counted again). The FFN half first: it recomputes the attention block too
// when h was dropped (full; save_qkv_proj: only the core and out projection, from the kept
// q, k, v); with h kept (save_out_proj) attention is recomputed only when its half of the
// backward starts, after the FFN's tensors are freed.
void remat_restore_ffn(Model *m, int l, LayerActs *a, int B, int S, float lb_coef);
void remat_restore_attn(Model *m, int l, LayerActs *a, int B, int S);
// Nested checkpointing, before layer l's backward (its unit not yet acquired): if its input
// was dropped, recompute the inputs of its block's layers from the block's first input.
void remat_block_inputs(Model *m, int l, int B, int S, float lb_coef);
#endif
