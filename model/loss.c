// model/loss.c: softmax cross-entropy and z-loss, forward and backward, in float32: the
// statistics combined over the tensor axis, the pieces and leaves summed along the
// canonical tree; the loops over logits are kernels (kernels/loss.h).
#include "model/loss.h"
#include "base/treesum.h"
#include "kernels/kernels.h"
#include "base/tensor.h"
#include "base/memory.h"
#include "core/common.h"

void loss_forward(float *lse, double *leaf_sums, const float *logits, int logits16, const int *targets,
                  int T, int V, int v0, int chunks, float zmul, Leaves leaf) {
    if (chunks < 1 || V % chunks) die("internal: %d logits cannot be cut into %d pieces", V, chunks);
    const LossKernels *k = kern()->loss;
    int Vc = V / chunks;
    // m = max over the whole vocabulary (a max is exact in any order).
    float *m = mem_floats(MEM_TEMP, (size_t)T, "loss max");              // (T)
    const uint16_t *z16 = logits16 ? (const uint16_t *)(const void *)logits : NULL;
    if (z16) k->loss_row_max16(m, z16, T, V);
    else k->loss_row_max(m, logits, T, V);
    tp_all_reduce_max(m, (size_t)T);
    // sum_i exp(z_i - m): piece by piece, the pieces along the canonical tree, then over
    // the devices that share the vocabulary.
    float *sum = mem_floats(MEM_TEMP, (size_t)T, "loss sum of exponentials");   // (T)
    TreeSum ts;
    treesum_begin(&ts, (size_t)T, MEM_TEMP, "loss piece sums");
    for (int r = 0; r < chunks; r++) {
        float *piece = treesum_leaf(&ts);   // (T)
        if (z16) k->loss_sum_exp16(piece, z16, m, T, V, r * Vc, Vc);
        else k->loss_sum_exp(piece, logits, m, T, V, r * Vc, Vc);
        treesum_push(&ts);
    }
    treesum_end(&ts, sum);
    tp_all_reduce(sum, (size_t)T);
    // The target's logit, from the device that holds it (the others add an exact zero).
    float *zt = mem_floats(MEM_TEMP, (size_t)T, "loss target logit");   // (T)
    if (z16) k->loss_target_logit16(zt, z16, targets, T, V, v0);
    else k->loss_target_logit(zt, logits, targets, T, V, v0);
    tp_all_reduce(zt, (size_t)T);
    k->loss_lse(lse, m, sum, T);
    // Per-leaf sums in token order (double), so they do not depend on the thread count.
    for (long l = 0; l < leaf.n; l++)
        k->loss_leaf_sum(&leaf_sums[l], lse, zt, targets, leaf_token(leaf, l), leaf.len, zmul);
    mem_free(m);
    mem_free(sum);
    mem_free(zt);
}

void loss_backward(float *dz, const float *lse, const int *targets, int T, int V, int v0, float zmul, float scale) {
    kern()->loss->loss_backward(dz, lse, targets, T, V, v0, zmul, scale);
}
