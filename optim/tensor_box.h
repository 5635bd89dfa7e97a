// optim/tensor_box.h: a tensor's box, what a per-tensor optimizer (adafactor's factored
// moments, muon's orthogonalization) needs whole: the device's piece of the tensor (its
// local shape, model/model.h ParamSpec) extended to every index along some of its
// dimensions. Under tensor or expert parallelism a cut along such a dimension is undone by
// gathering the pieces of the devices along the cutting axes, which hold the same indices
// of the other dimensions; with no cut there the box is the piece itself.
#ifndef MESHMOE_TENSOR_BOX_H
#define MESHMOE_TENSOR_BOX_H
#include <stddef.h>
#include "model/model.h"

typedef struct {
    const ParamSpec *sp;
    unsigned whole;   // bit d: dimension d is whole in the box
    unsigned cut;     // the mesh axes (tensor, expert) that cut a whole dimension: the box is gathered over them
    int shape[4];     // the box's shape: the global size along a whole dimension, the piece's along the others
    size_t size;      // its elements
} TensorBox;

// The box of tensor sp with the dimensions in `whole` (a bit mask) whole.
void tensor_box_init(TensorBox *b, const ParamSpec *sp, unsigned whole);
// The box (b->size floats, MEM_COMM, to free) from `piece` (this device's piece, whole,
// sp->size floats) and the pieces of the devices along b->cut, each placed at its indices.
// Every device along b->cut calls it together (a collective). Only where b->cut != 0.
float *tensor_box_gather(const TensorBox *b, const float *piece);
// dst (k1 - k0) = the elements [k0, k1) of this device's piece (row-major in its local
// shape), read from the box.
void tensor_box_take(const TensorBox *b, const float *box, size_t k0, size_t k1, float *dst);

#endif
