// optim/optimizer.c: the optimizer step, chosen here once by opt_type; the schedule,
// clipping and the routing-bias update. The updates' arithmetic is in kernels/optim.h.
#include "optim/optimizer.h"
#include "model/model.h"
#include "optim/adafactor.h"
#include "optim/muon.h"
#include "base/memory.h"
#include "base/collectives.h"
#include "optim/offload.h"
#include "kernels/kernels.h"
#include "core/common.h"

// optax.linear_schedule(from, to, transition_steps = n - 1) at step k of its piece: from
// `from` to `to` in n steps, the last one reaching `to`; a piece of one step stays at
// `from` (optax's schedule for transition_steps <= 0). The arithmetic is optax's.
static float linear_piece(float from, float to, int n, int k) {
    if (n <= 1) return from;
    float frac = 1.0f - (float)MM_MIN(k, n - 1) / (float)(n - 1);
    return (from - to) * frac + to;
}

// MaxText's cosine piece: from `from` to `to` over n steps, the last one reaching `to`
// (a piece of one step is `to`).
static float cosine_piece(float from, float to, int n, int k) {
    float pct = n > 1 ? (float)MM_MIN(k, n - 1) / (float)(n - 1) : 1.0f;
    float a = 0.5f * (cosf((float)M_PI * pct) + 1.0f);
    return from * a + to * (1.0f - a);
}

float lr_schedule(const Config *c, int step) {
    float lr = c->learning_rate, final = c->learning_rate_final_fraction * lr;
    int len = cfg_lr_schedule_length(c);
    if (step >= len && step < c->steps) return 0.0f;   // MaxText's constant-zero piece, up to steps
    int warmup = cfg_lr_warmup_steps(c);
    if (step < warmup) return linear_piece(0.0f, lr, warmup, step);
    int k = step - warmup;
    if (c->lr_schedule_type == LR_SCHEDULE_COSINE) return cosine_piece(lr, final, len - warmup, k);
    int decay = cfg_lr_wsd_decay_steps(c), stable = len - warmup - decay;   // config_validate: stable >= 0
    if (k < stable) return lr;
    k -= stable;
    if (c->wsd_decay_style == WSD_DECAY_LINEAR) return linear_piece(lr, final, decay, k);
    return cosine_piece(lr, final, decay, k);
}

GradClip grad_clip_of(float norm, float threshold) {
    GradClip k = {!(threshold <= 0.0f || norm < threshold), norm, threshold};
    return k;
}

void grad_clip(float *g, size_t n, float norm, float threshold) {
    if (grad_clip_of(norm, threshold).on) kern()->optim->clip_scale(g, n, norm, threshold);
}

int optimizer_state_floats(const Config *c) {
    if (c->opt_type == OPT_ADAMW || c->opt_type == OPT_ADAM_PAX) return 2;
    if (c->opt_type == OPT_MUON) return 2;   // nu for its AdamW half only (optim/muon.h)
    if (c->opt_type == OPT_SGD) return 0;   // no state: that is what it saves
    if (c->opt_type == OPT_ADAFACTOR) return 1;   // at most one: per tensor (optim/adafactor.h)
    die("internal: opt_type %d has no state size", (int)c->opt_type);
}

void optimizer_state_alloc(Model *m) {
    const StateShard *sh = &m->shard;
    if (m->cfg.opt_type == OPT_MUON) {   // mu per weight; nu for the tensors AdamW updates (optim/muon.h)
        if (m->cfg.mu_dtype == MU_DTYPE_BFLOAT16)
            m->m16_mem = mem_alloc(MEM_OPTIMIZER, sizeof(uint16_t) * (sh->local_n / sh->Z), "muon mu (bf16)");
        else
            m->m_mem = mem_floats(MEM_OPTIMIZER, sh->local_n / sh->Z, "muon mu");
        m->v_mem = mem_floats(MEM_OPTIMIZER, muon_nu_floats(m), "muon's adamw nu");
        return;
    }
    switch (optimizer_state_floats(&m->cfg)) {
    case 2:   // adamw's moments, one of each per weight of this device's shard (or ZeRO-1 piece)
        if (m->cfg.mu_dtype == MU_DTYPE_BFLOAT16)
            m->m16_mem = mem_alloc(MEM_OPTIMIZER, sizeof(uint16_t) * (sh->local_n / sh->Z), "adam mu (bf16)");
        else
            m->m_mem = mem_floats(MEM_OPTIMIZER, sh->local_n / sh->Z, "adam mu");
        m->v_mem = mem_floats(MEM_OPTIMIZER, sh->local_n / sh->Z, "adam nu");
        break;
    case 1:   // adafactor, per tensor: row and column means, or one per element
        m->v_mem = mem_floats(MEM_OPTIMIZER, adafactor_state_floats(m), "adafactor second moments");
        break;
    }
}

// opt_type=adam_pax (MaxText's Pax-style Adam): AdamW's update with the decays of update t
// bias-corrected, b * (1 - b^(t-1)) / (1 - b^t) in float32 as JAX computes them (so the first
// update's moments are g and g^2), and the moments then used as they are.
static AdamWParams adam_pax_params(const Config *c, float lr, int t) {
    float b1 = c->adam_b1, b2 = c->adam_b2, tf = (float)t;
    AdamWParams h = {lr, t, b1 * (1.0f - powf(b1, tf - 1.0f)) / (1.0f - powf(b1, tf)),
                     b2 * (1.0f - powf(b2, tf - 1.0f)) / (1.0f - powf(b2, tf)), c->adam_eps, c->adam_eps_root,
                     c->adam_weight_decay, 0, 1};
    return h;
}

// AdamW (or SGD) on n weights of the local layout from `at`, their moments from `mo`; p16:
// AdamW also writes the weights' kept 16-bit copy there (update_shard), or NULL.
static void update_run(Model *m, int sgd, size_t at, size_t mo, size_t n, float lr, int t, GradClip clip,
                       uint16_t *p16) {
    const Config *c = &m->cfg;
    float *p = m->params_mem + at;
    const float *g = m->grads_mem + at;
    if (sgd) kern()->optim->sgd_update(p, g, n, lr, clip);
    else {
        AdamWParams h = {lr, t, c->adam_b1, c->adam_b2, c->adam_eps, c->adam_eps_root, c->adam_weight_decay, 0, 0};
        if (c->opt_type == OPT_ADAM_PAX) h = adam_pax_params(c, lr, t);
        kern()->optim->adamw_update(p, p16, g, m->m_mem ? m->m_mem + mo : NULL, m->m16_mem ? m->m16_mem + mo : NULL,
                                    m->v_mem + mo, n, h, clip);
    }
}

// The elementwise optimizers (adamw, sgd) over this device's shard of every unit. ZeRO-1
// (shard_optimizer_over_data, sharding/fsdp.h): this data rank holds the moments of piece
// zrank of each unit's shard and updates that piece (zero1_gather then gives every replica
// the whole updated shard).
// With the weights' 16-bit copy kept (bf16_storage=kept, model/model.c) and the whole
// shard updated here, AdamW writes the copy of the updated weights as it goes: one pass
// fewer over the weights than packing them after, and the copy is then that of update t.
static void update_shard(Model *m, int sgd, float lr, int t, GradClip clip) {
    const StateShard *s = &m->shard;
    if (s->Z == 1) {
        uint16_t *p16 = !sgd && m->copy16_kept && model_copy16_kept(m) ? m->copy16_kept : NULL;
        update_run(m, sgd, 0, 0, s->local_n, lr, t, clip, p16);
        if (p16) m->copy16_step = t;   // (apply_update moves m->step to t)
        return;
    }
    for (int u = 0; u < s->nunits; u++) {
        size_t off, piece = shard_zero1_piece(s, shard_len(s, u), &off);
        update_run(m, sgd, s->local_off[u] + off, s->local_off[u] / s->Z, piece, lr, t, clip, NULL);
    }
}

// ZeRO-1: every optimizer updated this data replica's piece of each unit's shard; the
// replicas all-gather their pieces, so that all hold the whole updated shard again. In
// place: piece q of every member lands at piece q of the shard, this member's own piece is
// already there (each member writes only the pieces it does not send).
static void zero1_gather(Model *m) {
    const StateShard *s = &m->shard;
    for (int u = 0; s->Z > 1 && u < s->nunits; u++) {
        size_t off, piece = shard_zero1_piece(s, shard_len(s, u), &off);
        coll_all_gather(s->data, m->params_mem + s->local_off[u] + off, m->params_mem + s->local_off[u],
                        sizeof(float) * piece);
    }
}

void optimizer_step(Model *m, float lr, int t, float grad_norm) {
    const Config *c = &m->cfg;
    state_optimizer_in(m);
    if (c->opt_type == OPT_MUON) {   // per tensor (optim/muon.c), each reading the gradient clipped
        muon_update(m, lr, t, grad_clip_of(grad_norm, c->gradient_clipping_threshold));
    } else if (c->opt_type == OPT_ADAFACTOR) {   // per tensor (optim/adafactor.c), on the clipped gradient
        grad_clip(m->grads_mem, m->shard.local_n, grad_norm, c->gradient_clipping_threshold);
        adafactor_update(m, lr, t);
    } else {   // elementwise: the update clips each gradient as it reads it
        update_shard(m, c->opt_type == OPT_SGD, lr, t, grad_clip_of(grad_norm, c->gradient_clipping_threshold));
    }
    zero1_gather(m);
    state_optimizer_out(m);
}

// bias and counts are device data: E numbers each, read into host copies, updated there,
// and the bias written back (one synchronisation per MoE layer and step).
void router_bias_update(float *bias, const long *counts, long tokens, int E, int K, float rate) {
    float target = (float)tokens * K / E;   // the count every expert would get if balanced
    long *n = mem_host_copy(counts, sizeof(long) * E);
    float *b = mem_host_copy(bias, sizeof(float) * E);
    for (int e = 0; e < E; e++) {
        float diff = target - (float)n[e];
        float sign = diff > 0 ? 1.0f : diff < 0 ? -1.0f : 0.0f;
        b[e] += rate * sign;
    }
    mem_upload(bias, b, sizeof(float) * E);
    free(n);
    free(b);
}
