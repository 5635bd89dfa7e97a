// kernels/loss.h: softmax cross-entropy with z-loss, forward and backward, and the row
// moves of vocabulary tiling (docs/model.md#output-head-and-loss). The layers, which combine
// the statistics over the tensor axis and add the pieces and leaves along the canonical
// tree, are model/loss.c and model/vocab_tiling.c.
// logits (T,V) hold this device's columns v0 .. v0+V-1 of the vocabulary; a target < 0 is
// a token without a target.
#ifndef MESHMOE_KERNELS_LOSS_H
#define MESHMOE_KERNELS_LOSS_H
#include <stdint.h>

typedef struct LossKernels {
    // m (T) = max over the V logits of each token (a max is exact in any order).
    void (*loss_row_max)(float *m, const float *logits, int T, int V);
    // piece (T) = sum over columns c0 .. c0+Vc-1 of exp(logits[t][c] - m[t]), in column
    // order: one piece of the sum of exponentials.
    void (*loss_sum_exp)(float *piece, const float *logits, const float *m, int T, int V, int c0, int Vc);
    // zt (T) = the logit of each token's target if this device holds it, else 0.
    void (*loss_target_logit)(float *zt, const float *logits, const int *targets, int T, int V, int v0);
    // lse (T) = m + log(sum).
    void (*loss_lse)(float *lse, const float *m, const float *sum, int T);
    // *sum = the sum, in token order and in double, of l = lse - zt + zmul * lse^2 over the
    // tokens t0 .. t0+len-1 with a target: one leaf of the loss. *sum is device memory like
    // every array: the step reads its leaves back once, with the rest of its statistics, and
    // counts the tokens with a target from its batch (trainer/step.c), so nothing here waits.
    void (*loss_leaf_sum)(double *sum, const float *lse, const float *zt, const int *targets, long t0, long len,
                          float zmul);
    // dz (T,V) = scale * dl/dz, written in place over the logits:
    // dl/dz = softmax(z) * (1 + 2*zmul*lse) - onehot(target); zero for a token without a target.
    void (*loss_backward)(float *logits_to_dlogits, const float *lse, const int *targets, int T, int V, int v0,
                          float zmul, float scale);
    // The same written into dz (T,V) as 16-bit numbers, each rounded (kernels/bf16.h), the
    // logits (T,V) only read: the gradient for products that read 16-bit operands.
    void (*loss_backward_packed)(uint16_t *dz, const float *logits, const float *lse, const int *targets, int T, int V,
                                 int v0, float zmul, float scale);

    // Vocabulary tiling (num_vocab_tiling) moves one leaf's rows at a time between a
    // (T,w) array and the (R,w) rows of a tile.
    // dst (len,w) = rows t0 .. t0+len-1 of src (T,w).
    void (*tile_gather_rows)(float *dst, const float *src, long t0, int len, int w);
    // rows t0 .. t0+len-1 of dst (T,w) = src (len,w).
    void (*tile_scatter_rows)(float *dst, const float *src, long t0, int len, int w);
    // dst (len) = src[t0 .. t0+len-1] (the targets of a tile's leaf).
    void (*tile_gather_targets)(int *dst, const int *src, long t0, int len);

    // The logits stored as 16-bit numbers (bf16 bits, kernels/bf16.h), as the head's product
    // writes them under bf16_storage (their values rounded to bf16 already, cast point 16):
    // the forward's three reads, each value widened exactly, so the float32 forms' results on
    // the same values.
    void (*loss_row_max16)(float *m, const uint16_t *logits, int T, int V);
    void (*loss_sum_exp16)(float *piece, const uint16_t *logits, const float *m, int T, int V, int c0, int Vc);
    void (*loss_target_logit16)(float *zt, const uint16_t *logits, const int *targets, int T, int V, int v0);
    // loss_backward_packed from them, in place: each element's logit read, then its gradient's
    // bits written over it.
    void (*loss_backward16)(uint16_t *logits_to_dlogits, const float *lse, const int *targets, int T, int V, int v0,
                            float zmul, float scale);
} LossKernels;

extern const LossKernels loss_cpu;   // kernels/cpu/loss.c

#endif
