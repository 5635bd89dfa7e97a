// model/loss.c: softmax cross-entropy and z-loss, forward and backward, in float32.
#include "model/loss.h"
#include "model/treesum.h"
#include "sharding/tensor.h"
#include "sharding/memory.h"
#include "common.h"

long loss_forward(float *lse, double *leaf_sums, const float *logits, const int *targets,
                  int T, int V, int v0, int chunks, float zmul, Leaves leaf) {
    if (chunks < 1 || V % chunks) die("internal: %d logits cannot be cut into %d pieces", V, chunks);
    int Vc = V / chunks;
    // m = max over the whole vocabulary (a max is exact in any order).
    float *m = mem_floats(MEM_TEMP, (size_t)T, "loss max");              // (T)
    int Tc = mem_dry() ? 0 : T;   // dry run: the buffers are allocated, nothing computed
    for (int t = 0; t < Tc; t++) {
        const float *z = logits + (size_t)t * V;
        float mx = z[0];
        for (int i = 1; i < V; i++) mx = fmaxf(mx, z[i]);
        m[t] = mx;
    }
    tp_all_reduce_max(m, (size_t)T);
    // sum_i exp(z_i - m): piece by piece, the pieces along the canonical tree, then over
    // the devices that share the vocabulary.
    float *sum = mem_floats(MEM_TEMP, (size_t)T, "loss sum of exponentials");   // (T)
    TreeSum ts;
    treesum_begin(&ts, (size_t)T, MEM_TEMP, "loss piece sums");
    for (int r = 0; r < chunks; r++) {
        float *piece = treesum_leaf(&ts);   // (T)
        #pragma omp parallel for if (T * Vc > 65536)
        for (int t = 0; t < Tc; t++) {
            const float *z = logits + (size_t)t * V + (size_t)r * Vc;
            float s = 0.0f;
            for (int i = 0; i < Vc; i++) s += expf(z[i] - m[t]);
            piece[t] = s;
        }
        treesum_push(&ts);
    }
    treesum_end(&ts, sum);
    tp_all_reduce(sum, (size_t)T);
    // The target's logit, from the device that holds it (the others add an exact zero).
    float *zt = mem_floats(MEM_TEMP, (size_t)T, "loss target logit");   // (T)
    for (int t = 0; t < Tc; t++) {
        int y = targets[t] - v0;
        zt[t] = targets[t] >= 0 && y >= 0 && y < V ? logits[(size_t)t * V + y] : 0.0f;
    }
    tp_all_reduce(zt, (size_t)T);
    for (int t = 0; t < Tc; t++) lse[t] = m[t] + logf(sum[t]);
    // Per-leaf sums in token order (double), so they do not depend on the thread count.
    long n = 0;
    for (long l = 0; l < (mem_dry() ? 0 : leaf.n); l++) {
        double s = 0.0;
        for (long t = leaf_token(leaf, l); t < leaf_token(leaf, l) + leaf.len; t++) {
            if (targets[t] < 0) continue;
            float l = lse[t] - zt[t] + zmul * lse[t] * lse[t];
            s += l;
            n++;
        }
        leaf_sums[l] = s;
    }
    mem_free(m);
    mem_free(sum);
    mem_free(zt);
    return n;
}

void loss_backward(float *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul, float scale) {
    if (mem_dry()) return;   // dry run: nothing to compute (sharding/memory.h)
    #pragma omp parallel for if (T * V > 65536)
    for (int t = 0; t < T; t++) {
        float *z = dz + (size_t)t * V;
        if (targets[t] < 0) { memset(z, 0, sizeof(float) * V); continue; }
        float coef = 1.0f + 2.0f * zmul * lse[t];   // d(lse + zmul*lse^2)/d lse
        for (int i = 0; i < V; i++) z[i] = scale * (expf(z[i] - lse[t]) * coef);
        int y = targets[t] - v0;
        if (y >= 0 && y < V) z[y] -= scale;
    }
}
