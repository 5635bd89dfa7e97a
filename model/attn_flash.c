// model/attn_flash.c: blocked online-softmax attention, forward and backward, and the
// block-size autotune (attention=flash; see model/attn_flash.h for the math).
#include "model/attn_flash.h"
#include "model/precision.h"
#include "model/treesum.h"
#include "sharding/memory.h"
#include "common.h"
#include <time.h>

static inline int imin(int a, int b) { return a < b ? a : b; }

// The keys a block of query rows [i0, i1) can see: up to the last row's position, or every
// key (q0 + S) when a materialised mask decides. Key blocks past it are skipped whole.
static inline int keys_of_block(const unsigned char *mask, int i1, int S, int q0) {
    return mask ? q0 + S : q0 + i1;
}
// The end of the keys j0 .. that query row i scans inside the key block [j0, j1).
static inline int row_key_end(const unsigned char *mask, int i, int j1, int q0) {
    return mask ? j1 : imin(j1, q0 + i + 1);
}

void attn_flash_forward(float *o, float *stats, const float *q, const float *k, const float *v,
                        const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv,
                        AttnRounding rnd, int bq, int bkv) {
    attn_check_heads(N, Nkv);
    if (bq < 1 || bkv < 1) die("internal: attention block sizes %d x %d", bq, bkv);
    int group = N / Nkv, W = q0 + S;
    int nb = imin(bkv, W);   // floats of one key block's scores
    // One key block of scores per (b, h) work item: threads never share scratch, and the
    // memory does not depend on the thread count. B*N*bkv floats, never B*N*S*S.
    float *blocks = mem_floats(MEM_TEMP, (size_t)B * N * nb, "flash attention score block");   // (B,N,bkv)
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (Dqk + Dv);
    if (mem_dry()) B = 0;   // dry run: the scratch is allocated, nothing computed

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
                        const float *qi = q + row * Dqk;   // (Dqk)
                        float *acc = o + row * Dv;         // (Dv)
                        float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                        float m = st[0], l = st[1], bm = ATTN_MASK_VALUE;
                        int seen = 0;
                        for (int jb = j0; jb < jn; jb += 8) {   // 8 keys' dots at a time
                            const float *kr[8];
                            float s8[8];
                            attn_rows8(kr, k, b, jb, jn, B, S, Nkv, g, Dqk);
                            attn_dot8(s8, qi, kr, Dqk);
                            for (int j = jb; j < jb + 8 && j < jn; j++) {
                                if (!attn_visible(mask, b, i, j, S, q0)) continue;
                                float s = rnd.scores ? bf16_round(s8[j - jb]) : s8[j - jb];
                                e[j - j0] = s;
                                if (s > bm) bm = s;
                                seen = 1;
                            }
                        }
                        if (!seen) continue;   // a materialised mask hides the whole block
                        // New max: rescale what was summed so far by exp(m - m') (0 on the
                        // first block: l and acc are 0 then).
                        if (bm > m) {
                            float a = expf(m - bm);
                            l *= a;
                            for (int d = 0; d < Dv; d++) acc[d] *= a;
                            m = bm;
                        }
                        for (int j = j0; j < jn; j++) {
                            if (!attn_visible(mask, b, i, j, S, q0)) continue;
                            float ej = expf(e[j - j0] - m);
                            if (rnd.probs) ej = bf16_round(ej);
                            l += ej;
                            attn_axpy(acc, ej, v + (attn_key_row(b, j, B, S) * Nkv + g) * Dv, Dv);
                        }
                        st[0] = m;
                        st[1] = l;
                    }
                }
                // o = acc / l, rounded where the dot-product path rounds.
                for (int i = i0; i < i1; i++) {
                    float *oi = o + (((size_t)b * S + i) * N + h) * Dv;
                    float l = stats[(((size_t)b * N + h) * S + i) * 2 + 1];
                    for (int d = 0; d < Dv; d++) {
                        float num = rnd.probs ? bf16_round(oi[d]) : oi[d];
                        oi[d] = rnd.out ? bf16_round(num / l) : num / l;
                    }
                }
            }
        }
    mem_free(blocks);
}

void attn_flash_backward(float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *o, const float *stats,
                         const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk,
                         int Dv, AttnRounding rnd, int bq, int bkv) {
    attn_check_heads(N, Nkv);
    if (bq < 1 || bkv < 1) die("internal: attention block sizes %d x %d", bq, bkv);
    if (chunk <= 0 || S % chunk) die("internal: attention rows (%d) cannot be cut into chunks of %d", S, chunk);
    int group = N / Nkv, nq = S / chunk, nbq = imin(bq, chunk);
    size_t nk = (size_t)P * B * S * Nkv;   // key rows (of one head) of every part
    mem_device()->flops += 2.0 * B * N * (S * (double)q0 + S * (S + 1.0) / 2) * (3.0 * Dqk + 2.0 * Dv);
    mem_zero(dk, sizeof(float) * nk * Dqk);
    mem_zero(dv, sizeof(float) * nk * Dv);
    // D_i = dO_i . o_i of the rows of one query block, per (b, kv head) work item.
    float *Dblk = mem_floats(MEM_TEMP, (size_t)B * Nkv * nbq, "flash attention rowsum(dO*O) block");   // (B,Nkv,bq)
    int Bc = mem_dry() ? 0 : B;

    // The query chunks and their tree exactly as attn_core_backward (context parallelism).
    TreeSum tk, tv;
    treesum_begin(&tk, nk * Dqk, MEM_TEMP, "attention d k, one query chunk");
    treesum_begin(&tv, nk * Dv, MEM_TEMP, "attention d v, one query chunk");
    for (int qc = 0; qc < nq; qc++) {
        float *ck = nq > 1 ? treesum_leaf(&tk) : dk, *cv = nq > 1 ? treesum_leaf(&tv) : dv;
        // One work item per (sequence, kv head), owning dk, dv of that kv head and dq of its
        // query heads. Per key j the adds come in (head, row) order and per dq_i in key
        // order: the order of attn_core_backward, whatever the block sizes.
        #pragma omp parallel for collapse(2) schedule(static) if ((double)B * N * chunk * (q0 + S) * (Dqk + Dv) > 1e5)
        for (int b = 0; b < Bc; b++)
            for (int g = 0; g < Nkv; g++) {
                float *Di = Dblk + ((size_t)b * Nkv + g) * nbq;
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int i0 = qc * chunk; i0 < (qc + 1) * chunk; i0 += bq) {
                        int i1 = imin(i0 + bq, (qc + 1) * chunk);
                        for (int i = i0; i < i1; i++) {
                            size_t qrow = ((size_t)b * S + i) * N + h;
                            Di[i - i0] = attn_dot(dout + qrow * Dv, o + qrow * Dv, Dv);
                            for (int d = 0; d < Dqk; d++) dq[qrow * Dqk + d] = 0.0f;
                        }
                        int kend = keys_of_block(mask, i1, S, q0);
                        for (int j0 = 0; j0 < kend; j0 += bkv) {
                            int j1 = imin(j0 + bkv, kend);
                            for (int i = i0; i < i1; i++) {
                                size_t qrow = ((size_t)b * S + i) * N + h;
                                const float *qi = q + qrow * Dqk, *doi = dout + qrow * Dv;
                                float *dqi = dq + qrow * Dqk;
                                const float *st = stats + (((size_t)b * N + h) * S + i) * 2;
                                float m = st[0], l = st[1];
                                int jn = row_key_end(mask, i, j1, q0);
                                for (int jb = j0; jb < jn; jb += 8) {   // 8 keys' dots at a time
                                    const float *kr[8], *vr[8];
                                    float s8[8], dp8[8];
                                    attn_rows8(kr, k, b, jb, jn, B, S, Nkv, g, Dqk);
                                    attn_rows8(vr, v, b, jb, jn, B, S, Nkv, g, Dv);
                                    attn_dot8(s8, qi, kr, Dqk);
                                    attn_dot8(dp8, doi, vr, Dv);
                                    for (int j = jb; j < jb + 8 && j < jn; j++) {
                                        if (!attn_visible(mask, b, i, j, S, q0)) continue;
                                        size_t krow = attn_key_row(b, j, B, S) * Nkv + g;
                                        // p from the saved (m, l): the block's scores recomputed
                                        float s = rnd.scores ? bf16_round(s8[j - jb]) : s8[j - jb];
                                        float e = expf(s - m);
                                        if (rnd.probs) e = bf16_round(e);
                                        float p = e / l;
                                        float ds = p * (dp8[j - jb] - Di[i - i0]);
                                        attn_axpy(cv + krow * Dv, p, doi, Dv);
                                        attn_axpy(dqi, ds, kr[j - jb], Dqk);
                                        attn_axpy(ck + krow * Dqk, ds, qi, Dqk);
                                    }
                                }
                            }
                        }
                    }
            }
        if (nq > 1) { treesum_push(&tk); treesum_push(&tv); }
    }
    if (nq > 1) { treesum_end(&tk, dk); treesum_end(&tv, dv); }
    mem_free(Dblk);
}

static int is_flash(const Config *c) { return c->attention == ATTENTION_FLASH; }

void attn_forward_cfg(const Config *c, float *o, float *stats, const float *q, const float *k, const float *v,
                      const unsigned char *mask, int B, int S, int q0, int N, int Nkv, int Dqk, int Dv) {
    if (is_flash(c))
        attn_flash_forward(o, stats, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, attn_rounding(c), c->attn_block_q,
                           c->attn_block_kv);
    else
        attn_core_forward(o, stats, q, k, v, mask, B, S, q0, N, Nkv, Dqk, Dv, attn_rounding(c));
}

void attn_backward_cfg(const Config *c, float *dq, float *dk, float *dv, const float *dout,
                       const float *q, const float *k, const float *v, const float *o, const float *stats,
                       const unsigned char *mask, int B, int S, int q0, int P, int chunk, int N, int Nkv, int Dqk,
                       int Dv) {
    if (is_flash(c))
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
    int mla = cfg_is_mla(c), N = c->base_num_query_heads / tp;
    int Nkv = mla ? N : c->base_num_kv_heads / tp;
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
    uint32_t r = 12345;   // a small LCG: inputs uniform in [-1, 1)
    float *fill[] = {q, k, v, dO};
    size_t len[] = {nq * Dqk, nkv * Dqk, nkv * Dv, nq * Dv};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < len[t]; i++) { r = r * 1664525u + 1013904223u; fill[t][i] = (r >> 8) / 8388608.0f - 1.0f; }
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
