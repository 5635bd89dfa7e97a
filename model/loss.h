// model/loss.h: cross-entropy with z-loss (docs/model.md#output-head-and-loss).
// Vocabulary-parallel: under tensor parallelism each device holds the logits of its slice
// [v0, v0+V) of the vocabulary (base/tensor.h); the max, the sum of exponentials and
// the target's logit are combined over the tensor axis. The sum of exponentials is always
// cut into `chunks` pieces (per device) added along the canonical tree, so the result does
// not depend on how many devices share the vocabulary.
#ifndef MESHMOE_LOSS_H
#define MESHMOE_LOSS_H
#include "base/context.h"

// Per token with target >= 0: l = lse(z) - z_target + zmul * lse^2. Saves lse (T).
// logits (T,V) are this device's columns v0 .. v0+V-1, floats or (logits16) 16-bit numbers
// held in a float pointer (model/precision.h: packed_alloc); chunks must divide V.
// leaf_sums (leaf.n) = the sum of l over each leaf, in tree order (base/context.h), each
// in token order, in double; the caller adds the leaves along the canonical tree
// (tree_sum_double), so the total does not depend on how the batch was split. The tokens
// with a target are counted by the caller, from its batch (trainer/step.c).
void loss_forward(float *lse, double *leaf_sums, const float *logits, int logits16, const int *targets,
                  int T, int V, int v0, int chunks, float zmul, Leaves leaf);
// dlogits (T,V) = scale * dl/dz, written in place over the logits (they are not needed after).
// dl/dz = softmax(z) * (1 + 2*zmul*lse) - onehot(target); zero for ignored tokens.
void loss_backward(float *logits_to_dlogits, const float *lse, const int *targets, int T, int V, int v0,
                   float zmul, float scale);
#endif
