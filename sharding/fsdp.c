// sharding/fsdp.c: the units and each device's share of them (see fsdp.h).
#include "sharding/fsdp.h"
#include "pipeline/pipeline.h"
#include "sharding/context.h"
#include "common.h"

void shard_init(StateShard *s, const Config *c, const int *spec_unit, const size_t *spec_off,
                const size_t *spec_size, int nspecs) {
    memset(s, 0, sizeof *s);
    const Mesh *mesh = mesh_current();
    int dev = mesh ? mesh_device_id() : 0;
    s->F = mesh ? mesh->size[AX_FSDP] : 1;
    s->frank = mesh ? mesh_coord(mesh, dev, AX_FSDP) : 0;
    int D = mesh ? mesh->size[AX_DATA] : 1;
    s->Z = c->shard_optimizer_over_data ? D : 1;
    s->zrank = c->shard_optimizer_over_data && mesh ? mesh_coord(mesh, dev, AX_DATA) : 0;
    // The batch is split over data, fsdp and expert (MaxText's activation_batch); expert
    // varies fastest, then fsdp, then data, so a device's sequences are one block. Context
    // splits every sequence instead (sharding/context.h).
    int EP = mesh ? mesh->size[AX_EXPERT] : 1;
    unsigned batch_axes = AXIS_BIT(AX_DATA) | AXIS_BIT(AX_FSDP) | AXIS_BIT(AX_EXPERT);
    s->nbatch = D * s->F * EP;
    s->brank = mesh ? mesh_rank(mesh, dev, batch_axes) : 0;
    s->nctx = mesh ? mesh->size[AX_CONTEXT] : 1;
    s->crank = mesh ? mesh_coord(mesh, dev, AX_CONTEXT) : 0;
    if (mesh) {
        s->fsdp = mesh_group(mesh, dev, AXIS_BIT(AX_FSDP));
        s->data = mesh_group(mesh, dev, AXIS_BIT(AX_DATA));
        s->expert = mesh_group(mesh, dev, AXIS_BIT(AX_EXPERT));
        s->batch = mesh_group(mesh, dev, batch_axes);
        s->context = mesh_group(mesh, dev, AXIS_BIT(AX_CONTEXT));
        s->tokens = mesh_group(mesh, dev, batch_axes | AXIS_BIT(AX_CONTEXT));
    }
    // A device that holds several chunks of its sequences while other devices (or other
    // microbatches) hold other sequences of the same chunks cannot add its chunks before
    // those are added in: it keeps one gradient per chunk (sharding/context.h, "what the
    // default costs").
    int chunks_here = cfg_context_chunks(c) / s->nctx;
    int others = s->nbatch > 1 || c->gradient_accumulation_steps > 1;
    s->grad_slots = others && chunks_here > 1 ? chunks_here : 1;
    s->nunits = spec_unit[nspecs - 1] + 1;
    s->unit_off = calloc((size_t)s->nunits, sizeof(size_t));
    s->unit_size = calloc((size_t)s->nunits, sizeof(size_t));
    s->unit_pad = calloc((size_t)s->nunits, sizeof(size_t));
    s->local_off = calloc((size_t)s->nunits, sizeof(size_t));
    s->here = calloc((size_t)s->nunits, 1);
    int stages = mesh ? mesh->size[AX_STAGE] : 1, stage = mesh ? mesh_coord(mesh, dev, AX_STAGE) : 0;
    for (int u = 0; u < s->nunits; u++) s->here[u] = pipeline_stage_of_unit(c, stages, u) == stage;
    for (int i = nspecs - 1; i >= 0; i--) s->unit_off[spec_unit[i]] = spec_off[i];   // first spec wins
    for (int i = 0; i < nspecs; i++) s->unit_size[spec_unit[i]] += spec_size[i];
    // Pad only when something is split, so a 1-device (or plain DP) layout is the global one.
    size_t mult = shard_is_split(s) ? (size_t)s->F * s->Z * NORM_CHUNK : 1;
    size_t local = 0;
    for (int u = 0; u < s->nunits; u++) {
        s->unit_pad[u] = (s->unit_size[u] + mult - 1) / mult * mult;
        s->local_off[u] = local;
        local += shard_len(s, u);
    }
    s->local_n = local;
}

void shard_free(StateShard *s) {
    free(s->unit_off); free(s->unit_size); free(s->unit_pad); free(s->local_off); free(s->here);
    memset(s, 0, sizeof *s);
}

size_t shard_len(const StateShard *s, int u) { return s->here[u] ? s->unit_pad[u] / s->F : 0; }
size_t shard_first(const StateShard *s, int u) { return s->unit_off[u] + (size_t)s->frank * shard_len(s, u); }

// ---------------------------------------------------------------------------------------
// What the model calls.
#include "model/model.h"
#include "kernels/kernels.h"
#include "model/treesum.h"
#include "sharding/overlap.h"

void fsdp_acquire(Model *m, int u) {
    const StateShard *s = &m->shard;
    if (s->F == 1) return;
    float *full = overlap_take(m, u);   // gathered in the background already (overlap_collectives)
    if (!full) {
        full = mem_floats(MEM_PARAMS, s->unit_pad[u], "all-gathered weights (fsdp)");
        coll_all_gather(s->fsdp, m->params_mem + s->local_off[u], full, sizeof(float) * shard_len(s, u));
    }
    model_bind_unit(m, &m->params, u, full);
    m->gathered[2 * u] = full;
}

void fsdp_release(Model *m, int u) {
    if (m->shard.F == 1) return;
    mem_free(m->gathered[2 * u]);
    m->gathered[2 * u] = NULL;
}

static void set_target(Model *m, float *buf, int partial) {
    const StateShard *s = &m->shard;
    m->grad_dst = buf;
    m->grad_partial = partial;
    if (s->F == 1)   // whole units here: the backward pass writes straight into buf
        for (int u = 0; u < s->nunits; u++)
            if (s->here[u]) model_bind_unit(m, &m->grads, u, buf + s->local_off[u]);
}
void fsdp_set_grad_target(Model *m, float *buf) { set_target(m, buf, 0); }
void fsdp_set_grad_partial(Model *m, float *buf) { set_target(m, buf, 1); }

void fsdp_grad_finish(Model *m, float *buf) {
    const StateShard *s = &m->shard;
    if (buf != m->grads_mem) {   // the chunk slots along the tree over this device's chunks
        tree_reduce_inplace(buf, s->grad_slots, s->local_n);
        mem_copy(m->grads_mem, buf, sizeof(float) * s->local_n);
    }
    if (s->nctx > 1)
        for (int u = 0; u < s->nunits; u++) coll_all_reduce(s->context, m->grads_mem + s->local_off[u], shard_len(s, u));
}

void fsdp_grad_begin(Model *m, int u) {
    const StateShard *s = &m->shard;
    int slots = s->grad_slots;
    if (s->F == 1 && slots == 1) return;
    float *full = mem_floats(MEM_GRADS, s->unit_pad[u] * slots,
                             slots > 1 ? "unit grads, one per chunk (context_reduce_chunks)" : "unsharded grads of one unit (fsdp)");
    model_bind_unit(m, &m->grads, u, full);
    cp_set_grad_slots(slots > 1 ? s->unit_pad[u] : 0);   // chunk j of every tensor: + j * unit_pad
    m->gathered[2 * u + 1] = full;
}

// Expert parallelism: the weights that are not split over `expert` (all but the experts'
// own) saw only this device's tokens; add the expert group's contributions. Expert is the
// fastest-varying batch axis, so this is the first level of the tree over devices.
static void expert_reduce(Model *m, int u, float *unit_grad) {
    const StateShard *s = &m->shard;
    if (!s->expert || group_size(s->expert) == 1) return;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *sp = &m->specs[i];
        unsigned split = 0;
        for (int d = 0; d < sp->ndim; d++) split |= sp->part.axes[d];
        if ((split & AXIS_BIT(AX_EXPERT)) || model_unit_of(&m->cfg, sp->name) != u) continue;
        coll_all_reduce(s->expert, unit_grad + (sp->offset - s->unit_off[u]), sp->size);
    }
}

void fsdp_grad_end(Model *m, int u) {
    fsdp_grad_end_into(m, u, m->grad_dst + m->shard.local_off[u]);
}

void fsdp_grad_end_into(Model *m, int u, float *dst) {
    const StateShard *s = &m->shard;
    size_t len = shard_len(s, u);
    float *full = m->gathered[2 * u + 1];
    if (full) {
        // Sum over the batch devices along the canonical tree: first over expert, then over
        // fsdp (each device keeps its shard), then over data (the batch axes from the fastest
        // varying); chunk slot by chunk slot. Then the slots along the tree over this
        // device's chunks, or, while accumulating, each slot into its own copy of the target.
        int slots = s->grad_slots;
        cp_set_grad_slots(0);
        // Where slot j's shard lands: piece + j * stride.
        float *piece = m->grad_partial || slots == 1 ? dst
                     : s->F > 1 ? mem_floats(MEM_GRADS, len * slots, "grad shards, one per chunk") : full;
        size_t stride = m->grad_partial ? s->local_n : piece == full ? s->unit_pad[u] : len;
        for (int j = 0; j < slots; j++) {
            float *fj = full + (size_t)j * s->unit_pad[u], *pj = piece + (size_t)j * stride;
            expert_reduce(m, u, fj);
            if (s->F > 1) coll_reduce_scatter(s->fsdp, fj, pj, len);
            else if (pj != fj) mem_copy(pj, fj, sizeof(float) * len);
            if (s->data && group_size(s->data) > 1) coll_all_reduce(s->data, pj, len);
        }
        if (!m->grad_partial && slots > 1) {
            tree_reduce_inplace(piece, slots, len);
            mem_copy(dst, piece, sizeof(float) * len);
            if (piece != full) mem_free(piece);
        }
        mem_free(full);
        m->gathered[2 * u + 1] = NULL;
        if (s->F == 1) model_bind_unit(m, &m->grads, u, dst);   // back to the gradient buffer
    } else {
        expert_reduce(m, u, dst);
        if (s->data && group_size(s->data) > 1) coll_all_reduce(s->data, dst, len);
    }
    // Over context last: each context device holds whole chunks, the tree's outermost level
    // (after the microbatches, in fsdp_grad_finish, while accumulating).
    if (!m->grad_partial && s->nctx > 1) coll_all_reduce(s->context, dst, len);
}

// The global gradient norm, the same bits on every mesh. Each device adds the squares of
// the gradient elements it owns in 128-bit fixed point (kernels/optim.h:squares_add),
// where addition is exact: the total does not depend on the order, so neither on how the
// elements are spread over devices. What a device owns: its fsdp shard of each unit; of a
// tensor split over `tensor` or `expert`, its piece; of a tensor replicated along an axis,
// only the copy at coordinate 0 of that axis (and only the copy at data/context coordinate
// 0: those axes hold replicas).
int shard_first_copy(const Mesh *mesh, int dev, unsigned split) {
    if (!mesh) return 1;
    const MeshAxis replicas[] = {AX_DATA, AX_CONTEXT, AX_TENSOR, AX_EXPERT};
    for (int i = 0; i < 4; i++)
        if (!(split & AXIS_BIT(replicas[i])) && mesh_coord(mesh, dev, replicas[i]) != 0) return 0;
    return 1;
}

static int owns_tensor(const Mesh *mesh, int dev, const ParamSpec *sp) {
    unsigned split = 0;
    for (int d = 0; d < sp->ndim; d++) split |= sp->part.axes[d];
    return shard_first_copy(mesh, dev, split);
}

float fsdp_grad_norm(Model *m) {
    const StateShard *s = &m->shard;
    const Mesh *mesh = mesh_current();
    int dev = mesh_device_id(), n = mesh ? mesh->ndev : 1;
    // (n) every device's sum; this device's is entry 0 until the all-gather places them.
    Squares *each = mem_alloc(MEM_COMM, sizeof(Squares) * (size_t)n, "grad norm sums");
    Squares *mine = each;
    if (n > 1) mine = mem_alloc(MEM_COMM, sizeof(Squares), "grad norm sum (this device)");
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *sp = &m->specs[i];
        if (!owns_tensor(mesh, dev, sp)) continue;
        int u = model_unit_of(&m->cfg, sp->name);
        // The part of this tensor inside this device's shard of unit u.
        size_t g0 = shard_first(s, u), g1 = g0 + shard_len(s, u);
        size_t a = MM_MAX(g0, sp->offset), b = MM_MIN(g1, sp->offset + sp->size);
        if (a < b) kern()->optim->squares_add(&mine->sum, &mine->bad, m->grads_mem + s->local_off[u] + (a - g0), b - a);
    }
    if (n > 1) coll_all_gather(mesh_group(mesh, dev, (1u << MESH_NAXES) - 1), mine, each, sizeof(Squares));
    Squares *host = malloc(sizeof(Squares) * (size_t)n);
    if (!host) die("host out of memory (grad norm sums)");
    kern()->to_host(host, each, sizeof(Squares) * (size_t)n);
    fixed128 total = 0;
    int bad = 0;
    for (int d = 0; d < n; d++) { total += host[d].sum; bad |= host[d].bad; }
    free(host);
    if (mine != each) mem_free(mine);
    mem_free(each);
    if (bad) return NAN;   // the training loop stops on it, naming a non-finite gradient
    return (float)sqrt((double)total / SQUARES_SCALE);
}
