// model/embedding.h: token embedding lookup (docs/model.md#embedding): no sqrt(D) scaling.
// Vocabulary-parallel: the device holds rows v0 .. v0+V-1 of the table (base/tensor.h).
#ifndef MESHMOE_EMBEDDING_H
#define MESHMOE_EMBEDDING_H
#include "base/context.h"

// out (T,D) = table (V,D) [ids (T) - v0] for the ids this device holds, 0 for the others
// (summed over the tensor axis by the caller: exactly one device contributes each row).
void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0);
// dtable (V,D) += scatter-add of dout (T,D) by the ids this device holds, leaf by leaf along
// the canonical tree.
void embedding_backward(float *dtable, const float *dout, const int *ids, int T, int D, int V, int v0, Leaves leaf);

// use_iota_embed (docs/optimizations.md#use_iota_embed): the same lookup as a matmul, MaxText's iota
// embedding: onehot (T,V) with onehot[t][ids[t]-v0] = 1 (a row of zeros for another
// device's ids), out = onehot @ table. The one-hot tensor is a (T,V) MEM_TEMP buffer.
void embedding_forward_onehot(float *out, const int *ids, const float *table, int T, int D, int V, int v0);
// dtable (V,D) += onehot^T @ dout, leaf by leaf (each leaf's rows of the one-hot tensor)
// along the canonical tree.
void embedding_backward_onehot(float *dtable, const float *dout, const int *ids, int T, int D, int V, int v0,
                               Leaves leaf);
#endif
