// model/moe.c: the mixture-of-experts block (docs/model.md#moe-routing, #expert-dispatch).
//
//   logits = x Wg                                  (T,E) gate
//   idx, w = route(logits)                         (T,K) Mixtral or DeepSeek routing
//   y_e    = SwiGLU_e(x)                           each expert on the tokens sent to it
//   out[t] = sum_k w[t,k] * y_{idx[t,k]}[t]        the combine (ascending expert order)
//          (+ SwiGLU_shared(x) for DeepSeek)
//
// Two ways to run the experts (sparse_matmul):
//   sparse: sort the T*K (token, slot) assignments by expert and run one matmul per expert
//           over exactly its rows (a grouped GEMM): dropless, no wasted work;
//   dense:  every expert runs on every token; the combine weight is 0 where a token did not
//           pick the expert. With capacity_factor > 0, assignments beyond an expert's
//           capacity in a sequence are dropped (weight 0).
// Both paths share the row bookkeeping of MoeSaved (model/moe.h): each expert owns a
// contiguous range of rows, sorted by token, so its weight gradient can be summed leaf by
// leaf in the canonical order (model/treesum.h) whatever the routing.
// Context parallelism (sharding/context.h): S is this device's part of each sequence; the
// per-sequence statistics (load-balance loss, capacity) are combined over the context group.
#include "model/moe.h"
#include "model/matmul.h"
#include "model/precision.h"
#include "sharding/tensor.h"
#include "model/tensor_parallel.h"
#include "sharding/expert.h"
#include "sharding/context.h"
#include "model/treesum.h"
#include "sharding/memory.h"
#include "common.h"

static void moe_saved_pack(const Config *c, MoeSaved *s, int pack);

// bf16 mode: the gate logits and the router's scores are rounded unless float32_gate_logits.
static int gate_rounds(const Config *c) { return cfg_bf16(c) && !c->float32_gate_logits; }

// ---------------------------------------------------------------------------------------
// Routing

// idx (k) = the k largest entries of v (n), largest first; ties go to the lower index
// (as jax.lax.top_k). -inf entries are only picked when nothing else is left.
static void topk_desc(const float *v, int n, int k, int *idx) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= idx[q] == i;
            if (taken) continue;
            if (best < 0 || v[i] > v[best]) best = i;
        }
        idx[j] = best;
    }
}

void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K) {
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        int *idx = top_idx + (size_t)t * K;
        float *w = top_w + (size_t)t * K;
        memcpy(scores + (size_t)t * E, l, sizeof(float) * E);
        topk_desc(l, E, K, idx);
        // softmax over the K chosen logits only; the first is the largest
        float m = l[idx[0]], sum = 0.0f;
        for (int k = 0; k < K; k++) { w[k] = expf(l[idx[k]] - m); sum += w[k]; }
        for (int k = 0; k < K; k++) w[k] /= sum;
    }
}

void route_softmax(const Config *c, int *top_idx, float *top_w, float *scores, const float *logits, int T) {
    int E = c->num_experts, K = c->num_experts_per_tok;
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        float *p = scores + (size_t)t * E, *w = top_w + (size_t)t * K;
        int *idx = top_idx + (size_t)t * K;
        // p = softmax over all E experts; the K largest p are chosen
        float m = l[0], z = 0.0f;
        for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
        for (int e = 0; e < E; e++) { p[e] = expf(l[e] - m); z += p[e]; }
        for (int e = 0; e < E; e++) p[e] /= z;
        topk_desc(p, E, K, idx);
        if (cfg_is_deepseek(c)) {   // the chosen probabilities, scaled
            for (int k = 0; k < K; k++) w[k] = p[idx[k]] * c->routed_scaling_factor;
        } else {                    // a softmax over the K chosen probabilities; the first is the largest
            float sum = 0.0f;
            for (int k = 0; k < K; k++) { w[k] = expf(p[idx[k]] - p[idx[0]]); sum += w[k]; }
            for (int k = 0; k < K; k++) w[k] /= sum;
        }
    }
}

void route_deepseek(const Config *c, int *top_idx, float *top_w, float *scores, const float *logits,
                    const float *bias, int T) {
    int E = c->num_experts, K = c->num_experts_per_tok;
    int G = c->n_routing_groups, keep_groups = c->topk_routing_group;
    float masked[E], s[E];
    for (int t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * E;
        float *sel = scores + (size_t)t * E;
        int *idx = top_idx + (size_t)t * K;
        float *w = top_w + (size_t)t * K;
        // 1. s = sigmoid(logits); selection scores s' = s + bias (selection only).
        // (bf16, cast point 13: s, the bias and s' are rounded like the gate logits)
        int gr = gate_rounds(c);
        for (int e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-l[e]));
            if (gr) s[e] = bf16_round(s[e]);
            float b = bias ? (gr ? bf16_round(bias[e]) : bias[e]) : 0.0f;
            sel[e] = gr ? bf16_round(s[e] + b) : s[e] + b;
            masked[e] = sel[e];
        }
        // 2. Group-limited routing: a group's score is the sum of its two best s'; only the
        //    best keep_groups groups stay eligible.
        if (G > 0) {
            int per = E / G, top2[2], best[G];
            float gscore[G];
            for (int g = 0; g < G; g++) {
                topk_desc(sel + g * per, per, 2, top2);
                gscore[g] = sel[g * per + top2[0]] + sel[g * per + top2[1]];
            }
            topk_desc(gscore, G, keep_groups, best);
            for (int g = 0; g < G; g++) {
                int kept = 0;
                for (int j = 0; j < keep_groups; j++) kept |= best[j] == g;
                if (!kept)
                    for (int e = g * per; e < (g + 1) * per; e++) masked[e] = -INFINITY;
            }
        }
        // 3. The K best eligible experts; weights from the unbiased s, normalised, scaled.
        topk_desc(masked, E, K, idx);
        float sum = 0.0f;
        for (int k = 0; k < K; k++) { w[k] = s[idx[k]]; sum += w[k]; }
        for (int k = 0; k < K; k++) w[k] = w[k] / (sum + 1e-20f) * c->routed_scaling_factor;
        round_bf16(w, (size_t)K, cfg_bf16(c));
    }
}

int moe_capacity(const Config *c, int S) {
    double per_expert = ceil((double)S * c->num_experts_per_tok / c->num_experts);
    return (int)fmax(per_expert * c->capacity_factor, c->capacity_factor);
}

void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity, const int *before) {
    int used[E];
    for (int b = 0; b < B; b++) {
        if (before) memcpy(used, before + (size_t)b * E, sizeof used);
        else memset(used, 0, sizeof used);
        // priority: (s, k) order within the sequence, s-major
        for (size_t a = (size_t)b * S * K; a < (size_t)(b + 1) * S * K; a++)
            keep[a] = ++used[top_idx[a]] <= capacity;
    }
}

// ---------------------------------------------------------------------------------------
// Load-balance loss (Switch/Mixtral form, docs/model.md#load-balance-loss):
//   P = softmax(logits) (T,E);  f[b,e] = (1/S) #assignments of sequence b to e;
//   Pbar[b,e] = (1/S) sum_s P[b,s,e];  lb_seq[b] = lb_coef * sum_e f[b,e] * Pbar[b,e]
// S is the whole sequence. The counts and the sums of P are taken chunk by chunk (the
// chunks of sharding/context.h, each in position order, in double) and the chunks added
// along the tree over the sequence's chunks, gathered from the context group when this
// device holds only its part: the same numbers on any mesh (the counts are exact).

static void load_balance_forward(MoeSaved *s, double *lb_seq, Leaves lv, int E, int K, float lb_coef) {
    int B = lv.B, S = lv.S, Sg = S * cp_size();   // this device's part, the whole sequence
    size_t T = (size_t)B * S;
    s->probs = mem_floats(MEM_ACTIVATIONS, T * E, "moe router probs");   // (T,E)
    s->lb_f = mem_floats(MEM_ACTIVATIONS, (size_t)B * E, "moe lb f");    // (B,E)
    for (size_t t = 0; t < (mem_dry() ? 0 : T); t++) {   // (a dry run computes nothing)
        const float *l = s->logits + t * E;
        float *p = s->probs + t * E, m = l[0], sum = 0.0f;
        for (int e = 1; e < E; e++) m = fmaxf(m, l[e]);
        for (int e = 0; e < E; e++) { p[e] = expf(l[e] - m); sum += p[e]; }
        for (int e = 0; e < E; e++) p[e] /= sum;
    }
    // part (B,nchunks,2E): per sequence and chunk, the assignment count of each expert,
    // then the sum of P of each expert.
    double *part = (double *)mem_alloc(MEM_TEMP, sizeof(double) * B * lv.nchunks * 2 * E, "moe lb chunk sums");
    double *tot = (double *)mem_alloc(MEM_TEMP, sizeof(double) * B * 2 * E, "moe lb sequence sums");
    for (int b = 0; b < (mem_dry() ? 0 : B); b++)
        for (int j = 0; j < lv.nchunks; j++) {
            double *cnt = part + ((size_t)b * lv.nchunks + j) * 2 * E, *psum = cnt + E;
            for (int t = b * S + j * lv.chunk; t < b * S + (j + 1) * lv.chunk; t++)
                for (int k = 0; k < K; k++) cnt[s->top_idx[(size_t)t * K + k]] += 1.0;
            for (int e = 0; e < E; e++)
                for (int t = b * S + j * lv.chunk; t < b * S + (j + 1) * lv.chunk; t++) psum[e] += s->probs[(size_t)t * E + e];
        }
    cp_chunk_tree(tot, part, B, lv.nchunks, 2 * E);
    for (int b = 0; b < B; b++) {
        float *f = s->lb_f + (size_t)b * E;
        const double *cnt = tot + (size_t)b * 2 * E, *pbar = cnt + E;
        double acc = 0.0;
        for (int e = 0; e < E; e++) {
            f[e] = (float)cnt[e] / (float)Sg;
            acc += (double)f[e] * (pbar[e] / Sg);
        }
        lb_seq[b] = lb_coef * acc;
    }
    mem_free(part);
    mem_free(tot);
}

// dlogits (T,E) += softmax backward of dP[t,e] = lb_coef * f[b,e] / Sg (S tokens of each
// sequence here, Sg in the whole sequence).
static void load_balance_backward(float *dlogits, const MoeSaved *s, int B, int S, int Sg, int E, float lb_coef) {
    for (int t = 0; t < (mem_dry() ? 0 : B * S); t++) {
        const float *p = s->probs + (size_t)t * E, *f = s->lb_f + (size_t)(t / S) * E;
        float dot = 0.0f;
        for (int e = 0; e < E; e++) dot += p[e] * (lb_coef * f[e] / Sg);
        for (int e = 0; e < E; e++) dlogits[(size_t)t * E + e] += p[e] * (lb_coef * f[e] / Sg - dot);
    }
}

// ---------------------------------------------------------------------------------------
// Expert rows: which rows each expert runs on (see MoeSaved in model/moe.h).

static void build_rows(MoeSaved *s, int sparse, int T, int E, int K) {
    size_t A = (size_t)T * K;
    s->nrows = sparse ? (int)A : E * T;
    s->row_start = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (E + 1), "moe row start");
    s->row_token = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * s->nrows, "moe row token");
    s->assign_row = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * A, "moe assignment row");
    if (!sparse) {
        for (int e = 0; e <= E; e++) s->row_start[e] = e * T;
        if (mem_dry()) return;   // (a dry run needs the counts only)
        for (int e = 0; e < E; e++)
            for (int t = 0; t < T; t++) s->row_token[e * T + t] = t;
        for (size_t a = 0; a < A; a++) s->assign_row[a] = s->top_idx[a] * T + (int)(a / K);
        return;
    }
    if (mem_dry()) {
        // Dry run (the planner, sharding/memory.h): there are no logits to route on. Only
        // the experts' row counts are needed (the all-to-all sizes); they are those of a
        // balanced routing, assignment a to expert a mod E. Every buffer whose size depends
        // on the routing is allocated for its bound (see expert_forward), so the plan does
        // not depend on this choice. The other routing arrays stay as allocated (zero).
        for (int e = 0; e <= E; e++) s->row_start[e] = (int)(A / E * e + MM_MIN((size_t)e, A % E));
        return;
    }
    // A counting sort of the assignments by expert, keeping (token, slot) order inside.
    int fill[E];
    memset(fill, 0, sizeof fill);
    for (size_t a = 0; a < A; a++) fill[s->top_idx[a]]++;
    s->row_start[0] = 0;
    for (int e = 0; e < E; e++) { s->row_start[e + 1] = s->row_start[e] + fill[e]; fill[e] = 0; }
    for (size_t a = 0; a < A; a++) {
        int e = s->top_idx[a], r = s->row_start[e] + fill[e]++;
        s->row_token[r] = (int)(a / K);
        s->assign_row[a] = r;
    }
}

// xs (n,D) = x rows of the tokens of rows [r0, r0+n)
static void gather_rows(float *xs, const float *x, const int *row_token, int r0, int n, int D) {
    #pragma omp parallel for if ((long)n * D > 65536)
    for (int i = 0; i < (mem_dry() ? 0 : n); i++)
        memcpy(xs + (size_t)i * D, x + (size_t)row_token[r0 + i] * D, sizeof(float) * D);
}

// The first of the n rows (sorted by token) whose token is >= t.
static int first_row_from(const int *row_token, int n, long t) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (row_token[mid] < t) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// dw (C,OC) += sum over rows of inp[r]^T dout[r], leaf by leaf in tree order (the leaves of
// sharding/context.h). An expert's rows are sorted by token, so a leaf's rows (those of
// its tokens t0 .. t0+len-1) are contiguous; every leaf is pushed (an empty one adds
// zero) so the tree has the same shape whatever the routing.
static void expert_dw(float *dw, const float *inp, const float *dout, const int *row_token, int n,
                      int C, int OC, Leaves leaf) {
    LeafSum ls;
    leafsum_begin(&ls, leaf, dw, (size_t)C * OC, "expert dw leaf");
    for (long l = 0; l < leaf.n; l++) {
        long t0 = leaf_token(leaf, l);
        int r0 = first_row_from(row_token, n, t0), r1 = first_row_from(row_token, n, t0 + leaf.len);
        float *g = leafsum_leaf(&ls);
        if (r1 > r0) gemm(1, 0, C, OC, r1 - r0, 1.0f, inp + (size_t)r0 * C, C, dout + (size_t)r0 * OC, OC, 0.0f, g, OC);
        leafsum_push(&ls);
    }
    leafsum_end(&ls);
}

// ---------------------------------------------------------------------------------------
// One expert, forward and backward, on n rows. e is the expert's index in this device's
// share of the expert weights (all of them without expert parallelism).

// The per-expert temporaries are allocated for `cap` rows, the most the expert can get
// (one row per token it can see), not for its n rows of this batch: so the memory a step
// needs does not depend on the routing, and the dry-run planner (which does not route)
// allocates exactly what a real step does.
//
// moe_skip_redundant_cast (docs/optimizations.md#moe_skip_redundant_cast), read here only. MaxText casts the
// expert intermediate silu(h0)*h1 (rows,H) to the activation dtype before the wo matmul
// (and autodiff casts its gradient back); with float32 activations both casts are no-ops,
// and the skip drops them. Without it each cast writes a copy (MEM_TEMP) that the next
// op reads while the uncast buffer is still held: one more (rows,H) buffer, same bits.
// Like the other per-expert temporaries it is allocated for `cap` rows; n are copied.
static float *intermediate_cast(const Config *c, float *x, size_t n, size_t cap, const char *name) {
    if (c->moe_skip_redundant_cast) return x;
    float *copy = mem_floats(MEM_TEMP, cap, name);
    mem_copy(copy, x, sizeof(float) * n);
    return copy;
}
static void intermediate_cast_free(float *copy, const float *x) {
    if (copy != x) mem_free(copy);
}

// h0, h1 (n,H) = xs wi_0, xs wi_1 (kept);  y (n,D) = (silu(h0) * h1) wo
static void expert_forward(const Config *c, const MoeParams *p, int e, const float *xs, int n, int cap,
                           float *h0, float *h1, float *y) {
    int D = c->base_emb_dim, H = cfg_expert_dim(c);
    matmul_forward(h0, xs, p->wi_0 + (size_t)e * D * H, n, D, H, 0);
    matmul_forward(h1, xs, p->wi_1 + (size_t)e * D * H, n, D, H, 0);
    prec_round(c, h0, (size_t)n * H);
    prec_round(c, h1, (size_t)n * H);
    float *act = mem_floats(MEM_TEMP, (size_t)cap * H, "moe expert activation");   // (n,H) of (cap,H)
    swiglu_forward(act, h0, h1, (long)n * H, cfg_bf16(c));
    float *actc = intermediate_cast(c, act, (size_t)n * H, (size_t)cap * H, "moe expert activation, cast (a no-op copy)");
    tp_rowpar_forward_cap(c, y, actc, p->wo + (size_t)e * H * D, n, cap, H, D);   // a sum over H (tensor-split)
    prec_round(c, y, (size_t)n * D);
    intermediate_cast_free(actc, act);
    mem_free(act);
}

// Given dy (n,D): g's expert e += weight gradients (rows' tokens rt, leaf by leaf over the
// leaves of the tokens those are numbered in), dxs (n,D) = the rows' input gradient (overwritten).
static void expert_backward(const Config *c, const MoeParams *p, MoeParams *g, int e, const float *xs,
                            const float *h0, const float *h1, const float *dye, const int *rt, int n, int cap,
                            Leaves leaf, float *dxs) {
    int D = c->base_emb_dim, H = cfg_expert_dim(c);
    const float *wi0 = p->wi_0 + (size_t)e * D * H, *wi1 = p->wi_1 + (size_t)e * D * H;
    const float *wo = p->wo + (size_t)e * H * D;
    // y = act wo:  dact = dy wo^T,  dwo += act^T dy
    float *act = mem_floats(MEM_TEMP, (size_t)cap * H, "moe expert activation");   // (n,H) recomputed
    swiglu_forward(act, h0, h1, (long)n * H, cfg_bf16(c));
    float *dact = mem_floats(MEM_TEMP, (size_t)cap * H, "moe expert d activation");
    matmul_backward(dact, NULL, dye, NULL, wo, n, H, D, leaf);
    prec_round(c, dact, (size_t)n * H);   // bf16: act was rounded, so is its gradient
    float *actc = intermediate_cast(c, act, (size_t)n * H, (size_t)cap * H, "moe expert activation, cast (a no-op copy)");
    expert_dw(g->wo + (size_t)e * H * D, actc, dye, rt, n, H, D, leaf);
    intermediate_cast_free(actc, act);
    mem_free(act);
    // act = silu(h0) * h1
    float *dh0 = mem_floats(MEM_TEMP, (size_t)cap * H, "moe expert d h0");
    float *dh1 = mem_floats(MEM_TEMP, (size_t)cap * H, "moe expert d h1");
    float *dactc = intermediate_cast(c, dact, (size_t)n * H, (size_t)cap * H, "moe expert d activation, cast back (a no-op copy)");
    swiglu_backward(dh0, dh1, dactc, h0, h1, (long)n * H);
    intermediate_cast_free(dactc, dact);
    prec_round(c, dh0, (size_t)n * H);
    prec_round(c, dh1, (size_t)n * H);
    mem_free(dact);
    // h0 = xs wi_0, h1 = xs wi_1:  dxs = dh0 wi_0^T + dh1 wi_1^T;  dwi += xs^T dh
    mem_zero(dxs, sizeof(float) * (size_t)n * D);
    tp_colpar_dinp_cap(c, dxs, dh0, wi0, n, cap, D, H);   // sums over H (tensor-split)
    tp_colpar_dinp_cap(c, dxs, dh1, wi1, n, cap, D, H);
    expert_dw(g->wi_0 + (size_t)e * D * H, xs, dh0, rt, n, D, H, leaf);
    expert_dw(g->wi_1 + (size_t)e * D * H, xs, dh1, rt, n, D, H, leaf);
    mem_free(dh0); mem_free(dh1);
}

// Expert parallelism (sharding/expert.h): send each expert's rows to the device that owns
// it, run the local experts on what arrived, send the outputs back into s->y.
static void experts_forward_parallel(const Config *c, const MoeParams *p, MoeSaved *s, const float *x, int T) {
    int D = c->base_emb_dim, H = cfg_expert_dim(c);
    if (!c->sparse_matmul) die("expert parallelism runs the dropless sparse path: set sparse_matmul=true");
    float *rows = mem_floats(MEM_TEMP, (size_t)s->nrows * D, "moe rows to send");   // (R,D)
    gather_rows(rows, x, s->row_token, 0, s->nrows, D);
    ExpertDispatch *d = s->ep = ep_plan(s->row_start, s->row_token, c->num_experts, c->num_experts_per_tok, T);
    size_t n = (size_t)d->cap;   // the receive bound (sharding/expert.h), not nrecv: see expert_forward
    d->x = mem_floats(MEM_ACTIVATIONS, n * D, "moe received rows (expert parallel)");   // (nrecv,D)
    d->h0 = mem_floats(MEM_ACTIVATIONS, n * H, "moe expert wi_0 out");
    d->h1 = mem_floats(MEM_ACTIVATIONS, n * H, "moe expert wi_1 out");
    ep_send(d, rows, d->x, D);
    mem_free(rows);
    float *y = mem_floats(MEM_TEMP, n * D, "moe expert out (expert parallel)");   // (nrecv,D)
    for (int e = 0; e < d->El; e++) {
        int r0 = d->row_start[e], m = d->row_start[e + 1] - r0;
        if (m > 0)
            expert_forward(c, p, e, d->x + (size_t)r0 * D, m, d->ep * T, d->h0 + (size_t)r0 * H, d->h1 + (size_t)r0 * H,
                           y + (size_t)r0 * D);
    }
    ep_return(d, y, s->y, D);
    mem_free(y);
}

// Backward of experts_forward_parallel: dy (R,D) goes to the owners, dxs (R,D) comes back.
static void experts_backward_parallel(const Config *c, const MoeParams *p, MoeParams *g, MoeSaved *s,
                                      const float *dy, float *dxs_rows, int B, int S) {
    int D = c->base_emb_dim, H = cfg_expert_dim(c);
    ExpertDispatch *d = s->ep;
    size_t n = (size_t)d->cap;
    float *dye = mem_floats(MEM_TEMP, n * D, "moe d expert out (expert parallel)");   // (nrecv,D)
    float *dxs = mem_floats(MEM_TEMP, n * D, "moe expert d input (expert parallel)");
    ep_send(d, dy, dye, D);
    // The leaves of the whole expert group: its ep devices hold consecutive sequences.
    Leaves group = leaves_of(c, d->ep * B, S);   // a row's token: rank * B*S + token
    for (int e = 0; e < d->El; e++) {
        int r0 = d->row_start[e], m = d->row_start[e + 1] - r0;
        if (m > 0)
            expert_backward(c, p, g, e, d->x + (size_t)r0 * D, d->h0 + (size_t)r0 * H, d->h1 + (size_t)r0 * H,
                            dye + (size_t)r0 * D, d->row_token + r0, m, d->ep * B * S, group, dxs + (size_t)r0 * D);
    }
    ep_return(d, dxs, dxs_rows, D);
    mem_free(dye);
    mem_free(dxs);
}

// ---------------------------------------------------------------------------------------
// Forward

void moe_forward(const Config *c, const MoeParams *p, const float *bias, MoeSaved *s, float *out,
                 const float *x, int B, int S, float lb_coef, double *lb_seq, long *expert_counts) {
    int T = B * S, D = c->base_emb_dim, E = c->num_experts, K = c->num_experts_per_tok, H = cfg_expert_dim(c);
    size_t A = (size_t)T * K;
    memset(s, 0, sizeof(*s));

    // Gate and routing.
    s->logits = mem_floats(MEM_ACTIVATIONS, (size_t)T * E, "moe gate logits");    // (T,E)
    s->scores = mem_floats(MEM_ACTIVATIONS, (size_t)T * E, "moe router scores");  // (T,E)
    s->top_idx = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * A, "moe top-k experts");  // (T,K)
    s->top_w = mem_floats(MEM_ACTIVATIONS, A, "moe top-k weights");               // (T,K)
    s->w_eff = mem_floats(MEM_ACTIVATIONS, A, "moe combine weights");             // (T,K)
    matmul_forward(s->logits, x, p->gate, T, D, E, 0);
    round_bf16(s->logits, (size_t)T * E, gate_rounds(c));   // cast point 5
    if (mem_dry()) {
        // no routing: see build_rows
    } else if (cfg_sigmoid_router(c)) {
        route_deepseek(c, s->top_idx, s->top_w, s->scores, s->logits, bias, T);
    } else if (cfg_softmax_router(c)) {
        route_softmax(c, s->top_idx, s->top_w, s->scores, s->logits, T);
        prec_round(c, s->top_w, A);   // cast point 12
    } else {
        route_mixtral(s->top_idx, s->top_w, s->scores, s->logits, T, E, K);
        prec_round(c, s->top_w, A);   // cast point 12
    }
    mem_copy(s->w_eff, s->top_w, sizeof(float) * A);
    if (!c->sparse_matmul && c->capacity_factor > 0) {   // (a dry run allocates, does not count)
        int *keep = (int *)mem_alloc(MEM_TEMP, sizeof(int) * A, "moe capacity keep");
        // The priority runs over the whole sequence: the assignments of the parts before this
        // device's (context parallelism) count first, per sequence and expert.
        int *mine = (int *)mem_alloc(MEM_TEMP, sizeof(int) * B * E, "moe capacity counts");      // (B,E)
        int *before = (int *)mem_alloc(MEM_TEMP, sizeof(int) * B * E, "moe capacity counts before");
        for (size_t a = 0; a < (mem_dry() ? 0 : A); a++) mine[(a / K / S) * E + s->top_idx[a]]++;
        cp_counts_before(before, mine, (size_t)B * E);
        if (!mem_dry()) capacity_mask(keep, s->top_idx, B, S, E, K, moe_capacity(c, S * cp_size()), before);
        for (size_t a = 0; a < A; a++) s->w_eff[a] *= (float)keep[a];
        mem_free(keep);
        mem_free(mine);
        mem_free(before);
    }
    if (expert_counts && !mem_dry())   // (a dry run does not route: build_rows)
        for (size_t a = 0; a < A; a++) expert_counts[s->top_idx[a]]++;
    if (lb_coef > 0) load_balance_forward(s, lb_seq, leaves_of(c, B, S), E, K, lb_coef);

    // Experts: y = SwiGLU_e(x) on each expert's rows.
    build_rows(s, c->sparse_matmul, T, E, K);
    size_t R = (size_t)s->nrows;
    s->y = mem_floats(MEM_ACTIVATIONS, R * D, "moe expert out");         // (R,D)
    if (ep_size() > 1) {
        experts_forward_parallel(c, p, s, x, T);
    } else {
        s->h0 = mem_floats(MEM_ACTIVATIONS, R * H, "moe expert wi_0 out");   // (R,H)
        s->h1 = mem_floats(MEM_ACTIVATIONS, R * H, "moe expert wi_1 out");   // (R,H)
        for (int e = 0; e < E; e++) {
            int r0 = s->row_start[e], n = s->row_start[e + 1] - r0;
            if (n == 0) continue;
            float *xs = mem_floats(MEM_TEMP, (size_t)T * D, "moe expert input");   // (n,D) of (T,D): see expert_forward
            gather_rows(xs, x, s->row_token, r0, n, D);
            expert_forward(c, p, e, xs, n, T, s->h0 + (size_t)r0 * H, s->h1 + (size_t)r0 * H, s->y + (size_t)r0 * D);
            mem_free(xs);
        }
    }

    // Combine, each token's experts in ascending expert order (the order of the dense
    // path's sum over E), so both paths add the same terms in the same order.
    int bf16_sum = cfg_bf16(c) && !c->float32_weight_sum;
    #pragma omp parallel for if ((long)T * D * K > 65536)
    for (int t = 0; t < (mem_dry() ? 0 : T); t++) {   // (a dry run computes nothing)
        int ord[K];
        for (int k = 0; k < K; k++) ord[k] = k;
        for (int i = 1; i < K; i++)   // insertion sort of the slots by expert index
            for (int j = i; j > 0 && s->top_idx[(size_t)t * K + ord[j]] < s->top_idx[(size_t)t * K + ord[j - 1]]; j--) {
                int tmp = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = tmp;
            }
        float *o = out + (size_t)t * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int k = 0; k < K; k++) {
            size_t a = (size_t)t * K + ord[k];
            const float *y = s->y + (size_t)s->assign_row[a] * D;
            float w = s->w_eff[a];
            if (bf16_sum)   // cast point 14, float32_weight_sum=false: each product and partial sum in bf16
                for (int d = 0; d < D; d++) o[d] = bf16_round(o[d] + bf16_round(w * y[d]));
            else
                for (int d = 0; d < D; d++) o[d] += w * y[d];
        }
        if (!bf16_sum) round_bf16(o, (size_t)D, cfg_bf16(c));   // float32_weight_sum: one rounding
    }

    // DeepSeek's shared experts: a dense SwiGLU on every token, added to the routed output.
    if (p->shared.wi_0) {
        float *sh = mem_floats(MEM_TEMP, (size_t)T * D, "moe shared expert out");
        mlp_forward(c, &p->shared, &s->shared, sh, x, T, D, c->shared_experts * H);
        for (size_t i = 0; i < (mem_dry() ? 0 : (size_t)T * D); i++) out[i] += sh[i];
        prec_round(c, out, (size_t)T * D);   // cast point 15
        mem_free(sh);
    }
    // What the backward pass reads, kept as 16-bit numbers in bf16 mode.
    moe_saved_pack(c, s, 1);
}

// ---------------------------------------------------------------------------------------
// Backward

// dlogits (T,E) += the routing weights' gradient dw (T,K) pulled back through the router.
static void router_backward(const Config *c, float *dlogits, const float *dw, const MoeSaved *s, int T) {
    int E = c->num_experts, K = c->num_experts_per_tok;
    for (int t = 0; t < (mem_dry() ? 0 : T); t++) {
        const int *idx = s->top_idx + (size_t)t * K;
        const float *w = s->top_w + (size_t)t * K, *g = dw + (size_t)t * K, *l = s->logits + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        if (cfg_softmax_router(c)) {
            // p = softmax(logits) (the selection scores, s->scores); w from the chosen p:
            //   mixtral:  w = softmax(p[idx]):  dp_idx[k] = w_k (g_k - sum_j w_j g_j)
            //   deepseek: w = scale * p[idx]:   dp_idx[k] = scale * g_k
            // then through the softmax over all E: dl_e = p_e (dp_e - sum_j p_j dp_j).
            const float *p = s->scores + (size_t)t * E;
            float dp[E], dot = 0.0f;
            for (int e = 0; e < E; e++) dp[e] = 0.0f;
            for (int k = 0; k < K; k++) dot += w[k] * g[k];
            for (int k = 0; k < K; k++)
                dp[idx[k]] = cfg_is_deepseek(c) ? c->routed_scaling_factor * g[k] : w[k] * (g[k] - dot);
            float pdp = 0.0f;
            for (int e = 0; e < E; e++) pdp += p[e] * dp[e];
            for (int e = 0; e < E; e++) dl[e] += p[e] * (dp[e] - pdp);
        } else if (!cfg_sigmoid_router(c)) {
            // w = softmax(chosen logits): dl_k = w_k (g_k - sum_j w_j g_j)
            float dot = 0.0f;
            for (int k = 0; k < K; k++) dot += w[k] * g[k];
            for (int k = 0; k < K; k++) dl[idx[k]] += w[k] * (g[k] - dot);
        } else {
            // w_k = scale * s_k / Z, Z = sum_j s_j + 1e-20, s = sigmoid(logit):
            // ds_j = scale * (g_j / Z - sum_k g_k s_k / Z^2);  dl_j = ds_j * s_j (1 - s_j)
            // bf16: the forward used rb(sigmoid) (unless float32_gate_logits); its gradient
            // is rounded the same way, and sigmoid' uses the unrounded value.
            int gr = gate_rounds(c);
            float sg[K], sig[K], Z = 0.0f, gs = 0.0f;
            for (int k = 0; k < K; k++) {
                sig[k] = 1.0f / (1.0f + expf(-l[idx[k]]));
                sg[k] = gr ? bf16_round(sig[k]) : sig[k];
                Z += sg[k];
            }
            Z += 1e-20f;
            for (int k = 0; k < K; k++) gs += g[k] * sg[k];
            for (int k = 0; k < K; k++) {
                float ds = c->routed_scaling_factor * (g[k] / Z - gs / (Z * Z));
                if (gr) ds = bf16_round(ds);
                dl[idx[k]] += ds * sig[k] * (1.0f - sig[k]);
            }
        }
    }
}

void moe_backward(const Config *c, const MoeParams *p, MoeParams *g, MoeSaved *s, float *dx,
                  const float *dout, const float *x, int B, int S, float lb_coef) {
    int T = B * S, D = c->base_emb_dim, E = c->num_experts, K = c->num_experts_per_tok, H = cfg_expert_dim(c);
    Leaves leaf = leaves_of(c, B, S);
    size_t A = (size_t)T * K, R = (size_t)s->nrows;
    moe_saved_pack(c, s, 0);

    // Shared experts: out += SwiGLU_shared(x).
    if (p->shared.wi_0) mlp_backward(c, &p->shared, &g->shared, &s->shared, dx, dout, x, T, D, c->shared_experts * H, leaf);

    // Combine: out[t] = sum_k w_eff[t,k] y[row(t,k)]
    //   dy[row] = w_eff * dout[t];  dw[t,k] = dout[t] . y[row]  (0 where the assignment was dropped)
    float *dy = mem_floats(MEM_TEMP, R * D, "moe d expert out");   // (R,D), zero on unused dense rows
    float *dw = mem_floats(MEM_TEMP, A, "moe d routing weights");  // (T,K)
    #pragma omp parallel for if ((long)A * D > 65536)
    for (size_t a = 0; a < (mem_dry() ? 0 : A); a++) {
        const float *dt = dout + (a / K) * D, *y = s->y + (size_t)s->assign_row[a] * D;
        float *dyr = dy + (size_t)s->assign_row[a] * D, w = s->w_eff[a], dot = 0.0f;
        for (int d = 0; d < D; d++) { dyr[d] = w * dt[d]; dot += dt[d] * y[d]; }
        // w_eff = top_w * keep: a dropped assignment (keep 0) passes no gradient to top_w
        dw[a] = (w == 0.0f && s->top_w[a] != 0.0f) ? 0.0f : dot;
    }
    prec_round(c, dy, R * D);   // bf16: y and the weights were rounded, so are their gradients
    prec_round(c, dw, A);

    // Experts; each row's input gradient is added into dx in row order (ascending expert).
    float *dxs = mem_floats(MEM_TEMP, R * D, "moe expert d input");   // (R,D)
    if (s->ep) {
        experts_backward_parallel(c, p, g, s, dy, dxs, B, S);
    } else {
        for (int e = 0; e < E; e++) {
            int r0 = s->row_start[e], n = s->row_start[e + 1] - r0;
            if (n == 0) continue;
            float *xs = mem_floats(MEM_TEMP, (size_t)T * D, "moe expert input");   // (n,D) of (T,D)
            gather_rows(xs, x, s->row_token, r0, n, D);
            expert_backward(c, p, g, e, xs, s->h0 + (size_t)r0 * H, s->h1 + (size_t)r0 * H, dy + (size_t)r0 * D,
                            s->row_token + r0, n, T, leaf, dxs + (size_t)r0 * D);
            mem_free(xs);
        }
    }
    // A token's rows belong to distinct experts: add them expert by expert, as one device does.
    for (int e = 0; e < E; e++) {
        int r0 = s->row_start[e], n = s->row_start[e + 1] - r0;
        #pragma omp parallel for if ((long)n * D > 65536)
        for (int i = 0; i < (mem_dry() ? 0 : n); i++)
            for (int d = 0; d < D; d++) dx[(size_t)s->row_token[r0 + i] * D + d] += dxs[(size_t)(r0 + i) * D + d];
    }
    mem_free(dxs);
    mem_free(dy);

    // Router and load-balance loss to the gate logits, then the gate matmul.
    float *dlogits = mem_floats(MEM_TEMP, (size_t)T * E, "moe d gate logits");   // (T,E)
    router_backward(c, dlogits, dw, s, T);
    mem_free(dw);
    if (lb_coef > 0) load_balance_backward(dlogits, s, B, S, S * cp_size(), E, lb_coef);
    matmul_backward(dx, g->gate, dlogits, x, p->gate, T, D, E, leaf);
    mem_free(dlogits);

    // The experts' saved rows are done; the routing stays for the dump until moe_saved_free.
    mem_free(s->h0); mem_free(s->h1); mem_free(s->y);
    mem_free(s->row_start); mem_free(s->row_token); mem_free(s->assign_row);
    mem_free(s->probs); mem_free(s->lb_f);
    ep_free(s->ep);
    s->h0 = s->h1 = s->y = s->probs = s->lb_f = NULL;
    s->row_start = s->row_token = s->assign_row = NULL;
    s->ep = NULL;
}

// bf16 mode: the experts' saved rows as 16-bit numbers (pack) or back to floats (unpack).
static void moe_saved_pack(const Config *c, MoeSaved *s, int pack) {
    void (*f)(const Config *, float **, size_t) = pack ? act_pack : act_unpack;
    size_t D = (size_t)c->base_emb_dim, H = (size_t)cfg_expert_dim(c), R = (size_t)s->nrows;
    f(c, &s->y, R * D);
    f(c, &s->h0, R * H);
    f(c, &s->h1, R * H);
    if (s->ep) {
        size_t n = (size_t)s->ep->cap;
        f(c, &s->ep->x, n * D);
        f(c, &s->ep->h0, n * H);
        f(c, &s->ep->h1, n * H);
    }
}

void moe_saved_free(MoeSaved *s) {
    mem_free(s->logits); mem_free(s->scores); mem_free(s->top_idx); mem_free(s->top_w); mem_free(s->w_eff);
    mem_free(s->probs); mem_free(s->lb_f);
    mem_free(s->h0); mem_free(s->h1); mem_free(s->y);
    mem_free(s->row_start); mem_free(s->row_token); mem_free(s->assign_row);
    mlp_saved_free(&s->shared);
    ep_free(s->ep);
    memset(s, 0, sizeof(*s));
}
