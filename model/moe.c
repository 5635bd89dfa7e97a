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
// leaf in the canonical order (base/treesum.h) whatever the routing.
// Context parallelism (base/context.h): S is this device's part of each sequence; the
// per-sequence statistics (load-balance loss, capacity) are combined over the context group.
// This file orchestrates: it reads the switches, allocates, calls the collectives and reads
// the rows' layout back to the host once per layer (rows_to_host); the experts' SwiGLU on
// their rows, one expert a call or all at once (megablox), is model/moe_experts.c; the
// arithmetic is in the kernels of kernels/router.h (routing, capacity, load-balance loss)
// and kernels/moe.h (row layout, gather, combine).
#include "model/moe.h"             // MoeParams, MoeSaved, this file's functions
#include "model/moe_experts.h"     // the experts' SwiGLU on their rows
#include "model/matmul.h"          // gemm, the chunked products: the experts' matmuls
#include "model/precision.h"       // prec_round, act_pack: the bf16 points
#include "base/tensor.h"           // tp_all_reduce: the expert width split over `tensor`
#include "model/tensor_parallel.h" // tp_rowpar_forward, tp_colpar_dinp
#include "base/expert.h"           // ep_send, ep_return: rows to the experts' devices and back
#include "base/context.h"          // leaves_of, the sums over tokens
#include "base/treesum.h"          // the canonical tree over leaves
#include "base/memory.h"           // mem_floats: tagged buffers
#include "kernels/kernels.h"       // kern()->router, ->moe: the arithmetic
#include "core/common.h"           // die

static void moe_saved_pack(const Config *c, const LocalDims *ld, MoeSaved *s, int pack);
// The experts' outputs y kept as 16-bit numbers from their products on (packed_operands,
// model/precision.h), read so by the combine and its backward; under expert parallelism they
// come back from their owners as floats, packed after the layer as before.
static int y_packed(const Config *c) { return packed_operands(c) && ep_size() == 1; }

// bf16 mode: the gate logits and the router's scores are rounded unless float32_gate_logits.
static int gate_rounds(const Config *c) { return cfg_bf16(c) && !c->float32_gate_logits; }

// ---------------------------------------------------------------------------------------
// Routing

// The router's arithmetic is kernels/router.h; these entry points read the switches from
// the config and pass them on.

void route_mixtral(int *top_idx, float *top_w, float *scores, const float *logits, int T, int E, int K) {
    kern()->router->route_mixtral(top_idx, top_w, scores, logits, T, E, K);
}

void route_softmax(const Config *c, int *top_idx, float *top_w, float *scores, const float *logits, int T) {
    kern()->router->route_softmax(top_idx, top_w, scores, logits, T, c->num_experts, c->num_experts_per_tok,
                                  c->n_routing_groups, c->topk_routing_group, cfg_is_deepseek(c),
                                  c->routed_scaling_factor);
}

void route_deepseek(const Config *c, int *top_idx, float *top_w, float *scores, const float *logits,
                    const float *bias, int T) {
    kern()->router->route_deepseek(top_idx, top_w, scores, logits, bias, T, c->num_experts, c->num_experts_per_tok,
                                   c->n_routing_groups, c->topk_routing_group, c->routed_scaling_factor,
                                   gate_rounds(c), cfg_bf16(c));
}

// top_idx, top_w, scores of s from the gate logits, by routed_score_func.
static void route(const Config *c, MoeSaved *s, const float *bias, int T) {
    size_t A = (size_t)T * c->num_experts_per_tok;
    if (cfg_sigmoid_router(c)) {
        route_deepseek(c, s->top_idx, s->top_w, s->scores, s->logits, bias, T);
    } else if (cfg_softmax_router(c)) {
        route_softmax(c, s->top_idx, s->top_w, s->scores, s->logits, T);
        prec_round(c, s->top_w, A);   // cast point 12
    } else {
        route_mixtral(s->top_idx, s->top_w, s->scores, s->logits, T, c->num_experts, c->num_experts_per_tok);
        prec_round(c, s->top_w, A);   // cast point 12
    }
}

// MaxText's int(max(ceil(S K / E) * capacity_factor, capacity_factor)), with the factor as
// written (cfg_decimal: 0.7 x 10 is 7 in MaxText's double, 6.99999 with the float).
int moe_capacity(const Config *c, int S) {
    double per_expert = ceil((double)S * c->num_experts_per_tok / c->num_experts);
    double factor = cfg_decimal(c->capacity_factor);
    return (int)fmax(per_expert * factor, factor);
}

void capacity_mask(int *keep, const int *top_idx, int B, int S, int E, int K, int capacity, const int *before) {
    kern()->router->capacity_mask(keep, top_idx, B, S, E, K, capacity, before);
}

// The dense path with capacity_factor > 0: w_eff = 0 for the assignments beyond their
// expert's capacity in their sequence. The priority runs over the whole sequence: the
// assignments of the parts before this device's (context parallelism) count first, per
// sequence and expert.
static void drop_over_capacity(const Config *c, MoeSaved *s, int B, int S) {
    int E = c->num_experts, K = c->num_experts_per_tok;
    size_t A = (size_t)B * S * K;
    int *keep = (int *)mem_alloc(MEM_TEMP, sizeof(int) * A, "moe capacity keep");
    int *mine = (int *)mem_alloc(MEM_TEMP, sizeof(int) * B * E, "moe capacity counts");      // (B,E)
    int *before = (int *)mem_alloc(MEM_TEMP, sizeof(int) * B * E, "moe capacity counts before");
    kern()->router->count_sequence_assignments(mine, s->top_idx, B, S, E, K);
    cp_counts_before(before, mine, (size_t)B * E);
    capacity_mask(keep, s->top_idx, B, S, E, K, moe_capacity(c, cp_sequence_length(S)), before);
    kern()->router->drop_weights(s->w_eff, keep, A);
    mem_free(keep);
    mem_free(mine);
    mem_free(before);
}

// ---------------------------------------------------------------------------------------
// Load-balance loss (Switch/Mixtral form, docs/model.md#load-balance-loss):
//   P = softmax(logits) (T,E);  f[b,e] = (1/S) #assignments of sequence b to e;
//   Pbar[b,e] = (1/S) sum_s P[b,s,e];  lb_seq[b] = lb_coef * sum_e f[b,e] * Pbar[b,e]
// S is the whole sequence. The counts and the sums of P are taken chunk by chunk (the
// chunks of base/context.h, each in position order, in double) and the chunks added
// along the tree over the sequence's chunks, gathered from the context group when this
// device holds only its part: the same numbers on any mesh (the counts are exact).

static void load_balance_forward(MoeSaved *s, double *lb_seq, Leaves lv, int E, int K, float lb_coef) {
    int B = lv.B, S = lv.S, Sg = S * cp_size();   // this device's part, the whole sequence
    size_t T = (size_t)B * S;
    s->probs = mem_floats(MEM_ACTIVATIONS, T * E, "moe router probs");   // (T,E)
    s->lb_f = mem_floats(MEM_ACTIVATIONS, (size_t)B * E, "moe lb f");    // (B,E)
    kern()->router->router_probs(s->probs, s->logits, (int)T, E);
    // part (B,nchunks,2E): per sequence and chunk, the assignment count of each expert,
    // then the sum of P of each expert.
    double *part = (double *)mem_alloc(MEM_TEMP, sizeof(double) * B * lv.nchunks * 2 * E, "moe lb chunk sums");
    double *tot = (double *)mem_alloc(MEM_TEMP, sizeof(double) * B * 2 * E, "moe lb sequence sums");
    kern()->router->lb_chunk_sums(part, s->top_idx, s->probs, B, S, lv.nchunks, lv.chunk, E, K);
    cp_chunk_tree(tot, part, B, lv.nchunks, 2 * E);
    kern()->router->lb_loss(s->lb_f, lb_seq, tot, B, E, Sg, lb_coef);
    mem_free(part);
    mem_free(tot);
}

// ---------------------------------------------------------------------------------------
// Expert rows: which rows each expert runs on (see MoeSaved in model/moe.h).

static void build_rows(MoeSaved *s, int sparse, int T, int E, int K) {
    size_t A = (size_t)T * K;
    s->nrows = sparse ? (int)A : E * T;
    s->row_start = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (E + 1), "moe row start");
    s->row_token = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * s->nrows, "moe row token");
    s->assign_row = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * A, "moe assignment row");
    if (sparse) kern()->moe->sort_rows(s->row_start, s->row_token, s->assign_row, s->top_idx, T, E, K);
    else kern()->moe->dense_rows(s->row_start, s->row_token, s->assign_row, s->top_idx, T, E, K);
}

// Expert parallelism (base/expert.h): send each expert's rows to the device that owns
// it, run the local experts on what arrived, send the outputs back into s->y. row_start
// (E+1) is the host's copy of s->row_start: the all-to-all's send counts.
static void experts_forward_parallel(const Config *c, const LocalDims *ld, const MoeParams *p, MoeSaved *s,
                                     const int *row_start, const float *x, int T) {
    int D = c->base_emb_dim, H = ld->expert_dim;
    if (!c->sparse_matmul) die("expert parallelism runs the dropless sparse path: set sparse_matmul=true");
    float *rows = mem_floats(MEM_TEMP, (size_t)s->nrows * D, "moe rows to send");   // (R,D)
    kern()->moe->gather_rows(rows, x, s->row_token, 0, s->nrows, D);
    ExpertDispatch *d = s->ep = ep_plan(row_start, s->row_token, c->num_experts, c->num_experts_per_tok, T);
    size_t n = (size_t)d->cap;   // the receive bound (base/expert.h), not nrecv: see expert_forward
    d->x = mem_floats(MEM_ACTIVATIONS, n * D, "moe received rows (expert parallel)");   // (nrecv,D)
    d->h0 = packed_alloc(c, n * H, 1, "moe expert wi_0 out");   // (model/precision.h: floats or 16-bit)
    d->h1 = packed_alloc(c, n * H, 1, "moe expert wi_1 out");
    ep_send(d, rows, d->x, D);
    mem_free(rows);
    // (s->y NULL, a recomputation whose outputs remat kept: the wi products alone, nothing to return)
    float *y = s->y ? mem_floats(MEM_TEMP, n * D, "moe expert out (expert parallel)") : NULL;   // (nrecv,D)
    if (c->megablox) {   // the local experts at once, temporaries for all that can arrive
        ExpertRows er = {d->row_start, d->El, d->nrecv, d->cap};
        experts_forward(c, ld, p, 0, er, d->x, d->h0, d->h1, y, 0);
    } else {
        for (int e = 0; e < d->El; e++) {
            int r0 = d->row_start[e], m = d->row_start[e + 1] - r0;
            if (m > 0)
                experts_forward(c, ld, p, e, expert_rows_one(m, d->ep * T), d->x + (size_t)r0 * D,
                                packed_at(c, d->h0, (size_t)r0 * H), packed_at(c, d->h1, (size_t)r0 * H),
                                y ? y + (size_t)r0 * D : NULL, 0);
        }
    }
    if (y) ep_return(d, y, s->y, D);
    mem_free(y);
}

// Backward of experts_forward_parallel: dy (R,D) goes to the owners, dxs (R,D) comes back.
static void experts_backward_parallel(const Config *c, const LocalDims *ld, const MoeParams *p, MoeParams *g,
                                      MoeSaved *s, const float *dy, float *dxs_rows, int B, int S) {
    int D = c->base_emb_dim, H = ld->expert_dim;
    ExpertDispatch *d = s->ep;
    size_t n = (size_t)d->cap;
    float *dye = mem_floats(MEM_TEMP, n * D, "moe d expert out (expert parallel)");   // (nrecv,D)
    float *dxs = mem_floats(MEM_TEMP, n * D, "moe expert d input (expert parallel)");
    ep_send(d, dy, dye, D);
    // The leaves of the whole expert group: its ep devices hold consecutive sequences.
    Leaves group = leaves_of(c, d->ep * B, S);   // a row's token: rank * B*S + token
    if (c->megablox) {
        ExpertRows er = {d->row_start, d->El, d->nrecv, d->cap};
        experts_backward(c, ld, p, g, 0, er, d->x, d->h0, d->h1, dye, d->row_token, group, dxs);
    } else {
        for (int e = 0; e < d->El; e++) {
            int r0 = d->row_start[e], m = d->row_start[e + 1] - r0;
            if (m > 0)
                experts_backward(c, ld, p, g, e, expert_rows_one(m, d->ep * B * S), d->x + (size_t)r0 * D,
                                 packed_at(c, d->h0, (size_t)r0 * H), packed_at(c, d->h1, (size_t)r0 * H),
                                 dye + (size_t)r0 * D,
                                 d->row_token + r0, group, dxs + (size_t)r0 * D);
        }
    }
    ep_return(d, dxs, dxs_rows, D);
    mem_free(dye);
    mem_free(dxs);
}

// xs (n,D of cap,D) = the x (T,D) rows of the tokens of rows [r0, r0+n), which only the
// experts' products read: floats, or (packed_operands, model/precision.h) 16-bit numbers that
// the products read in place (model/matmul.h: matmul_packed). Freed by matmul_packed_free.
static const float *experts_input(const Config *c, const float *x, const int *row_token, int r0, int n, int cap,
                                  int D) {
    size_t room = (size_t)cap * D;
    if (packed_operands(c)) {
        uint16_t *h = mem_alloc_uninit(MEM_TEMP, sizeof(uint16_t) * MM_MAX(room, 1), "moe expert input");
        kern()->moe->gather_rows_packed(h, x, row_token, r0, n, D);
        return matmul_packed(h, (size_t)n * D);
    }
    float *xs = mem_floats_uninit(MEM_TEMP, room, "moe expert input");
    kern()->moe->gather_rows(xs, x, row_token, r0, n, D);
    return xs;
}

// Without expert parallelism: this device's experts on its own rows, the forward (g NULL) or
// the backward (g the gradients: dy (R,D) in, dxs (R,D) out, row_token (R) the host's copy of
// the rows' tokens). Expert by expert, each gathering its rows into a buffer for the most it
// can get (one row per token); or, with megablox, all the rows gathered at once and every
// expert in one call of each product.
static void experts_local(const Config *c, const LocalDims *ld, const MoeParams *p, MoeParams *g, MoeSaved *s,
                          const int *row_start, const int *row_token, const float *dy, float *dxs, const float *x,
                          int T, Leaves leaf) {
    int D = c->base_emb_dim, H = ld->expert_dim, E = c->num_experts, R = s->nrows;
    for (int e = 0; e < E; e++) {
        int r0 = c->megablox ? 0 : row_start[e], n = c->megablox ? R : row_start[e + 1] - r0;
        if (n == 0) continue;
        const float *xs = experts_input(c, x, s->row_token, r0, n, c->megablox ? R : T, D);
        ExpertRows er = c->megablox ? (ExpertRows){row_start, E, R, R} : expert_rows_one(n, T);
        float *h0 = packed_at(c, s->h0, (size_t)r0 * H), *h1 = packed_at(c, s->h1, (size_t)r0 * H);
        if (g)
            experts_backward(c, ld, p, g, e, er, xs, h0, h1, dy + (size_t)r0 * D, row_token + r0, leaf,
                             dxs + (size_t)r0 * D);
        else
            experts_forward(c, ld, p, e, er, xs, h0, h1, s->y ? packed_at(c, s->y, (size_t)r0 * D) : NULL,
                            y_packed(c));
        matmul_packed_free(xs);
        if (c->megablox) break;   // (e = 0: all of them at once)
    }
}

// ---------------------------------------------------------------------------------------
// Forward

// The expert rows' layout on the host, where the layer decides with it: the row starts
// (E+1), which size each expert's matmuls and the all-to-all's sends, and, without expert
// parallelism, the token of each of the nrows rows, which splits an expert's weight
// gradient into leaves in the backward pass. This is the layer's one read-back (kernels/kernels.h:
// a GPU backend synchronises here): the backward reads the forward's copies.
static void rows_to_host(MoeSaved *s, int E) {
    s->host_row_start = malloc(sizeof(int) * (E + 1));
    s->host_row_token = ep_size() > 1 ? NULL : malloc(sizeof(int) * ((size_t)s->nrows + 1));
    if (!s->host_row_start || (ep_size() == 1 && !s->host_row_token))
        die("out of host memory for the expert rows' layout (%d rows)", s->nrows);
    mem_download(s->host_row_start, s->row_start, sizeof(int) * (E + 1));
    if (s->host_row_token) mem_download(s->host_row_token, s->row_token, sizeof(int) * s->nrows);
}

static void rows_host_free(MoeSaved *s) {
    free(s->host_row_start);
    free(s->host_row_token);
    s->host_row_start = s->host_row_token = NULL;
}

// moe_forward, and with kept_y (out NULL) moe_recompute: s->y stays NULL while the experts
// run, so they stop after their wi products (experts_forward with y NULL), and takes kept_y
// at the end, already in its saved form.
static void moe_run(const Config *c, const LocalDims *ld, const MoeParams *p, const float *bias, MoeSaved *s,
                    float *out, const float *x, int B, int S, float lb_coef, double *lb_seq, long *expert_counts,
                    float *kept_y) {
    int T = B * S, D = c->base_emb_dim, E = c->num_experts, K = c->num_experts_per_tok, H = ld->expert_dim;
    size_t A = (size_t)T * K;
    memset(s, 0, sizeof(*s));

    // Gate and routing.
    s->logits = mem_floats(MEM_ACTIVATIONS, (size_t)T * E, "moe gate logits");    // (T,E)
    s->scores = mem_floats(MEM_ACTIVATIONS, (size_t)T * E, "moe router scores");  // (T,E)
    s->top_idx = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * A, "moe top-k experts");  // (T,K)
    s->top_w = mem_floats(MEM_ACTIVATIONS, A, "moe top-k weights");               // (T,K)
    s->w_eff = mem_floats(MEM_ACTIVATIONS, A, "moe combine weights");             // (T,K)
    // The gate's weights stay float32 in bf16 mode with float32_gate_logits: the plain
    // product then (the same bits on the CPU), since a weight product may run in bf16 on
    // tensor cores (gpu_matmul=cublas_bf16, gpu/matmul.cu), which would round them.
    if (cfg_bf16(c) && c->float32_gate_logits) gemm(0, 0, T, E, D, 1.0f, x, D, p->gate, E, 0.0f, s->logits, E);
    else matmul_forward(s->logits, x, p->gate, T, D, E, 0);
    round_bf16(s->logits, (size_t)T * E, gate_rounds(c));   // cast point 5
    route(c, s, bias, T);
    mem_copy(s->w_eff, s->top_w, sizeof(float) * A);
    if (!c->sparse_matmul && c->capacity_factor > 0) drop_over_capacity(c, s, B, S);
    if (expert_counts) kern()->router->count_experts(expert_counts, s->top_idx, A);
    if (lb_coef > 0) load_balance_forward(s, lb_seq, leaves_of(c, B, S), E, K, lb_coef);

    // Experts: y = SwiGLU_e(x) on each expert's rows.
    build_rows(s, c->sparse_matmul, T, E, K);
    rows_to_host(s, E);   // (the planner's: a balanced routing, kernels/dry.c)
    const int *row_start = s->host_row_start;
    size_t R = (size_t)s->nrows;
    // (R,D), written whole: each row by its expert (or, under expert parallelism, by its
    // return from the expert's owner); the dense path runs every expert on every token.
    if (!kept_y)
        s->y = ep_size() > 1 ? mem_floats_uninit(MEM_ACTIVATIONS, R * D, "moe expert out")
                             : packed_alloc(c, R * D, 0, "moe expert out");   // (model/precision.h: floats or 16-bit)
    if (ep_size() > 1) {
        experts_forward_parallel(c, ld, p, s, row_start, x, T);
    } else {
        // (R,H) each, every row written by its expert's product below
        s->h0 = packed_alloc(c, R * H, 0, "moe expert wi_0 out");   // (model/precision.h: floats or 16-bit)
        s->h1 = packed_alloc(c, R * H, 0, "moe expert wi_1 out");
        experts_local(c, ld, p, NULL, s, row_start, NULL, NULL, NULL, x, T, (Leaves){0});
    }

    // Combine, each token's experts in ascending expert order (the order of the dense
    // path's sum over E), so both paths add the same terms in the same order.
    int bf16_sum = cfg_bf16(c) && !c->float32_weight_sum;   // cast point 14
    if (out && y_packed(c))
        kern()->moe->combine_forward_packed(out, (const uint16_t *)(const void *)s->y, s->w_eff, s->top_idx,
                                            s->assign_row, T, D, K, bf16_sum, cfg_bf16(c));
    else if (out)
        kern()->moe->combine_forward(out, s->y, s->w_eff, s->top_idx, s->assign_row, T, D, K, bf16_sum,
                                     cfg_bf16(c));

    // DeepSeek's shared experts: a dense SwiGLU on every token, added to the routed output
    // (without out, their h0 and h1 only).
    if (p->shared.wi_0) {
        float *sh = out ? mem_floats(MEM_TEMP, (size_t)T * D, "moe shared expert out") : NULL;
        mlp_forward(c, &p->shared, &s->shared, sh, x, T, D, c->shared_experts * H);
        if (out) {
            kern()->moe->add_shared(out, sh, (size_t)T * D);
            prec_round(c, out, (size_t)T * D);   // cast point 15
            mem_free(sh);
        }
    }
    // What the backward pass reads, kept as 16-bit numbers in bf16 mode.
    moe_saved_pack(c, ld, s, 1);
    if (kept_y) s->y = kept_y;
}

void moe_forward(const Config *c, const LocalDims *ld, const MoeParams *p, const float *bias, MoeSaved *s, float *out,
                 const float *x, int B, int S, float lb_coef, double *lb_seq, long *expert_counts) {
    moe_run(c, ld, p, bias, s, out, x, B, S, lb_coef, lb_seq, expert_counts, NULL);
}

void moe_recompute(const Config *c, const LocalDims *ld, const MoeParams *p, const float *bias, MoeSaved *s,
                   const float *x, int B, int S, float lb_coef, double *lb_seq, long *expert_counts, float *y) {
    moe_run(c, ld, p, bias, s, NULL, x, B, S, lb_coef, lb_seq, expert_counts, y);
}

// ---------------------------------------------------------------------------------------
// Backward

// dy (R,D): y's gradient, rounded in bf16, for the experts' products (the sparse path's rows
// are the assignments, each written; the dense path's rows of tokens an expert was not chosen
// for stay zero); *dw (A, a new array) the routing weights'. Under y_packed both y and dy are 16-bit
// numbers, dy an operand the products read in place (model/matmul.h: matmul_packed); freed by
// matmul_packed_free either way.
static const float *combine_backward(const Config *c, const MoeSaved *s, float **dw, const float *dout, size_t R,
                                     size_t A, int D, int K) {
    const char *name = "moe d expert out";
    if (y_packed(c)) {
        size_t bytes = sizeof(uint16_t) * MM_MAX(R * D, 1);
        uint16_t *dy = c->sparse_matmul ? mem_alloc_uninit(MEM_TEMP, bytes, name) : mem_alloc(MEM_TEMP, bytes, name);
        *dw = mem_floats(MEM_TEMP, A, "moe d routing weights");   // (T,K)
        kern()->moe->combine_backward_packed(dy, *dw, dout, (const uint16_t *)(const void *)s->y, s->w_eff, s->top_w,
                                             s->assign_row, A, D, K);
        return matmul_packed(dy, R * D);
    }
    float *dy = c->sparse_matmul ? mem_floats_uninit(MEM_TEMP, R * D, name) : mem_floats(MEM_TEMP, R * D, name);
    *dw = mem_floats(MEM_TEMP, A, "moe d routing weights");
    kern()->moe->combine_backward(dy, *dw, dout, s->y, s->w_eff, s->top_w, s->assign_row, A, D, K);
    prec_round(c, dy, R * D);
    return dy;
}

// dlogits (T,E) += the routing weights' gradient dw (T,K) pulled back through the router.
static void router_backward(const Config *c, float *dlogits, const float *dw, const MoeSaved *s, int T) {
    int E = c->num_experts, K = c->num_experts_per_tok;
    if (cfg_softmax_router(c))   // the selection scores s->scores are softmax(logits)
        kern()->router->router_softmax_backward(dlogits, dw, s->top_idx, s->top_w, s->scores, T, E, K,
                                                cfg_is_deepseek(c), c->routed_scaling_factor);
    else if (cfg_sigmoid_router(c))
        kern()->router->router_deepseek_backward(dlogits, dw, s->top_idx, s->logits, T, E, K,
                                                 c->routed_scaling_factor, gate_rounds(c));
    else
        kern()->router->router_mixtral_backward(dlogits, dw, s->top_idx, s->top_w, T, E, K);
}

void moe_backward(const Config *c, const LocalDims *ld, const MoeParams *p, MoeParams *g, MoeSaved *s, float *dx,
                  const float *dout, const float *x, int B, int S, float lb_coef) {
    int T = B * S, D = c->base_emb_dim, E = c->num_experts, K = c->num_experts_per_tok, H = ld->expert_dim;
    Leaves leaf = leaves_of(c, B, S);
    size_t A = (size_t)T * K, R = (size_t)s->nrows;
    moe_saved_pack(c, ld, s, 0);
    // The rows' layout as the forward read it back: no read-back here.
    const int *row_start = s->host_row_start, *row_token = s->host_row_token;

    // Shared experts: out += SwiGLU_shared(x).
    if (p->shared.wi_0) mlp_backward(c, &p->shared, &g->shared, &s->shared, dx, dout, x, T, D, c->shared_experts * H, leaf);

    // Combine: out[t] = sum_k w_eff[t,k] y[row(t,k)]
    //   dy[row] = w_eff * dout[t];  dw[t,k] = dout[t] . y[row]  (0 where the assignment was dropped)
    float *dw;
    const float *dy = combine_backward(c, s, &dw, dout, R, A, D, K);
    prec_round(c, dw, A);   // bf16: y and the weights were rounded, so are their gradients

    // Experts; each row's input gradient is added into dx in row order (ascending expert).
    float *dxs = mem_floats_uninit(MEM_TEMP, R * D, "moe expert d input");   // (R,D), each expert's rows written by it
    if (s->ep) {
        experts_backward_parallel(c, ld, p, g, s, dy, dxs, B, S);
    } else {
        experts_local(c, ld, p, g, s, row_start, row_token, dy, dxs, x, T, leaf);
    }
    // A token's rows belong to distinct experts: add them expert by expert, as one device does
    // (the sparse path's rows, one per assignment, in one call: each token's in row order).
    if (c->sparse_matmul)
        kern()->moe->scatter_add_tokens(dx, dxs, s->assign_row, T, K, D);
    else
        for (int e = 0; e < E; e++)
            kern()->moe->scatter_add_rows(dx, dxs, s->row_token, row_start[e], row_start[e + 1] - row_start[e], D);
    mem_free(dxs);
    matmul_packed_free(dy);

    // Router and load-balance loss to the gate logits, then the gate matmul.
    float *dlogits = mem_floats(MEM_TEMP, (size_t)T * E, "moe d gate logits");   // (T,E)
    router_backward(c, dlogits, dw, s, T);
    mem_free(dw);
    if (lb_coef > 0) kern()->router->lb_backward(dlogits, s->probs, s->lb_f, B, S, S * cp_size(), E, lb_coef);
    matmul_backward_float32(dx, g->gate, dlogits, x, p->gate, T, D, E, leaf);   // dlogits: float32 values
    mem_free(dlogits);

    // The experts' saved rows are done; the routing stays for the dump until moe_saved_free.
    mem_free(s->h0); mem_free(s->h1); mem_free(s->y);
    mem_free(s->row_start); mem_free(s->row_token); mem_free(s->assign_row);
    mem_free(s->probs); mem_free(s->lb_f);
    ep_free(s->ep);
    rows_host_free(s);
    s->h0 = s->h1 = s->y = s->probs = s->lb_f = NULL;
    s->row_start = s->row_token = s->assign_row = NULL;
    s->ep = NULL;
}

// bf16 mode: the experts' saved rows as 16-bit numbers (pack) or back to floats (unpack);
// under packed_operands h0 and h1 are 16-bit from the start and stay so (model/mlp.h).
static void moe_saved_pack(const Config *c, const LocalDims *ld, MoeSaved *s, int pack) {
    void (*f)(const Config *, float **, size_t) = pack ? act_pack : act_unpack;
    size_t D = (size_t)c->base_emb_dim, H = (size_t)ld->expert_dim, R = (size_t)s->nrows;
    int h = !packed_operands(c);
    if (!y_packed(c)) f(c, &s->y, R * D);
    if (h) f(c, &s->h0, R * H);
    if (h) f(c, &s->h1, R * H);
    if (s->ep) {
        size_t n = (size_t)s->ep->cap;
        f(c, &s->ep->x, n * D);
        if (h) f(c, &s->ep->h0, n * H);
        if (h) f(c, &s->ep->h1, n * H);
    }
}

void moe_saved_free(MoeSaved *s) {
    mem_free(s->logits); mem_free(s->scores); mem_free(s->top_idx); mem_free(s->top_w); mem_free(s->w_eff);
    mem_free(s->probs); mem_free(s->lb_f);
    mem_free(s->h0); mem_free(s->h1); mem_free(s->y);
    mem_free(s->row_start); mem_free(s->row_token); mem_free(s->assign_row);
    rows_host_free(s);
    mlp_saved_free(&s->shared);
    ep_free(s->ep);
    memset(s, 0, sizeof(*s));
}
