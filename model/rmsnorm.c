// model/rmsnorm.c: RMSNorm forward and backward, in float32.
#include "model/rmsnorm.h"
#include "model/treesum.h"
#include "model/precision.h"
#include "sharding/memory.h"
#include "common.h"

// The scale of token t is scale + t * scale_stride: stride 0 reads the one (D) vector for
// every token (the fused form), stride D reads row t of a materialised (T,D) broadcast.
static void rmsnorm_forward_rows(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                                 int T, int D, float eps, int bf16) {
    if (mem_dry()) return;   // dry run: nothing to compute (sharding/memory.h)
    #pragma omp parallel for if (T * D > 32768)
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * D;
        const float *sc = scale + (size_t)t * scale_stride;
        float *ot = out + (size_t)t * D;
        float ss = 0.0f;                           // mean of squares, float32 as in MaxText
        for (int i = 0; i < D; i++) ss += xt[i] * xt[i];
        float r = 1.0f / sqrtf(ss / D + eps);
        rstd[t] = r;
        if (!bf16) for (int i = 0; i < D; i++) ot[i] = (xt[i] * r) * sc[i];
        else for (int i = 0; i < D; i++) ot[i] = bf16_round(bf16_round(xt[i] * r) * sc[i]);   // cast point 3
    }
}

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, int T, int D, float eps, int bf16) {
    rmsnorm_forward_rows(out, rstd, x, scale, 0, T, D, eps, bf16);
}

// With n = x * r (the normalised value) and y = n * scale:
//   dscale = sum_t dy * n
//   dx = r * (dy*scale - n * mean(dy*scale * n))
// bf16 (the forward rounded n and n*scale): the gradient of n is rounded too, g = rb(dy*scale),
// and dscale sums dy * rb(n).
// scale_stride as in rmsnorm_forward_rows.
static void rmsnorm_backward_rows(float *dx, float *dscale, const float *dout, const float *x, const float *scale,
                                  size_t scale_stride, const float *rstd, int T, int D, Leaves leaf, int bf16) {
    if (mem_dry()) T = 0;   // dry run: no rows to compute, the leaves are still allocated
    #pragma omp parallel for if (T * D > 32768)
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * D, *dyt = dout + (size_t)t * D;
        const float *scale_t = scale + (size_t)t * scale_stride;
        float r = rstd[t], dot = 0.0f;
        for (int i = 0; i < D; i++) {
            float g = bf16 ? bf16_round(dyt[i] * scale_t[i]) : dyt[i] * scale_t[i];
            dot += g * (xt[i] * r);
        }
        dot /= D;
        for (int i = 0; i < D; i++) {
            float g = bf16 ? bf16_round(dyt[i] * scale_t[i]) : dyt[i] * scale_t[i];
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

void rmsnorm_backward(float *dx, float *dscale, const float *dout, const float *x, const float *scale,
                      const float *rstd, int T, int D, Leaves leaf, int bf16) {
    rmsnorm_backward_rows(dx, dscale, dout, x, scale, 0, rstd, T, D, leaf, bf16);
}

// rmsnorm_fused_scale (docs/optimizations.md#rmsnorm_fused_scale), read here only. MaxText's fused form
// multiplies each normalised row by the (D) scale as it goes. The einsum form
// ("bsd,bsd->bsd" against jnp.broadcast_to(scale, x.shape)) materialises the broadcast
// scale, and since it is an operand of the product, autodiff keeps it for the backward
// product dy * scale: one (T,D) buffer per norm call, saved from the forward pass to the
// backward pass (MEM_ACTIVATIONS). The same products, so the same bits.
float *rmsnorm_forward_cfg(const Config *c, float *out, float *rstd, const float *x, const float *scale, int T, int D) {
    float eps = c->normalization_layer_epsilon;
    if (c->rmsnorm_fused_scale) {
        rmsnorm_forward_rows(out, rstd, x, scale, 0, T, D, eps, cfg_bf16(c));
        return NULL;
    }
    float *bcast = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "rmsnorm broadcast scale (einsum form)");   // (T,D)
    for (int t = 0; t < (mem_dry() ? 0 : T); t++) memcpy(bcast + (size_t)t * D, scale, sizeof(float) * D);
    rmsnorm_forward_rows(out, rstd, x, bcast, (size_t)D, T, D, eps, cfg_bf16(c));
    return bcast;
}

void rmsnorm_backward_cfg(const Config *c, float *dx, float *dscale, const float *dout, const float *x,
                          const float *scale, const float *bcast, const float *rstd, int T, int D, Leaves leaf) {
    if (bcast) rmsnorm_backward_rows(dx, dscale, dout, x, bcast, (size_t)D, rstd, T, D, leaf, cfg_bf16(c));
    else rmsnorm_backward_rows(dx, dscale, dout, x, scale, 0, rstd, T, D, leaf, cfg_bf16(c));
}
