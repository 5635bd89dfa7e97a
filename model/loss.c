// model/loss.c: softmax cross-entropy and z-loss, forward and backward, in float32.
#include "model/loss.h"
#include "common.h"

long loss_forward(float *lse, double *leaf_sums, const float *logits, const int *targets,
                  int T, int V, float zmul, int leaf) {
    long n = 0;
    // The per-token values are independent; the sum runs in token order afterwards so it
    // does not depend on the number of threads.
    #pragma omp parallel for if (T * V > 65536)
    for (int t = 0; t < T; t++) {
        const float *z = logits + (size_t)t * V;
        float m = z[0];
        for (int i = 1; i < V; i++) m = fmaxf(m, z[i]);
        float s = 0.0f;
        for (int i = 0; i < V; i++) s += expf(z[i] - m);
        lse[t] = m + logf(s);
    }
    for (int t0 = 0; t0 < T; t0 += leaf) {
        double sum = 0.0;
        for (int t = t0; t < MM_MIN(T, t0 + leaf); t++) {
            if (targets[t] < 0) continue;
            float l = lse[t] - logits[(size_t)t * V + targets[t]] + zmul * lse[t] * lse[t];
            sum += l;
            n++;
        }
        leaf_sums[t0 / leaf] = sum;
    }
    return n;
}

void loss_backward(float *dz, const float *lse, const int *targets, int T, int V, float zmul, float scale) {
    #pragma omp parallel for if (T * V > 65536)
    for (int t = 0; t < T; t++) {
        float *z = dz + (size_t)t * V;
        if (targets[t] < 0) { memset(z, 0, sizeof(float) * V); continue; }
        float coef = 1.0f + 2.0f * zmul * lse[t];   // d(lse + zmul*lse^2)/d lse
        for (int i = 0; i < V; i++) z[i] = scale * (expf(z[i] - lse[t]) * coef);
        z[targets[t]] -= scale;
    }
}
