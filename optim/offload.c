// optim/offload.c: model state in host memory between steps (MaxText's
// parameter_memory_host_offload and optimizer_memory_host_offload) and the EMA copy of the
// weights. Every move is a real copy through base/memory.h, counted in the device's
// host-transfer bytes; the values are copied exactly, so the losses are unchanged.
#include "optim/offload.h"
#include "base/memory.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "kernels/kernels.h"
#include "core/common.h"

void state_offload_check(const Config *c) {
    int moments = optimizer_state_floats(c);
    if (!moments && c->optimizer_memory_host_offload)
        die("optimizer_memory_host_offload=true with opt_type=%s: there is no optimizer state to offload",
            opt_type_name(c->opt_type));
    if (c->ema_decay < 0 || c->ema_decay >= 1) die("ema_decay must be in [0, 1) (0 = off), got %g", c->ema_decay);
    if (c->ema_host_offload && c->ema_decay == 0)
        die("ema_host_offload=true needs an EMA: set ema_decay (e.g. 0.999)");
}

// Rebind the weights' pointers after params_mem moved (FSDP binds at each gather).
static void rebind(Model *m) {
    const StateShard *sh = &m->shard;
    if (sh->F == 1)
        for (int u = 0; u < sh->nunits; u++)
            if (sh->here[u]) model_bind_unit(m, &m->params, u, m->params_mem + sh->local_off[u]);
}

void state_params_in(Model *m) {
    if (!m->cfg.parameter_memory_host_offload) return;
    m->params_mem = mem_to_device(m->params_mem);
    rebind(m);
}

void state_params_out(Model *m) {
    if (!m->cfg.parameter_memory_host_offload) return;
    m->params_mem = mem_to_host(m->params_mem);
    rebind(m);
}

void ema_restart(Model *m) {
    if (m->ema) mem_transfer(m->ema, m->params_mem, sizeof(float) * m->shard.local_n);
}

void state_offload_init(Model *m) {
    const Config *c = &m->cfg;
    size_t n = m->shard.local_n;
    if (c->ema_decay > 0) {   // the EMA starts at the initial weights
        m->ema = c->ema_host_offload ? mem_alloc_host(MEM_PARAMS, sizeof(float) * n, "ema params")
                                     : mem_floats(MEM_PARAMS, n, "ema params");
        ema_restart(m);
    }
    state_params_out(m);
    state_optimizer_out(m);
}

void state_optimizer_in(Model *m) {
    if (!m->cfg.optimizer_memory_host_offload) return;
    if (m->m_mem) m->m_mem = mem_to_device(m->m_mem);
    if (m->m16_mem) m->m16_mem = mem_to_device(m->m16_mem);
    m->v_mem = mem_to_device(m->v_mem);
}

void state_optimizer_out(Model *m) {
    if (!m->cfg.optimizer_memory_host_offload) return;
    if (m->m_mem) m->m_mem = mem_to_host(m->m_mem);
    if (m->m16_mem) m->m16_mem = mem_to_host(m->m16_mem);
    m->v_mem = mem_to_host(m->v_mem);
}

void ema_update(Model *m) {
    const Config *c = &m->cfg;
    if (c->ema_decay <= 0) return;
    size_t n = m->shard.local_n;
    // On the host the weights are copied there first (unless they live there already).
    const float *p = m->params_mem;
    float *staged = NULL;
    if (mem_is_host(m->ema) && !mem_is_host(p)) {
        staged = mem_alloc_host(MEM_PARAMS, sizeof(float) * n, "params copied for the EMA");
        mem_transfer(staged, p, sizeof(float) * n);
        p = staged;
    }
    kern()->optim->ema_update(m->ema, p, n, c->ema_decay);
    mem_free(staged);
}
