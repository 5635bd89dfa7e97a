// model/attn_parts.h: the attention core over every part of the sequence, the part both
// attention kinds (model/attention.c, model/mla.c) run between their projections.
// Under context parallelism (base/context.h) a device holds one part of each sequence: its
// queries read the keys and values of all parts, gathered over `context` (or, with
// context_parallel_strategy=ring, passed round the ring, model/attn_ring.h); in the
// backward each part's dk, dv go back to the device that holds it (a reduce-scatter).
// With one context device there is nothing to gather or send.
#ifndef MESHMOE_ATTN_PARTS_H
#define MESHMOE_ATTN_PARTS_H
#include "base/config.h"
#include "model/attn_core.h"

// The names of the buffers in the memory report, one set per attention kind.
typedef struct {
    const char *k_all, *v_all, *o, *stats, *dq, *dk, *dv;
} AttnPartsNames;

// o (B,S,N,Dv) = softmax(mask(q k^T)) v and its per-row stats (B,N,S,2) (m and l),
// allocated here (MEM_ACTIVATIONS). q (B,S,N,Dqk), k (B,S,Nkv,Dqk), v (B,S,Nkv,Dv) are this
// device's part, at positions cp_rank()*S ..
void attn_parts_forward(const Config *c, float **o, float **stats, const float *q, const float *k,
                        const float *v, int B, int S, int N, int Nkv, int Dqk, int Dv, const AttnPartsNames *nm);

// dq (B,S,N,Dqk), dk (B,S,Nkv,Dqk), dv (B,S,Nkv,Dv), allocated here (MEM_TEMP), from dO
// (B,S,N,Dv) and what the forward saw and wrote. dO is freed as soon as it is read (the
// core's backward), before the reduce-scatter of dk and dv.
void attn_parts_backward(const Config *c, float **dq, float **dk, float **dv, float *dO, const float *q,
                         const float *k, const float *v, const float *o, const float *stats, int B, int S,
                         int N, int Nkv, int Dqk, int Dv, const AttnPartsNames *nm);
#endif
