// base/partition.h: logical axis names and the rule table that maps them to mesh axes,
// as in MaxText (base.yml `logical_axis_rules`).
//
// Every parameter and activation names the meaning of each of its dimensions with a
// logical axis ("embed", "mlp", "q_heads", "exp", "activation_batch", ...). The rule table
// says which mesh axes each logical axis is split over; the first rule that names the
// logical axis wins, mesh axes of size 1 are dropped (nothing to split), and a mesh axis
// already used by an earlier dimension of the same tensor is not used twice. The result is
// the tensor's partition spec, e.g. decoder/layers_0/self_attention/query/kernel
// [embed, q_heads, kv] -> (fsdp, tensor, -).
//
// How each mesh axis is realised here:
//   tensor, expert  the dimension is really cut: the device holds shape/size of it
//                   (model/model.c builds each device's layout from these specs);
//   fsdp            weights are stored as 1/F of each layer's flat unit (sharding/fsdp.h),
//                   so "embed -> fsdp" is shown in the spec but the local shape keeps it;
//   data, context   activations only (batch and sequence), weights replicated.
#ifndef MESHMOE_PARTITION_H
#define MESHMOE_PARTITION_H
#include "base/mesh.h"

#define PART_MAX_DIMS 4

// The partition of one tensor: for each dimension, the mesh axes it is split over (a
// bit mask of MeshAxis), and how many pieces that makes.
typedef struct {
    int ndim;
    unsigned axes[PART_MAX_DIMS];   // AXIS_BIT(...) | ..., 0 = replicated along this dim
    int pieces[PART_MAX_DIMS];      // product of the sizes of those axes (1 = not split)
} PartSpec;

// The partition of a tensor whose dimensions have the given logical names, on `mesh`
// (NULL: one device, nothing split).
PartSpec partition_spec(const Mesh *mesh, int ndim, const char *const *logical);
// Every mesh axis the rules name for these logical axes, whatever its size (a bit mask of
// MeshAxis): the spec before size-1 axes are dropped (remove_size_one_mesh_axis=false).
unsigned partition_named_axes(int ndim, const char *const *logical);
// The pieces of dimension d that are really cut in the device's local shape (tensor and
// expert axes; fsdp is flat, data and context do not cut weights).
int partition_local_pieces(const Mesh *mesh, const PartSpec *p, int d);
// This device's index along the really-cut axes of dimension d (0 .. local_pieces-1).
int partition_local_index(const Mesh *mesh, int dev, const PartSpec *p, int d);
// "(fsdp, tensor, -)" into buf.
const char *partition_describe(const PartSpec *p, char *buf, size_t cap);
// Prints the rule table (logical axis -> mesh axes).
void partition_print_rules(void);

#endif
