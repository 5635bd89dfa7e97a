// model/attn_ring.c: ring attention over the context axis (see model/attn_ring.h).
// One function per pass runs the ring; one per pass handles one arriving K/V block.
#include "model/attn_ring.h"
#include "model/precision.h"
#include "sharding/context.h"
#include "sharding/memory.h"
#include "common.h"

int attn_ring_on(const Config *c) {
    return c->context_parallel_strategy == CP_RING && cp_size() > 1;
}

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

// y = y * a + b * x
static void scale_axpy(float *y, float a, float b, const float *x, int n) {
    for (int d = 0; d < n; d++) y[d] = y[d] * a + b * x[d];
}

// Does query row i (position q0+i) of sequence b see key j of the block at k0 (position k0+j)?
static inline int seen(const unsigned char *mask, int b, int i, int j, int S, int q0, int k0) {
    return mask ? mask[((size_t)b * S + i) * (q0 + S) + k0 + j] : k0 + j <= q0 + i;
}
// How many keys of the block row i scans: up to its own position, or all when a mask decides.
static inline int scanned(const unsigned char *mask, int i, int S, int q0, int k0) {
    if (mask) return S;
    int n = q0 + i - k0 + 1;
    return n < 0 ? 0 : n > S ? S : n;
}

// Visible (query, key) pairs between this device's rows and the block at k0 (k0 <= q0).
static double pairs(int S, int q0, int k0) {
    return k0 < q0 ? (double)S * S : S * (S + 1.0) / 2;
}

// ---------------------------------------------------------------------------------------
// Forward

// The block kb (B,S,Nkv,Dqk), vb (B,S,Nkv,Dv) at positions k0.. into the running state of
// every query row: acc in o (B,S,N,Dv), m and l in stats (B,N,S,2). rows: (B,N,S) scratch.
static void block_forward(float *o, float *stats, float *rows, const float *q, const float *kb, const float *vb,
                          const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk, int Dv,
                          AttnRounding rnd) {
    int group = N / Nkv;
    mem_device()->flops += 2.0 * B * N * pairs(S, q0, k0) * (Dqk + Dv);
    if (mem_dry()) return;
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * S * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++) {
            int g = h / group;
            float *e = rows + ((size_t)b * N + h) * S;   // (S) this block's scores, then exp(s - m')
            for (int i = 0; i < S; i++) {
                const float *qi = q + (((size_t)b * S + i) * N + h) * Dqk;
                float *acc = o + (((size_t)b * S + i) * N + h) * Dv;
                float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                int nj = scanned(mask, i, S, q0, k0), any = 0;
                float mb = ATTN_MASK_VALUE;   // the block's max over the keys row i sees
                for (int j = 0; j < nj; j++) {
                    if (!seen(mask, b, i, j, S, q0, k0)) continue;
                    e[j] = dot(qi, kb + (((size_t)b * S + j) * Nkv + g) * Dqk, Dqk);
                    if (rnd.scores) e[j] = bf16_round(e[j]);
                    if (e[j] > mb) mb = e[j];
                    any = 1;
                }
                if (!any) continue;   // the block adds nothing to this row
                // The log-sum-exp merge: rescale what is there to the new max, add the block.
                float m = st[0], mn = m > mb ? m : mb;
                float r = expf(m - mn);   // 0 for the first block (m is the mask value, acc and l 0)
                float l = st[1] * r;
                for (int d = 0; d < Dv; d++) acc[d] *= r;
                for (int j = 0; j < nj; j++) {
                    if (!seen(mask, b, i, j, S, q0, k0)) continue;
                    float ej = expf(e[j] - mn);
                    if (rnd.probs) ej = bf16_round(ej);
                    l += ej;
                    scale_axpy(acc, 1.0f, ej, vb + (((size_t)b * S + j) * Nkv + g) * Dv, Dv);
                }
                st[0] = mn;
                st[1] = l;
            }
        }
}

void attn_ring_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                       const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                       AttnRounding rnd) {
    if (Nkv <= 0 || N % Nkv) die("attention: base_num_query_heads (%d) must be a multiple of base_num_kv_heads (%d)", N, Nkv);
    int P = cp_size(), r = cp_rank();
    size_t nk = (size_t)B * S * Nkv * Dqk, nv = (size_t)B * S * Nkv * Dv;   // one block's floats
    // The running state: acc = 0 (in o), m = the mask value, l = 0.
    mem_zero(o, sizeof(float) * B * S * N * Dv);
    for (size_t x = 0; x < (mem_dry() ? 0 : (size_t)B * N * S); x++) {
        stats[2 * x] = ATTN_MASK_VALUE;
        stats[2 * x + 1] = 0.0f;
    }
    // The blocks in flight: received into one buffer while the other is sent on (one
    // buffer is enough for a single hop).
    int nbuf = P > 2 ? 2 : 1;
    float *kbuf[2] = {NULL, NULL}, *vbuf[2] = {NULL, NULL};
    for (int x = 0; x < nbuf; x++) {
        kbuf[x] = mem_floats(MEM_COMM, nk, "ring attention k block");   // (B,S,Nkv,Dqk)
        vbuf[x] = mem_floats(MEM_COMM, nv, "ring attention v block");   // (B,S,Nkv,Dv)
    }
    float *rows = mem_floats(MEM_TEMP, (size_t)B * N * S, "ring attention score rows");   // (B,N,S)
    const float *kc = k, *vc = v;   // the block in hand: this device's own first
    for (int t = 0; t < P; t++) {
        int p = (r - t + P) % P;   // whose block it is
        if (p <= r)   // causal: a later part's keys are all in the future
            block_forward(o, stats, rows, q, kc, vc, mask, B, S, q0, p * S, N, Nkv, Dqk, Dv, rnd);
        if (t == P - 1) break;
        cp_ring_pass(kc, kbuf[t % nbuf], nk);
        cp_ring_pass(vc, vbuf[t % nbuf], nv);
        kc = kbuf[t % nbuf];
        vc = vbuf[t % nbuf];
    }
    mem_free(rows);
    for (int x = 0; x < nbuf; x++) { mem_free(kbuf[x]); mem_free(vbuf[x]); }
    // o = acc / l, rounded as attn_core_forward rounds its numerator and output.
    if (mem_dry()) return;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++)
            for (int h = 0; h < N; h++) {
                float *oi = o + (((size_t)b * S + i) * N + h) * Dv;
                float l = stats[(((size_t)b * N + h) * S + i) * 2 + 1];
                for (int d = 0; d < Dv; d++) {
                    float num = rnd.probs ? bf16_round(oi[d]) : oi[d];
                    oi[d] = rnd.out ? bf16_round(num / l) : num / l;
                }
            }
}

// ---------------------------------------------------------------------------------------
// Backward

// The block at k0: dq (B,S,N,Dqk) += its share, dkb, dvb (the block's accumulators) += this
// device's queries' contributions. With P = exp(s - m) / l from the saved stats:
//     dv_j += P_ij dO_i,   dS_ij = P_ij (dO_i . v_j - dO_i . o_i),   dq_i += dS_ij k_j,   dk_j += dS_ij q_i
// One work item per (sequence, kv head), as attn_core_backward: no two write the same float.
static void block_backward(float *dq, float *dkb, float *dvb, const float *dout, const float *q, const float *kb,
                           const float *vb, const float *o, const float *stats, const unsigned char *mask,
                           int B, int S, int q0, int k0, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    int group = N / Nkv;
    mem_device()->flops += 2.0 * B * N * pairs(S, q0, k0) * (3.0 * Dqk + 2.0 * Dv);
    if (mem_dry()) return;
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * S * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Nkv; g++)
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i = 0; i < S; i++) {
                    size_t qrow = ((size_t)b * S + i) * N + h;
                    const float *qi = q + qrow * Dqk, *doi = dout + qrow * Dv;
                    float *dqi = dq + qrow * Dqk;
                    const float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                    float m = st[0], l = st[1], Di = dot(doi, o + qrow * Dv, Dv);
                    for (int j = 0; j < scanned(mask, i, S, q0, k0); j++) {
                        if (!seen(mask, b, i, j, S, q0, k0)) continue;
                        size_t krow = ((size_t)b * S + j) * Nkv + g;
                        const float *kj = kb + krow * Dqk, *vj = vb + krow * Dv;
                        float s = dot(qi, kj, Dqk);
                        if (rnd.scores) s = bf16_round(s);
                        float e = expf(s - m);
                        if (rnd.probs) e = bf16_round(e);
                        float p = e / l;
                        float ds = p * (dot(doi, vj, Dv) - Di);
                        scale_axpy(dvb + krow * Dv, 1.0f, p, doi, Dv);
                        scale_axpy(dqi, 1.0f, ds, kj, Dqk);
                        scale_axpy(dkb + krow * Dqk, 1.0f, ds, qi, Dqk);
                    }
                }
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
