// model/rmsnorm.c: RMSNorm forward and backward, in float32.
#include "model/rmsnorm.h"
#include "model/treesum.h"
#include "model/precision.h"
#include "common.h"

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, int T, int D, float eps, int bf16) {
    if (mem_dry()) return;   // dry run: nothing to compute (sharding/memory.h)
    #pragma omp parallel for if (T * D > 32768)
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * D;
        float *ot = out + (size_t)t * D;
        float ss = 0.0f;                           // mean of squares, float32 as in MaxText
        for (int i = 0; i < D; i++) ss += xt[i] * xt[i];
        float r = 1.0f / sqrtf(ss / D + eps);
        rstd[t] = r;
        if (!bf16) for (int i = 0; i < D; i++) ot[i] = (xt[i] * r) * scale[i];
        else for (int i = 0; i < D; i++) ot[i] = bf16_round(bf16_round(xt[i] * r) * scale[i]);   // cast point 3
    }
}

// With n = x * r (the normalised value) and y = n * scale:
//   dscale = sum_t dy * n
//   dx = r * (dy*scale - n * mean(dy*scale * n))
// bf16 (the forward rounded n and n*scale): the gradient of n is rounded too, g = rb(dy*scale),
// and dscale sums dy * rb(n).
void rmsnorm_backward(float *dx, float *dscale, const float *dout, const float *x, const float *scale,
                      const float *rstd, int T, int D, Leaves leaf, int bf16) {
    if (mem_dry()) T = 0;   // dry run: no rows to compute, the leaves are still allocated
    #pragma omp parallel for if (T * D > 32768)
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * D, *dyt = dout + (size_t)t * D;
        float r = rstd[t], dot = 0.0f;
        for (int i = 0; i < D; i++) {
            float g = bf16 ? bf16_round(dyt[i] * scale[i]) : dyt[i] * scale[i];
            dot += g * (xt[i] * r);
        }
        dot /= D;
        for (int i = 0; i < D; i++) {
            float g = bf16 ? bf16_round(dyt[i] * scale[i]) : dyt[i] * scale[i];
            dx[(size_t)t * D + i] += r * (g - (xt[i] * r) * dot);
        }
    }
    if (!dscale) return;
    LeafSum ls;
    leafsum_begin(&ls, leaf, dscale, (size_t)D, "rmsnorm dscale leaf");
    for (long l = 0; l < leaf.n; l++) {
        float *g = leafsum_leaf(&ls);
        for (long t = leaf_token(leaf, l); t < (mem_dry() ? 0 : leaf_token(leaf, l) + leaf.len); t++)
            for (int i = 0; i < D; i++) {
                float n = x[(size_t)t * D + i] * rstd[t];
                g[i] += dout[(size_t)t * D + i] * (bf16 ? bf16_round(n) : n);
            }
        leafsum_push(&ls);
    }
    leafsum_end(&ls);
}
