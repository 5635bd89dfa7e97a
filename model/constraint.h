// model/constraint.h: sharding constraints on activations (MaxText's
// nn.with_logical_constraint / maybe_shard_with_logical): skip_trivial_specs and
// remove_size_one_mesh_axis (docs/optimizations.md#skip_trivial_specs).
//
// MaxText's model code pins the layout of activations at layer boundaries: the residual
// stream entering each decoder layer, the attention and MLP inputs (the norm outputs), the
// residual after attention, the decoder output and the logits. Each constraint names its
// logical axes; the rule table (base/partition.h) turns them into a partition spec on
// the mesh. XLA sometimes materialises a constraint as a copy of the tensor; two switches
// decide when that happens here:
//
//   skip_trivial_specs (default true): a constraint whose spec splits nothing on this mesh
//     (every dimension replicated: on one device every spec is) emits no copy. false: it
//     materialises one copy, which the next op reads and which is freed right after.
//   remove_size_one_mesh_axis (default true): specs drop mesh axes of size 1. false: the
//     spec keeps them (activation_batch -> (data, fsdp, expert) even where data is 1), the
//     runtime sees a layout it does not have and does an identity reshard: a copy.
//
// A constraint whose spec really splits the tensor (e.g. the batch over fsdp=2) is a
// reshard to that layout. In this trainer each device already holds exactly its piece of
// every activation in the layout the rule table gives (the batch is split over
// data/fsdp/expert, the sequence over context, heads and vocabulary over tensor), so such a
// reshard moves nothing and costs nothing. At most one copy per constraint.
//
// Copies change no value: the losses are bit-identical either way. The copies are MEM_TEMP
// buffers named after the constraint, so the timeline and the dry-run plan show them.
#ifndef MESHMOE_CONSTRAINT_H
#define MESHMOE_CONSTRAINT_H
#include <stddef.h>
#include "base/config.h"

// The logical axes a constraint names (MaxText's names; base/partition.c has the rules).
typedef struct {
    int ndim;
    const char *logical[4];
} LogicalSpec;

// [activation_batch, activation_length, activation_embed]: the residual stream and the
// norm outputs, (T,D) floats on a device.
extern const LogicalSpec SPEC_RESIDUAL;
// [activation_batch, activation_length, activation_vocab]: the logits, (T,V/tensor).
extern const LogicalSpec SPEC_LOGITS;

// Whether a constraint with this spec materialises a copy on the calling device's mesh
// (the rules above).
int constraint_copies(const Config *c, const LogicalSpec *spec);
// The constraint on x (n floats): returns what the next op reads, x itself or a MEM_TEMP
// copy named `name`. Pass the result to constraint_end once that op has read it.
const float *constraint_apply(const Config *c, const float *x, size_t n, const LogicalSpec *spec, const char *name);
// Frees the copy (nothing when y is x).
void constraint_end(const float *y, const float *x);

#endif
