// model/attn_ring.c: ring attention over the context axis (see model/attn_ring.h).
// One function per pass runs the ring; one per pass handles one arriving K/V block.
#include "model/attn_ring.h"
#include "kernels/kernels.h"
#include "base/context.h"
#include "base/memory.h"
#include "core/common.h"

int attn_ring_on(const Config *c) {
    return c->context_parallel_strategy == CP_RING && cp_size() > 1;
}

// Visible (query, key) pairs between this device's rows and the block at k0 (k0 <= q0).
static double pairs(int S, int q0, int k0) {
    return k0 < q0 ? (double)S * S : S * (S + 1.0) / 2;
}

// The block kb (B,S,Nkv,Dqk), vb (B,S,Nkv,Dv) at positions k0.. into the running state of
// every query row: acc in o (B,S,N,Dv), m and l in stats (B,N,S,2), bkv keys at a time when
// bkv > 0. rows: (B,N,span) scratch.
static void block_forward(float *o, float *stats, float *rows, const float *q, const float *kb, const float *vb,
                          const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk, int Dv,
                          AttnRounding rnd, int bkv) {
    mem_device()->flops += 2.0 * B * N * pairs(S, q0, k0) * (Dqk + Dv);
    kern()->attention->ring_block_forward(o, stats, rows, q, kb, vb, mask, B, S, q0, k0, N, Nkv, Dqk, Dv, rnd, bkv);
}

void attn_ring_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                       const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                       AttnRounding rnd, int bkv) {
    attn_check_heads(N, Nkv);
    int P = cp_size(), r = cp_rank();
    size_t nk = (size_t)B * S * Nkv * Dqk, nv = (size_t)B * S * Nkv * Dv;   // one block's floats
    // The running state: acc = 0 (in o), m = the mask value, l = 0.
    mem_zero(o, sizeof(float) * B * S * N * Dv);
    kern()->attention->ring_begin(stats, B, S, N);
    // The blocks in flight: received into one buffer while the other is sent on (one
    // buffer is enough for a single hop).
    int nbuf = P > 2 ? 2 : 1;
    float *kbuf[2] = {NULL, NULL}, *vbuf[2] = {NULL, NULL};
    for (int x = 0; x < nbuf; x++) {
        kbuf[x] = mem_floats(MEM_COMM, nk, "ring attention k block");   // (B,S,Nkv,Dqk)
        vbuf[x] = mem_floats(MEM_COMM, nv, "ring attention v block");   // (B,S,Nkv,Dv)
    }
    // One range of scores per (sequence, head): the block's S keys, or flash's bkv of them.
    int span = bkv > 0 && bkv < S ? bkv : S;
    float *rows = mem_floats(MEM_TEMP, (size_t)B * N * span, "ring attention score rows");   // (B,N,span)
    const float *kc = k, *vc = v;   // the block in hand: this device's own first
    for (int t = 0; t < P; t++) {
        int p = (r - t + P) % P;   // whose block it is
        if (p <= r)   // causal: a later part's keys are all in the future
            block_forward(o, stats, rows, q, kc, vc, mask, B, S, q0, p * S, N, Nkv, Dqk, Dv, rnd, bkv);
        if (t == P - 1) break;
        cp_ring_pass(kc, kbuf[t % nbuf], nk);
        cp_ring_pass(vc, vbuf[t % nbuf], nv);
        kc = kbuf[t % nbuf];
        vc = vbuf[t % nbuf];
    }
    mem_free(rows);
    for (int x = 0; x < nbuf; x++) { mem_free(kbuf[x]); mem_free(vbuf[x]); }
    // o = acc / l, rounded as attn_core_forward rounds its numerator and output.
    kern()->attention->ring_end(o, stats, B, S, N, Dv, rnd);
}

// ---------------------------------------------------------------------------------------
// Backward

// The block at k0: dq (B,S,N,Dqk) += its share, dkb, dvb (the block's accumulators) += this
// device's queries' contributions (kernels/attention.h).
static void block_backward(float *dq, float *dkb, float *dvb, const float *dout, const float *q, const float *kb,
                           const float *vb, const float *o, const float *stats, const unsigned char *mask,
                           int B, int S, int q0, int k0, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    mem_device()->flops += 2.0 * B * N * pairs(S, q0, k0) * (3.0 * Dqk + 2.0 * Dv);
    kern()->attention->ring_block_backward(dq, dkb, dvb, dout, q, kb, vb, o, stats, mask, B, S, q0, k0, N, Nkv, Dqk,
                                           Dv, rnd);
}

void attn_ring_backward(float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *o, const float *stats,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd) {
    int P = cp_size(), r = cp_rank();
    size_t nk = (size_t)B * S * Nkv * Dqk, nv = (size_t)B * S * Nkv * Dv;
    mem_zero(dq, sizeof(float) * B * S * N * Dqk);
    // The K/V blocks in flight, and the dK/dV accumulators travelling with them (P-1 hops:
    // one buffer each is enough for P = 2, two to send one while receiving the other above).
    int nbuf = P > 2 ? 2 : 1;
    float *kbuf[2] = {NULL, NULL}, *vbuf[2] = {NULL, NULL}, *dkbuf[2] = {NULL, NULL}, *dvbuf[2] = {NULL, NULL};
    for (int x = 0; x < nbuf; x++) {
        kbuf[x] = mem_floats(MEM_COMM, nk, "ring attention k block");
        vbuf[x] = mem_floats(MEM_COMM, nv, "ring attention v block");
        dkbuf[x] = mem_floats(MEM_COMM, nk, "ring attention d k block");
        dvbuf[x] = mem_floats(MEM_COMM, nv, "ring attention d v block");
    }
    // Step t = 1 .. P-1: the block of part (r - t) mod P arrives with its accumulator (fresh
    // zeros at t = 1, where the block has just left its owner); this device adds its share
    // and passes both on. The own block comes last, after its accumulator is home.
    const float *kc = k, *vc = v;
    float *dkc = NULL, *dvc = NULL;
    for (int t = 1; t < P; t++) {
        int x = t % nbuf;
        cp_ring_pass(kc, kbuf[x], nk);
        cp_ring_pass(vc, vbuf[x], nv);
        kc = kbuf[x];
        vc = vbuf[x];
        if (t == 1) {
            dkc = dkbuf[x];
            dvc = dvbuf[x];
            mem_zero(dkc, sizeof(float) * nk);
            mem_zero(dvc, sizeof(float) * nv);
        } else {   // the accumulator of the block now in hand comes from the previous device
            cp_ring_pass(dkc, dkbuf[x], nk);
            cp_ring_pass(dvc, dvbuf[x], nv);
            dkc = dkbuf[x];
            dvc = dvbuf[x];
        }
        int p = (r - t + P) % P;
        if (p < r) block_backward(dq, dkc, dvc, dout, q, kc, vc, o, stats, mask, B, S, q0, p * S, N, Nkv, Dqk, Dv, rnd);
    }
    // The last hop brings every accumulator home: the other devices' share of this device's
    // own K/V gradient. Then its own queries' share, from its own block.
    cp_ring_pass(dkc, dk, nk);
    cp_ring_pass(dvc, dv, nv);
    for (int x = 0; x < nbuf; x++) {
        mem_free(kbuf[x]); mem_free(vbuf[x]); mem_free(dkbuf[x]); mem_free(dvbuf[x]);
    }
    block_backward(dq, dk, dv, dout, q, k, v, o, stats, mask, B, S, q0, q0, N, Nkv, Dqk, Dv, rnd);
}
