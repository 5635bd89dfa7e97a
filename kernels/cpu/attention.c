// kernels/cpu/attention.c: causal softmax attention on the CPU (the arithmetic of
// kernels/attention.h). One (sequence, head) per OpenMP work item in the forward and one
// (sequence, kv head) in the backward, so no two threads write the same float and nothing
// depends on the thread count. The three layers share the per-row pieces: the log-sum-exp
// merge of a key range (flash and ring), the per-key backward (all three) and the final
// division.
//
// Two tables. attention_cpu_plain runs those pieces one query row at a time: the
// definition of every sum and its order. attention_cpu runs the same sums on tiles of 16
// query rows (kernels/cpu/attn_tiles.c), the same bits in about a third of the time
// (docs/performance.md#the-attention-core), and falls back to the per-row loops where a
// tile does not apply: a materialised mask, a head wider than TILE_MAX_D, or more than
// TILE_MAX_KEYS keys in one merge.
#include "kernels/attention.h"
#include "kernels/cpu/attn_tiles.h"
#include "kernels/bf16.h"
#include <math.h>

static inline int imin(int a, int b) { return a < b ? a : b; }

// A dot product is one in-order sum, s = ((a0 b0 + a1 b1) + a2 b2) + ..., each product
// rounded, then each add (no fused multiply-add: the build is ISO C, where the compiler
// does not contract).
static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}
// s[t] = a . b[t] for 8 vectors b[t]: eight dot chains side by side. Each is the same
// in-order sum (the same bits); run together they fill the CPU's pipelines, where one
// chain would wait on each add's latency.
static inline void dot8(float s[8], const float *a, const float *const b[8], int n) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, s4 = 0.0f, s5 = 0.0f, s6 = 0.0f, s7 = 0.0f;
    for (int d = 0; d < n; d++) {
        float x = a[d];
        s0 += x * b[0][d]; s1 += x * b[1][d]; s2 += x * b[2][d]; s3 += x * b[3][d];
        s4 += x * b[4][d]; s5 += x * b[5][d]; s6 += x * b[6][d]; s7 += x * b[7][d];
    }
    s[0] = s0; s[1] = s1; s[2] = s2; s[3] = s3; s[4] = s4; s[5] = s5; s[6] = s6; s[7] = s7;
}
// y += a * x, 8 elements per vector operation: each element is y + (a x), the product
// rounded and then the add, as in the scalar loop (GCC vector extension; may_alias because
// it reads and writes float arrays).
typedef float Vec8 __attribute__((vector_size(32), aligned(4), may_alias));
static inline void axpy(float *y, float a, const float *x, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        Vec8 xv = *(const Vec8 *)(x + d), yv = *(Vec8 *)(y + d);
        *(Vec8 *)(y + d) = yv + a * xv;
    }
    for (; d < n; d++) y[d] += a * x[d];
}
// Does query row i of sequence b see key j, at position k0 + j? From the materialised mask
// if there is one (which then decides), else from the positions.
static inline int visible(const unsigned char *mask, int b, int i, int j, int S, int q0, int k0) {
    return mask ? mask[((size_t)b * S + i) * (q0 + S) + k0 + j] : k0 + j <= q0 + i;
}
// How many of W keys at positions k0 .. query row i scans: up to its own position, or every
// key when a mask decides.
static inline int keys_scanned(const unsigned char *mask, int i, int q0, int k0, int W) {
    if (mask) return W;
    int n = q0 + i - k0 + 1;
    return n < 0 ? 0 : n > W ? W : n;
}
// The row, in k (P,B,S,Nkv,.) or v, of key j of sequence b: part j/S, row j%S.
static inline size_t key_row(int b, int j, int B, int S) {
    return ((size_t)(j / S) * B + b) * S + j % S;
}
// The rows of keys j0 .. j0+7 of sequence b, kv head g, in x (P,B,S,Nkv,D) (k or v), for
// dot8; keys from jn on repeat the last one (their dots are not used).
static inline void rows8(const float *r[8], const float *x, int b, int j0, int jn, int B, int S, int Nkv, int g,
                         int D) {
    for (int t = 0; t < 8; t++) {
        int j = j0 + t < jn ? j0 + t : jn - 1;
        r[t] = x + (key_row(b, j, B, S) * Nkv + g) * D;
    }
}

// ---- the per-row pieces ----

// o_i = num / l, num = acc (Dv); bf16: num and the output rounded. In vector lanes (a
// division is exact to the last bit in a lane as in a scalar, and bf16_round is integer
// arithmetic): the scalar divisions took 93% of the tiles' forward driver, 13% of the forward.
static inline void finish_row(float *oi, float l, int Dv, AttnRounding rnd) {
    #pragma omp simd
    for (int d = 0; d < Dv; d++) {
        float num = rnd.probs ? bf16_round(oi[d]) : oi[d];
        oi[d] = rnd.out ? bf16_round(num / l) : num / l;
    }
}

// Keys ja .. jb-1 of k, v (kv head g) into query row i's running state: acc (Dv) and
// st = (m, l). With the range's scores s_j (in e[j - ja]) of the keys the row sees:
//     m' = max(m, max_j s_j),  a = exp(m - m'),  l = a l + sum_j exp(s_j - m'),
//     acc = a acc + sum_j exp(s_j - m') v_j,  m = m'
// A row that sees none of the keys is left as it is.
static void merge_keys_row(float *acc, float *st, float *e, const float *qi, const float *k, const float *v,
                           const unsigned char *mask, int b, int i, int ja, int jb, int B, int S, int q0, int k0,
                           int Nkv, int g, int Dqk, int Dv, AttnRounding rnd) {
    float m = st[0], l = st[1], bm = ATTN_MASK_VALUE;
    int seen = 0;
    for (int j0 = ja; j0 < jb; j0 += 8) {   // 8 keys' dots at a time
        const float *kr[8];
        float s8[8];
        rows8(kr, k, b, j0, jb, B, S, Nkv, g, Dqk);
        dot8(s8, qi, kr, Dqk);
        for (int j = j0; j < j0 + 8 && j < jb; j++) {
            if (!visible(mask, b, i, j, S, q0, k0)) continue;
            float s = rnd.scores ? bf16_round(s8[j - j0]) : s8[j - j0];
            e[j - ja] = s;
            if (s > bm) bm = s;
            seen = 1;
        }
    }
    if (!seen) return;
    // New max: rescale what was summed so far by exp(m - m') (0 on the first range: l and
    // acc are 0 then). With no new max the factor would be exp(0) = 1: nothing to do.
    if (bm > m) {
        float a = expf(m - bm);
        l *= a;
        for (int d = 0; d < Dv; d++) acc[d] *= a;
        m = bm;
    }
    for (int j = ja; j < jb; j++) {
        if (!visible(mask, b, i, j, S, q0, k0)) continue;
        float ej = expf(e[j - ja] - m);
        if (rnd.probs) ej = bf16_round(ej);
        l += ej;
        axpy(acc, ej, v + (key_row(b, j, B, S) * Nkv + g) * Dv, Dv);
    }
    st[0] = m;
    st[1] = l;
}

// The backward of query row i (q_i, dO_i; kv head g) against keys ja .. jb-1 of k, v. With
// p_ij = exp(s_ij - m) / l recomputed from the saved (m, l) and D_i = dO_i . o_i:
//     dv_j += p_ij dO_i,   dS_ij = p_ij (dO_i . v_j - D_i),   dq_i += dS_ij k_j,   dk_j += dS_ij q_i
// (the max m cancels out of the math: it needs no gradient; masked pairs get none.)
static void keys_backward_row(float *dqi, float *dk, float *dv, const float *qi, const float *doi,
                              const float *k, const float *v, const unsigned char *mask, int b, int i, int ja,
                              int jb, int B, int S, int q0, int k0, int Nkv, int g, int Dqk, int Dv, float m,
                              float l, float Di, AttnRounding rnd) {
    for (int j0 = ja; j0 < jb; j0 += 8) {   // 8 keys' dots at a time
        const float *kr[8], *vr[8];
        float s8[8], dp8[8];
        rows8(kr, k, b, j0, jb, B, S, Nkv, g, Dqk);
        rows8(vr, v, b, j0, jb, B, S, Nkv, g, Dv);
        dot8(s8, qi, kr, Dqk);
        dot8(dp8, doi, vr, Dv);
        for (int j = j0; j < j0 + 8 && j < jb; j++) {
            if (!visible(mask, b, i, j, S, q0, k0)) continue;
            size_t krow = key_row(b, j, B, S) * Nkv + g;
            float s = rnd.scores ? bf16_round(s8[j - j0]) : s8[j - j0];
            float e = expf(s - m);
            if (rnd.probs) e = bf16_round(e);
            float p = e / l;
            float ds = p * (dp8[j - j0] - Di);
            axpy(dv + krow * Dv, p, doi, Dv);
            axpy(dqi, ds, kr[j - j0], Dqk);
            axpy(dk + krow * Dqk, ds, qi, Dqk);
        }
    }
}

// ---- the kernels ----

static void causal_mask(unsigned char *mask, int B, int S, int q0) {
    int W = q0 + S;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++)
            for (int j = 0; j < W; j++) mask[((size_t)b * S + i) * W + j] = j <= q0 + i;
}

static void dot_forward(float *o, float *stats, float *rows, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd) {
    int group = N / Nkv;   // query heads per kv head
    int W = q0 + S;        // keys of the whole sequence up to the last query position
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
                int nj = keys_scanned(mask, i, q0, 0, W);
                for (int j0 = 0; j0 < nj; j0 += 8) {   // 8 keys' dots at a time
                    const float *kr[8];
                    float s8[8];
                    rows8(kr, k, b, j0, nj, B, S, Nkv, g, Dqk);
                    dot8(s8, qi, kr, Dqk);
                    for (int j = j0; j < j0 + 8 && j < nj; j++) {
                        if (!visible(mask, b, i, j, S, q0, 0)) continue;
                        e[j] = rnd.scores ? bf16_round(s8[j - j0]) : s8[j - j0];
                        if (e[j] > m) m = e[j];
                    }
                }
                // o_i = (sum_j e_j v_j) / l, e_j = exp(s_j - m), l = sum_j e_j
                float l = 0.0f;
                for (int d = 0; d < Dv; d++) oi[d] = 0.0f;
                for (int j = 0; j < nj; j++) {
                    if (!visible(mask, b, i, j, S, q0, 0)) continue;
                    const float *vj = v + (key_row(b, j, B, S) * Nkv + g) * Dv;    // (Dv)
                    e[j] = expf(e[j] - m);
                    if (rnd.probs) e[j] = bf16_round(e[j]);
                    l += e[j];
                    axpy(oi, e[j], vj, Dv);
                }
                finish_row(oi, l, Dv, rnd);
                float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                st[0] = m;
                st[1] = l;
            }
        }
}

static void dot_backward_rows(float *dq, float *dk, float *dv, const float *dout, const float *q,
                              const float *k, const float *v, const float *o, const float *stats,
                              const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                              int Dqk, int Dv, AttnRounding rnd) {
    int group = N / Nkv;
    // One work item per (sequence, kv head): it owns dk and dv of that kv head and dq of the
    // query heads of its group, which it visits in order. No two items write the same
    // float, and each float is summed in the same order whatever the thread count.
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * (r1 - r0) * (q0 + S) * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Nkv; g++)
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i = r0; i < r1; i++) {
                    size_t qrow = ((size_t)b * S + i) * N + h;
                    const float *qi = q + qrow * Dqk, *doi = dout + qrow * Dv, *oi = o + qrow * Dv;
                    float *dqi = dq + qrow * Dqk;                                  // (Dqk)
                    const float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                    float Di = dot(doi, oi, Dv);
                    for (int d = 0; d < Dqk; d++) dqi[d] = 0.0f;
                    int nj = keys_scanned(mask, i, q0, 0, q0 + S);
                    keys_backward_row(dqi, dk, dv, qi, doi, k, v, mask, b, i, 0, nj, B, S, q0, 0, Nkv, g, Dqk, Dv,
                                      st[0], st[1], Di, rnd);
                }
}

// The keys a block of query rows ending at i1 can see: up to the last row's position, or
// every key (q0 + S) when a materialised mask decides. Key blocks past it are skipped whole.
static inline int keys_of_block(const unsigned char *mask, int i1, int S, int q0) {
    return mask ? q0 + S : q0 + i1;
}
// The end of the keys j0 .. that query row i scans inside the key block [j0, j1).
static inline int row_key_end(const unsigned char *mask, int i, int j1, int q0) {
    return mask ? j1 : imin(j1, q0 + i + 1);
}

static void flash_forward(float *o, float *stats, float *blocks, const float *q, const float *k, const float *v,
                          const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                          AttnRounding rnd, int bq, int bkv) {
    int group = N / Nkv, W = q0 + S;
    int nb = imin(bkv, W);   // floats of one key block's scores
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * W * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++) {
            int g = h / group;
            float *e = blocks + ((size_t)b * N + h) * nb;   // (bkv) scores, then exp weights
            for (int i0 = 0; i0 < S; i0 += bq) {
                int i1 = imin(i0 + bq, S);
                // The running state of each row: acc in o, (m, l) in stats.
                for (int i = i0; i < i1; i++) {
                    size_t row = ((size_t)b * S + i) * N + h;
                    for (int d = 0; d < Dv; d++) o[row * Dv + d] = 0.0f;
                    float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                    st[0] = ATTN_MASK_VALUE;
                    st[1] = 0.0f;
                }
                int kend = keys_of_block(mask, i1, S, q0);
                for (int j0 = 0; j0 < kend; j0 += bkv) {
                    int j1 = imin(j0 + bkv, kend);
                    // The key block [j0, j1) stays in cache while the query rows use it.
                    for (int i = i0; i < i1; i++) {
                        int jn = row_key_end(mask, i, j1, q0);
                        if (jn <= j0) continue;   // the whole block lies after this row's position
                        size_t row = ((size_t)b * S + i) * N + h;
                        merge_keys_row(o + row * Dv, stats + (((size_t)b * N + h) * S + i) * 2, e, q + row * Dqk,
                                       k, v, mask, b, i, j0, jn, B, S, q0, 0, Nkv, g, Dqk, Dv, rnd);
                    }
                }
                // o = acc / l, rounded where the dot-product path rounds.
                for (int i = i0; i < i1; i++)
                    finish_row(o + (((size_t)b * S + i) * N + h) * Dv, stats[(((size_t)b * N + h) * S + i) * 2 + 1],
                               Dv, rnd);
            }
        }
}

static void flash_backward_rows(float *dq, float *dk, float *dv, float *Dblk, const float *dout, const float *q,
                                const float *k, const float *v, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                                int Dqk, int Dv, AttnRounding rnd, int bq, int bkv) {
    int group = N / Nkv, chunk = r1 - r0, nbq = imin(bq, chunk);
    // One work item per (sequence, kv head), owning dk, dv of that kv head and dq of its
    // query heads. Per key j the adds come in (head, row) order and per dq_i in key order:
    // the order of dot_backward_rows, whatever the block sizes.
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * chunk * (q0 + S) * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Nkv; g++) {
            float *Di = Dblk + ((size_t)b * Nkv + g) * nbq;
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i0 = r0; i0 < r1; i0 += bq) {
                    int i1 = imin(i0 + bq, r1);
                    for (int i = i0; i < i1; i++) {
                        size_t qrow = ((size_t)b * S + i) * N + h;
                        Di[i - i0] = dot(dout + qrow * Dv, o + qrow * Dv, Dv);
                        for (int d = 0; d < Dqk; d++) dq[qrow * Dqk + d] = 0.0f;
                    }
                    int kend = keys_of_block(mask, i1, S, q0);
                    for (int j0 = 0; j0 < kend; j0 += bkv) {
                        int j1 = imin(j0 + bkv, kend);
                        for (int i = i0; i < i1; i++) {
                            size_t qrow = ((size_t)b * S + i) * N + h;
                            const float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                            int jn = row_key_end(mask, i, j1, q0);
                            keys_backward_row(dq + qrow * Dqk, dk, dv, q + qrow * Dqk, dout + qrow * Dv, k, v, mask,
                                              b, i, j0, jn, B, S, q0, 0, Nkv, g, Dqk, Dv, st[0], st[1], Di[i - i0],
                                              rnd);
                        }
                    }
                }
        }
}

static void ring_begin(float *stats, int B, int S, int N) {
    for (size_t x = 0; x < (size_t)B * N * S; x++) {
        stats[2 * x] = ATTN_MASK_VALUE;
        stats[2 * x + 1] = 0.0f;
    }
}

// Each row merges the keys it sees in one range (bkv = 0) or in ranges of bkv keys.
static void ring_block_forward(float *o, float *stats, float *rows, const float *q, const float *kb,
                               const float *vb, const unsigned char *mask, int B, int S, int q0, int k0, int N,
                               int Nkv, int Dqk, int Dv, AttnRounding rnd, int bkv) {
    int group = N / Nkv, span = bkv > 0 ? imin(bkv, S) : S;
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * S * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++) {
            int g = h / group;
            float *e = rows + ((size_t)b * N + h) * span;   // (span) a range's scores, then exp(s - m')
            for (int i = 0; i < S; i++) {
                size_t row = ((size_t)b * S + i) * N + h;
                int nj = keys_scanned(mask, i, q0, k0, S);
                for (int j0 = 0; j0 < nj; j0 += span)
                    merge_keys_row(o + row * Dv, stats + (((size_t)b * N + h) * S + i) * 2, e, q + row * Dqk, kb, vb,
                                   mask, b, i, j0, imin(j0 + span, nj), B, S, q0, k0, Nkv, g, Dqk, Dv, rnd);
            }
        }
}

static void ring_end(float *o, const float *stats, int B, int S, int N, int Dv, AttnRounding rnd) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++)
            for (int h = 0; h < N; h++)
                finish_row(o + (((size_t)b * S + i) * N + h) * Dv, stats[(((size_t)b * N + h) * S + i) * 2 + 1], Dv,
                           rnd);
}

static void ring_block_backward(float *dq, float *dkb, float *dvb, const float *dout, const float *q,
                                const float *kb, const float *vb, const float *o, const float *stats,
                                const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv, int Dqk,
                                int Dv, AttnRounding rnd) {
    int group = N / Nkv;
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * S * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Nkv; g++)
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i = 0; i < S; i++) {
                    size_t qrow = ((size_t)b * S + i) * N + h;
                    const float *doi = dout + qrow * Dv;
                    const float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                    keys_backward_row(dq + qrow * Dqk, dkb, dvb, q + qrow * Dqk, doi, kb, vb, mask, b, i, 0,
                                      keys_scanned(mask, i, q0, k0, S), B, S, q0, k0, Nkv, g, Dqk, Dv, st[0], st[1],
                                      dot(doi, o + qrow * Dv, Dv), rnd);
                }
}

static void uniform_fill(float *x, size_t n, uint32_t seed) {
    uint32_t r = seed;
    for (size_t i = 0; i < n; i++) { r = r * 1664525u + 1013904223u; x[i] = (r >> 8) / 8388608.0f - 1.0f; }
}

const AttentionKernels attention_cpu_plain = {causal_mask,         dot_forward, dot_backward_rows,  flash_forward,
                                              flash_backward_rows, ring_begin,  ring_block_forward, ring_end,
                                              ring_block_backward, uniform_fill};

// ---- the same kernels on tiles of TILE_ROWS query rows ----

// The running state of query rows i0 .. i1-1 of (b, h) before the first key: acc = 0 in o,
// (m, l) = (mask value, 0).
static void begin_rows(float *o, float *stats, int b, int h, int i0, int i1, int S, int N, int Dv) {
    for (int i = i0; i < i1; i++) {
        float *oi = o + (((size_t)b * S + i) * N + h) * Dv, *st = stats + (((size_t)b * N + h) * S + i) * 2;
        for (int d = 0; d < Dv; d++) oi[d] = 0.0f;
        st[0] = ATTN_MASK_VALUE;
        st[1] = 0.0f;
    }
}
static void finish_rows(float *o, const float *stats, int b, int h, int i0, int i1, int S, int N, int Dv,
                        AttnRounding rnd) {
    for (int i = i0; i < i1; i++)
        finish_row(o + (((size_t)b * S + i) * N + h) * Dv, stats[(((size_t)b * N + h) * S + i) * 2 + 1], Dv, rnd);
}
static void zero_rows(float *dq, int b, int h, int i0, int i1, int S, int N, int Dqk) {
    for (int i = i0; i < i1; i++)
        for (int d = 0; d < Dqk; d++) dq[(((size_t)b * S + i) * N + h) * Dqk + d] = 0.0f;
}

// dot_forward's softmax is the merge of all W keys into an empty state: the first merge
// finds the max m of the row's scores and rescales l = 0 and acc = 0 by exp(mask value - m)
// = 0, which leaves them 0; then e_j = exp(s_j - m), l and acc are summed as dot_forward
// sums them.
static void dot_forward_tiles(float *o, float *stats, float *rows, const float *q, const float *k, const float *v,
                              const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                              AttnRounding rnd) {
    int W = q0 + S;
    if (mask || !tiles_fit(Dqk, Dv) || W > TILE_MAX_KEYS) {
        dot_forward(o, stats, rows, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd);
        return;
    }
    AttnGeom G = {B, S, q0, 0, N, Nkv, Dqk, Dv};
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * W * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++)
            for (int i0 = 0; i0 < S; i0 += TILE_ROWS) {
                int i1 = imin(i0 + TILE_ROWS, S);
                begin_rows(o, stats, b, h, i0, i1, S, N, Dv);
                tile_merge_keys(o, stats, q, k, v, G, b, h, i0, i1 - i0, 0, W, rnd);
                finish_rows(o, stats, b, h, i0, i1, S, N, Dv, rnd);
            }
}

static void dot_backward_tiles(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                               const float *v, const float *o, const float *stats, const unsigned char *mask, int B,
                               int S, int q0, int r0, int r1, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    if (mask || !tiles_fit(Dqk, Dv)) {
        dot_backward_rows(dq, dk, dv, dout, q, k, v, o, stats, mask, B, S, q0, r0, r1, N, Nkv, Dqk, Dv, rnd);
        return;
    }
    int group = N / Nkv;
    AttnGeom G = {B, S, q0, 0, N, Nkv, Dqk, Dv};
    // Per (sequence, kv head), the heads of its group in order and their rows in tiles in
    // order: each dk, dv row gets its terms in dot_backward_rows's (head, row) order.
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * (r1 - r0) * (q0 + S) * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Nkv; g++)
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i0 = r0; i0 < r1; i0 += TILE_ROWS) {
                    int i1 = imin(i0 + TILE_ROWS, r1);
                    zero_rows(dq, b, h, i0, i1, S, N, Dqk);
                    tile_keys_backward(dq, dk, dv, dout, q, k, v, o, stats, G, b, h, i0, i1 - i0, 0, q0 + S, rnd);
                }
}

// Each query block walks the key blocks as flash_forward does; inside a block the rows go in
// tiles (rows are independent in the forward, so only each row's order of key blocks counts).
static void flash_forward_tiles(float *o, float *stats, float *blocks, const float *q, const float *k,
                                const float *v, const unsigned char *mask, int B, int S, int q0, int N, int Nkv,
                                int Dqk, int Dv, AttnRounding rnd, int bq, int bkv) {
    int W = q0 + S;
    if (mask || !tiles_fit(Dqk, Dv) || imin(bkv, W) > TILE_MAX_KEYS) {
        flash_forward(o, stats, blocks, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd, bq, bkv);
        return;
    }
    AttnGeom G = {B, S, q0, 0, N, Nkv, Dqk, Dv};
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * W * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++)
            for (int i0 = 0; i0 < S; i0 += bq) {
                int i1 = imin(i0 + bq, S);
                begin_rows(o, stats, b, h, i0, i1, S, N, Dv);
                for (int j0 = 0; j0 < q0 + i1; j0 += bkv)
                    for (int t0 = i0; t0 < i1; t0 += TILE_ROWS)
                        tile_merge_keys(o, stats, q, k, v, G, b, h, t0, imin(TILE_ROWS, i1 - t0), j0,
                                        imin(j0 + bkv, q0 + i1), rnd);
                finish_rows(o, stats, b, h, i0, i1, S, N, Dv, rnd);
            }
}

// flash_backward_rows's sums are dot_backward_rows's, whatever the block sizes: the same
// tiles.
static void flash_backward_tiles(float *dq, float *dk, float *dv, float *Dblk, const float *dout, const float *q,
                                 const float *k, const float *v, const float *o, const float *stats,
                                 const unsigned char *mask, int B, int S, int q0, int r0, int r1, int N, int Nkv,
                                 int Dqk, int Dv, AttnRounding rnd, int bq, int bkv) {
    if (mask || !tiles_fit(Dqk, Dv)) {
        flash_backward_rows(dq, dk, dv, Dblk, dout, q, k, v, o, stats, mask, B, S, q0, r0, r1, N, Nkv, Dqk, Dv, rnd,
                            bq, bkv);
        return;
    }
    dot_backward_tiles(dq, dk, dv, dout, q, k, v, o, stats, mask, B, S, q0, r0, r1, N, Nkv, Dqk, Dv, rnd);
}

static void ring_block_forward_tiles(float *o, float *stats, float *rows, const float *q, const float *kb,
                                     const float *vb, const unsigned char *mask, int B, int S, int q0, int k0,
                                     int N, int Nkv, int Dqk, int Dv, AttnRounding rnd, int bkv) {
    int span = bkv > 0 ? imin(bkv, S) : S;
    if (mask || !tiles_fit(Dqk, Dv) || span > TILE_MAX_KEYS) {
        ring_block_forward(o, stats, rows, q, kb, vb, mask, B, S, q0, k0, N, Nkv, Dqk, Dv, rnd, bkv);
        return;
    }
    AttnGeom G = {B, S, q0, k0, N, Nkv, Dqk, Dv};
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * S * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < N; h++)
            for (int i0 = 0; i0 < S; i0 += TILE_ROWS)
                for (int j0 = 0; j0 < S; j0 += span)   // (a range past every row's keys does nothing)
                    tile_merge_keys(o, stats, q, kb, vb, G, b, h, i0, imin(TILE_ROWS, S - i0), j0,
                                    imin(j0 + span, S), rnd);
}

static void ring_block_backward_tiles(float *dq, float *dkb, float *dvb, const float *dout, const float *q,
                                      const float *kb, const float *vb, const float *o, const float *stats,
                                      const unsigned char *mask, int B, int S, int q0, int k0, int N, int Nkv,
                                      int Dqk, int Dv, AttnRounding rnd) {
    if (mask || !tiles_fit(Dqk, Dv)) {
        ring_block_backward(dq, dkb, dvb, dout, q, kb, vb, o, stats, mask, B, S, q0, k0, N, Nkv, Dqk, Dv, rnd);
        return;
    }
    int group = N / Nkv;
    AttnGeom G = {B, S, q0, k0, N, Nkv, Dqk, Dv};
    #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * S * S * (Dqk + Dv) > 1e5)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < Nkv; g++)
            for (int h = g * group; h < (g + 1) * group; h++)
                for (int i0 = 0; i0 < S; i0 += TILE_ROWS)
                    tile_keys_backward(dq, dkb, dvb, dout, q, kb, vb, o, stats, G, b, h, i0, imin(TILE_ROWS, S - i0),
                                       0, S, rnd);
}

const AttentionKernels attention_cpu = {causal_mask,          dot_forward_tiles,        dot_backward_tiles,
                                        flash_forward_tiles,  flash_backward_tiles,     ring_begin,
                                        ring_block_forward_tiles, ring_end,             ring_block_backward_tiles,
                                        uniform_fill};
