// model/embedding.c: embedding gather and its scatter-add backward, or the same as a
// one-hot matmul (use_iota_embed); the loops over tokens are kernels (kernels/embedding.h).
#include "model/embedding.h"
#include "model/matmul.h"
#include "kernels/kernels.h"
#include "base/memory.h"
#include "core/common.h"

void embedding_forward(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {
    kern()->embedding->embedding_forward(out, ids, table, T, D, V, v0);
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
        kern()->embedding->embedding_backward_leaf(g, dout, ids, leaf_token(leaf, l), leaf.len, D, V, v0);
        leafsum_push(&ls);
    }
    leafsum_end(&ls);
}

// ---------------------------------------------------------------------------------------
// The one-hot form (use_iota_embed). Why it gives the gather's bits with the ordered GEMM
// (kernels/matmul.h), where each output element is one chain of fused multiply-adds over k
// in order, starting from 0:
//   forward  out[t][d] = sum_k onehot[t][k] * table[k][d]: every term but one is 0 * w,
//            an exact zero that leaves the chain unchanged, and the one term 1 * w adds w
//            exactly to 0: out = w, bit for bit (only a -0.0 weight would come out +0.0).
//   backward g[v][d] = sum over the leaf's tokens t, in order, of onehot[t][v] * dout[t][d]:
//            the tokens with id v add dout exactly as the scatter-add does (0 + d0 + d1 ...,
//            in token order), the others add exact zeros. The leaves go along the same
//            tree as embedding_backward's, so the gradient is bit-identical too.
// With matmul_impl=openblas the forward is still exact (every partial sum adds zeros to at
// most one nonzero term); the backward's sum over tokens may be blocked differently.

// onehot (T,V) for the ids this device holds; MEM_TEMP, the caller frees it.
static float *onehot_of(const int *ids, int T, int V, int v0) {
    float *oh = mem_floats(MEM_TEMP, (size_t)T * V, "one-hot tokens (use_iota_embed)");   // zeroed
    kern()->embedding->embedding_onehot(oh, ids, T, V, v0);
    return oh;
}

void embedding_forward_onehot(float *out, const int *ids, const float *table, int T, int D, int V, int v0) {
    float *oh = onehot_of(ids, T, V, v0);        // (T,V)
    matmul_forward(out, oh, table, T, V, D, 0);  // (T,V) @ (V,D) -> (T,D)
    mem_free(oh);
}

void embedding_backward_onehot(float *dtable, const float *dout, const int *ids, int T, int D, int V, int v0,
                               Leaves leaf) {
    float *oh = onehot_of(ids, T, V, v0);        // (T,V)
    // dtable (V,D) += onehot^T @ dout, the general product: dout, the residual stream's
    // gradient, is a float32 sum in bf16 mode too, not bf16-valued (model/precision.h)
    matmul_backward_float32(NULL, dtable, dout, oh, NULL, T, V, D, leaf);
    mem_free(oh);
}
