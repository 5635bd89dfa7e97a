// model/attn_core.h: the part both attention kinds share: causal softmax attention given
// q, k, v (projected, RoPE applied, any scaling already folded in), for any head widths and
// a grouped kv-head mapping. GQA (model/attention.c) and MLA (model/mla.c) call it.
//
// The math (docs/model.md#gqa-attention), per sequence b and query head h,
// with g = h / (N/Nkv) the kv head it reads:
//     s[i][j] = q[b,i,h] . k[b,j,g]                (no 1/sqrt(d) here)
//     s[i][j] = -0.7 * FLT_MAX  where j > i        (the causal mask, by replacement)
//     m[i]    = max_j s[i][j],   e[i][j] = exp(s[i][j] - m[i]),   l[i] = sum_j e[i][j]
//     o[b,i,h] = (sum_j e[i][j] v[b,j,g]) / l[i]   (the division after the product with v)
// Probabilities are never stored: the backward pass recomputes them from q, k and the
// per-row statistics (m, l), so memory grows with S, not S*S.
//
// Context parallelism (sharding/context.h): a device holds S positions q0 .. q0+S-1 of
// every sequence (its part; q0 = 0 on one device) and runs its queries against the keys
// and values of all P parts, gathered from the context group: k (P,B,S,Nkv,Dqk), part p
// holding positions p*S .. p*S+S-1 (P = 1 is the plain (B,S,Nkv,Dqk)). The mask compares
// global positions: key j is visible to the query at position q0+i when j <= q0+i.
#ifndef MESHMOE_ATTN_CORE_H
#define MESHMOE_ATTN_CORE_H
#include <float.h>
#include "model/config.h"
#include "sharding/context.h"

// The bf16 rounding points inside attention (model/precision.h, cast points 8 and 9):
// scores = rb(q.k); e = rb(exp(s - m)) and num = rb(sum_j e_j v_j); out = rb(num / l).
// All 0 in float32 mode; float32_qk_product and float32_logits switch the first two off.
typedef struct { int scores, probs, out; } AttnRounding;
AttnRounding attn_rounding(const Config *c);

// The mask value of MaxText, DEFAULT_MASK_VALUE = -0.7 * float(jnp.finfo(float32).max): a
// Python double rounded once to float32. Finite, so that max and exp stay well defined, and
// so negative that exp(mask - m) is exactly 0 in float32.
#define ATTN_MASK_VALUE ((float)(-0.7 * (double)FLT_MAX))

// implicit_causal_mask (docs/optimizations.md#implicit_causal_mask): NULL, the mask comes from comparing
// positions (j <= q0+i); or, with implicit_causal_mask=false, a materialised boolean mask
// (B,1,S,q0+S) (MEM_TEMP, 1 byte per entry) as MaxText builds it, which both passes read
// to decide which keys a query sees. The same keys either way, so the same bits. Free with mem_free.
unsigned char *attn_causal_mask(const Config *c, int B, int S, int q0);

// o (B,S,N,Dv) and stats (B,N,S,2) (per query row: m and l) are written.
// q (B,S,N,Dqk) at positions q0.., k (P,B,S,Nkv,Dqk), v (P,B,S,Nkv,Dv) with P*S > q0 (the
// parts after the queries' own are never read). N must be a multiple of Nkv.
void attn_core_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                       const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                       AttnRounding rnd);

// Backward of attn_core_forward given dout = dL/do (B,S,N,Dv) and what the forward saw and
// wrote. dq (B,S,N,Dqk), dk (P,B,S,Nkv,Dqk), dv (P,B,S,Nkv,Dv) are overwritten (not +=):
// dk and dv hold this device's contribution to the keys of every part (0 where its queries
// do not see them). A key's gradient sums over the query rows that see it: the rows are
// cut into chunks of `chunk` rows (the reduce chunks of sharding/context.h); within a chunk
// the rows are added in (head of the group, row) order, and the chunks along the pairwise
// tree, on one device too, so that the reduce-scatter over the context group (a tree over
// the devices' whole subtrees of chunks) gives the same bits as one device. dq sums over
// keys in position order. Nothing depends on the number of threads.
// The probabilities are recomputed with the forward's rounding (rnd).
void attn_core_backward(float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *o, const float *stats,
                        const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd);

// Small pieces shared with the blocked kernel (model/attn_flash.c). A dot product is one
// in-order sum, s = ((q0 k0 + q1 k1) + q2 k2) + ..., each product rounded, then each add
// (no fused multiply-add: the build is ISO C, where the compiler does not contract).
static inline float attn_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}
// s[t] = a . b[t] for 8 vectors b[t]: eight attn_dot chains side by side. Each is the same
// in-order sum (the same bits); run together they fill the CPU's pipelines, where one
// chain would wait on each add's latency.
static inline void attn_dot8(float s[8], const float *a, const float *const b[8], int n) {
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
typedef float AttnVec8 __attribute__((vector_size(32), aligned(4), may_alias));
static inline void attn_axpy(float *y, float a, const float *x, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        AttnVec8 xv = *(const AttnVec8 *)(x + d), yv = *(AttnVec8 *)(y + d);
        *(AttnVec8 *)(y + d) = yv + a * xv;
    }
    for (; d < n; d++) y[d] += a * x[d];
}
// Does query row i of sequence b see key position j? From the materialised mask if there
// is one (which then decides), else from the positions.
static inline int attn_visible(const unsigned char *mask, int b, int i, int j, int S, int q0) {
    return mask ? mask[((size_t)b * S + i) * (q0 + S) + j] : j <= q0 + i;
}
// The row, in k (P,B,S,Nkv,.) or v, of key position j of sequence b: part j/S, row j%S.
static inline size_t attn_key_row(int b, int j, int B, int S) {
    return ((size_t)(j / S) * B + b) * S + j % S;
}
// The rows of key positions j0 .. j0+7 of sequence b, kv head g, in x (P,B,S,Nkv,D) (k or
// v), for attn_dot8; positions from jn on repeat the last one (their dots are not used).
static inline void attn_rows8(const float *r[8], const float *x, int b, int j0, int jn, int B, int S, int Nkv,
                              int g, int D) {
    for (int t = 0; t < 8; t++) {
        int j = j0 + t < jn ? j0 + t : jn - 1;
        r[t] = x + (attn_key_row(b, j, B, S) * Nkv + g) * D;
    }
}
// Dies unless N is a multiple of Nkv.
void attn_check_heads(int N, int Nkv);

// The projections of both attention kinds, run as one GEMM per sequence.
// Why: OpenBLAS (0.3.21, Haswell kernels) handles the rows of a GEMM in blocks whose kernel
// depends on how many rows are left, and those kernels add a row's products in different
// orders, so the same token gets different bits in a 10-row GEMM than in a 5-row one
// (measured: tests/test_attention.c, check 6). One GEMM per sequence makes every token's
// result depend on its own sequence only, never on the batch size or on how the batch is
// split over devices (docs/model.md#summation-order).
// out (B*S, OC) = inp (B*S, C) @ w (C, OC)
void attn_matmul_forward(float *out, const float *inp, const float *w, int B, int S, int C, int OC);
// dinp (B*S, C) += dout @ w^T, one GEMM per sequence (dinp may be NULL);
// dw (C, OC) += inp^T dout along the canonical leaf tree (model/matmul.c does it; may be NULL).
void attn_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          int B, int S, int C, int OC, Leaves leaf);
#endif
