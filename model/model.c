// model/model.c: the decoder stack's forward and backward passes for one microbatch
// (docs/model.md#decoder-stack). The weights it reads are laid out, named and initialised
// in model/params.c.
//
//   x = Embed(ids)
//   for each layer:  h = x + Attention(RMSNorm_pre(x));  x = h + FFN(RMSNorm_post(h))
//   logits = RMSNorm_final(x) @ W_out;   loss = CE(logits, targets) (+ z-loss, + aux)
//
// Beside the math, three switches act at fixed points, each behind one call: a sharding
// constraint (model/constraint.h: a copy of a tensor in another layout, or nothing),
// bf16 rounding (model/precision.h: prec_round / round_bf16 where MaxText casts) and the
// saved activations packed as 16-bit numbers (act_pack); none changes the float32 math.
#include "model/model.h"           // Model, LayerActs, the layers' forward/backward
#include "model/embedding.h"       // embedding_forward/backward (gather or one-hot)
#include "model/rmsnorm.h"         // rmsnorm_forward_cfg/backward_cfg
#include "model/matmul.h"          // matmul_forward/backward: the head's logits
#include "model/precision.h"       // prec_round, round_bf16, act_pack: the bf16 points
#include "model/loss.h"            // loss_forward/backward: cross-entropy with z-loss
#include "model/remat.h"           // what the backward recomputes or fetches
#include "model/vocab_tiling.h"    // the head and loss in token tiles (num_vocab_tiling)
#include "model/tensor_parallel.h" // tp_colpar_dinp: the head's input gradient, a sum over the vocabulary
#include "model/constraint.h"      // constraint_apply/end: sharding constraints
#include "model/weights16.h"       // the weights' copy as 16-bit numbers (bf16_storage)
#include "base/tensor.h"           // tp_all_reduce, tp_local_chunks
#include "base/context.h"          // leaves_of: this device's tokens in the canonical tree
#include "base/memory.h"           // mem_floats, mem_phase: tagged buffers, the timeline
#include "kernels/kernels.h"       // kern()->sum->residual_add

// ---------------------------------------------------------------------------------------
// The walk over the units (sharding/fsdp.h): 0 the embedding, 1+l layer l, L+1 the head.

// Before / after unit u's weights are used (sharding/fsdp.h: all-gathered under FSDP). In
// bf16 mode the layers use a copy of the unit's master weights rounded to bf16 (cast point
// 1 of model/precision.h), made here and dropped after: the master copy, its gradient and
// the optimizer state stay float32. The gate kernel stays unrounded with float32_gate_logits.
// The copy is float32 numbers, which the layers' weight pointers are bound to; or, under
// bf16_storage, 16-bit ones, recorded tensor by tensor for the layers' products and
// norms to find (model/weights16.h), the pointers left on the float32 weights; those are
// kept from one update to the next where the device holds whole units (copy16_current).
static int rounded(const Config *c, const ParamSpec *s) {
    return !(c->float32_gate_logits && strstr(s->name, "MoeBlock_0/gate/kernel"));
}

// Under bf16_storage only the one-hot embedding (use_iota_embed) reads the embedding
// table's copy; the gather reads the float32 table and rounds the rows it takes
// (model_embed_forward), so without use_iota_embed the table gets no 16-bit copy.
static int copy16_needed(const Config *c, int u) { return u != 0 || c->use_iota_embed; }

int model_copy16_kept(const Model *m) {
    return weights16_mode() == BF16_STORAGE_KEPT && cfg_bf16(&m->cfg) && m->shard.F == 1 &&
           !m->cfg.parameter_memory_host_offload;
}

// Unit u's weights w packed into its 16-bit copy (laid out as w), tensor by tensor.
static void unit_pack16(Model *m, int u, uint16_t *copy, const float *w) {
    const Config *c = &m->cfg;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *s = &m->specs[i];
        if (model_unit_of(c, s->name) != u || !rounded(c, s)) continue;   // the float32 gate: no copy
        size_t at = s->offset - m->shard.unit_off[u];
        kern()->cast->pack_bf16(copy + at, w + at, s->size);
    }
}

// The kept 16-bit copy of every unit (model_copy16_kept), laid out as params_mem: made at
// the first use and again at the first use after each update of the weights (the optimizer
// moves m->step; a run that starts from saved weights starts with no copy). Each update
// thus costs one pass over the weights, where a copy per use of a unit costs two a step (the
// forward's and the backward's), for 2 bytes a weight kept.
static uint16_t *copy16_current(Model *m) {
    const StateShard *sh = &m->shard;
    if (!m->copy16_kept)
        m->copy16_kept = mem_alloc_uninit(MEM_PARAMS, sizeof(uint16_t) * (sh->local_n ? sh->local_n : 1),
                                          "bf16 weights kept between updates (16-bit storage)");
    if (m->copy16_step != m->step) {
        for (int u = 0; u < sh->nunits; u++)
            if (sh->here[u] && copy16_needed(&m->cfg, u))
                unit_pack16(m, u, m->copy16_kept + sh->local_off[u], m->params_mem + sh->local_off[u]);
        m->copy16_step = m->step;
    }
    return m->copy16_kept;
}

void model_unit_acquire(Model *m, int u) {
    if (m->hooks && m->hooks->gather) m->hooks->gather(m, u);
    const Config *c = &m->cfg;
    if (!cfg_bf16(c)) return;
    const StateShard *sh = &m->shard;
    const float *w = sh->F > 1 ? m->gathered[2 * u] : m->params_mem + sh->local_off[u];
    size_t n = sh->unit_size[u];
    if (weights16_on()) {
        if (!copy16_needed(c, u)) return;
        uint16_t *copy;
        if (model_copy16_kept(m)) copy = copy16_current(m) + sh->local_off[u];
        else {
            copy = mem_alloc_uninit(MEM_PARAMS, sizeof(uint16_t) * n, "bf16 weights of one unit (16-bit storage)");
            unit_pack16(m, u, copy, w);
        }
        for (int i = 0; i < m->ntensors; i++) {   // each tensor's copy recorded for its readers
            const ParamSpec *s = &m->specs[i];
            if (model_unit_of(c, s->name) != u || !rounded(c, s)) continue;
            size_t at = s->offset - sh->unit_off[u];
            weights16_add(w + at, s->size, copy + at);
        }
        m->copy16[u] = copy;
        return;
    }
    float *copy = mem_floats(MEM_PARAMS, n, "bf16-rounded weights of one unit (float32 storage)");
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *s = &m->specs[i];
        if (model_unit_of(c, s->name) != u) continue;
        size_t at = s->offset - sh->unit_off[u];
        round_copy_bf16(copy + at, w + at, s->size, rounded(c, s));
    }
    model_bind_unit(m, &m->params, u, copy);
    m->bf16_copy[u] = copy;
}

void model_unit_release(Model *m, int u) {
    if (m->copy16[u]) {
        weights16_drop(m->copy16[u], m->shard.unit_size[u]);
        if (!model_copy16_kept(m)) mem_free(m->copy16[u]);   // (a kept copy stays for the next use)
        m->copy16[u] = NULL;
    }
    if (m->bf16_copy[u]) {
        mem_free(m->bf16_copy[u]);
        m->bf16_copy[u] = NULL;
        // Without FSDP the pointers go back to the master weights (FSDP rebinds at each gather).
        if (m->shard.F == 1) model_bind_unit(m, &m->params, u, m->params_mem + m->shard.local_off[u]);
    }
    if (m->hooks && m->hooks->release) m->hooks->release(m, u);
}

void model_grad_begin(Model *m, int u) {
    if (m->hooks && m->hooks->grad_begin) m->hooks->grad_begin(m, u);
}

void model_grad_end(Model *m, int u) {
    if (m->hooks && m->hooks->grad_end) m->hooks->grad_end(m, u);
}

static void unit_prefetch(Model *m, int u) {
    if (m->hooks && m->hooks->prefetch) m->hooks->prefetch(m, u);
}

static void units_drain(Model *m) {
    if (m->hooks && m->hooks->drain) m->hooks->drain(m);
}

// scan_layers (docs/optimizations.md#scan_layers), read here only. MaxText scans its decoder layers by
// default (true): one compiled layer body run L times, whose temporaries every layer reuses,
// as the loops below do when each layer frees its own before the next begins. Unrolled
// (false), each layer is separate code and XLA gives each its own temporaries: a set per
// layer. Within one layer buffers are reused as in the scanned body; across layers they are
// not. So each layer's forward (with what remat keeps or drops) and each layer's backward
// (with its recomputation) measures its set, the high-water of its temporaries above what
// was live when it began, and leaves a buffer of that size allocated until the step's
// backward pass ends: the temp peak grows by about one forward set and one backward set per
// layer. Same arithmetic, same bits.
static size_t layer_temps_begin(const Model *m) {
    if (m->cfg.scan_layers) return 0;
    mem_temp_hw_reset();
    return mem_temp_live();
}

static void layer_temps_end(const Model *m, size_t base, const char *name) {
    if (m->cfg.scan_layers) return;
    size_t set = mem_temp_hw() - base;
    if (set) mem_hold(mem_alloc(MEM_TEMP, set, name));   // freed by mem_release_held
}

// ---------------------------------------------------------------------------------------
// Forward and backward of one microbatch: the whole stack first, then its pieces.

void model_forward(Model *m, const int *ids, const int *targets, int B, int S, float lb_coef, FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim, L = c->base_num_decoder_layers;
    m->B = B; m->S = S; m->ids = ids; m->targets = targets;

    // Units (sharding/fsdp.h): 0 the embedding, 1+l layer l, L+1 the head. Under FSDP each
    // is all-gathered just before use and freed right after.
    mem_phase("forward embedding");   // phases name the moments of the memory timeline (report/plan.h)
    float *x = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "x (layer input)");
    // overlap_collectives (sharding/overlap.h): while a unit computes, the next one is
    // gathered on a helper thread.
    model_unit_acquire(m, 0);
    unit_prefetch(m, 1);
    model_embed_forward(m, x, ids, T);
    model_unit_release(m, 0);
    for (int l = 0; l < L; l++) {
        mem_phase("forward layer %d", l);
        size_t base = layer_temps_begin(m);
        model_unit_acquire(m, 1 + l);
        unit_prefetch(m, 2 + l);   // the next layer's unit, or the head's
        x = model_layer_forward(m, l, &m->acts[l], x, B, S, lb_coef, st);
        model_unit_release(m, 1 + l);
        remat_after_forward(m, l, &m->acts[l]);   // what the backward will recompute or fetch (model/remat.h)
        layer_temps_end(m, base, "a layer's forward temporaries (scan_layers=false)");
    }
    mem_phase("forward head and loss");
    model_unit_acquire(m, L + 1);
    model_head_forward(m, x, T);
    model_unit_release(m, L + 1);
    units_drain(m);   // (nothing is left in flight: each prefetch was taken)
    model_loss_forward(m, targets, B, S, st);
}

void model_backward(Model *m, float scale, float lb_coef) {
    const Config *c = &m->cfg;
    int B = m->B, S = m->S, T = B * S, D = c->base_emb_dim;
    int L = c->base_num_decoder_layers;

    // Loss and output head.
    mem_phase("backward head and loss");
    model_head_unpack(m, T);
    model_unit_acquire(m, L + 1);
    unit_prefetch(m, L);   // the backward walks the units down: the last layer's next
    model_grad_begin(m, L + 1);
    float *dnf;
    float *dx = model_head_backward(m, B, S, scale, &dnf);
    model_grad_end(m, L + 1);
    model_unit_release(m, L + 1);
    float *dh = mem_floats(MEM_TEMP, (size_t)T * D, "d h");
    float *dn = dnf;   // reused: gradient of a norm's output
    for (int l = L - 1; l >= 0; l--) {
        mem_phase("backward layer %d", l);
        size_t base = layer_temps_begin(m);
        remat_block_inputs(m, l, B, S, lb_coef);   // remat_nested_block: the block's layer inputs
        model_unit_acquire(m, 1 + l);
        if (l > 0) unit_prefetch(m, l);   // layer l-1's unit (the embedding's backward needs no weights)
        model_grad_begin(m, 1 + l);
        model_layer_backward(m, l, &m->acts[l], dx, dh, dn, B, S, lb_coef);
        model_grad_end(m, 1 + l);
        model_unit_release(m, 1 + l);
        model_layer_free(m, l, &m->acts[l]);   // done with: the layers below need only their own
        layer_temps_end(m, base, "a layer's backward temporaries (scan_layers=false)");
    }
    mem_phase("backward embedding");
    units_drain(m);
    model_grad_begin(m, 0);
    model_embed_backward(m, dx, m->ids, B, S);
    model_grad_end(m, 0);
    mem_free(dnf); mem_free(dx); mem_free(dh);
    model_head_free(m);
    mem_release_held();   // scan_layers=false: every layer's temporaries, kept until now
}

void model_discard(Model *m) {
    for (int l = 0; l < m->cfg.base_num_decoder_layers; l++) model_layer_free(m, l, &m->acts[l]);
    model_head_free(m);
    mem_release_held();
}

// ---------------------------------------------------------------------------------------
// The pieces of the stack, each a pure computation on weights that are already in place
// (the caller acquires and releases the units and brackets a backward piece with the
// gradient reduction), so that model_forward/model_backward above and the pipeline
// (pipeline/) share them.

static float *bias_of(const Model *m, int l) {
    return m->router_bias ? m->router_bias + (size_t)l * m->cfg.num_experts : NULL;
}

// use_iota_embed + iota_embed_max_bytes (docs/optimizations.md#use_iota_embed), read here only. MaxText's
// iota embedding looks the tokens up as onehot(ids) @ table instead of a gather: on an
// accelerator a matmul can beat a gather, at the cost of a (T,V) one-hot tensor (this
// device's slice of the vocabulary), which the guard caps: above iota_embed_max_bytes the
// gather is used. Forward and backward give the gather's bits (model/embedding.c).
static int iota_embed(const Model *m, int T) {
    int64_t onehot = (int64_t)T * m->dims.vocab_size * (int64_t)sizeof(float);
    return m->cfg.use_iota_embed && onehot <= m->cfg.iota_embed_max_bytes;
}

void model_embed_forward(Model *m, float *x, const int *ids, int T) {
    int D = m->cfg.base_emb_dim, V = m->dims.vocab_size, v0 = m->dims.vocab_first;
    if (iota_embed(m, T)) embedding_forward_onehot(x, ids, m->params.embedding, T, D, V, v0);   // (T,D)
    else {
        embedding_forward(x, ids, m->params.embedding, T, D, V, v0);
        // The gather reads the float32 table; with the weights' copy 16-bit (bf16_storage),
        // that is the unrounded one: its rows rounded here are what the copy's rows would be.
        if (weights16_on() && cfg_bf16(&m->cfg)) kern()->cast->round_to_bf16(x, (size_t)T * D);
    }
    tp_all_reduce(x, (size_t)T * D);   // vocabulary-parallel: each row comes from one device
}

void model_embed_backward(Model *m, const float *dx, const int *ids, int B, int S) {
    int D = m->cfg.base_emb_dim, V = m->dims.vocab_size, v0 = m->dims.vocab_first;
    if (iota_embed(m, B * S))
        embedding_backward_onehot(m->grads.embedding, dx, ids, B * S, D, V, v0, leaves_of(&m->cfg, B, S));
    else embedding_backward(m->grads.embedding, dx, ids, B * S, D, V, v0, leaves_of(&m->cfg, B, S));
}

// moe_reshard_io (docs/optimizations.md#moe_reshard_io), read here only. MaxText's DeepSeek MoE layer
// can reshard the block's input and output (sharding constraints between the attention
// part and the MoE block) where the layout was already right; XLA materialised each as a
// copy. On: the block reads a copy of its input and writes into a fresh output buffer that
// is then copied into the residual stream, two activation-sized (T,D) temporaries held
// across the block (MEM_TEMP), and the backward pass copies the two gradients likewise.
// Copies change no value: the same bits. Off (the default, as in MaxText's layer): none.
static int moe_reshards(const Config *c, int l) {
    return c->moe_reshard_io && cfg_is_deepseek(c) && cfg_layer_is_moe(c, l);
}
static float *reshard_copy(const float *x, size_t n, const char *name) {
    float *y = mem_floats(MEM_TEMP, n, name);
    mem_copy(y, x, sizeof(float) * n);
    return y;
}

// h (T,D) = x + (attention core and out projection) of the q, k, v in a.
static void attn_core_residual(Model *m, int l, LayerActs *a, float *h, const float *x, int B, int S) {
    const Config *c = &m->cfg;
    size_t n = (size_t)B * S * c->base_emb_dim;
    LayerParams *p = &m->params.layers[l];
    if (cfg_is_mla(c)) mla_core_forward(c, &m->dims, &p->mla, &a->mla, h, B, S);
    else attention_core_forward(c, &m->dims, &p->attn, &a->attn, h, B, S);
    if (!h) return;   // (h kept: o and its statistics alone)
    kern()->sum->residual_add(h, x, n);
    round_bf16(h, n, cfg_bf16(c));   // residual (cast point 10)
}

// out = RMSNorm(x) with the norm's scale: out (T,D), rstd (T), returns the broadcast scale
// (rmsnorm_fused_scale=false) or NULL. The sharding constraint on x as the norm reads it
// (model/constraint.h) is a copy or nothing.
static float *rmsnorm_constrained(const Config *c, float *out, float *rstd, const float *x, const float *scale,
                                  int T, int D, const char *constraint) {
    const float *xc = constraint_apply(c, x, (size_t)T * D, &SPEC_RESIDUAL, constraint);
    float *bscale = rmsnorm_forward_cfg(c, out, rstd, xc, scale, T, D);
    constraint_end(xc, x);
    return bscale;
}

// Its backward: dx += d RMSNorm(x)/dx applied to dout, dscale += the scale's gradient; the
// forward's constraint transposed is one on dout, at the same point.
static void rmsnorm_constrained_backward(const Config *c, float *dx, float *dscale, const float *dout, const float *x,
                                         const float *scale, const float *bscale, const float *rstd, int T, int D,
                                         Leaves leaf, const char *constraint) {
    const float *dc = constraint_apply(c, dout, (size_t)T * D, &SPEC_RESIDUAL, constraint);
    rmsnorm_backward_cfg(c, dx, dscale, dc, x, scale, bscale, rstd, T, D, leaf);
    constraint_end(dc, dout);
}

float *model_attn_block_forward(Model *m, int l, LayerActs *a, const float *x, int B, int S) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    LayerParams *p = &m->params.layers[l];
    // n1 = RMSNorm_pre(x)
    a->n1 = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * D, "attention norm out");   // the norm writes it whole
    a->rstd1 = mem_floats(MEM_ACTIVATIONS, (size_t)T, "attention norm rstd");
    a->scale1 = rmsnorm_constrained(c, a->n1, a->rstd1, x, p->pre_norm, T, D, "constraint copy: decoder layer input");
    // h = x + Attention(n1), in two parts: the q/k/v projections, then the core, the out
    // projection and the residual (the part remat_policy=save_qkv_proj recomputes,
    // model_attn_core_forward). Attention reads n1 under a sharding constraint.
    float *h = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * D, "h (after attention)");   // written whole
    const float *n1c = constraint_apply(c, a->n1, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: attention input");
    if (cfg_is_mla(c)) mla_proj_forward(c, &m->dims, &p->mla, &a->mla, n1c, B, S);
    else attention_proj_forward(c, &m->dims, &p->attn, &a->attn, n1c, B, S);
    attn_core_residual(m, l, a, h, x, B, S);
    constraint_end(n1c, a->n1);
    return h;
}

float *model_attn_core_forward(Model *m, int l, LayerActs *a, const float *x, int B, int S) {
    float *h = x ? mem_floats_uninit(MEM_ACTIVATIONS, (size_t)B * S * m->cfg.base_emb_dim, "h (after attention)")
                 : NULL;   // (h kept: o and its statistics alone)
    attn_core_residual(m, l, a, h, x, B, S);
    return h;
}

// The MoE forward, or a recomputation that takes the kept expert outputs y (model/moe.h).
static void moe_call(const Config *c, const LocalDims *ld, const MoeParams *p, const float *bias, MoeSaved *s,
                     float *out, const float *x, int B, int S, float lb_coef, double *lb, long *counts, float *y) {
    if (y) moe_recompute(c, ld, p, bias, s, x, B, S, lb_coef, lb, counts, y);
    else moe_forward(c, ld, p, bias, s, out, x, B, S, lb_coef, lb, counts);
}

// out (T,D) = MoE(n2) of layer l, with moe_reshard_io's copies around it (out == NULL:
// the saved tensors only, moe_forward).
static void moe_block_forward(Model *m, int l, LayerActs *a, float *out, const float *n2, int B, int S,
                              float lb_coef, FwdStats *st) {
    const Config *c = &m->cfg;
    MoeParams *p = &m->params.layers[l].moe;
    long *counts = st->expert_counts ? st->expert_counts + (size_t)l * c->num_experts : NULL;
    double *lb = st->aux_seq + (size_t)(l - c->first_num_dense_layers) * st->aux_stride;
    float *kept_y = out ? NULL : a->ffn_y;   // remat kept the expert outputs: the recomputation takes them
    a->ffn_y = NULL;
    if (!moe_reshards(c, l)) {
        moe_call(c, &m->dims, p, bias_of(m, l), &a->moe, out, n2, B, S, lb_coef, lb, counts, kept_y);
        return;
    }
    size_t n = (size_t)B * S * c->base_emb_dim;
    float *in = reshard_copy(n2, n, "moe block input, resharded (a copy)");
    float *res = out ? mem_floats(MEM_TEMP, n, "moe block output, before its reshard") : NULL;
    moe_call(c, &m->dims, p, bias_of(m, l), &a->moe, res, in, B, S, lb_coef, lb, counts, kept_y);
    if (out) mem_copy(out, res, sizeof(float) * n);
    mem_free(in);
    mem_free(res);
}

// The FFN block of layer l on h: n2, rstd2 and the FFN's saved tensors in a, and with
// output the block's output x' = h + FFN(RMSNorm_post(h)) (T,D), returned; without it (a
// remat recomputation) NULL, and what only the output needs is not computed.
static float *ffn_block(Model *m, int l, LayerActs *a, const float *h, int B, int S, float lb_coef, FwdStats *st,
                        int output) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    LayerParams *p = &m->params.layers[l];
    // n2 = RMSNorm_post(h)
    a->n2 = mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * D, "ffn norm out");   // the norm writes it whole
    a->rstd2 = mem_floats(MEM_ACTIVATIONS, (size_t)T, "ffn norm rstd");
    a->scale2 = rmsnorm_constrained(c, a->n2, a->rstd2, h, p->post_norm, T, D,
                                    "constraint copy: attention output (residual)");
    // x' = h + FFN(n2), FFN the MoE block or the dense MLP, reading n2 under a constraint
    float *xn = output ? mem_floats_uninit(MEM_ACTIVATIONS, (size_t)T * D, "x (layer input)") : NULL;   // written whole
    const float *n2c = constraint_apply(c, a->n2, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: mlp input");
    if (cfg_layer_is_moe(c, l)) moe_block_forward(m, l, a, xn, n2c, B, S, lb_coef, st);
    else mlp_forward(c, &p->mlp, &a->mlp, xn, n2c, T, D, m->dims.mlp_dim);
    constraint_end(n2c, a->n2);
    if (!xn) return NULL;
    kern()->sum->residual_add(xn, h, (size_t)T * D);
    round_bf16(xn, (size_t)T * D, cfg_bf16(c));     // residual (cast point 10)
    return xn;
}

float *model_ffn_block_forward(Model *m, int l, LayerActs *a, const float *h, int B, int S, float lb_coef,
                               FwdStats *st) {
    return ffn_block(m, l, a, h, B, S, lb_coef, st, 1);
}

void model_ffn_block_saved(Model *m, int l, LayerActs *a, const float *h, int B, int S, float lb_coef,
                           FwdStats *st) {
    ffn_block(m, l, a, h, B, S, lb_coef, st, 0);
}

float *model_layer_forward(Model *m, int l, LayerActs *a, float *x, int B, int S, float lb_coef, FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    a->x = x;
    a->h = model_attn_block_forward(m, l, a, x, B, S);                  // h  = x + Attention(RMSNorm_pre(x))
    float *xn = model_ffn_block_forward(m, l, a, a->h, B, S, lb_coef, st);   // x' = h + FFN(RMSNorm_post(h))
    // What this layer's backward reads, kept as 16-bit numbers in bf16 mode.
    act_pack(c, &a->x, (size_t)T * D);
    act_pack(c, &a->n1, (size_t)T * D);
    act_pack(c, &a->h, (size_t)T * D);
    act_pack(c, &a->n2, (size_t)T * D);
    return xn;
}

// dn (T,D) = d MoE(n2)/d n2 applied to dout (dn zero on entry), with moe_reshard_io's
// transposes: copies of both gradients. Frees the block's saved tensors.
static void moe_block_backward(Model *m, int l, LayerActs *a, float *dn, const float *dout, int B, int S,
                               float lb_coef) {
    const Config *c = &m->cfg;
    MoeParams *p = &m->params.layers[l].moe, *g = &m->grads.layers[l].moe;
    if (moe_reshards(c, l)) {
        size_t n = (size_t)B * S * c->base_emb_dim;
        float *dres = reshard_copy(dout, n, "moe block d output, resharded (a copy)");
        float *din = mem_floats(MEM_TEMP, n, "moe block d input, before its reshard");
        moe_backward(c, &m->dims, p, g, &a->moe, din, dres, a->n2, B, S, lb_coef);
        mem_copy(dn, din, sizeof(float) * n);   // dn was zero, as din
        mem_free(dres);
        mem_free(din);
    } else {
        moe_backward(c, &m->dims, p, g, &a->moe, dn, dout, a->n2, B, S, lb_coef);
    }
    moe_saved_free(&a->moe);
}

// x' = h + FFN(n2), n2 = RMSNorm_post(h):  dh = dx' + d FFN(n2)/dh. dx holds dx' (rounded
// here in bf16 mode); dn is scratch.
static void ffn_block_backward(Model *m, int l, LayerActs *a, float *dx, float *dh, float *dn, int B, int S,
                               float lb_coef) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    Leaves leaf = leaves_of(c, B, S);   // this device's tokens in the canonical tree (base/context.h)
    LayerParams *p = &m->params.layers[l], *gl = &m->grads.layers[l];
    prec_round(c, dx, (size_t)T * D);
    mem_copy(dh, dx, sizeof(float) * T * D);
    mem_zero(dn, sizeof(float) * T * D);
    if (cfg_layer_is_moe(c, l)) moe_block_backward(m, l, a, dn, dx, B, S, lb_coef);
    else mlp_backward(c, &p->mlp, &gl->mlp, &a->mlp, dn, dx, a->n2, T, D, m->dims.mlp_dim, leaf);
    prec_round(c, dn, (size_t)T * D);
    // The forward's constraints transpose to constraints on the gradients at the same points
    // (model/constraint.h): here d(mlp input), as the post-norm's backward reads it.
    rmsnorm_constrained_backward(c, dh, gl->post_norm, dn, a->h, p->post_norm, a->scale2, a->rstd2, T, D, leaf,
                                 "constraint copy: d mlp input");
    prec_round(c, dh, (size_t)T * D);
}

// h = x + Attention(n1), n1 = RMSNorm_pre(x):  dx = dh + d Attention(n1)/dx. dn is scratch.
static void attn_block_backward(Model *m, int l, LayerActs *a, float *dx, float *dh, float *dn, int B, int S) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim;
    Leaves leaf = leaves_of(c, B, S);
    LayerParams *p = &m->params.layers[l], *gl = &m->grads.layers[l];
    const float *dhc = constraint_apply(c, dh, (size_t)T * D, &SPEC_RESIDUAL, "constraint copy: d attention output");
    mem_copy(dx, dhc, sizeof(float) * T * D);
    mem_zero(dn, sizeof(float) * T * D);
    if (cfg_is_mla(c)) mla_backward(c, &m->dims, &p->mla, &gl->mla, &a->mla, dn, dhc, a->n1, B, S);
    else attention_backward(c, &m->dims, &p->attn, &gl->attn, &a->attn, dn, dhc, a->n1, B, S);
    constraint_end(dhc, dh);
    prec_round(c, dn, (size_t)T * D);
    rmsnorm_constrained_backward(c, dx, gl->pre_norm, dn, a->x, p->pre_norm, a->scale1, a->rstd1, T, D, leaf,
                                 "constraint copy: d attention input");
}

// Everything each half of the backward reads, on the device and as floats: what the remat
// policy offloaded is copied back, what it dropped is recomputed (model/remat.h).
void model_layer_backward(Model *m, int l, LayerActs *a, float *dx, float *dh, float *dn, int B, int S, float lb_coef) {
    remat_restore_ffn(m, l, a, B, S, lb_coef);
    ffn_block_backward(m, l, a, dx, dh, dn, B, S, lb_coef);   // dh = dx' + d FFN(RMSNorm_post(h))/dh
    remat_restore_attn(m, l, a, B, S);
    attn_block_backward(m, l, a, dx, dh, dn, B, S);          // dx = dh + d Attention(RMSNorm_pre(x))/dx
}

void model_layer_free(Model *m, int l, LayerActs *a) {
    if (cfg_is_mla(&m->cfg)) mla_saved_free(&a->mla);
    else attention_saved_free(&a->attn);
    if (cfg_layer_is_moe(&m->cfg, l)) moe_saved_free(&a->moe);
    else mlp_saved_free(&a->mlp);
    mem_free(a->x); matmul_packed_free(a->n1); mem_free(a->rstd1);   // n1: perhaps a 16-bit operand (act_for_products)
    mem_free(a->h); mem_free(a->n2); mem_free(a->rstd2);
    mem_free(a->scale1); mem_free(a->scale2); mem_free(a->ffn_y);
    a->x = a->n1 = a->rstd1 = a->h = a->n2 = a->rstd2 = a->scale1 = a->scale2 = a->ffn_y = NULL;
}

// Without vocabulary tiling, under packed_operands (model/precision.h) and without the
// logits' constraint copies, the logits are made as 16-bit numbers (the head's product
// rounded, kernels/matmul16.h) and the loss reads them so; in the backward pass d logits are
// written over them, 16-bit numbers that the head's products read in place
// (model/matmul.h: matmul_packed). Else both are float32, d logits written over the logits
// and rounded in place.
static int head_packed(const Config *c) { return packed_operands(c) && !constraint_copies(c, &SPEC_LOGITS); }

void model_head_forward(Model *m, float *x, int T) {
    const Config *c = &m->cfg;
    int D = c->base_emb_dim, V = m->dims.vocab_size;
    // logits = RMSNorm_final(x) @ W_out
    m->xL = x;
    m->nf = mem_floats(MEM_ACTIVATIONS, (size_t)T * D, "final norm out");
    m->rstdf = mem_floats(MEM_ACTIVATIONS, (size_t)T, "final norm rstd");
    m->scalef = rmsnorm_constrained(c, m->nf, m->rstdf, x, m->params.final_norm, T, D, "constraint copy: decoder output");
    // Cast point 16: the logits rounded to bf16, kept as 16-bit numbers where head_packed.
    m->logits16 = !vocab_tiled(c) && head_packed(c);
    if (vocab_tiled(c)) return;   // num_vocab_tiling: the logits come tile by tile with the loss (model/vocab_tiling.h)
    if (m->logits16) {
        m->logits = packed_alloc(c, (size_t)T * V, 0, "logits");
        matmul_forward_round16(m->logits, m->nf, m->params.logits, T, D, V);
        return;
    }
    m->logits = mem_floats(MEM_ACTIVATIONS, (size_t)T * V, "logits");
    matmul_forward(m->logits, m->nf, m->params.logits, T, D, V, 0);
    round_bf16(m->logits, (size_t)T * V, cfg_bf16(c));   // the loss reads them as float32
}

void model_loss_forward(Model *m, const int *targets, int B, int S, FwdStats *st) {
    const Config *c = &m->cfg;
    int T = B * S;
    m->targets = targets;
    if (vocab_tiled(c)) vocab_tiled_loss_forward(m, targets, B, S, st);   // needs nf as floats
    // What the head's backward reads, kept as 16-bit numbers in bf16 mode.
    act_pack(c, &m->xL, (size_t)T * c->base_emb_dim);
    act_pack(c, &m->nf, (size_t)T * c->base_emb_dim);
    if (vocab_tiled(c)) return;
    m->lse = mem_floats(MEM_ACTIVATIONS, (size_t)T, "logsumexp");
    // Sharding constraint on the logits as the loss reads them ((T, V/tensor) on a device).
    int V = m->dims.vocab_size;
    const float *z = constraint_apply(c, m->logits, (size_t)T * V, &SPEC_LOGITS, "constraint copy: logits");
    loss_forward(m->lse, st->loss_leaf, z, m->logits16, targets, T, V, m->dims.vocab_first, tp_local_chunks(c),
                 c->z_loss_multiplier, leaves_of(c, B, S));
    constraint_end(z, m->logits);
}

void model_head_unpack(Model *m, int T) {
    const Config *c = &m->cfg;
    act_unpack(c, &m->xL, (size_t)T * c->base_emb_dim);
    // nf: read by the head's weight gradient alone, a product, but for vocabulary tiling's
    // row copies
    if (vocab_tiled(c)) act_unpack(c, &m->nf, (size_t)T * c->base_emb_dim);
    else act_for_products(c, &m->nf, (size_t)T * c->base_emb_dim);
}

// d logits (T,V), the operand of the head's products; head_dlogits_end releases it.
static const float *head_dlogits(Model *m, int T, int V, float scale) {
    const Config *c = &m->cfg;
    int v0 = m->dims.vocab_first;
    if (m->logits16) {
        uint16_t *dz = (uint16_t *)(void *)m->logits;   // logits := d logits, the operand's numbers
        kern()->loss->loss_backward16(dz, m->lse, m->targets, T, V, v0, c->z_loss_multiplier, scale);
        m->logits = NULL;   // now matmul_packed's, freed by head_dlogits_end
        return matmul_packed(dz, (size_t)T * V);
    }
    loss_backward(m->logits, m->lse, m->targets, T, V, v0, c->z_loss_multiplier, scale);  // logits := dlogits
    // bf16: where the forward rounded a value, its gradient is rounded too (as autodiff
    // transposes a cast); here and at each such point in the layers' backward.
    prec_round(c, m->logits, (size_t)T * V);
    // The logits' constraint transposed: one on d logits (model/constraint.h).
    return constraint_apply(c, m->logits, (size_t)T * V, &SPEC_LOGITS, "constraint copy: d logits");
}
static void head_dlogits_end(Model *m, const float *d) {
    if (m->logits16) matmul_packed_free(d);
    else constraint_end(d, m->logits);
}

float *model_head_backward(Model *m, int B, int S, float scale, float **dnf_out) {
    const Config *c = &m->cfg;
    int T = B * S, D = c->base_emb_dim, V = m->dims.vocab_size;
    Leaves leaf = leaves_of(c, B, S);   // this device's tokens in the canonical tree (base/context.h)
    float *dnf;
    if (vocab_tiled(c)) {
        dnf = vocab_tiled_head_backward(m, B, S, scale);   // the same, tile by tile (model/vocab_tiling.h)
    } else {
        const float *d = head_dlogits(m, T, V, scale);
        dnf = mem_floats(MEM_TEMP, (size_t)T * D, "d final norm out");
        matmul_backward(NULL, m->grads.logits, d, m->nf, m->params.logits, T, D, V, leaf);
        tp_colpar_dinp(c, dnf, d, m->params.logits, T, D, V);   // a sum over the vocabulary
        head_dlogits_end(m, d);
        if (packed_operands(c)) {   // nf, 16-bit (act_for_products), is not read again
            matmul_packed_free(m->nf);
            m->nf = NULL;
        }
    }
    prec_round(c, dnf, (size_t)T * D);
    float *dx = mem_floats(MEM_TEMP, (size_t)T * D, "d x");
    rmsnorm_backward_cfg(c, dx, m->grads.final_norm, dnf, m->xL, m->params.final_norm, m->scalef, m->rstdf, T, D, leaf);
    *dnf_out = dnf;
    return dx;
}

void model_head_free(Model *m) {
    mem_free(m->xL); matmul_packed_free(m->nf); mem_free(m->rstdf); mem_free(m->logits); mem_free(m->lse);
    mem_free(m->scalef);
    m->xL = m->nf = m->rstdf = m->logits = m->lse = m->scalef = NULL;
}

float *model_logits_rows(const Model *m, size_t t0, size_t n) {
    size_t V = (size_t)m->dims.vocab_size;
    float *z = mem_floats(MEM_TEMP, n * V, "logits as floats");
    if (m->logits16) kern()->cast->unpack_bf16(z, (const uint16_t *)(const void *)m->logits + t0 * V, n * V);
    else mem_copy(z, m->logits + t0 * V, sizeof(float) * n * V);
    return z;
}

// ---------------------------------------------------------------------------------------
float model_lb_coef(const Config *c, int global_seqs) {
    if (c->load_balance_loss_weight <= 0.0f) return 0.0f;
    // L_lb = w * E^2 * mean_{b,e}(f*Pbar), then the mean over MoE layers.
    float E = (float)c->num_experts;
    return c->load_balance_loss_weight * E * E / ((float)global_seqs * E * (float)model_num_moe_layers(c));
}
