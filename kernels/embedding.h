// kernels/embedding.h: the token embedding's lookup and its gradient (docs/model.md#embedding);
// the layer, which adds the gradient's leaves along the canonical tree and chooses the
// one-hot form (use_iota_embed), is model/embedding.c.
// Vocabulary-parallel: the device holds rows v0 .. v0+V-1 of the table.
#ifndef MESHMOE_KERNELS_EMBEDDING_H
#define MESHMOE_KERNELS_EMBEDDING_H

typedef struct EmbeddingKernels {
    // out (T,D) = table (V,D) [ids (T) - v0] for the ids this device holds, 0 for the others.
    void (*embedding_forward)(float *out, const int *ids, const float *table, int T, int D, int V, int v0);
    // dtable (V,D) += dout (t,D) scattered by ids (t) for the tokens t0 .. t0+len-1 whose
    // ids this device holds, in token order: one leaf of the table's gradient.
    void (*embedding_backward_leaf)(float *dtable, const float *dout, const int *ids, long t0, long len,
                                    int D, int V, int v0);
    // onehot (T,V), zeroed by the caller: onehot[t][ids[t]-v0] = 1 for the ids this device holds.
    void (*embedding_onehot)(float *onehot, const int *ids, int T, int V, int v0);
} EmbeddingKernels;

extern const EmbeddingKernels embedding_cpu;   // kernels/cpu/embedding.c

#endif
