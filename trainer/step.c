// trainer/step.c: the optimizer step. The gradient of the global batch is the sum of the
// microbatches' gradients along the canonical tree, divided once by the global token
// count (the division is folded into the loss gradient's scale).
#include "trainer/step.h"      // StepResult, this file's functions
#include "model/remat.h"       // remat_plan: the remat policy checked before training
#include "optim/optimizer.h"   // optimizer_step, the learning-rate schedule
#include "sharding/fsdp.h"     // fsdp_attach, the gradient norm
#include "base/treesum.h"      // tree sums: the loss over leaves, microbatches' gradients
#include "base/memory.h"       // mem_floats, mem_phase
#include "base/fresh.h"        // the zeroed gradients, written onto 0.0f where untouched
#include "base/collectives.h"  // coll_all_reduce_double: the loss over the mesh
#include "optim/offload.h"     // host offload and the EMA copy
#include "pipeline/pipeline.h" // the step as a pipeline over `stage`
#include "core/common.h"       // die, MM_MAX

void step_check_config(const Config *c) {
    config_validate(c);
    remat_plan(c);            // dies on a remat combination that cannot run
    state_offload_check(c);   // and on a bad ema_decay or offload combination
}

void step_init(Model *m, const Config *c) {
    model_init_layout(m, c);
    optimizer_state_alloc(m);   // the state opt_type keeps (optim/optimizer.h)
    model_init_weights(m);
    fsdp_attach(m);
    state_offload_init(m);   // host offload of weights / optimizer state, the EMA copy (optim/offload.h)
}

// Tokens with a target: the loss is their mean, over the whole global batch. Counted on a
// host copy of the targets (device data).
static long count_targets(const int *targets, long n) {
    int *t = mem_host_copy(targets, sizeof(int) * n);
    long k = 0;
    for (long i = 0; i < n; i++) k += t[i] >= 0;
    free(t);
    return k;
}

// The step's loss from its per-leaf sums and per-sequence aux terms, both in tree order
// (device data, read here once into host copies).
static void finish_loss(const Config *c, StepResult *r, const double *loss_leaf_dev, long nleaves,
                        const double *aux_seq_dev, int nseq) {
    int nmoe = model_num_moe_layers(c);
    double *loss_leaf = mem_host_copy(loss_leaf_dev, sizeof(double) * nleaves);
    double *aux_seq = mem_host_copy(aux_seq_dev, sizeof(double) * (size_t)MM_MAX(nmoe, 1) * nseq);
    double ce = tree_sum_double(loss_leaf, nleaves) / (double)MM_MAX(r->ntok, 1);
    double aux = 0.0;
    if (c->load_balance_loss_weight > 0)
        for (int j = 0; j < nmoe; j++) aux += tree_sum_double(aux_seq + (size_t)j * nseq, nseq);
    free(loss_leaf);
    free(aux_seq);
    r->ce_loss = (float)ce;
    r->aux_loss = (float)aux;
    r->loss = (float)(ce + aux);
}

// Sums over a group of devices (exact: every entry is written by one device of the group
// and is zero on the others, and x + 0 == x). The group: sh->batch for what is per
// sequence (context devices hold the same value), sh->tokens for what is per token.
static void group_sum_double(Group *g, double *x, size_t n) {
    if (g && group_size(g) > 1) coll_all_reduce_double(g, x, n);
}
static void group_sum_long(Group *g, long *x, size_t n) {
    if (g && group_size(g) > 1) coll_all_reduce_long(g, x, n);
}

// The loss sums of this device's leaves (tree order, lv.n) into their places among the
// leaves of the step (base/context.h): chunk, then sequence of the step's nseq (all
// microbatches: this device's first is first_seq), then leaf.
// Both are device data: each leaf's sum is copied to its place (a handful per device).
static void place_leaves(double *all, const double *mine, Leaves lv, int nseq, long first_seq, const StateShard *sh) {
    for (long i = 0; i < lv.n; i++)
        mem_copy(all + leaf_global(lv, i, nseq, first_seq, sh->crank * lv.nchunks), mine + i, sizeof(double));
}

// The global batch of a step is A microbatches of B*nbatch sequences; this device holds
// sequences [brank*B, (brank+1)*B) of each microbatch (ids, targets: (A*B, S) here), and of
// each, part crank of nctx (S tokens) under context parallelism.
void compute_gradients(Model *m, const int *ids, const int *targets, int A, int B, int S,
                       StepResult *r, long *expert_counts, MicrobatchHook hook, void *hook_ctx) {
    const Config *c = &m->cfg;
    const StateShard *sh = &m->shard;
    Leaves lv = leaves_of(c, B, S);
    int Bg = B * sh->nbatch, nseq = A * Bg;
    long leaves_per_mb = lv.n * sh->nbatch * sh->nctx;   // leaves of one microbatch, all devices
    // The loss is the mean over the global batch's tokens: count them first.
    long ntok = count_targets(targets, (long)A * B * S);
    group_sum_long(sh->tokens, &ntok, 1);
    r->ntok = ntok;
    float scale = 1.0f / (float)MM_MAX(r->ntok, 1);
    float lb_coef = model_lb_coef(c, nseq);
    double *loss_leaf = (double *)mem_alloc(MEM_TEMP, sizeof(double) * leaves_per_mb * A, "loss per leaf");
    double *mine = (double *)mem_alloc(MEM_TEMP, sizeof(double) * lv.n, "loss per leaf (this device)");
    int nmoe = model_num_moe_layers(c);
    double *aux_seq = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)MM_MAX(nmoe, 1) * nseq, "aux per sequence");
    size_t ncount = (size_t)c->base_num_decoder_layers * c->num_experts;
    if (expert_counts) mem_zero(expert_counts, sizeof(long) * ncount);

    state_params_in(m);   // parameter_memory_host_offload: the weights onto the device for the step
    mem_zero(m->grads_mem, sizeof(float) * sh->local_n);
    fresh_arm(m->grads_mem, sh->local_n);   // until the backward passes end: base/fresh.h
    memset(r->fwd_peak, 0, sizeof r->fwd_peak);
    // The forwards below apply the remat policy (model/remat.h), except with a hook: the
    // parity dump's reads every layer's saved routing between forward and backward.
    m->training = !hook;
    // With several microbatches, each one's gradient is a leaf block of the tree; its
    // buffer is a second gradient-sized allocation (that is what accumulation costs), one
    // per chunk slot: the chunks are the tree's outermost level, above the microbatches.
    TreeSum acc;
    size_t nacc = sh->local_n * (size_t)sh->grad_slots;
    if (A > 1) treesum_begin(&acc, nacc, MEM_GRADS, "microbatch grads");
    for (int mb = 0; mb < A; mb++) {
        const int *mids = ids + (size_t)mb * B * S, *mtg = targets + (size_t)mb * B * S;
        if (pipeline_active()) {   // the stage's layers, microbatch by microbatch (pipeline/)
            FwdStats st = {loss_leaf + mb * leaves_per_mb, aux_seq + (long)mb * Bg, nseq, expert_counts};
            if (A > 1) model_set_grad_target(m, treesum_leaf(&acc));
            pipeline_train(m, mids, mtg, B, S, scale, lb_coef, &st);
            if (A > 1) treesum_push(&acc);
            continue;
        }
        long first_seq = (long)mb * Bg + (long)sh->brank * B;   // this device's first sequence
        FwdStats st = {mine, aux_seq + first_seq, nseq, expert_counts};
        // The forward pass's own peak (mem_mark_reset): a forward-only temporary shows here
        // even when the backward pass sets the step's peak.
        mem_mark_reset(mem_device());
        model_forward(m, mids, mtg, B, S, lb_coef, &st);
        for (int t = 0; t < MEM_NTAGS; t++) r->fwd_peak[t] = MM_MAX(r->fwd_peak[t], mem_device()->mark[t]);
        place_leaves(loss_leaf, mine, lv, nseq, first_seq, sh);
        if (hook) hook(m, mb, hook_ctx);
        if (A > 1) model_set_grad_partial(m, treesum_leaf(&acc));
        model_backward(m, scale, lb_coef);
        if (A > 1) treesum_push(&acc);
    }
    fresh_disarm();
    if (A > 1) {
        // The microbatches' sum per chunk slot, then the chunks and context (fsdp_grad_finish).
        float *sum = sh->grad_slots > 1 ? mem_floats(MEM_GRADS, nacc, "microbatch grads, per chunk") : m->grads_mem;
        treesum_end(&acc, sum);
        fsdp_grad_finish(m, sum);
        if (sum != m->grads_mem) mem_free(sum);
        model_set_grad_target(m, m->grads_mem);
    }
    m->training = 0;
    group_sum_double(sh->tokens, loss_leaf, (size_t)leaves_per_mb * A);
    group_sum_double(sh->batch, aux_seq, (size_t)MM_MAX(nmoe, 1) * nseq);
    if (expert_counts) group_sum_long(sh->tokens, expert_counts, ncount);
    finish_loss(c, r, loss_leaf, leaves_per_mb * A, aux_seq, nseq);
    mem_phase("gradient norm");
    r->grad_norm = fsdp_grad_norm(m);
    mem_free(loss_leaf);
    mem_free(mine);
    mem_free(aux_seq);
}

// skip_noop_grad_cast (docs/optimizations.md#skip_noop_grad_cast), read here only. MaxText casts the
// gradients to grad_dtype before the optimizer; with float32 gradients and grad_dtype
// float32 the cast changes nothing, and the guard skips it. Without the guard the cast
// writes a gradient-sized copy (MEM_GRADS) that clipping and AdamW then read: the same
// values, so the same bits, for one more gradient buffer during the update.
static float *grad_dtype_cast(Model *m) {
    if (m->cfg.skip_noop_grad_cast) return NULL;
    float *cast = mem_floats(MEM_GRADS, m->shard.local_n, "grads cast to grad_dtype (a no-op copy)");
    mem_copy(cast, m->grads_mem, sizeof(float) * m->shard.local_n);
    float *orig = m->grads_mem;
    m->grads_mem = cast;   // what the optimizer reads
    return orig;
}

// donate_buffers (docs/optimizations.md#donate_buffers), read here only. MaxText donates the train
// state to the step, so XLA updates the parameters in place. Without donation the update
// writes the new parameters into a new buffer (MEM_PARAMS) while the old ones are still
// held, and drops the old after: one model-sized copy at the update. Same arithmetic, same bits.
static float *params_undonated(Model *m) {
    if (m->cfg.donate_buffers) return NULL;
    const StateShard *sh = &m->shard;
    float *fresh = mem_floats(MEM_PARAMS, sh->local_n, "params, new copy (buffers not donated)");
    mem_copy(fresh, m->params_mem, sizeof(float) * sh->local_n);   // AdamW then updates this copy
    float *old = m->params_mem;
    m->params_mem = fresh;
    if (sh->F == 1)   // whole units here: the layers' pointers move to the new buffer (FSDP binds at each gather)
        for (int u = 0; u < sh->nunits; u++)
            if (sh->here[u]) model_bind_unit(m, &m->params, u, m->params_mem + sh->local_off[u]);
    return old;
}

void apply_update(Model *m, StepResult *r, const long *expert_counts, long tokens) {
    const Config *c = &m->cfg;
    r->lr = lr_schedule(c, m->step);
    mem_phase("optimizer");
    float *grads_before_cast = grad_dtype_cast(m);
    float *old_params = params_undonated(m);
    // The optimizer opt_type names (optim/optimizer.c), clipping the gradient by its global norm.
    optimizer_step(m, r->lr, m->step + 1, r->grad_norm);
    mem_free(old_params);
    if (grads_before_cast) {   // the cast copy is dropped; the next step accumulates into the original
        mem_free(m->grads_mem);
        m->grads_mem = grads_before_cast;
    }
    if (m->router_bias && c->routed_bias_update_rate > 0)
        for (int l = c->first_num_dense_layers; l < c->base_num_decoder_layers; l++)
            router_bias_update(m->router_bias + (size_t)l * c->num_experts, expert_counts + (size_t)l * c->num_experts,
                               tokens, c->num_experts, c->num_experts_per_tok, c->routed_bias_update_rate);
    m->step++;
    ema_update(m);
    state_params_out(m);   // parameter_memory_host_offload: back to host memory until the next step
}

// One training step: the gradients, then the update. A non-finite loss or gradient stops the
// run before the update (a dry run computes nothing to check). The routing-bias update counts
// the global batch's tokens: A * B * nbatch sequences of S * nctx tokens.
void train_step(Model *m, const int *ids, const int *targets, int A, int B, int S, StepResult *r) {
    const Config *c = &m->cfg;
    size_t ncount = (size_t)c->base_num_decoder_layers * c->num_experts;
    long *counts = (long *)mem_alloc(MEM_TEMP, sizeof(long) * ncount, "expert counts");
    compute_gradients(m, ids, targets, A, B, S, r, counts, NULL, NULL);
    if (!c->dry_run && (!isfinite(r->loss) || !isfinite(r->grad_norm)))
        die("non-finite %s at step %d (loss %g, grad norm %g): stopped before the update, so "
            "the last checkpoint written (if any) is the last good state; lower learning_rate "
            "or check the data", isfinite(r->loss) ? "gradient" : "loss", m->step, r->loss, r->grad_norm);
    apply_update(m, r, counts, (long)A * B * m->shard.nbatch * S * m->shard.nctx);
    mem_free(counts);
}

// B: this device's sequences (S tokens of each: its part); the eval batch is B * nbatch sequences.
float eval_loss(Model *m, const int *ids, const int *targets, int B, int S) {
    const Config *c = &m->cfg;
    const StateShard *sh = &m->shard;
    Leaves lv = leaves_of(c, B, S);
    int nmoe = model_num_moe_layers(c), Bg = B * sh->nbatch;
    long nleaves = lv.n * sh->nbatch * sh->nctx;
    double *loss_leaf = (double *)mem_alloc(MEM_TEMP, sizeof(double) * nleaves, "eval loss per leaf");
    double *mine = (double *)mem_alloc(MEM_TEMP, sizeof(double) * lv.n, "eval loss per leaf (this device)");
    double *aux_seq = (double *)mem_alloc(MEM_TEMP, sizeof(double) * (size_t)MM_MAX(nmoe, 1) * Bg, "eval aux");
    long first_seq = (long)sh->brank * B;
    FwdStats st = {mine, aux_seq + first_seq, Bg, NULL};
    state_params_in(m);
    if (pipeline_active()) {   // the pipeline places its sequences' statistics itself
        FwdStats whole = {loss_leaf, aux_seq, Bg, NULL};
        pipeline_eval(m, ids, targets, B, S, model_lb_coef(c, Bg), &whole);
    } else {
        model_forward(m, ids, targets, B, S, model_lb_coef(c, Bg), &st);
        model_discard(m);
        place_leaves(loss_leaf, mine, lv, Bg, first_seq, sh);
    }
    state_params_out(m);
    StepResult r = {0};
    r.ntok = count_targets(targets, (long)B * S);
    group_sum_long(sh->tokens, &r.ntok, 1);
    group_sum_double(sh->tokens, loss_leaf, (size_t)nleaves);
    group_sum_double(sh->batch, aux_seq, (size_t)MM_MAX(nmoe, 1) * Bg);
    finish_loss(c, &r, loss_leaf, nleaves, aux_seq, Bg);
    mem_free(loss_leaf);
    mem_free(mine);
    mem_free(aux_seq);
    return r.loss;
}
