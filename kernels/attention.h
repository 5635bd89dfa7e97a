// kernels/attention.h: the causal softmax attention kernels (docs/model.md#gqa-attention).
// The layers that allocate their buffers and run the passes are model/attn_core.c (dot
// product), model/attn_flash.c (blocked, attention=flash) and model/attn_ring.c (ring over
// the context axis); their headers give the math.
//
// Shapes: B sequences, S query rows per sequence at positions q0 .. q0+S-1, N query heads,
// Nkv kv heads (query head h reads kv head h / (N/Nkv)), Dqk and Dv the widths of a q/k head
// and of a v head. Keys come as k (P,B,S,Nkv,Dqk) and v (P,B,S,Nkv,Dv): P parts of S
// positions each, in position order (P = 1: the plain (B,S,Nkv,.)). A ring block is one part
// whose first key sits at position k0. stats (B,N,S,2) holds per query row the max score m
// and the sum l of exp(s - m). mask is NULL (a key is visible when its position <= the
// query's) or a materialised (B,1,S,q0+S) boolean mask, which then decides.
#ifndef MESHMOE_KERNELS_ATTENTION_H
#define MESHMOE_KERNELS_ATTENTION_H
#include <float.h>
#include <stddef.h>
#include <stdint.h>

// The bf16 rounding points inside attention (docs/model.md#bf16-cast-points, 8 and 9), 0 or 1
// each: scores = rb(q.k); e = rb(exp(s - m)) and num = rb(sum_j e_j v_j); out = rb(num / l).
typedef struct AttnRounding { int scores, probs, out; } AttnRounding;

// The mask value of MaxText, DEFAULT_MASK_VALUE = -0.7 * float(jnp.finfo(float32).max): a
// Python double rounded once to float32. Finite, so that max and exp stay well defined, and
// so negative that exp(mask - m) is exactly 0 in float32.
#define ATTN_MASK_VALUE ((float)(-0.7 * (double)FLT_MAX))

typedef struct AttentionKernels {
    // mask (B,S,q0+S) = 1 where key position j <= query position q0+i, else 0.
    void (*causal_mask)(unsigned char *mask, int B, int S, int q0);

    // The one-pass softmax (attention=dot_product): o (B,S,N,Dv) and stats (B,N,S,2) written;
    // q (B,S,N,Dqk); k, v hold P*S > q0 positions. rows (B,N,q0+S): scratch, one score row
    // per (sequence, head).
    void (*dot_forward)(float *o, float *stats, float *rows, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd);
    // The backward of query rows r0 .. r1-1 of every sequence and head (one reduce chunk):
    // dq (B,S,N,Dqk) rows written; dk (P,B,S,Nkv,Dqk), dv (P,B,S,Nkv,Dv) += the rows' share,
    // per key in (head of the group, row) order. dout, o (B,S,N,Dv); stats as the forward wrote.
    void (*dot_backward_rows)(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *o, const float *stats,
                              const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                              int Dqk, int Dv, AttnRounding rnd);

    // Blocked online softmax (attention=flash), bq query rows by bkv keys: outputs as
    // dot_forward. blocks (B,N,min(bkv,q0+S)): scratch, one key block of scores per (b, h).
    void (*flash_forward)(float *o, float *stats, float *blocks, const float *q, const float *k, const float *v,
                          const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                          AttnRounding rnd, int bq, int bkv);
    // As dot_backward_rows, block by block, with the same sums in the same order (the same
    // bits given the same o and stats). Dblk (B,Nkv,min(bq,r1-r0)): scratch for D_i = dO_i . o_i.
    void (*flash_backward_rows)(float *dq, float *dk, float *dv, float *Dblk, const float *dout, const float *q,
                                const float *k, const float *v, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                                int Dqk, int Dv, AttnRounding rnd, int bq, int bkv);

    // Ring attention (context_parallel_strategy=ring): the running state before the first
    // block, stats (B,N,S,2) = (mask value, 0) per row (the accumulator o is zeroed by the layer).
    void (*ring_begin)(float *stats, int B, int S, int N);
    // Merge the block kb (B,S,Nkv,Dqk), vb (B,S,Nkv,Dv) at positions k0 .. k0+S-1 into the
    // running state: acc in o (B,S,N,Dv), (m, l) in stats, by the log-sum-exp rule. bkv = 0:
    // the block's keys in one merge; bkv > 0 (attention=flash): in merges of bkv keys, in
    // order, the block's first key starting the first (so with S a multiple of bkv, the
    // blocks of flash_forward). rows (B,N,bkv > 0 ? min(bkv,S) : S): scratch.
    void (*ring_block_forward)(float *o, float *stats, float *rows, const float *q, const float *kb,
                               const float *vb, const unsigned char *mask, int B, int S, int q0, int k0, int N,
                               int Nkv, int Dqk, int Dv, AttnRounding rnd, int bkv);
    // o (B,S,N,Dv) = acc / l, rounded as dot_forward rounds its output.
    void (*ring_end)(float *o, const float *stats, int B, int S, int N, int Dv, AttnRounding rnd);
    // The block at k0: dq (B,S,N,Dqk) += its share, dkb (B,S,Nkv,Dqk), dvb (B,S,Nkv,Dv) += this
    // device's queries' contributions to the block's keys and values.
    void (*ring_block_backward)(float *dq, float *dkb, float *dvb, const float *dout, const float *q,
                                const float *kb, const float *vb, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk,
                                int Dv, AttnRounding rnd);

    // x (n) = uniform numbers in [-1, 1) from a small LCG started at seed: the inputs that
    // attn_block_autotune times the kernels on.
    void (*uniform_fill)(float *x, size_t n, uint32_t seed);
} AttentionKernels;

extern const AttentionKernels attention_cpu;   // kernels/cpu/attention.c
// The same kernels in per-row loops only (kernels/cpu/attention.c): the same bits; the
// tests compare the two.
extern const AttentionKernels attention_cpu_plain;

#endif
