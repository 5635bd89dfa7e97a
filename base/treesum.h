// base/treesum.h: the canonical order in which gradient contributions are added.
//
// A weight gradient is a sum over tokens. If one device adds tokens 0..T-1 in a row and
// two devices each add half and then add the halves, the float32 results differ in the
// last bits. meshmoe therefore fixes the order once and for all (docs/model.md#summation-order):
// tokens are cut into leaves of `reduce_leaf_tokens` tokens (default: one sequence); each
// leaf's contribution is computed on its own, and leaves are added along a fixed pairwise
// tree: leaf0+leaf1, leaf2+leaf3, then (01)+(23), ... The tree depends only on the leaf
// index, never on how leaves were spread over devices or microbatches, so a device's
// share is a whole subtree and the all-reduce adds the subtrees' roots in tree order.
//
// Use (streaming, like a binary counter; needs at most log2(leaves)+1 buffers):
//     TreeSum t; treesum_begin(&t, n, MEM_TEMP, "dW");
//     for each leaf: float *g = treesum_leaf(&t); ...g = contribution...; treesum_push(&t);
//     treesum_end(&t, dW);      // dW += sum, in the canonical order
#ifndef MESHMOE_TREESUM_H
#define MESHMOE_TREESUM_H
#include <stddef.h>
#include "base/memory.h"

#define TREESUM_LEVELS 40

typedef struct {
    size_t n;                          // floats per contribution
    MemTag tag;
    const char *name;
    float *level[TREESUM_LEVELS];      // level[k]: the sum of a block of 2^k leaves, or NULL
    float *leaf;                       // the buffer handed out by treesum_leaf
    float *spare;                      // a freed buffer kept for reuse
    int onto;                          // the leaf was added onto level[0] (treesum_leaf_onto)
    long count;                        // leaves pushed so far
} TreeSum;

void treesum_begin(TreeSum *t, size_t n, MemTag tag, const char *name);
float *treesum_leaf(TreeSum *t);       // a zeroed buffer of n floats for the next leaf
// For a leaf that a product writes whole and can add onto a buffer instead (accumulate):
// an odd leaf's first merge is (the leaf before it) + (this leaf), so while that earlier
// leaf waits at level 0 its buffer is returned and *onto = 1, and the product adds onto it
// (C_old + the finished product: the merge's add, the same bits); else *onto = 0 and an
// unzeroed buffer, which the product overwrites (no memset of it). Saves the leaf's buffer
// and one pass of adds.
float *treesum_leaf_onto(TreeSum *t, int *onto);
void treesum_push(TreeSum *t);         // add the leaf into the tree
void treesum_end(TreeSum *t, float *dst);  // dst[i] += total[i]; frees the buffers

// The same tree over n scalars (per-leaf loss sums): left subtree = the largest power of
// two of leaves below n, right subtree = the rest.
double tree_sum_double(const double *x, long n);

#endif
