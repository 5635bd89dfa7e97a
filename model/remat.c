// model/remat.c: rematerialisation policies (MaxText's remat_policy), their offloaded
// variants, and sqrt(L) nested checkpointing.
//
// A layer's forward saves, for its backward: its input x, the norm outputs, attention's
// tensors, the residual h and the FFN's tensors (model/model.h LayerActs). Keeping all of
// them costs memory; dropping some costs a second forward of that block in the backward;
// offloading costs copies to host memory and back. The recomputation is the same
// arithmetic on the same inputs and weights, so every policy gives the same bits. The
// backward recomputes a block just before its half of the backward needs it (the FFN's
// first, then attention's), so with h kept only one block's tensors are live at a time.
//
//   policy               x      norms  q,k,v   context  h (out_proj)  FFN
//   none                 device device device  device   device        device
//   minimal              device remat  device  remat    device        device
//   minimal_with_context device remat  device  device   device        device
//   save_dot_except_mlp  device remat  device  remat    device        remat
//   save_dot_with_context_except_mlp  (save_dot_except_mlp with context on the device)
//   save_dot_except_mlpwi (save_dot_except_mlp with the experts' outputs y, mlpwo, on the device)
//   save_qkv_proj        device remat  device  remat    remat         remat
//   save_out_proj        device remat  remat   remat    device        remat
//   full (MaxText's default) device remat remat remat  remat         remat
//   minimal_offloaded    device remat  host    remat    host          host
//   minimal_flash        (MaxText's older name of minimal_with_context)
//   qkv_proj_offloaded   device remat  host    remat    remat         remat
//   custom               decoder_layer_input, query_proj.., context, out_proj, mlpwi.. = device/offload/remat
//
// MaxText's names and meanings, but for `none`: MaxText still wraps each layer in
// jax.checkpoint, without a policy, which recomputes everything as `full`; here `none`
// keeps everything.
//
// q,k,v (query_proj, key_proj, value_proj) are what attention's projections leave, RoPE
// applied (the same bytes as the projections: RoPE is a rotation in place). For MLA they
// are the whole projection chain: q, k, v and the low-rank intermediates qa, qa_rstd, qn,
// latent, kv_rstd, latn (and the norms' broadcast scales) that the projections' backward
// reads; keeping only q, k, v would mean recomputing that chain, i.e. the projections.
// mlpwo is a MoE layer's expert outputs y (nrows,D): the combine's backward reads them for
// the routing weights' gradient, where the experts' own backward reads only h0 and h1. Kept
// while the FFN's other tensors are recomputed (save_dot_except_mlpwi), the recomputation
// runs the routing and the wi products and skips the wo products (model/moe.h:
// moe_recompute). A dense MLP's output is read by no backward, so there it means nothing.
// context is the attention core's output o and its softmax statistics. With q, k, v kept
// and context dropped, the backward recomputes only the core, and the out projection (h)
// where h was not kept, from the kept q, k, v: with context parallelism through the same
// gather or ring as the forward (model_attn_core_forward); the pre-norm's output n1, the
// projections' input, is recomputed as the norms are.
#include "model/remat.h"
#include "base/expert.h"
#include "model/rmsnorm.h"
#include "model/precision.h"
#include "base/memory.h"
#include "core/common.h"

// Where remat_policy=custom's key puts its checkpoint.
static Keep keep_of(CheckpointPlace v) {
    return v == PLACE_DEVICE ? KEEP_DEVICE : v == PLACE_OFFLOAD ? KEEP_HOST : RECOMPUTE;
}

RematPlan remat_plan(const Config *c) {
    RematPolicy p = c->remat_policy;
    RematPlan r = {.x = KEEP_DEVICE, .norms = RECOMPUTE, .qkv = KEEP_DEVICE, .attn = KEEP_DEVICE, .h = KEEP_DEVICE,
                   .ffn = KEEP_DEVICE, .y = KEEP_DEVICE, .block = c->remat_nested_block};
    if (p == REMAT_NONE) r.norms = KEEP_DEVICE;
    else if (p == REMAT_MINIMAL) r.attn = RECOMPUTE;
    else if (p == REMAT_MINIMAL_WITH_CONTEXT || p == REMAT_MINIMAL_FLASH) {}
    else if (p == REMAT_SAVE_DOT_EXCEPT_MLP || p == REMAT_SAVE_DOT_EXCEPT_MLPWI) r.attn = r.ffn = RECOMPUTE;
    else if (p == REMAT_SAVE_DOT_WITH_CONTEXT_EXCEPT_MLP) r.ffn = RECOMPUTE;
    else if (p == REMAT_SAVE_QKV_PROJ) r.attn = r.h = r.ffn = RECOMPUTE;
    else if (p == REMAT_SAVE_OUT_PROJ) r.qkv = r.attn = r.ffn = RECOMPUTE;
    else if (p == REMAT_FULL) r.qkv = r.attn = r.h = r.ffn = RECOMPUTE;
    else if (p == REMAT_MINIMAL_OFFLOADED) { r.qkv = r.h = r.ffn = KEEP_HOST; r.attn = RECOMPUTE; }
    else if (p == REMAT_QKV_PROJ_OFFLOADED) { r.qkv = KEEP_HOST; r.attn = r.h = r.ffn = RECOMPUTE; }
    else if (p == REMAT_CUSTOM) {
        r.x = keep_of(c->decoder_layer_input);
        if (r.x == RECOMPUTE) die("decoder_layer_input=remat: the layer input is what a recomputation starts from; use device or offload");
        r.qkv = keep_of(c->query_proj);
        if (keep_of(c->key_proj) != r.qkv || keep_of(c->value_proj) != r.qkv)
            die("query_proj, key_proj and value_proj must have the same value (got %s, %s, %s): this trainer keeps "
                "or recomputes attention's projections as one block", checkpoint_place_name(c->query_proj),
                checkpoint_place_name(c->key_proj), checkpoint_place_name(c->value_proj));
        r.attn = keep_of(c->context);
        if (r.attn != r.qkv && r.attn != RECOMPUTE)
            die("context=%s with query_proj=key_proj=value_proj=%s: context must equal them, or be remat with them "
                "device or offload (save_qkv_proj, qkv_proj_offloaded); the attention core's backward reads q, k, v "
                "with its output", checkpoint_place_name(c->context), checkpoint_place_name(c->query_proj));
        r.h = keep_of(c->out_proj);
        if (r.h == RECOMPUTE && r.attn != RECOMPUTE)
            die("out_proj=remat recomputes the attention core, so context must be remat too (got %s)",
                checkpoint_place_name(c->context));
        r.ffn = keep_of(c->mlpwi);
        r.y = keep_of(c->mlpwo);
        if (r.y != r.ffn && r.ffn != RECOMPUTE)
            die("mlpwo=%s with mlpwi=%s: mlpwo must equal mlpwi, or be kept (device or offload) with mlpwi remat; "
                "recomputing the experts' outputs needs the wi products they are made from",
                checkpoint_place_name(c->mlpwo), checkpoint_place_name(c->mlpwi));
    }
    if (p != REMAT_CUSTOM) r.y = p == REMAT_SAVE_DOT_EXCEPT_MLPWI ? KEEP_DEVICE : r.ffn;
    int keeps_more = r.norms != RECOMPUTE || r.qkv != RECOMPUTE || r.attn != RECOMPUTE || r.h != RECOMPUTE ||
                     r.ffn != RECOMPUTE || r.y != RECOMPUTE;
    if (r.block == -1) r.block = (int)lround(sqrt((double)c->base_num_decoder_layers));   // sqrt(L) blocks of sqrt(L)
    if (r.block < -1) die("remat_nested_block must be >= 0 (layers per block) or -1 (sqrt of the layers), got %d", r.block);
    if (r.block > 1 && keeps_more)
        die("remat_nested_block=%d needs remat_policy=full (or custom with every checkpoint remat): only the "
            "block's first input is kept, and each layer is recomputed from its input", r.block);
    if (c->ici_pipeline_parallelism > 1 && r.block > 1)
        die("remat_nested_block=%d with ici_pipeline_parallelism=%d: the pipeline saves each iteration's input "
            "(iteration_input) and recomputes its chunk of layers from it; use remat_nested_block=0", r.block,
            c->ici_pipeline_parallelism);
    if (c->ici_pipeline_parallelism > 1 && p != REMAT_FULL && !c->pipeline_save_decoder_layer_input)
        die("pipeline_save_decoder_layer_input=false with remat_policy=%s: every layer keeps its input under a policy "
            "other than full (where the policy's decoder_layer_input puts it); the switch chooses between saving the "
            "layer inputs and recomputing them from iteration_input under remat_policy=full only",
            remat_policy_name(p));
    return r;
}

// ---------------------------------------------------------------------------------------
// The groups' buffers, as addresses of their pointers (to drop, move or bring back).

// query_proj, key_proj, value_proj: the projections' outputs (MLA: and their intermediates).
static int qkv_ptrs(const Config *c, LayerActs *a, void **p) {
    int n = 0;
    if (cfg_is_mla(c)) {
        MLASaved *s = &a->mla;
        void *q[] = {&s->qa, &s->qa_rstd, &s->qn, &s->qn_scale, &s->latent, &s->kv_rstd, &s->latn, &s->kvn_scale,
                     &s->q, &s->k, &s->v};
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) p[n++] = q[i];
    } else {
        AttentionSaved *s = &a->attn;
        p[n++] = &s->q; p[n++] = &s->k; p[n++] = &s->v;
    }
    return n;
}

// context: the attention core's output and softmax statistics.
static int ctx_ptrs(const Config *c, LayerActs *a, void **p) {
    if (cfg_is_mla(c)) { p[0] = &a->mla.o; p[1] = &a->mla.stats; }
    else { p[0] = &a->attn.o; p[1] = &a->attn.stats; }
    return 2;
}

static int attn_ptrs(const Config *c, LayerActs *a, void **p) {
    int n = qkv_ptrs(c, a, p);
    return n + ctx_ptrs(c, a, p + n);
}

#define FFN_PTRS_MAX 24   // the most buffers a group has (a MoE layer under expert parallelism: 20)
static int ffn_ptrs(const Config *c, int l, LayerActs *a, void **p) {
    int n = 0;
    if (cfg_layer_is_moe(c, l)) {
        MoeSaved *s = &a->moe;
        void *q[] = {&s->logits, &s->scores, &s->top_idx, &s->top_w, &s->w_eff, &s->probs, &s->lb_f, &s->row_start,
                     &s->row_token, &s->assign_row, &s->h0, &s->h1, &s->y, &s->shared.h0, &s->shared.h1};
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) p[n++] = q[i];
        if (s->ep) {   // expert parallelism: the rows this device's experts ran on, and where they go back
            p[n++] = &s->ep->x; p[n++] = &s->ep->h0; p[n++] = &s->ep->h1; p[n++] = &s->ep->from; p[n++] = &s->ep->to;
        }
    } else {
        p[n++] = &a->mlp.h0;
        p[n++] = &a->mlp.h1;
    }
    return n;
}

// Move the buffers at the addresses p[0..n) to host memory (host = 1) or to the device.
static void move_all(void **p, int n, int host) {
    for (int i = 0; i < n; i++) {
        void **q = (void **)p[i];
        *q = host ? mem_to_host(*q) : mem_to_device(*q);
    }
}

static void free_ptr(float **p) { mem_free(*p); *p = NULL; }

void remat_after_forward(Model *m, int l, LayerActs *a) {
    const Config *c = &m->cfg;
    if (!m->training) return;   // eval and sampling: no backward follows, model_discard frees all
    RematPlan r = remat_plan(c);
    void *p[FFN_PTRS_MAX];
    if (r.norms == RECOMPUTE) {   // with each norm its broadcast scale (rmsnorm_fused_scale=false)
        free_ptr(&a->n1); free_ptr(&a->rstd1); free_ptr(&a->scale1);
        free_ptr(&a->n2); free_ptr(&a->rstd2); free_ptr(&a->scale2);
    }
    if (r.qkv == RECOMPUTE) {   // then context too (remat_plan): attention's tensors all go
        if (cfg_is_mla(c)) mla_saved_free(&a->mla);
        else attention_saved_free(&a->attn);
    } else {
        if (r.qkv == KEEP_HOST) move_all(p, qkv_ptrs(c, a, p), 1);
        int n = ctx_ptrs(c, a, p);
        for (int i = 0; i < n; i++)
            if (r.attn == RECOMPUTE) free_ptr((float **)p[i]);   // o and stats: recomputed from q, k, v
        if (r.attn == KEEP_HOST) move_all(p, n, 1);
    }
    if (r.h == RECOMPUTE) free_ptr(&a->h);
    else if (r.h == KEEP_HOST) a->h = mem_to_host(a->h);
    if (r.ffn == RECOMPUTE) {
        if (cfg_layer_is_moe(c, l)) {
            float *y = r.y == RECOMPUTE ? NULL : a->moe.y;   // mlpwo kept: taken out before the rest goes
            if (y) a->moe.y = NULL;
            moe_saved_free(&a->moe);
            a->ffn_y = r.y == KEEP_HOST ? mem_to_host(y) : y;
        } else {
            mlp_saved_free(&a->mlp);
        }
    } else if (r.ffn == KEEP_HOST) move_all(p, ffn_ptrs(c, l, a, p), 1);
    // Nested checkpointing: inside a block only its first layer's input stays.
    if (r.block > 1 && l % r.block) free_ptr(&a->x);
    else if (r.x == KEEP_HOST) a->x = mem_to_host(a->x);
}

// Statistics of a recomputation go to scratch: the forward counted them already.
static double *scratch_aux(const Config *c, int B) {
    return (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)MM_MAX(1, model_num_moe_layers(c)) * B,
                               "recompute aux (discarded)");
}

static void norm_recompute(const Config *c, float **n, float **rstd, float **bcast, const float *in,
                           const float *scale, int T) {
    int D = c->base_emb_dim;
    *n = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "norm out (recomputed)");
    *rstd = mem_floats(MEM_ACTIVATIONS, (size_t)T, "norm rstd (recomputed)");
    *bcast = rmsnorm_forward_cfg(c, *n, *rstd, in, scale, T, D);
}

// bf16 mode: a saved (T,D) tensor back to floats, unless it is already (the FFN half may
// have unpacked x, or recomputed n1, before the attention half runs).
static void unpack(const Config *c, float **p, size_t n) {
    if (*p && mem_size(*p) < n * sizeof(float)) act_unpack(c, p, n);
}

static int attn_gone(const Config *c, const LayerActs *a) { return cfg_is_mla(c) ? !a->mla.q : !a->attn.q; }
static int ctx_gone(const Config *c, const LayerActs *a) { return cfg_is_mla(c) ? !a->mla.o : !a->attn.o; }

// The attention block recomputed from x (x on the device, as floats): its norm output,
// attention's tensors and h (where out_proj was saved, h is kept: the recomputed copy is the
// same); or with q, k, v kept only the core, and the out projection if h was not kept.
static void attn_recompute(Model *m, int l, LayerActs *a, int B, int S) {
    const Config *c = &m->cfg;
    if (attn_gone(c, a)) {
        free_ptr(&a->n1); free_ptr(&a->rstd1); free_ptr(&a->scale1);
        float *h = model_attn_block_forward(m, l, a, a->x, B, S);
        if (a->h) mem_free(h);
        else a->h = h;
    } else {
        void *q[16];
        move_all(q, qkv_ptrs(c, a, q), 0);   // qkv_proj_offloaded: back from the host
        float *h = model_attn_core_forward(m, l, a, a->h ? NULL : a->x, B, S);
        if (h) a->h = h;
    }
}

void remat_restore_ffn(Model *m, int l, LayerActs *a, int B, int S, float lb_coef) {
    const Config *c = &m->cfg;
    int T = B * S;
    size_t n = (size_t)T * c->base_emb_dim;
    void *q[FFN_PTRS_MAX];
    move_all(q, ffn_ptrs(c, l, a, q), 0);   // offloaded tensors back (a no-op for those that stayed)
    a->h = mem_to_device(a->h);
    unpack(c, &a->h, n);
    unpack(c, &a->n2, n);
    if (!a->h) {   // out_proj dropped: the attention block (full) or its core (save_qkv_proj) runs again now
        a->x = mem_to_device(a->x);
        unpack(c, &a->x, n);
        attn_recompute(m, l, a, B, S);
    }
    int ffn_gone = cfg_layer_is_moe(c, l) ? !a->moe.logits : !a->mlp.h0;
    if (ffn_gone) {
        free_ptr(&a->n2); free_ptr(&a->rstd2); free_ptr(&a->scale2);
        a->ffn_y = mem_to_device(a->ffn_y);   // mlpwo kept: taken by the recomputation (model/moe.h)
        double *aux = scratch_aux(c, B);
        FwdStats rs = {NULL, aux, B, NULL};
        model_ffn_block_saved(m, l, a, a->h, B, S, lb_coef, &rs);
        mem_free(aux);
    } else if (!a->n2) {
        norm_recompute(c, &a->n2, &a->rstd2, &a->scale2, a->h, m->params.layers[l].post_norm, T);
    }
}

void remat_restore_attn(Model *m, int l, LayerActs *a, int B, int S) {
    const Config *c = &m->cfg;
    int T = B * S;
    size_t n = (size_t)T * c->base_emb_dim;
    void *q[16];
    move_all(q, attn_ptrs(c, a, q), 0);
    a->x = mem_to_device(a->x);
    unpack(c, &a->x, n);
    if (!packed_operands(c)) unpack(c, &a->n1, n);   // else act_for_products, below
    if (attn_gone(c, a) || ctx_gone(c, a)) attn_recompute(m, l, a, B, S);
    if (!a->n1) norm_recompute(c, &a->n1, &a->rstd1, &a->scale1, a->x, m->params.layers[l].pre_norm, T);
    act_for_products(c, &a->n1, n);   // only the projections' weight gradients read n1
}

void remat_block_inputs(Model *m, int l, int B, int S, float lb_coef) {
    const Config *c = &m->cfg;
    int k = remat_plan(c).block;
    if (k <= 1 || m->acts[l].x) return;
    int b0 = l - l % k;
    size_t n = (size_t)B * S * c->base_emb_dim, bytes = (cfg_bf16(c) ? sizeof(uint16_t) : sizeof(float)) * n;
    m->acts[b0].x = mem_to_device(m->acts[b0].x);
    double *aux = scratch_aux(c, B);
    FwdStats rs = {NULL, aux, B, NULL};
    for (int j = b0; j < l; j++) {
        // Layer j forward on a copy of its input; only its output, layer j+1's input, stays.
        float *in = (float *)mem_alloc(MEM_ACTIVATIONS, bytes, "x (layer input)");
        mem_copy(in, m->acts[j].x, bytes);
        act_unpack(c, &in, n);
        LayerActs t;
        memset(&t, 0, sizeof t);
        model_unit_acquire(m, 1 + j);
        float *y = model_layer_forward(m, j, &t, in, B, S, lb_coef, &rs);
        model_unit_release(m, 1 + j);
        model_layer_free(m, j, &t);
        act_pack(c, &y, n);
        m->acts[j + 1].x = y;
    }
    mem_free(aux);
}
