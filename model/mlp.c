// model/mlp.c: the dense SwiGLU feed-forward (DeepSeek's dense first layers and shared
// experts); the SwiGLU nonlinearity, which the MoE experts use too, is kernels/mlp.h:
//     h0 = x wi_0,  h1 = x wi_1          (T,F)
//     act = silu(h0) * h1                (T,F),  silu(z) = z * sigmoid(z)
//     out = act wo                       (T,D)
// Under tensor parallelism F is this device's slice of the width: wi_0, wi_1 are
// column-parallel and wo row-parallel (base/tensor.h).
#include "model/mlp.h"
#include "model/matmul.h"
#include "model/precision.h"
#include "base/tensor.h"
#include "model/tensor_parallel.h"
#include "base/memory.h"
#include "kernels/kernels.h"
#include "core/common.h"

// h0, h1 as the packed kernels read them (packed_operands).
static const uint16_t *bits(const float *h) { return (const uint16_t *)(const void *)h; }

const float *swiglu_activation(const Config *c, const float *h0, const float *h1, size_t n, size_t cap,
                               const char *name) {
    if (packed_operands(c)) {
        uint16_t *a = mem_alloc_uninit(MEM_TEMP, sizeof(uint16_t) * (cap ? cap : 1), name);
        kern()->mlp->swiglu_forward_packed(a, bits(h0), bits(h1), (long)n);
        return matmul_packed(a, n);
    }
    float *act = mem_floats_uninit(MEM_TEMP, cap, name);
    kern()->mlp->swiglu_forward(act, h0, h1, (long)n, cfg_bf16(c));
    return act;
}

float *swiglu_dact(const Config *c, float *df, size_t n, size_t cap, const char *name) {
    if (!packed_operands(c)) {
        prec_round(c, df, n);
        return df;
    }
    float *d = mem_alloc_uninit(MEM_TEMP, sizeof(uint16_t) * MM_MAX(cap, 1), name);
    packed_round(c, d, df, n);
    mem_free(df);
    return d;
}

// swiglu_gradients under packed_operands: three 16-bit operands (two without act), dh1 over
// dact with act.
static void packed_gradients(const float **act, const float **dh0, const float **dh1, float *dact, const float *h0,
                             const float *h1, size_t n, size_t cap, const char *const names[3]) {
    size_t bytes = sizeof(uint16_t) * (cap ? cap : 1);
    uint16_t *a = act ? mem_alloc_uninit(MEM_TEMP, bytes, names[0]) : NULL;
    uint16_t *g0 = mem_alloc_uninit(MEM_TEMP, bytes, names[1]);
    uint16_t *g1 = act ? (uint16_t *)(void *)dact : mem_alloc_uninit(MEM_TEMP, bytes, names[2]);
    kern()->mlp->swiglu_backward_packed(a, g0, g1, bits(dact), bits(h0), bits(h1), (long)n);
    if (act) *act = matmul_packed(a, n);
    *dh0 = matmul_packed(g0, n);
    *dh1 = matmul_packed(g1, n);
}

void swiglu_gradients(const Config *c, const float **act, const float **dh0, const float **dh1, float *dact,
                      const float *h0, const float *h1, size_t n, size_t cap, const char *const names[3]) {
    if (packed_operands(c)) {
        packed_gradients(act, dh0, dh1, dact, h0, h1, n, cap, names);
        return;
    }
    float *a = act ? mem_floats_uninit(MEM_TEMP, cap, names[0]) : NULL;
    float *g0 = mem_floats_uninit(MEM_TEMP, cap, names[1]);   // written whole (its n)
    float *g1 = act ? dact : mem_floats_uninit(MEM_TEMP, cap, names[2]);
    kern()->mlp->swiglu_backward(a, g0, g1, dact, h0, h1, (long)n, cfg_bf16(c) && act);
    prec_round(c, g0, n);
    prec_round(c, g1, n);
    if (act) *act = a;
    *dh0 = g0;
    *dh1 = g1;
}

// out (T,D) = SwiGLU(h0, h1) @ wo: the part of the forward whose result only the next layer
// reads (the backward recomputes the activation from h0, h1 and needs neither it nor out).
static void mlp_output(const Config *c, const MlpParams *p, float *out, const MlpSaved *s, int T, int D, int F) {
    const float *act = swiglu_activation(c, s->h0, s->h1, (size_t)T * F, (size_t)T * F, "mlp activation");
    tp_rowpar_forward(c, out, act, p->wo, T, F, D);   // a sum over F, split over the tensor axis
    prec_round(c, out, (size_t)T * D);
    matmul_packed_free(act);
}

void mlp_forward(const Config *c, const MlpParams *p, MlpSaved *s, float *out, const float *x, int T, int D, int F) {
    size_t n = (size_t)T * F;
    s->h0 = packed_alloc(c, n, 0, "mlp wi_0 out");   // (T,F), written whole below
    s->h1 = packed_alloc(c, n, 0, "mlp wi_1 out");   // (T,F)
    // h0, h1 rounded (cast point 4): as 16-bit numbers by the products themselves under
    // packed_operands, else rounded in place.
    matmul_share(x, (size_t)T * D);   // read by both products
    if (packed_operands(c)) {
        matmul_forward_round16(s->h0, x, p->wi_0, T, D, F);
        matmul_forward_round16(s->h1, x, p->wi_1, T, D, F);
    } else {
        matmul_forward(s->h0, x, p->wi_0, T, D, F, 0);
        prec_round(c, s->h0, n);
        matmul_forward(s->h1, x, p->wi_1, T, D, F, 0);
        prec_round(c, s->h1, n);
    }
    matmul_unshare(x, (size_t)T * D);
    if (out) mlp_output(c, p, out, s, T, D, F);
    if (packed_operands(c)) return;   // (16-bit already)
    act_pack(c, &s->h0, n);   // kept as 16-bit numbers in bf16 mode
    act_pack(c, &s->h1, n);
}

static const char *const names[3] = {"mlp activation", "mlp d h0", "mlp d h1"};

// dact (T,F) = dout wo^T, rounded in bf16 (act was rounded, so is its gradient): as 16-bit
// numbers by the product itself under packed_operands (swiglu_dact's form), else floats.
static float *mlp_dact(const Config *c, const float *wo, const float *dout, int T, int D, int F) {
    size_t n = (size_t)T * F;
    if (packed_operands(c)) {
        float *d = mem_alloc_uninit(MEM_TEMP, sizeof(uint16_t) * MM_MAX(n, 1), "mlp d activation");
        matmul_dinp_round16(d, dout, wo, T, F, D);
        return d;
    }
    float *dact = mem_floats(MEM_TEMP, n, "mlp d activation");
    matmul_backward(dact, NULL, dout, NULL, wo, T, F, D, (Leaves){0});   // (no weight gradient: no leaves)
    return swiglu_dact(c, dact, n, n, "mlp d activation");
}

// out = act wo, act = silu(h0) * h1 recomputed:  dwo += act^T dout, and the gradients dh0, dh1
// (T,F) of h0 and h1, returned, rounded in bf16 as act was. Where dwo's leaves go in one
// call, which takes no buffers of its own (leaf.nchunks == 1), dact = dout wo^T comes first
// and act comes out of the gradients' pass, one sigmoid per element for the three (as floats,
// dh1 written over dact): act, dact and dh0 are held during dwo's product, three buffers, as
// many as the gradients' pass holds either way. Otherwise dwo's leaf sums take buffers of
// their own, and act is recomputed in a pass of its own first, so that only act and dact are
// held beside them.
static void output_backward(const Config *c, const MlpParams *p, MlpParams *g, const MlpSaved *s, const float *dout,
                            int T, int D, int F, Leaves leaf, const float **dh0, const float **dh1) {
    size_t n = (size_t)T * F;
    matmul_share(dout, (size_t)T * D);   // read by wo's input and weight gradients
    if (leaf.nchunks == 1) {
        float *dact = mlp_dact(c, p->wo, dout, T, D, F);   // (T,F), then d h1
        const float *act;   // (T,F) recomputed
        swiglu_gradients(c, &act, dh0, dh1, dact, s->h0, s->h1, n, n, names);   // (dact taken over)
        matmul_backward(NULL, g->wo, dout, act, NULL, T, F, D, leaf);
        matmul_packed_free(act);
    } else {
        const float *act = swiglu_activation(c, s->h0, s->h1, n, n, "mlp activation");   // (T,F) recomputed
        float *dact = mlp_dact(c, p->wo, dout, T, D, F);   // (T,F)
        matmul_backward(NULL, g->wo, dout, act, NULL, T, F, D, leaf);
        matmul_packed_free(act);
        swiglu_gradients(c, NULL, dh0, dh1, dact, s->h0, s->h1, n, n, names);
        mem_free(dact);
    }
    matmul_unshare(dout, (size_t)T * D);
}

// h = x w (w column-parallel): dw += x^T dh and dx += dh w^T (a sum over F, split over the
// tensor axis), both reading dh (T,F).
static void input_backward(const Config *c, float *dx, float *dw, const float *dh, const float *x, const float *w,
                           int T, int D, int F, Leaves leaf) {
    matmul_share(dh, (size_t)T * F);
    matmul_backward(NULL, dw, dh, x, w, T, D, F, leaf);
    tp_colpar_dinp(c, dx, dh, w, T, D, F);
    matmul_unshare(dh, (size_t)T * F);
}

void mlp_backward(const Config *c, const MlpParams *p, MlpParams *g, MlpSaved *s, float *dx, const float *dout,
                  const float *x, int T, int D, int F, Leaves leaf) {
    if (!packed_operands(c)) {   // (16-bit, the packed kernels' inputs)
        act_unpack(c, &s->h0, (size_t)T * F);
        act_unpack(c, &s->h1, (size_t)T * F);
    }
    const float *dh0, *dh1;
    output_backward(c, p, g, s, dout, T, D, F, leaf, &dh0, &dh1);
    mlp_saved_free(s);
    matmul_share(x, (size_t)T * D);   // read by both weight gradients
    input_backward(c, dx, g->wi_0, dh0, x, p->wi_0, T, D, F, leaf);
    input_backward(c, dx, g->wi_1, dh1, x, p->wi_1, T, D, F, leaf);
    matmul_unshare(x, (size_t)T * D);
    matmul_packed_free(dh0);
    matmul_packed_free(dh1);
}

void mlp_saved_free(MlpSaved *s) {
    mem_free(s->h0);
    mem_free(s->h1);
    s->h0 = s->h1 = NULL;
}
