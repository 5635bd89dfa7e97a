// model/rmsnorm.c: the RMSNorm layer: the fused or einsum form of the scale, the scale
// gradient's leaves; the arithmetic is in kernels/norm.h.
#include "model/rmsnorm.h"
#include "base/treesum.h"
#include "model/precision.h"
#include "model/weights16.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "core/common.h"

#ifdef MESHMOE_PLANT_HOST_ACCESS
// tests/strict.sh's planted bugs (build/plant/train only; MESHMOE_PLANT picks one): a host
// write of the layer's output before its kernel, or a host read of it after. Harmless on the
// CPU (the kernel overwrites the element; the read changes nothing), a crash on a GPU: the
// strict mode must stop on them.
static int planted(const char *kind) {
    const char *p = getenv("MESHMOE_PLANT");
    return p && !strcmp(p, kind);
}
#endif

// The scale of token t is scale + t * scale_stride (kernels/norm.h).
static void rmsnorm_forward_rows(float *out, float *rstd, const float *x, const float *scale, size_t scale_stride,
                                 int T, int D, float eps, int bf16) {
#ifdef MESHMOE_PLANT_HOST_ACCESS
    if (planted("write")) out[0] = 0.0f;
#endif
    kern()->norm->rmsnorm_forward(out, rstd, x, scale, scale_stride, T, D, eps, bf16);
#ifdef MESHMOE_PLANT_HOST_ACCESS
    if (planted("read")) { volatile float seen = out[0]; (void)seen; }
#endif
}

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *scale, int T, int D, float eps, int bf16) {
    rmsnorm_forward_rows(out, rstd, x, scale, 0, T, D, eps, bf16);
}

// dx from the rows, then dscale as a sum of per-leaf contributions in the canonical tree
// (base/treesum.h): each leaf's buffer is allocated here, filled by the kernel.
static void rmsnorm_backward_rows(float *dx, float *dscale, const float *dout, const float *x, const float *scale,
                                  size_t scale_stride, const float *rstd, int T, int D, Leaves leaf, int bf16) {
    kern()->norm->rmsnorm_backward_dx(dx, dout, x, scale, scale_stride, rstd, T, D, bf16);
    if (!dscale) return;
    LeafSum ls;
    leafsum_begin(&ls, leaf, dscale, (size_t)D, "rmsnorm dscale leaf");
    for (long l = 0; l < leaf.n; l++) {
        float *g = leafsum_leaf(&ls);
        kern()->norm->rmsnorm_dscale_leaf(g, dout, x, rstd, leaf_token(leaf, l), leaf.len, D, bf16);
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
// The scale is a weight: where it has a 16-bit copy (bf16_storage, model/weights16.h)
// the norm reads that, widened into a temporary of D floats, as it reads the float32 copy.
static float *scale16(const float *scale, int D) {
    return weights16_widened(scale, (size_t)D, "an RMSNorm scale widened from its 16-bit copy (bf16_storage)");
}

float *rmsnorm_forward_cfg(const Config *c, float *out, float *rstd, const float *x, const float *scale, int T, int D) {
    return rmsnorm_forward_eps(c, c->normalization_layer_epsilon, out, rstd, x, scale, T, D);
}

float *rmsnorm_forward_eps(const Config *c, float eps, float *out, float *rstd, const float *x, const float *scale,
                           int T, int D) {
    float *s16 = scale16(scale, D), *bcast = NULL;
    if (s16) scale = s16;
    if (c->rmsnorm_fused_scale) rmsnorm_forward_rows(out, rstd, x, scale, 0, T, D, eps, cfg_bf16(c));
    else {
        bcast = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "rmsnorm broadcast scale (einsum form)");   // (T,D)
        kern()->norm->broadcast_rows(bcast, scale, T, D);
        rmsnorm_forward_rows(out, rstd, x, bcast, (size_t)D, T, D, eps, cfg_bf16(c));
    }
    mem_free(s16);
    return bcast;
}

void rmsnorm_backward_cfg(const Config *c, float *dx, float *dscale, const float *dout, const float *x,
                          const float *scale, const float *bcast, const float *rstd, int T, int D, Leaves leaf) {
    if (bcast) {
        rmsnorm_backward_rows(dx, dscale, dout, x, bcast, (size_t)D, rstd, T, D, leaf, cfg_bf16(c));
        return;
    }
    float *s16 = scale16(scale, D);
    rmsnorm_backward_rows(dx, dscale, dout, x, s16 ? s16 : scale, 0, rstd, T, D, leaf, cfg_bf16(c));
    mem_free(s16);
}
