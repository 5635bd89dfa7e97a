// model/moe_experts.c: the routed experts' SwiGLU on their rows (model/moe_experts.h).
//
//   h0 = xs wi_0,  h1 = xs wi_1,  act = silu(h0) * h1,  y = act wo     on each expert's rows
//
// One expert per call (the default), or all of a device's experts in one (megablox=true,
// MaxText's name for its grouped-matmul kernel): then each product is one grouped call
// (kernels/matmul.h) and each element-wise step one pass over all the rows, where the
// expert-by-expert way makes a call of each per expert (deepseek-medium: 64 experts, about
// 20 calls each per layer and step). The same arithmetic on the same rows either way, so the
// same bits on the CPU, whose products are row-stable; the temporaries are sized for all the
// rows at once rather than for one expert's.
#include "model/moe_experts.h"
#include "model/matmul.h"          // the products, one expert's or grouped
#include "model/precision.h"       // prec_round: the bf16 points
#include "model/mlp.h"             // SwiGLU's results as the products' operands
#include "model/tensor_parallel.h" // the expert width split over `tensor`
#include "base/treesum.h"          // LeafSum: a weight gradient's leaves over several chunks
#include "base/memory.h"           // mem_floats: tagged buffers
#include "kernels/kernels.h"       // kern()->mlp: SwiGLU
#include "core/common.h"           // die

ExpertRows expert_rows_one(int n, int cap) {
    ExpertRows er = {NULL, 1, n, cap};
    return er;
}

// ---------------------------------------------------------------------------------------
// The products of the experts in er, each on its own rows; w is the first expert's weight,
// the others follow it.

// out (n,OC) = inp (n,C) @ w_e.
static void experts_product(ExpertRows er, float *out, const float *inp, const float *w, int C, int OC) {
    if (er.rows) matmul_forward_grouped(out, inp, w, er.rows, er.G, C, OC);
    else matmul_forward(out, inp, w, er.n, C, OC, 0);
}

// out (n,OC) = bf16(inp (n,C) @ w_e), stored as 16-bit numbers (packed_operands).
static void experts_product_round16(ExpertRows er, float *out, const float *inp, const float *w, int C, int OC) {
    if (er.rows) matmul_forward_grouped_round16(out, inp, w, er.rows, er.G, C, OC);
    else matmul_forward_round16(out, inp, w, er.n, C, OC);
}

// dinp (n,C) += dout (n,OC) @ w_e^T.
static void experts_dinp(ExpertRows er, float *dinp, const float *dout, const float *w, int C, int OC) {
    if (er.rows) matmul_dinp_grouped(dinp, dout, w, er.rows, er.G, C, OC);
    else matmul_backward(dinp, NULL, dout, NULL, w, er.n, C, OC, (Leaves){0});   // (no weight gradient: no leaves)
}

// The row-parallel y = act wo and the column-parallel input gradient (sums over the expert
// width, which `tensor` splits).
static void experts_rowpar(const Config *c, ExpertRows er, float *out, const float *inp, const float *w, int Cl, int OC) {
    if (er.rows) tp_rowpar_forward_grouped(c, out, inp, w, er.rows, er.G, er.cap, Cl, OC);
    else tp_rowpar_forward_cap(c, out, inp, w, er.n, er.cap, Cl, OC);
}
static void experts_colpar(const Config *c, ExpertRows er, float *dinp, const float *dout, const float *w, int C,
                           int OCl) {
    if (er.rows) tp_colpar_dinp_grouped(c, dinp, dout, w, er.rows, er.G, er.cap, C, OCl);
    else tp_colpar_dinp_cap(c, dinp, dout, w, er.n, er.cap, C, OCl);
}

// ---------------------------------------------------------------------------------------
// Weight gradients

// The first of the n rows (sorted by token) whose token is >= t.
static int first_row_from(const int *row_token, int n, long t) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (row_token[mid] < t) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// off (leaf.n+1): the rows where each of the leaves starts among one expert's n rows (sorted
// by token, so a leaf's rows, those of its tokens t0 .. t0+len-1, are contiguous), from r0,
// then where the last ends. Every leaf counts (an empty one adds zero) so the tree has the
// same shape whatever the routing.
static void leaf_offsets(int *off, const int *row_token, int n, int r0, Leaves leaf) {
    for (long l = 0; l < leaf.n; l++) off[l] = r0 + first_row_from(row_token, n, leaf_token(leaf, l));
    off[leaf.n] = r0 + first_row_from(row_token, n, leaf_token(leaf, leaf.n - 1) + leaf.len);
}

// One expert's dw (C,OC) += sum over its n rows of inp[r]^T dout[r], leaf by leaf in tree
// order (the leaves of base/context.h). With one chunk the leaves' runs follow one another:
// the kernel takes them all in one call (matmul_dw_leaves); with more chunks each leaf is
// pushed through a LeafSum. row_token (n) is read on the host, to find each leaf's rows.
static void expert_dw(float *dw, const float *inp, const float *dout, const int *row_token, int n, int C, int OC,
                      Leaves leaf) {
    if (leaf.nchunks == 1) {
        int *off = malloc(sizeof(int) * ((size_t)leaf.n + 1));
        if (!off) die("out of host memory for an expert's %ld leaves", leaf.n);
        leaf_offsets(off, row_token, n, 0, leaf);
        matmul_dw_leaves(dw, inp, dout, off, (int)leaf.n, C, OC);
        free(off);
        return;
    }
    LeafSum ls;
    leafsum_begin(&ls, leaf, dw, (size_t)C * OC, "expert dw leaf");
    for (long l = 0; l < leaf.n; l++) {
        long t0 = leaf_token(leaf, l);
        int r0 = first_row_from(row_token, n, t0), r1 = first_row_from(row_token, n, t0 + leaf.len);
        // A leaf with no rows is a product over none: zeros, or, onto the leaf before it, + 0.0f
        // (the merge with a leaf of zeros). Every leaf takes the same buffers whatever its
        // rows, so the memory does not depend on the routing.
        int onto;
        float *g = leafsum_leaf_onto(&ls, &onto);
        matmul_dw_leaf(g, inp + (size_t)r0 * C, dout + (size_t)r0 * OC, r1 - r0, C, OC, onto);
        leafsum_push(&ls);
    }
    leafsum_end(&ls);
}

// The experts' dw (G,C,OC) += each expert's leaves over its rows: one grouped call with one
// chunk (the leaves of all the experts, one after another), else expert by expert.
static void experts_dw(ExpertRows er, float *dw, const float *inp, const float *dout, const int *row_token, int C,
                       int OC, Leaves leaf) {
    if (!er.rows) { expert_dw(dw, inp, dout, row_token, er.n, C, OC, leaf); return; }
    if (leaf.nchunks > 1) {
        for (int g = 0; g < er.G; g++) {
            int r0 = er.rows[g], n = er.rows[g + 1] - r0;
            if (n > 0)
                expert_dw(dw + (size_t)g * C * OC, inp + (size_t)r0 * C, dout + (size_t)r0 * OC, row_token + r0, n, C,
                          OC, leaf);
        }
        return;
    }
    size_t nl = (size_t)leaf.n;
    int *off = malloc(sizeof(int) * (er.G * nl + 1));
    if (!off) die("out of host memory for %d experts' %ld leaves", er.G, leaf.n);
    for (int g = 0; g < er.G; g++) {
        int r0 = er.rows[g], n = er.rows[g + 1] - r0;
        leaf_offsets(off + g * nl, row_token + r0, n, r0, leaf);   // its last entry: the next expert's first
        if (off[g * nl] != r0 || off[g * nl + nl] != r0 + n)
            die("internal: expert %d's leaves do not cover its rows %d .. %d", g, r0, r0 + n);
    }
    matmul_dw_leaves_grouped(dw, inp, dout, off, (int)nl, er.G, C, OC);
    free(off);
}

// ---------------------------------------------------------------------------------------
// Forward

// moe_skip_redundant_cast (docs/optimizations.md#moe_skip_redundant_cast), read here only. MaxText casts the
// expert intermediate silu(h0)*h1 (rows,H) to the activation dtype before the wo matmul
// (and autodiff casts its gradient back); with float32 activations both casts are no-ops,
// and the skip drops them. Without it each cast writes a copy (MEM_TEMP) that the next
// op reads while the uncast buffer is still held: one more (rows,H) buffer, same bits.
// Like the other temporaries it is allocated for `cap` rows; n are copied. A 16-bit
// operand (model/precision.h: packed_operands) is copied as its 16-bit numbers.
static const float *intermediate_cast(const Config *c, const float *x, size_t n, size_t cap, const char *name) {
    if (c->moe_skip_redundant_cast) return x;
    if (packed_operands(c)) return matmul_packed_copy(x, cap, name);
    float *copy = mem_floats(MEM_TEMP, cap, name);
    mem_copy(copy, x, sizeof(float) * n);
    return copy;
}
static void intermediate_cast_free(const float *copy, const float *x) {
    if (copy != x) matmul_packed_free(copy);
}

void experts_forward(const Config *c, const LocalDims *ld, const MoeParams *p, int e0, ExpertRows er, const float *xs,
                     float *h0, float *h1, float *y, int y16) {
    int D = c->base_emb_dim, H = ld->expert_dim;
    size_t n = (size_t)er.n, cap = (size_t)er.cap, w0 = (size_t)e0 * D * H;
    // h0, h1 rounded (cast point 4): as 16-bit numbers by the products themselves under
    // packed_operands (model/precision.h), else rounded in place.
    matmul_share_cap(xs, n * D, cap * D);   // read by both products
    if (packed_operands(c)) {
        experts_product_round16(er, h0, xs, p->wi_0 + w0, D, H);
        experts_product_round16(er, h1, xs, p->wi_1 + w0, D, H);
    } else {
        experts_product(er, h0, xs, p->wi_0 + w0, D, H);
        prec_round(c, h0, n * H);
        experts_product(er, h1, xs, p->wi_1 + w0, D, H);
        prec_round(c, h1, n * H);
    }
    matmul_unshare(xs, n * D);
    if (!y) return;   // a recomputation whose outputs remat kept (model/moe.h: moe_recompute)
    const float *act = swiglu_activation(c, h0, h1, n * H, cap * H, "moe expert activation");   // (n,H) of (cap,H)
    const float *actc = intermediate_cast(c, act, n * H, cap * H, "moe expert activation, cast (a no-op copy)");
    float *yf = y16 ? mem_floats_uninit(MEM_TEMP, cap * D, "moe expert out (float32, then 16-bit)") : NULL;
    experts_rowpar(c, er, yf ? yf : y, actc, p->wo + w0, H, D);   // a sum over H (tensor-split)
    packed_round(c, y, yf, n * D);
    mem_free(yf);
    intermediate_cast_free(actc, act);
    matmul_packed_free(act);
}

// ---------------------------------------------------------------------------------------
// Backward

// dact (n,H of cap,H) = dy wo^T, the gradient of y = act wo's input (rounded in bf16, as act was).
static float *experts_dact(const Config *c, ExpertRows er, const float *wo, const float *dye, int H, int D) {
    if (packed_operands(c)) {   // 16-bit numbers, rounded by the product (swiglu_dact's form)
        float *d = mem_alloc_uninit(MEM_TEMP, sizeof(uint16_t) * MM_MAX((size_t)er.cap * H, 1),
                                    "moe expert d activation");
        if (er.rows) matmul_dinp_grouped_round16(d, dye, wo, er.rows, er.G, H, D);
        else matmul_dinp_round16(d, dye, wo, er.n, H, D);
        return d;
    }
    float *dact = mem_floats_uninit(MEM_TEMP, (size_t)er.cap * H, "moe expert d activation");
    mem_zero(dact, sizeof(float) * (size_t)er.n * H);   // its n rows, which the product adds into
    experts_dinp(er, dact, dye, wo, H, D);
    return swiglu_dact(c, dact, (size_t)er.n * H, (size_t)er.cap * H, "moe expert d activation");
}

static const char *const names[3] = {"moe expert activation", "moe expert d h0", "moe expert d h1"};

// The SwiGLU backward: dwo += act^T dy, and the gradients dh0, dh1 (n,H of cap,H) of
// act = silu(h0) * h1, returned; act is recomputed from h0 and h1. As model/mlp.c's
// output_backward: where dwo's leaves go in one call (no buffers of their own) and without
// the cast copies (moe_skip_redundant_cast, the default), act comes out of the gradients'
// pass, one sigmoid per element for the three, dh1 written over dact (as floats); otherwise
// act first, its copy (with the casts) read by the wo product, then the gradients from
// dact's copy. Rounded in bf16, as act was.
static void experts_swiglu_backward(const Config *c, ExpertRows er, float *dwo, const float *wo, const float *h0,
                                    const float *h1, const float *dye, const int *rt, int H, int D, Leaves leaf,
                                    const float **dh0, const float **dh1) {
    size_t n = (size_t)er.n, cap = (size_t)er.cap;
    matmul_share_cap(dye, n * D, cap * D);   // read by wo's input and weight gradients
    if (c->moe_skip_redundant_cast && leaf.nchunks == 1) {
        float *dact = experts_dact(c, er, wo, dye, H, D);
        const float *act;   // (n,H) recomputed
        swiglu_gradients(c, &act, dh0, dh1, dact, h0, h1, n * H, cap * H, names);   // (dact taken over)
        experts_dw(er, dwo, act, dye, rt, H, D, leaf);
        matmul_packed_free(act);
    } else {
        const float *act = swiglu_activation(c, h0, h1, n * H, cap * H, names[0]);   // (n,H) recomputed
        float *dact = experts_dact(c, er, wo, dye, H, D);
        const float *actc = intermediate_cast(c, act, n * H, cap * H, "moe expert activation, cast (a no-op copy)");
        experts_dw(er, dwo, actc, dye, rt, H, D, leaf);
        intermediate_cast_free(actc, act);
        matmul_packed_free(act);
        float *dactc = dact;   // dact's cast copy (as dact: floats or 16-bit numbers)
        if (!c->moe_skip_redundant_cast) {
            size_t eb = packed_operands(c) ? sizeof(uint16_t) : sizeof(float);
            dactc = mem_alloc(MEM_TEMP, eb * cap * H, "moe expert d activation, cast back (a no-op copy)");
            mem_copy(dactc, dact, eb * n * H);
        }
        swiglu_gradients(c, NULL, dh0, dh1, dactc, h0, h1, n * H, cap * H, names);
        if (dactc != dact) mem_free(dactc);
        mem_free(dact);
    }
    matmul_unshare(dye, n * D);
}

// h = xs w (w column-parallel): dxs += dh w^T (a sum over H, tensor-split) and dw += xs^T dh,
// both reading dh (n,H).
static void experts_input_backward(const Config *c, ExpertRows er, float *dxs, float *dw, const float *dh,
                                   const float *xs, const float *w, const int *rt, int D, int H, Leaves leaf) {
    matmul_share_cap(dh, (size_t)er.n * H, (size_t)er.cap * H);
    experts_colpar(c, er, dxs, dh, w, D, H);
    experts_dw(er, dw, xs, dh, rt, D, H, leaf);
    matmul_unshare(dh, (size_t)er.n * H);
}

void experts_backward(const Config *c, const LocalDims *ld, const MoeParams *p, MoeParams *g, int e0, ExpertRows er,
                      const float *xs, const float *h0, const float *h1, const float *dye, const int *rt, Leaves leaf,
                      float *dxs) {
    int D = c->base_emb_dim, H = ld->expert_dim;
    size_t w0 = (size_t)e0 * D * H;
    const float *wi0 = p->wi_0 + w0, *wi1 = p->wi_1 + w0;
    const float *dh0, *dh1;   // y = act wo, act = silu(h0) * h1
    experts_swiglu_backward(c, er, g->wo + w0, p->wo + w0, h0, h1, dye, rt, H, D, leaf, &dh0, &dh1);
    // h0 = xs wi_0, h1 = xs wi_1:  dxs = dh0 wi_0^T + dh1 wi_1^T;  dwi += xs^T dh
    mem_zero(dxs, sizeof(float) * (size_t)er.n * D);
    matmul_share_cap(xs, (size_t)er.n * D, (size_t)er.cap * D);   // read by both weight gradients
    experts_input_backward(c, er, dxs, g->wi_0 + w0, dh0, xs, wi0, rt, D, H, leaf);
    experts_input_backward(c, er, dxs, g->wi_1 + w0, dh1, xs, wi1, rt, D, H, leaf);
    matmul_unshare(xs, (size_t)er.n * D);
    matmul_packed_free(dh0);
    matmul_packed_free(dh1);
}
