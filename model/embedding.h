// model/embedding.h: token embedding lookup (MODEL_SPEC.md "Embedding"): no sqrt(D) scaling.
#ifndef MESHMOE_EMBEDDING_H
#define MESHMOE_EMBEDDING_H

// out (T,D) = table (V,D) [ids (T)]
void embedding_forward(float *out, const int *ids, const float *table, int T, int D);
// dtable (V,D) += scatter-add of dout (T,D) by ids, leaf by leaf along the canonical tree.
void embedding_backward(float *dtable, const float *dout, const int *ids, int T, int D, int V, int leaf);
#endif
