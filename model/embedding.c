// model/embedding.c: embedding gather and its scatter-add backward.
#include "model/embedding.h"
#include "model/treesum.h"
#include "common.h"

void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {
    for (int t = 0; t < T; t++) {
        int row = ids[t] - v0;
        if (row >= 0 && row < V) memcpy(out + (size_t)t * D, table + (size_t)row * D, sizeof(float) * D);
        else memset(out + (size_t)t * D, 0, sizeof(float) * D);
    }
}

void embedding_backward(float *dtable, const float *dout, const int *ids, int T, int D, int V, int v0, int leaf) {
    // Each leaf scatters its tokens' gradients into a (V,D) buffer; the leaves are then
    // added along the canonical tree, so the result does not depend on how the tokens
    // were split over devices or microbatches.
    TreeSum ts;
    treesum_begin(&ts, (size_t)V * D, MEM_TEMP, "embedding grad leaf");
    for (int t0 = 0; t0 < T; t0 += leaf) {
        float *g = treesum_leaf(&ts);
        for (int t = t0; t < MM_MIN(T, t0 + leaf); t++) {
            if (ids[t] < v0 || ids[t] >= v0 + V) continue;   // another device's row
            float *row = g + (size_t)(ids[t] - v0) * D;
            const float *d = dout + (size_t)t * D;
            for (int i = 0; i < D; i++) row[i] += d[i];
        }
        treesum_push(&ts);
    }
    treesum_end(&ts, dtable);
}
