// model/vocab_tiling.h: num_vocab_tiling (docs/optimizations.md#num_vocab_tiling), MaxText's vocabulary
// tiling: the output head and the cross-entropy computed tile by tile over the tokens, so
// that only one (T/n, V) logits tile exists at a time, never the (B,S,V) logits. The
// forward pass keeps the logsumexp per token (T floats) and the final norm's output, which
// it keeps anyway; the backward pass recomputes each tile's logits from them.
//
// Tiles follow the canonical tree (base/context.h): tile k is the leaves
// [k*n/nt, (k+1)*n/nt) of this device's n leaves, in tree order. Every logit is one
// ordered dot product (kernels/matmul.h), whatever rows share the call; the loss is summed
// per leaf as before; the head's weight gradient is the same per-leaf products pushed into
// the same LeafSum in the same order; d(final norm output) is per token. So the loss and
// every gradient are bit-identical to num_vocab_tiling=1 (with the default ordered matmul).
#ifndef MESHMOE_VOCAB_TILING_H
#define MESHMOE_VOCAB_TILING_H
#include "model/model.h"

// 1: the head runs tiled (num_vocab_tiling > 1).
int vocab_tiled(const Config *c);
// Dies unless num_vocab_tiling divides the leaves of B sequences of S tokens on this device
// (the head's tiles are whole leaves): train.c asks it at start-up for the batches the head
// will see, before a checkpoint's load and the first step.
void vocab_tiling_check(const Config *c, int B, int S);
// Logits and loss of the final norm output m->nf (T,D), tile by tile, against targets (T):
// m->lse (T) kept for the backward, the leaves' loss sums into st. Acquires the head's
// weights itself (under FSDP a second all-gather of them: model_head_forward released them).
void vocab_tiled_loss_forward(Model *m, const int *targets, int B, int S, FwdStats *st);
// The head's backward, tile by tile: grads.logits += the weight gradient; returns
// d loss / d(final norm output) (T,D), MEM_TEMP. The head's weights must be in place.
float *vocab_tiled_head_backward(Model *m, int B, int S, float scale);
#endif
