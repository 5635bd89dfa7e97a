// model/constraint.c: sharding constraints on activations (see constraint.h).
#include "model/constraint.h"
#include "base/partition.h"
#include "base/memory.h"
#include "core/common.h"

const LogicalSpec SPEC_RESIDUAL = {3, {"activation_batch", "activation_length", "activation_embed"}};
const LogicalSpec SPEC_LOGITS = {3, {"activation_batch", "activation_length", "activation_vocab"}};

int constraint_copies(const Config *c, const LogicalSpec *spec) {
    const Mesh *mesh = mesh_current();   // NULL off a device thread: one device
    // Kept size-1 axes: the runtime reshards to a layout that names an axis it does not
    // split over, an identity reshard that copies.
    if (!c->remove_size_one_mesh_axis) {
        unsigned named = partition_named_axes(spec->ndim, spec->logical);
        for (int a = 0; a < MESH_NAXES; a++)
            if ((named & AXIS_BIT(a)) && (mesh ? mesh->size[a] : 1) == 1) return 1;
    }
    // A trivial spec (nothing split on this mesh): a copy unless skipped.
    PartSpec p = partition_spec(mesh, spec->ndim, spec->logical);
    int trivial = 1;
    for (int d = 0; d < p.ndim; d++) trivial &= p.axes[d] == 0;
    if (trivial) return !c->skip_trivial_specs;
    // A real reshard to the layout each device already holds: nothing moves.
    return 0;
}

const float *constraint_apply(const Config *c, const float *x, size_t n, const LogicalSpec *spec, const char *name) {
    if (!constraint_copies(c, spec)) return x;
    float *y = mem_floats(MEM_TEMP, n, name);
    mem_copy(y, x, sizeof(float) * n);
    return y;
}

void constraint_end(const float *y, const float *x) {
    if (y != x) mem_free((float *)y);
}
