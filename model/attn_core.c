// model/attn_core.c: causal softmax attention on projected q, k, v, forward and backward.
// Plain loops, one (sequence, head) per OpenMP work item; see model/attn_core.h.
#include "model/attn_core.h"
#include "model/matmul.h"
#include "model/precision.h"
#include "model/treesum.h"
#include "sharding/memory.h"
#include "common.h"

void attn_check_heads(int N, int Nkv) {
    if (Nkv <= 0 || N % Nkv != 0)
        die("attention: base_num_query_heads (%d) must be a multiple of base_num_kv_heads (%d)", N, Nkv);
}

AttnRounding attn_rounding(const Config *c) {
    int bf16 = cfg_bf16(c);
    return (AttnRounding){bf16 && !c->float32_qk_product, bf16 && !c->float32_logits, bf16};
}

unsigned char *attn_causal_mask(const Config *c, int B, int S, int q0) {
    if (c->implicit_causal_mask) return NULL;   // read here only
    int W = q0 + S;
    unsigned char *mask = (unsigned char *)mem_alloc(MEM_TEMP, (size_t)B * S * W, "causal mask (B,1,S,S)");
    for (int b = 0; b < (mem_dry() ? 0 : B); b++)
        for (int i = 0; i < S; i++)
            for (int j = 0; j < W; j++) mask[((size_t)b * S + i) * W + j] = j <= q0 + i;
    return mask;
}

// The keys a query row scans: up to its own position, or every key when a mask decides.
static inline int keys_scanned(const unsigned char *mask, int i, int S, int q0) {
    return mask ? q0 + S : q0 + i + 1;
}

void attn_core_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                       const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    attn_check_heads(N, Nkv);
    int group = N / Nkv;   // query heads per kv head
    int W = q0 + S;        // keys of the whole sequence up to this device's last position
    // One row of scores per (b, h) work item, so threads never share scratch and the
    // memory used does not depend on the thread count.
    float *rows = mem_floats(MEM_TEMP, (size_t)B * N * W, "attention score rows");   // (B,N,W)
    // Visible (query, key) pairs: q0+i+1 for row i; each costs a Dqk dot and a Dv axpy.
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (Dqk + Dv);
    if (mem_dry()) B = 0;   // dry run: the scratch is allocated, nothing computed

    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * W * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++) {
            int g = h / group;
            float *e = rows + ((size_t)b * N + h) * W;   // (W) scores, then exp(s - m)
            for (int i = 0; i < S; i++) {
                const float *qi = q + (((size_t)b * S + i) * N + h) * Dqk;   // (Dqk)
                float *oi = o + (((size_t)b * S + i) * N + h) * Dv;          // (Dv)
                // Scores of the visible keys j <= pos. The masked ones (j > pos) hold
                // ATTN_MASK_VALUE by definition; they cannot be the max (key 0 is always
                // visible) and exp(ATTN_MASK_VALUE - m) is exactly 0 in float32, so they
                // add nothing to l or to o: skipping them gives the very same numbers.
                float m = ATTN_MASK_VALUE;
                int nj = keys_scanned(mask, i, S, q0);
                for (int j0 = 0; j0 < nj; j0 += 8) {   // 8 keys' dots at a time
                    const float *kr[8];
                    float s8[8];
                    attn_rows8(kr, k, b, j0, nj, B, S, Nkv, g, Dqk);
                    attn_dot8(s8, qi, kr, Dqk);
                    for (int j = j0; j < j0 + 8 && j < nj; j++) {
                        if (!attn_visible(mask, b, i, j, S, q0)) continue;
                        e[j] = rnd.scores ? bf16_round(s8[j - j0]) : s8[j - j0];
                        if (e[j] > m) m = e[j];
                    }
                }
                // o_i = (sum_j e_j v_j) / l, e_j = exp(s_j - m), l = sum_j e_j
                float l = 0.0f;
                for (int d = 0; d < Dv; d++) oi[d] = 0.0f;
                for (int j = 0; j < nj; j++) {
                    if (!attn_visible(mask, b, i, j, S, q0)) continue;
                    const float *vj = v + (attn_key_row(b, j, B, S) * Nkv + g) * Dv;    // (Dv)
                    e[j] = expf(e[j] - m);
                    if (rnd.probs) e[j] = bf16_round(e[j]);
                    l += e[j];
                    attn_axpy(oi, e[j], vj, Dv);
                }
                for (int d = 0; d < Dv; d++) {
                    float num = rnd.probs ? bf16_round(oi[d]) : oi[d];
                    oi[d] = rnd.out ? bf16_round(num / l) : num / l;
                }
                float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                st[0] = m;
                st[1] = l;
            }
        }
    mem_free(rows);
}

// With P[i][j] = e[i][j] / l[i] (recomputed from q, k, m, l) and dO = dout:
//     dv_j += P_ij dO_i
//     dP_ij = dO_i . v_j
//     dS_ij = P_ij (dP_ij - D_i),   D_i = sum_j P_ij dP_ij = dO_i . o_i
//     dq_i += dS_ij k_j,   dk_j += dS_ij q_i
// (the max m cancels out of the math: it needs no gradient; masked pairs get none.)
void attn_core_backward(float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *o, const float *stats,
                        const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    attn_check_heads(N, Nkv);
    if (chunk <= 0 || S % chunk) die("internal: attention rows (%d) cannot be cut into chunks of %d", S, chunk);
    int group = N / Nkv, nq = S / chunk;
    size_t nk = (size_t)P * B * S * Nkv;   // key rows (of one head) of every part
    // Per visible pair: two dots (s, dP) and three axpys (dv, dq, dk).
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (3.0 * Dqk + 2.0 * Dv);
    mem_zero(dk, sizeof(float) * nk * Dqk);
    mem_zero(dv, sizeof(float) * nk * Dv);
    int Bc = mem_dry() ? 0 : B;   // dry run: the chunk leaves are allocated, nothing computed

    // Query chunk by query chunk: each chunk's dK, dV go into a leaf of the tree over the
    // chunks (straight into dk, dv when there is one chunk).
    TreeSum tk, tv;
    treesum_begin(&tk, nk * Dqk, MEM_TEMP, "attention d k, one query chunk");
    treesum_begin(&tv, nk * Dv, MEM_TEMP, "attention d v, one query chunk");
    for (int qc = 0; qc < nq; qc++) {
        float *ck = nq > 1 ? treesum_leaf(&tk) : dk, *cv = nq > 1 ? treesum_leaf(&tv) : dv;
        // One work item per (sequence, kv head): it owns dk and dv of that kv head and dq
        // of the query heads of its group, which it visits in order. No two items write
        // the same float, and each float is summed in the same order whatever the thread
        // count.
        #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * chunk * (q0 + S) * (Dqk + Dv) > 1e5)
        for (int b = 0; b < Bc; b++)
            for (int g = 0; g < Nkv; g++)
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int i = qc * chunk; i < (qc + 1) * chunk; i++) {
                        size_t qrow = ((size_t)b * S + i) * N + h;
                        const float *qi = q + qrow * Dqk, *doi = dout + qrow * Dv, *oi = o + qrow * Dv;
                        float *dqi = dq + qrow * Dqk;                                  // (Dqk)
                        const float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                        float m = st[0], l = st[1];
                        float Di = attn_dot(doi, oi, Dv);
                        for (int d = 0; d < Dqk; d++) dqi[d] = 0.0f;
                        int nj = keys_scanned(mask, i, S, q0);
                        for (int j0 = 0; j0 < nj; j0 += 8) {   // 8 keys' dots at a time
                            const float *kr[8], *vr[8];
                            float s8[8], dp8[8];
                            attn_rows8(kr, k, b, j0, nj, B, S, Nkv, g, Dqk);
                            attn_rows8(vr, v, b, j0, nj, B, S, Nkv, g, Dv);
                            attn_dot8(s8, qi, kr, Dqk);
                            attn_dot8(dp8, doi, vr, Dv);
                            for (int j = j0; j < j0 + 8 && j < nj; j++) {
                                if (!attn_visible(mask, b, i, j, S, q0)) continue;
                                size_t krow = attn_key_row(b, j, B, S) * Nkv + g;
                                float s = rnd.scores ? bf16_round(s8[j - j0]) : s8[j - j0];
                                float e = expf(s - m);
                                if (rnd.probs) e = bf16_round(e);
                                float p = e / l;
                                float ds = p * (dp8[j - j0] - Di);
                                attn_axpy(cv + krow * Dv, p, doi, Dv);
                                attn_axpy(dqi, ds, kr[j - j0], Dqk);
                                attn_axpy(ck + krow * Dqk, ds, qi, Dqk);
                            }
                        }
                    }
        if (nq > 1) { treesum_push(&tk); treesum_push(&tv); }
    }
    if (nq > 1) { treesum_end(&tk, dk); treesum_end(&tv, dv); }
}

void attn_matmul_forward(float *out, const float *inp, const float *w, int B, int S, int C, int OC) {
    for (int b = 0; b < B; b++)
        matmul_forward(out + (size_t)b * S * OC, inp + (size_t)b * S * C, w, S, C, OC, 0);
}

void attn_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          int B, int S, int C, int OC, Leaves leaf) {
    if (dinp)
        for (int b = 0; b < B; b++)
            matmul_backward(dinp + (size_t)b * S * C, NULL, dout + (size_t)b * S * OC, NULL, w, S, C, OC, leaf);
    // The weight gradient is already summed leaf by leaf, whatever B is.
    if (dw) matmul_backward(NULL, dw, dout, inp, w, B * S, C, OC, leaf);
}
