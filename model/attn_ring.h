// model/attn_ring.h: ring attention over the context axis (context_parallel_strategy=ring,
// docs/optimizations.md#context_parallel_strategy), the other way to reach the keys and
// values of the other parts of a sequence (base/context.h). The math is
// model/attn_core.h's; only the order of its sums changes.
//
// Instead of all-gathering every part's K/V, each of the P context devices keeps its own
// block (B,S,Nkv,.) and the blocks travel round the ring r -> r+1 (mod P): at step t device
// r holds the block of part (r - t) mod P, so after P-1 hops every device has seen every
// block, one block in flight at a time (plus the buffer it is received into).
//
// Forward: every query row keeps a running max m, sum l and unnormalised output acc; a
// block's scores s_j update them by the log-sum-exp rule
//     m' = max(m, max_j s_j),   acc = acc * exp(m - m') + sum_j exp(s_j - m') v_j,
//     l  = l * exp(m - m') + sum_j exp(s_j - m'),   and at the end o = acc / l.
// The final (m, l) are saved like attn_core_forward's, so the backward recomputes the same
// probabilities p = exp(s - m) / l. A block's merge and its backward are the flash path's
// row pieces (kernels/cpu/attention.c:merge_keys_row, keys_backward_row).
//
// Backward: the K/V blocks go round again. dQ of the local rows sums over the blocks as
// they arrive; the dK/dV of a block travel with it in an accumulator that every device
// it visits adds its queries' contribution to, and a last hop brings the accumulator home,
// where the owner adds its own queries' share (its own block, processed last). So per
// layer and pass every device sends P-1 K/V blocks, and in the backward P-1 dK/dV blocks:
// the same bytes as the all-gathers and the reduce-scatter, as ppermutes.
//
// Causal: a block of a later part (p > r) is wholly in the future of device r's queries:
// it is passed on but not computed with. The plain contiguous split of the sequence is
// kept (MaxText's load-balanced reordering of chunks is not done), so device P-1 computes
// P blocks and device 0 one.
//
// attention=flash: within each block the keys are merged attn_block_kv at a time, as the
// flash core merges its key blocks (in ring order: the own block first), and the score
// scratch is (B,N,attn_block_kv) rather than a row of the block; the backward is the same
// (flash's backward sums are the dot product's whatever the blocks).
//
// Numerics: the summation order of the softmax (running max, rescaled sums, blocks in ring
// order r, r-1, .., 0) and of dQ, dK, dV differs from the all-gather path: equal within
// float rounding, not bit for bit (tests/ring.sh states the tolerance). With one context
// device the ring is off and attn_core is used.
#ifndef MESHMOE_ATTN_RING_H
#define MESHMOE_ATTN_RING_H
#include "base/config.h"
#include "model/attn_core.h"

// Does this device's attention run as a ring (the strategy is ring and context > 1)?
int attn_ring_on(const Config *c);

// As attn_core_forward, but k (B,S,Nkv,Dqk) and v (B,S,Nkv,Dv) are this device's own
// part only (positions q0..), the other parts arriving round the ring. o (B,S,N,Dv) and
// stats (B,N,S,2) are written. mask: NULL or attn_causal_mask's (B,1,S,q0+S). bkv: 0 (each
// block in one merge) or flash's attn_block_kv.
void attn_ring_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                       const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                       AttnRounding rnd, int bkv);

// As attn_core_backward, but k, v are this device's own part and dk (B,S,Nkv,Dqk), dv
// (B,S,Nkv,Dv) receive the whole gradient of this device's own keys and values (every
// device's queries' contributions, summed round the ring). dq, dk, dv are overwritten.
void attn_ring_backward(float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *o, const float *stats,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd);
#endif
