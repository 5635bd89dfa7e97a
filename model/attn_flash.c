// model/attn_flash.c: blocked online-softmax attention, forward and backward (the scratch
// and the query chunks; the arithmetic is in kernels/attention.h), and the block-size
// autotune (attention=flash; see model/attn_flash.h for the math).
#include "model/attn_flash.h"
#include "model/dims.h"
#include "kernels/kernels.h"
#include "base/treesum.h"
#include "base/memory.h"
#include "core/common.h"
#include <time.h>

static inline int imin(int a, int b) { return a < b ? a : b; }

void attn_flash_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd, int bq, int bkv) {
    attn_check_heads(N, Nkv);
    if (bq < 1 || bkv < 1) die("internal: attention block sizes %d x %d", bq, bkv);
    int nb = imin(bkv, q0 + S);   // floats of one key block's scores
    // One key block of scores per (b, h) work item: threads never share scratch, and the
    // memory does not depend on the thread count. B*N*bkv floats, never B*N*S*S.
    float *blocks = mem_floats(MEM_TEMP, (size_t)B * N * nb, "flash attention score block");   // (B,N,bkv)
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (Dqk + Dv);
    kern()->attention->flash_forward(o, stats, blocks, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, rnd, bq, bkv);
    mem_free(blocks);
}

void attn_flash_backward(float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *o, const float *stats,
                         const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk,
                         int Dv, AttnRounding rnd, int bq, int bkv) {
    attn_check_heads(N, Nkv);
    if (bq < 1 || bkv < 1) die("internal: attention block sizes %d x %d", bq, bkv);
    if (chunk <= 0 || S % chunk) die("internal: attention rows (%d) cannot be cut into chunks of %d", S, chunk);
    int nq = S / chunk, nbq = imin(bq, chunk);
    size_t nk = (size_t)P * B * S * Nkv;   // key rows (of one head) of every part
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (3.0 * Dqk + 2.0 * Dv);
    mem_zero(dk, sizeof(float) * nk * Dqk);
    mem_zero(dv, sizeof(float) * nk * Dv);
    // D_i = dO_i . o_i of the rows of one query block, per (b, kv head) work item.
    float *Dblk = mem_floats(MEM_TEMP, (size_t)B * Nkv * nbq, "flash attention rowsum(dO*O) block");   // (B,Nkv,bq)

    // The query chunks and their tree exactly as attn_core_backward (context parallelism).
    TreeSum tk, tv;
    treesum_begin(&tk, nk * Dqk, MEM_TEMP, "attention d k, one query chunk");
    treesum_begin(&tv, nk * Dv, MEM_TEMP, "attention d v, one query chunk");
    for (int qc = 0; qc < nq; qc++) {
        float *ck = nq > 1 ? treesum_leaf(&tk) : dk, *cv = nq > 1 ? treesum_leaf(&tv) : dv;
        kern()->attention->flash_backward_rows(dq, ck, cv, Dblk, dout, q, k, v, o, stats, mask, B, S, q0,
                                               qc * chunk, (qc + 1) * chunk, N, Nkv, Dqk, Dv, rnd, bq, bkv);
        if (nq > 1) { treesum_push(&tk); treesum_push(&tv); }
    }
    if (nq > 1) { treesum_end(&tk, dk); treesum_end(&tv, dv); }
    mem_free(Dblk);
}

void attn_forward_cfg(const Config *c, float *o, float *stats, const float *q, const float *k, const float *v,
                      const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv) {
    if (cfg_attention_flash(c))
        attn_flash_forward(o, stats, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, attn_rounding(c), c->attn_block_q,
                           c->attn_block_kv);
    else
        attn_core_forward(o, stats, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, attn_rounding(c));
}

void attn_backward_cfg(const Config *c, float *dq, float *dk, float *dv, const float *dout,
                       const float *q, const float *k, const float *v, const float *o, const float *stats,
                       const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk,
                       int Dv) {
    if (cfg_attention_flash(c))
        attn_flash_backward(dq, dk, dv, dout, q, k, v, o, stats, mask, B, S, q0, P, chunk, N, Nkv, Dqk, Dv,
                            attn_rounding(c), c->attn_block_q, c->attn_block_kv);
    else
        attn_core_backward(dq, dk, dv, dout, q, k, v, o, stats, mask, B, S, q0, P, chunk, N, Nkv, Dqk, Dv,
                           attn_rounding(c));
}

// ---- attn_block_autotune ----

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

void attn_block_autotune(Config *c) {
    // The first step's per-device shapes: B sequences of S = max_target_length / context
    // positions (the first part, q0 = 0), this device's heads (tensor-split).
    int tp = c->ici_tensor_parallelism > 1 ? c->ici_tensor_parallelism : 1;
    int cp = c->ici_context_parallelism > 1 ? c->ici_context_parallelism : 1;
    int B = c->per_device_batch_size, S = c->max_target_length / cp;
    LocalDims ld = local_dims(c, tp, 0);
    int mla = cfg_is_mla(c), N = ld.num_query_heads, Nkv = ld.num_kv_heads;
    int Dqk = mla ? c->qk_nope_head_dim + c->qk_rope_head_dim : c->head_dim;
    int Dv = mla ? c->v_head_dim : c->head_dim;
    if (Nkv < 1) Nkv = 1;
    static const int cand[][2] = {{16, 16}, {32, 32}, {64, 64}, {128, 128}, {32, 128}, {128, 32}, {64, 128}};
    int ncand = (int)(sizeof cand / sizeof cand[0]);
    Device dev;
    device_init(&dev, 0, 0);   // a scratch device: nothing here is charged to the mesh
    mem_set_device(&dev);
    size_t nq = (size_t)B * S * N, nkv = (size_t)B * S * Nkv;
    float *q = mem_floats(MEM_TEMP, nq * Dqk, "autotune q"), *k = mem_floats(MEM_TEMP, nkv * Dqk, "autotune k");
    float *v = mem_floats(MEM_TEMP, nkv * Dv, "autotune v"), *o = mem_floats(MEM_TEMP, nq * Dv, "autotune o");
    float *dO = mem_floats(MEM_TEMP, nq * Dv, "autotune d o"), *dq = mem_floats(MEM_TEMP, nq * Dqk, "autotune d q");
    float *dk = mem_floats(MEM_TEMP, nkv * Dqk, "autotune d k"), *dv = mem_floats(MEM_TEMP, nkv * Dv, "autotune d v");
    float *st = mem_floats(MEM_TEMP, (size_t)B * N * S * 2, "autotune stats");
    float *fill[] = {q, k, v, dO};   // inputs uniform in [-1, 1), one seed each
    size_t len[] = {nq * Dqk, nkv * Dqk, nkv * Dv, nq * Dv};
    for (int t = 0; t < 4; t++) kern()->attention->uniform_fill(fill[t], len[t], 12345u + t);
    AttnRounding rnd = attn_rounding(c);
    printf("attn_block_autotune: B=%d S=%d N=%d Nkv=%d Dqk=%d Dv=%d, forward + backward, best of 3\n", B, S, N, Nkv,
           Dqk, Dv);
    printf("  %8s %8s %10s\n", "block_q", "block_kv", "ms");
    int best = 0;
    double best_ms = 0;
    for (int ci = 0; ci < ncand; ci++) {
        double ms = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_ms();
            attn_flash_forward(o, st, q, k, v, NULL, B, S, 0, N, Nkv, Dqk, Dv, rnd, cand[ci][0], cand[ci][1]);
            attn_flash_backward(dq, dk, dv, dO, q, k, v, o, st, NULL, B, S, 0, 1, S, N, Nkv, Dqk, Dv, rnd,
                                cand[ci][0], cand[ci][1]);
            double t = now_ms() - t0;
            if (t < ms) ms = t;
        }
        printf("  %8d %8d %10.3f\n", cand[ci][0], cand[ci][1], ms);
        if (ci == 0 || ms < best_ms) { best = ci; best_ms = ms; }
    }
    c->attn_block_q = cand[best][0];
    c->attn_block_kv = cand[best][1];
    printf("attn_block_autotune: picked attn_block_q=%d attn_block_kv=%d (%.3f ms)\n", c->attn_block_q,
           c->attn_block_kv, best_ms);
    device_release_all(&dev);
    mem_set_device(NULL);
}
