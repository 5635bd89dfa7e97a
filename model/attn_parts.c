// model/attn_parts.c: the attention core over every part of the sequence (see
// model/attn_parts.h): gather the keys and values (or run the ring), the core, free, and
// in the backward send each part's dk, dv back to its device.
#include "model/attn_parts.h"       // AttnPartsNames, these two functions
#include "model/attn_flash.h"       // attn_forward_cfg, attn_backward_cfg: dot_product or flash
#include "model/attn_ring.h"        // attn_ring_on, attn_ring_forward/backward
#include "base/context.h"           // cp_gather, cp_reduce_scatter over `context`, leaves_of
#include "base/memory.h"            // mem_floats, mem_free

void attn_parts_forward(const Config *c, float **o, float **stats, const float *q, const float *k,
                        const float *v, int B, int S, int N, int Nkv, int Dqk, int Dv, const AttnPartsNames *nm) {
    int T = B * S, p0 = cp_rank() * S;
    int ring = attn_ring_on(c);
    const float *k_all = ring ? k : cp_gather(k, (size_t)T * Nkv * Dqk, nm->k_all);   // (P,B,S,Nkv,Dqk)
    const float *v_all = ring ? v : cp_gather(v, (size_t)T * Nkv * Dv, nm->v_all);    // (P,B,S,Nkv,Dv)
    // o (B,S,N,Dv): the one-pass core writes each row; the ring adds each block onto zeros.
    size_t no = (size_t)T * N * Dv;
    *o = ring ? mem_floats(MEM_ACTIVATIONS, no, nm->o) : mem_floats_uninit(MEM_ACTIVATIONS, no, nm->o);
    *stats = mem_floats(MEM_ACTIVATIONS, (size_t)B * N * S * 2, nm->stats);      // (B,N,S,2)
    unsigned char *mask = attn_causal_mask(c, B, S, p0);   // NULL unless implicit_causal_mask=false
    if (ring)
        attn_ring_forward(*o, *stats, q, k, v, mask, B, S, p0, N, Nkv, Dqk, Dv, attn_rounding(c),
                          cfg_attention_flash(c) ? c->attn_block_kv : 0);
    else attn_forward_cfg(c, *o, *stats, q, k_all, v_all, mask, B, S, p0, N, Nkv, Dqk, Dv);
    mem_free(mask);
    cp_gather_free((float *)k_all, k);
    cp_gather_free((float *)v_all, v);
}

// With the ring, no gather: dk and dv are this device's part's whole gradient
// (model/attn_ring.h); else they hold every part's and are reduce-scattered.
void attn_parts_backward(const Config *c, float **dq, float **dk, float **dv, float *dO, const float *q,
                         const float *k, const float *v, const float *o, const float *stats, int B, int S,
                         int N, int Nkv, int Dqk, int Dv, const AttnPartsNames *nm) {
    int T = B * S, P = cp_size(), p0 = cp_rank() * S;
    int ring = attn_ring_on(c), parts = ring ? 1 : P;
    const float *k_all = ring ? k : cp_gather(k, (size_t)T * Nkv * Dqk, nm->k_all);   // (P,B,S,Nkv,Dqk)
    const float *v_all = ring ? v : cp_gather(v, (size_t)T * Nkv * Dv, nm->v_all);    // (P,B,S,Nkv,Dv)
    *dq = mem_floats(MEM_TEMP, (size_t)T * N * Dqk, nm->dq);               // (B,S,N,Dqk)
    *dk = mem_floats(MEM_TEMP, (size_t)parts * T * Nkv * Dqk, nm->dk);     // (P,B,S,Nkv,Dqk)
    *dv = mem_floats(MEM_TEMP, (size_t)parts * T * Nkv * Dv, nm->dv);      // (P,B,S,Nkv,Dv)
    unsigned char *mask = attn_causal_mask(c, B, S, p0);
    if (ring) attn_ring_backward(*dq, *dk, *dv, dO, q, k, v, o, stats, mask, B, S, p0, N, Nkv, Dqk, Dv,
                                 attn_rounding(c));
    else attn_backward_cfg(c, *dq, *dk, *dv, dO, q, k_all, v_all, o, stats, mask, B, S, p0, P,
                           leaves_of(c, B, S).chunk, N, Nkv, Dqk, Dv);
    mem_free(dO);
    mem_free(mask);
    cp_gather_free((float *)k_all, k);
    cp_gather_free((float *)v_all, v);
    if (!ring) cp_reduce_scatter(*dk, (size_t)T * Nkv * Dqk);
    if (!ring) cp_reduce_scatter(*dv, (size_t)T * Nkv * Dv);
}
