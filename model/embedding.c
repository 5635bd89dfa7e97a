// model/embedding.c: embedding gather and its scatter-add backward.
#include "model/embedding.h"
#include "common.h"

void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {
    if (mem_dry()) return;   // dry run: nothing to compute (sharding/memory.h)
    for (int t = 0; t < T; t++) {
        int row = ids[t] - v0;
        if (row >= 0 && row < V) memcpy(out + (size_t)t * D, table + (size_t)row * D, sizeof(float) * D);
        else memset(out + (size_t)t * D, 0, sizeof(float) * D);
    }
}

void embedding_backward(float *dtable, const float *dout, const int *ids, int T, int D, int V, int v0, Leaves leaf) {
    // Each leaf scatters its tokens' gradients into a (V,D) buffer; the leaves are then
    // added along the canonical tree, so the result does not depend on how the tokens
    // were split over devices or microbatches.
    (void)T;   // = leaf.B * leaf.S
    LeafSum ls;
    leafsum_begin(&ls, leaf, dtable, (size_t)V * D, "embedding grad leaf");
    for (long l = 0; l < leaf.n; l++) {
        float *g = leafsum_leaf(&ls);
        if (!mem_dry())
        for (long t = leaf_token(leaf, l); t < leaf_token(leaf, l) + leaf.len; t++) {
            if (ids[t] < v0 || ids[t] >= v0 + V) continue;   // another device's row
            float *row = g + (size_t)(ids[t] - v0) * D;
            const float *d = dout + (size_t)t * D;
            for (int i = 0; i < D; i++) row[i] += d[i];
        }
        leafsum_push(&ls);
    }
    leafsum_end(&ls);
}
