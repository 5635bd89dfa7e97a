// model/attn_flash.h: blocked online-softmax attention (attention=flash,
// docs/optimizations.md#attention), the FlashAttention way of computing what model/attn_core.c computes.
//
// Forward, per (sequence b, query head h), query block by query block (attn_block_q rows),
// key block by key block (attn_block_kv keys), for each row i a running max m, sum l and
// output accumulator acc (held in o itself):
//     s_j   = q_i . k_j                    for the keys j of the block that row i sees
//     m'    = max(m, max_j s_j),  a = exp(m - m')
//     l     = a l + sum_j exp(s_j - m'),   acc = a acc + sum_j exp(s_j - m') v_j,   m = m'
// then o_i = acc / l. What is kept for the backward is o and, per row, (m, l): the
// logsumexp m + log l, held as its two parts in the same (B,N,S,2) stats as the
// dot-product path's (so the remat lists are the same). Causal: the key blocks that start
// after the block's last query position are never visited.
// Backward, per (sequence, kv head) and query chunk as in attn_core_backward, then query
// block by key block: the block's probabilities are recomputed from q, k and (m, l),
//     p_ij = exp(s_ij - m_i) / l_i,   dP_ij = dO_i . v_j,   dS_ij = p_ij (dP_ij - D_i),
//     D_i = dO_i . o_i (rowsum(dO * O)),  dv_j += p_ij dO_i,  dk_j += dS_ij q_i,  dq_i += dS_ij k_j
// Nothing of size S x S (or even one key row per query) is held: the scratch is one key
// block of scores per (sequence, head), B*N*attn_block_kv floats.
//
// Numerics (tolerance, not bits): the running rescale adds l and acc in another order and
// with other roundings than the one-pass softmax; float32 losses agree with dot_product to
// ~1e-6 relative (tests/flash.sh states its bounds). The summation order depends on the
// block sizes. bf16 (AttnRounding): the scores are rounded as in the dot-product path, the
// exp weights are rounded relative to the running max m' (the dot-product path: the row's
// final max), acc is rounded once before the division and the output after it, as there.
// The backward adds every dk_j, dv_j over (head, row) and every dq_i over keys in the same
// order as attn_core_backward, with the same query chunks, so context parallelism gives
// the same bits as one device with the same context_reduce_chunks.
#ifndef MESHMOE_ATTN_FLASH_H
#define MESHMOE_ATTN_FLASH_H
#include "model/attn_core.h"

// Same arguments and outputs as attn_core_forward / attn_core_backward (model/attn_core.h),
// plus the block sizes bq, bkv (>= 1; a last, shorter block takes any remainder).
void attn_flash_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd, int bq, int bkv);
void attn_flash_backward(float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *o, const float *stats,
                         const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk,
                         int Dv, AttnRounding rnd, int bq, int bkv);

// The attention of the config: attention=dot_product (attn_core_*) or flash (attn_flash_*,
// with attn_block_q / attn_block_kv). Called by model/attention.c and model/mla.c.
void attn_forward_cfg(const Config *c, float *o, float *stats, const float *q, const float *k, const float *v,
                      const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv);
void attn_backward_cfg(const Config *c, float *dq, float *dk, float *dv, const float *dout,
                       const float *q, const float *k, const float *v, const float *o, const float *stats,
                       const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk,
                       int Dv);

// attn_block_autotune=true (docs/optimizations.md#attn_block_autotune): times forward + backward of a few (bq, bkv) candidates
// on random inputs of the first step's per-device shapes (on a scratch device of its own,
// before training), prints one line per candidate and sets c->attn_block_q, attn_block_kv
// to the fastest.
void attn_block_autotune(Config *c);
#endif
