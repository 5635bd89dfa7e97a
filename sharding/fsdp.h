// sharding/fsdp.h: where the model state lives on a mesh: data parallelism (DP), fully
// sharded data parallelism (FSDP, ZeRO-3) and ZeRO-1.
//
// The parameters are cut into units: the embedding, each decoder layer, and the output
// head (final norm + logits kernel). A unit is a contiguous run of the flat layout
// (model/params.c). With FSDP over F devices each unit is padded with zeros to a multiple
// of F*NORM_CHUNK floats and cut into F equal shards: device f of the `fsdp` axis keeps
// shard f of every unit's parameters, gradients and AdamW moments (16 bytes per parameter
// / F). Just before a unit is used it is all-gathered into a full buffer and freed right
// after; its gradient is computed in full, then reduce-scattered (and all-reduced over
// `data`) so that each device keeps the sum for its own shard. ZeRO-1
// (shard_optimizer_over_data) also cuts each shard into `data` pieces for the moments:
// the gradient is reduce-scattered over `data` instead (each replica needs the sum of its
// piece only), every data replica updates its piece and the pieces are all-gathered.
//
// The batch is split over data*fsdp devices; every sum over devices goes along the
// canonical tree (base/collectives.h), so the loss is bit-identical to one device
// as long as the sequences per device and the fsdp size are powers of two.
#ifndef MESHMOE_FSDP_H
#define MESHMOE_FSDP_H
#include "base/shard.h"

// ---- applied to the model (trainer/step.c:step_init) ----
struct Model;
// Install FSDP's gathers and reductions, and overlap_collectives' prefetch, as the model's
// ShardHooks (model/model.h). With one fsdp device and one data device they do nothing.
void fsdp_attach(struct Model *m);
// Before / after unit u's weights are used: under FSDP, all-gather them into a full buffer
// (tag params) and bind the model's pointers to it; then free it.
void fsdp_all_gather(struct Model *m, int u);
void fsdp_free_gathered(struct Model *m, int u);
// Around the backward pass of unit u: under FSDP the unit's gradient is computed in a full
// buffer (tag grads), then reduce-scattered over fsdp; with data > 1 it is all-reduced over
// data (under ZeRO-1 reduce-scattered: only this replica's piece is summed, and summed
// further); with context > 1, over context last (the outermost level of the canonical tree).
// With chunk slots (grad_slots > 1, base/context.h) the full buffer holds one gradient
// per chunk this device holds, each reduced over fsdp and data, then added along the tree.
// The result lands in m->grad_dst.
void fsdp_grad_begin(struct Model *m, int u);
void fsdp_grad_end(struct Model *m, int u);
// The same with the result in dst (shard_len floats) instead of m->grad_dst; with FSDP off the
// caller has bound the unit's gradients to dst (the pipeline's per-microbatch leaves).
void fsdp_grad_end_into(struct Model *m, int u, float *dst);
// While accumulating microbatches the gradients land in a buffer bound with
// model_set_grad_partial (model/model.h): grad_slots copies of the local layout, one per
// chunk slot, each summed over the batch devices; the chunks and the context devices come
// after the microbatches (chunk outermost, base/context.h): fsdp_grad_finish adds the
// slots of the microbatches' sum buf along the tree into m->grads_mem (buf may be
// grads_mem with one slot) and sums over context.
void fsdp_grad_finish(struct Model *m, float *buf);
// The global gradient norm, the same bits on every mesh: the squares of the elements each
// device owns are added in 128-bit fixed point, where addition is exact (fsdp.c).
float fsdp_grad_norm(struct Model *m);

#endif
