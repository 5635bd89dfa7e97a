// optim/tensor_box.c: a tensor's box (see tensor_box.h).
#include "optim/tensor_box.h"
#include "base/memory.h"
#include "base/collectives.h"
#include "base/partition.h"
#include "core/common.h"

// The mesh axes that really cut a weight (base/partition.h): a device holds a piece of it.
#define CUT_AXES (AXIS_BIT(AX_TENSOR) | AXIS_BIT(AX_EXPERT))

void tensor_box_init(TensorBox *b, const ParamSpec *sp, unsigned whole) {
    b->sp = sp;
    b->whole = whole;
    b->cut = 0;
    b->size = 1;
    for (int d = 0; d < sp->ndim; d++) {
        int w = (whole >> d) & 1;
        b->shape[d] = w ? sp->gshape[d] : sp->shape[d];
        if (w) b->cut |= sp->part.axes[d] & CUT_AXES;
        b->size *= (size_t)b->shape[d];
    }
}

// Where the piece of device `dev` starts in the box along each dimension: its piece index
// times the piece's size along a whole dimension, 0 along the others.
static void piece_shift(const TensorBox *b, const Mesh *mesh, int dev, size_t *shift) {
    const ParamSpec *sp = b->sp;
    for (int d = 0; d < sp->ndim; d++)
        shift[d] = mesh && ((b->whole >> d) & 1)
                       ? (size_t)partition_local_index(mesh, dev, &sp->part, d) * (size_t)sp->shape[d] : 0;
}

// The box index of the piece's run o (the runs are its rows along the last dimension, in
// order), the piece placed at `shift`.
static size_t run_at(const TensorBox *b, const size_t *shift, size_t o) {
    const ParamSpec *sp = b->sp;
    int nd = sp->ndim;
    size_t coord[4], rest = o, at = 0;
    coord[nd - 1] = 0;
    for (int d = nd - 2; d >= 0; d--) { coord[d] = rest % (size_t)sp->shape[d]; rest /= (size_t)sp->shape[d]; }
    for (int d = 0; d < nd; d++) at = at * (size_t)b->shape[d] + coord[d] + shift[d];
    return at;
}

float *tensor_box_gather(const TensorBox *b, const float *piece) {
    const Mesh *mesh = mesh_current();
    const ParamSpec *sp = b->sp;
    int dev = mesh_device_id(), n = 1;
    for (int a = 0; a < MESH_NAXES; a++)
        if (b->cut & AXIS_BIT(a)) n *= mesh->size[a];
    float *all = mem_floats(MEM_COMM, sp->size * (size_t)n, "tensor pieces gathered (optimizer)");
    coll_all_gather(mesh_group(mesh, dev, b->cut), piece, all, sizeof(float) * sp->size);
    float *box = mem_floats(MEM_COMM, b->size, "tensor box (optimizer)");
    size_t run = (size_t)sp->shape[sp->ndim - 1], runs = sp->size / run, shift[4];
    for (int k = 0; k < n; k++) {
        piece_shift(b, mesh, mesh_member(mesh, dev, b->cut, k), shift);
        for (size_t o = 0; o < runs; o++)
            mem_copy(box + run_at(b, shift, o), all + (size_t)k * sp->size + o * run, sizeof(float) * run);
    }
    mem_free(all);
    return box;
}

void tensor_box_take(const TensorBox *b, const float *box, size_t k0, size_t k1, float *dst) {
    const Mesh *mesh = mesh_current();
    size_t run = (size_t)b->sp->shape[b->sp->ndim - 1], shift[4];
    piece_shift(b, mesh, mesh ? mesh_device_id() : 0, shift);
    for (size_t i = k0; i < k1;) {   // a piece of a row at a time
        size_t o = i / run, in = i % run, n = MM_MIN(run - in, k1 - i);
        mem_copy(dst + (i - k0), box + run_at(b, shift, o) + in, sizeof(float) * n);
        i += n;
    }
}
