// kernels/cpu/embedding.c: the embedding gather, its scatter-add and the one-hot tokens on
// the CPU (kernels/embedding.h).
#include "kernels/embedding.h"
#include <stddef.h>
#include <string.h>

static void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {
    for (int t = 0; t < T; t++) {
        int row = ids[t] - v0;
        if (row >= 0 && row < V) memcpy(out + (size_t)t * D, table + (size_t)row * D, sizeof(float) * D);
        else memset(out + (size_t)t * D, 0, sizeof(float) * D);
    }
}

static void embedding_backward_leaf(float *dtable, const float *dout, const int *ids, long t0, long len,
                                    int D, int V, int v0) {
    for (long t = t0; t < t0 + len; t++) {
        if (ids[t] < v0 || ids[t] >= v0 + V) continue;   // another device's row
        float *row = dtable + (size_t)(ids[t] - v0) * D;
        const float *d = dout + (size_t)t * D;
        for (int i = 0; i < D; i++) row[i] += d[i];
    }
}

static void embedding_onehot(float *onehot, const int *ids, int T, int V, int v0) {
    for (int t = 0; t < T; t++)
        if (ids[t] >= v0 && ids[t] < v0 + V) onehot[(size_t)t * V + (ids[t] - v0)] = 1.0f;
}

const EmbeddingKernels embedding_cpu = {embedding_forward, embedding_backward_leaf, embedding_onehot};
