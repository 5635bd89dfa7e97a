// base/tensor.h: tensor parallelism (Megatron style) over the mesh axis `tensor`.
//
// A tensor-parallel pair of matmuls splits the hidden width over the t devices of the
// tensor axis: the first matmul is column-parallel (each device computes its slice of
// the output columns from the full input: no communication), the second is row-parallel
// (each device contracts its slice of the hidden width and the partial results are
// all-reduced). In the backward pass the roles swap: the input gradient of a
// column-parallel matmul is a contraction over the split width, all-reduced the same way.
// Heads (attention), MLP widths (dense, shared and expert) and the vocabulary (embedding,
// logits, softmax) are split like this; the layout in model/params.c says which tensors,
// and model/dims.h holds the counts one device computes with.
//
// The order of the sum: a contraction split over devices would add its pieces in an order
// that depends on t. So every split contraction is always cut into `tensor_reduce_chunks`
// (R) pieces, on one device too, and the pieces are added along the canonical pairwise tree
// (base/treesum.h). With t devices each holds R/t consecutive pieces, a whole subtree,
// and the all-reduce adds the subtrees' roots in tree order: the same bits as one device.
#ifndef MESHMOE_TENSOR_H
#define MESHMOE_TENSOR_H
#include <stddef.h>
#include "base/config.h"

// Devices along `tensor` around the calling device, and its rank among them.
int tp_size(void);
int tp_rank(void);
// Dies with a message naming the numbers if tensor_reduce_chunks does not fit the model
// or the tensor size (called once at model init).
void tp_check(const Config *c, int tensor);

// x (n floats) = sum over the tensor group, along the canonical tree (no-op when t = 1).
void tp_all_reduce(float *x, size_t n);
// The same with the collective's staging sized for cap >= n floats (coll_all_reduce_cap).
void tp_all_reduce_cap(float *x, size_t n, size_t cap);
// all (t*n floats) = every tensor device's x (n floats), in rank order (= x when t = 1).
void tp_all_gather(const float *x, float *all, size_t n);
// x[i] = max over the tensor group (exact in any order).
void tp_all_reduce_max(float *x, size_t n);
// The pieces of a split sum this device adds itself: tensor_reduce_chunks / t.
int tp_local_chunks(const Config *c);
#endif
