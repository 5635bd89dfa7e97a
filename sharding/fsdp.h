// sharding/fsdp.h: where the model state lives on a mesh: data parallelism (DP), fully
// sharded data parallelism (FSDP, ZeRO-3) and ZeRO-1.
//
// The parameters are cut into units: the embedding, each decoder layer, and the output
// head (final norm + logits kernel). A unit is a contiguous run of the flat layout
// (model/model.c). With FSDP over F devices each unit is padded with zeros to a multiple
// of F*NORM_CHUNK floats and cut into F equal shards: device f of the `fsdp` axis keeps
// shard f of every unit's parameters, gradients and AdamW moments (16 bytes per parameter
// / F). Just before a unit is used it is all-gathered into a full buffer and freed right
// after; its gradient is computed in full, then reduce-scattered (and all-reduced over
// `data`) so that each device keeps the sum for its own shard. ZeRO-1
// (shard_optimizer_over_data) also cuts each shard into `data` pieces for the moments:
// every data replica updates its piece and the pieces are all-gathered.
//
// The batch is split over data*fsdp devices; every sum over devices goes along the
// canonical tree (sharding/collectives.h), so the loss is bit-identical to one device
// as long as the sequences per device and the fsdp size are powers of two.
#ifndef MESHMOE_FSDP_H
#define MESHMOE_FSDP_H
#include <stddef.h>
#include "sharding/mesh.h"
#include "sharding/collectives.h"

// Units are padded to a multiple of F*Z*NORM_CHUNK floats when split (a round size).
#define NORM_CHUNK 256

typedef struct {
    int nunits;
    size_t *unit_off;        // (nunits) first float of the unit in the global flat layout
    size_t *unit_size;       // (nunits) floats in the unit
    size_t *unit_pad;        // (nunits) padded size (a multiple of F*Z*NORM_CHUNK, or = size)
    size_t *local_off;       // (nunits) where this device's shard of the unit starts locally
    size_t local_n;          // floats of params (and of grads) held per device
    int F, frank;            // fsdp size and this device's rank along it
    int Z, zrank;            // ZeRO-1: pieces of each shard (data size) and this device's piece
    int nbatch, brank;       // devices sharing the batch (data*fsdp*expert) and this device's rank
    unsigned char *here;     // (nunits) 1 if this device holds the unit: all of them, except under
                             // pipeline parallelism, where a stage holds its own (pipeline/)
    int nctx, crank;         // devices sharing each sequence (context) and this device's part
    int grad_slots;          // gradients kept per unit: one per chunk (sharding/context.h), or 1
    Group *fsdp, *data, *expert, *batch, *context;
    Group *tokens;           // every device with tokens of the step: data x fsdp x expert x context
} StateShard;

// The units of the layout and this device's share (mesh_current(), or one device).
void shard_init(StateShard *s, const Config *c, const int *spec_unit, const size_t *spec_off,
                const size_t *spec_size, int nspecs);
void shard_free(StateShard *s);
static inline int shard_is_split(const StateShard *s) { return s->F * s->Z > 1; }
// The shard of unit u's parameters this device holds: global elements [first, first+n)
// (n = 0 for a unit on another pipeline stage).
size_t shard_first(const StateShard *s, int u);
size_t shard_len(const StateShard *s, int u);
// Whether `dev` holds the first copy of something split over the mesh axes in `split` (a
// bit mask): coordinate 0 along every axis that holds replicas of it (data, context,
// tensor, expert). One device per distinct piece answers yes (mesh NULL: one device).
int shard_first_copy(const Mesh *mesh, int dev, unsigned split);

// ---- used by the model (model/model.c, model/step.c) ----
struct Model;
// Before / after unit u's weights are used: under FSDP, all-gather them into a full buffer
// (tag params) and bind the model's pointers to it; then free it.
void fsdp_acquire(struct Model *m, int u);
void fsdp_release(struct Model *m, int u);
// Around the backward pass of unit u: under FSDP the unit's gradient is computed in a full
// buffer (tag grads), then reduce-scattered over fsdp; with data > 1 it is all-reduced over
// data; with context > 1, over context last (the outermost level of the canonical tree).
// With chunk slots (grad_slots > 1, sharding/context.h) the full buffer holds one gradient
// per chunk this device holds, each reduced over fsdp and data, then added along the tree.
// The result lands in m->grad_dst.
void fsdp_grad_begin(struct Model *m, int u);
void fsdp_grad_end(struct Model *m, int u);
// The same with the result in dst (shard_len floats) instead of m->grad_dst; with FSDP off the
// caller has bound the unit's gradients to dst (the pipeline's per-microbatch leaves).
void fsdp_grad_end_into(struct Model *m, int u, float *dst);
// Where finished gradients go (the gradient buffer summed over every device, or the
// pipeline's per-microbatch leaf buffer).
void fsdp_set_grad_target(struct Model *m, float *buf);
// While accumulating microbatches, where one microbatch's gradient goes: buf holds
// grad_slots copies of the local layout, one per chunk slot, each summed over the batch
// devices; the chunks and the context devices come after the microbatches (chunk
// outermost, sharding/context.h): fsdp_grad_finish adds the slots of the microbatches'
// sum buf along the tree into m->grads_mem (buf may be grads_mem with one slot) and sums
// over context.
void fsdp_set_grad_partial(struct Model *m, float *buf);
void fsdp_grad_finish(struct Model *m, float *buf);
// The global gradient norm, the same bits on every mesh: the squares of the elements each
// device owns are added in 128-bit fixed point, where addition is exact (fsdp.c).
float fsdp_grad_norm(struct Model *m);

#endif
