// model/attn_core.c: causal softmax attention on projected q, k, v, forward and backward
// (see model/attn_core.h): the scratch, the query chunks of the backward and their tree;
// the arithmetic is in kernels/attention.h.
#include "model/attn_core.h"
#include "kernels/kernels.h"
#include "model/matmul.h"
#include "model/precision.h"
#include "base/treesum.h"
#include "base/memory.h"
#include "core/common.h"

// N and Nkv are one device's counts (model/dims.h): under tensor parallelism the Config's
// base_num_query_heads and base_num_kv_heads divided by the tensor size.
void attn_check_heads(int N, int Nkv) {
    if (Nkv <= 0 || N % Nkv != 0)
        die("attention: the device's query heads (%d) must be a multiple of its kv heads (%d) "
            "(base_num_query_heads and base_num_kv_heads, each divided by ici_tensor_parallelism)", N, Nkv);
}

AttnRounding attn_rounding(const Config *c) {
    int bf16 = cfg_bf16(c);
    return (AttnRounding){bf16 && !c->float32_qk_product, bf16 && !c->float32_logits, bf16};
}

unsigned char *attn_causal_mask(const Config *c, int B, int S, int q0) {
    if (c->implicit_causal_mask) return NULL;   // read here only
    unsigned char *mask = (unsigned char *)mem_alloc(MEM_TEMP, (size_t)B * S * (q0 + S), "causal mask (B,1,S,S)");
    kern()->attention->causal_mask(mask, B, S, q0);
    return mask;
}

void attn_core_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                       const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    attn_check_heads(N, Nkv);
    int W = q0 + S;        // keys of the whole sequence up to this device's last position
    // One row of scores per (b, h) work item, so threads never share scratch and the
    // memory used does not depend on the thread count.
    float *rows = mem_floats(MEM_TEMP, (size_t)B * N * W, "attention score rows");   // (B,N,W)
    // Visible (query, key) pairs: q0+i+1 for row i; each costs a Dqk dot and a Dv axpy.
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (Dqk + Dv);
    kern()->attention->dot_forward(o, stats, rows, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd);
    mem_free(rows);
}

// The math of the backward (kernels/cpu/attention.c:keys_backward_row), with
// P[i][j] = e[i][j] / l[i] recomputed from q, k, m, l and dO = dout:
//     dv_j += P_ij dO_i,   dS_ij = P_ij (dO_i . v_j - D_i),   D_i = dO_i . o_i
//     dq_i += dS_ij k_j,   dk_j += dS_ij q_i
void attn_core_backward(float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *o, const float *stats,
                        const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk, int Dv, AttnRounding rnd) {
    attn_check_heads(N, Nkv);
    if (chunk <= 0 || S % chunk) die("internal: attention rows (%d) cannot be cut into chunks of %d", S, chunk);
    int nq = S / chunk;
    size_t nk = (size_t)P * B * S * Nkv;   // key rows (of one head) of every part
    // Per visible pair: two dots (s, dP) and three axpys (dv, dq, dk).
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (3.0 * Dqk + 2.0 * Dv);
    mem_zero(dk, sizeof(float) * nk * Dqk);
    mem_zero(dv, sizeof(float) * nk * Dv);

    // Query chunk by query chunk: each chunk's dK, dV go into a leaf of the tree over the
    // chunks (straight into dk, dv when there is one chunk).
    TreeSum tk, tv;
    treesum_begin(&tk, nk * Dqk, MEM_TEMP, "attention d k, one query chunk");
    treesum_begin(&tv, nk * Dv, MEM_TEMP, "attention d v, one query chunk");
    for (int qc = 0; qc < nq; qc++) {
        float *ck = nq > 1 ? treesum_leaf(&tk) : dk, *cv = nq > 1 ? treesum_leaf(&tv) : dv;
        kern()->attention->dot_backward_rows(dq, ck, cv, dout, q, k, v, o, stats, mask, B, S, q0, qc * chunk,
                                             (qc + 1) * chunk, N, Nkv, Dqk, Dv, rnd);
        if (nq > 1) { treesum_push(&tk); treesum_push(&tv); }
    }
    if (nq > 1) { treesum_end(&tk, dk); treesum_end(&tv, dv); }
}

void attn_matmul_forward(float *out, const float *inp, const float *w, int B, int S, int C, int OC) {
    if (matmul_rows_independent()) {   // one product over all B*S rows: the same bits, fuller tiles
        matmul_forward(out, inp, w, B * S, C, OC, 0);
        return;
    }
    for (int b = 0; b < B; b++)
        matmul_forward(out + (size_t)b * S * OC, inp + (size_t)b * S * C, w, S, C, OC, 0);
}

void attn_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          int B, int S, int C, int OC, Leaves leaf) {
    size_t n = (size_t)B * S * OC;
    if (dinp && dw) matmul_share(dout, n);   // read by both products
    if (dinp && matmul_rows_independent())
        matmul_backward(dinp, NULL, dout, NULL, w, B * S, C, OC, leaf);
    else if (dinp)
        for (int b = 0; b < B; b++)
            matmul_backward(dinp + (size_t)b * S * C, NULL, dout + (size_t)b * S * OC, NULL, w, S, C, OC, leaf);
    // The weight gradient is already summed leaf by leaf, whatever B is.
    if (dw) matmul_backward(NULL, dw, dout, inp, w, B * S, C, OC, leaf);
    if (dinp && dw) matmul_unshare(dout, n);
}
