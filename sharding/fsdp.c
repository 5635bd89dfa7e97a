// sharding/fsdp.c: data parallelism, FSDP and ZeRO-1 applied to the model from outside: the
// gathers before a unit is used and the gradient reductions after (sharding/fsdp.h).
#include "sharding/fsdp.h"    // fsdp_attach, this file's functions
#include "base/context.h"     // cp_set_grad_slots, the context reduce chunks
#include "core/common.h"      // die, MM_MAX

// ---------------------------------------------------------------------------------------
// What the model calls.
#include "model/model.h"      // Model, ShardHooks: what the strategy hooks into
#include "kernels/kernels.h"  // kern()->optim: sums of squares for the norm
#include "base/treesum.h"     // the gradient norm along the tree
#include "sharding/overlap.h" // the prefetching gathers (overlap_collectives)

// What the model's walk calls (model/model.h ShardHooks), FSDP's and overlap_collectives'.
static const ShardHooks fsdp_hooks = {
    .gather = fsdp_all_gather, .release = fsdp_free_gathered,
    .prefetch = overlap_prefetch, .drain = overlap_drain,
    .grad_begin = fsdp_grad_begin, .grad_end = fsdp_grad_end,
    .detach = overlap_free,
};

void fsdp_attach(Model *m) { m->hooks = &fsdp_hooks; }

void fsdp_all_gather(Model *m, int u) {
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

void fsdp_free_gathered(Model *m, int u) {
    if (m->shard.F == 1) return;
    mem_free(m->gathered[2 * u]);
    m->gathered[2 * u] = NULL;
}

// The sum over the data replicas of a shard's gradient (len floats at x): an all-reduce, or
// under ZeRO-1 a reduce-scatter in place, rank r's slice being piece r (the data group's
// ranks are the zrank order); the other pieces of x then hold this device's own
// contribution, which nothing reads. The same bits in the piece either way.
static void data_reduce(const StateShard *s, float *x, size_t len) {
    if (!s->data || group_size(s->data) == 1) return;
    if (s->Z > 1) coll_reduce_scatter_inplace(s->data, x, len);
    else coll_all_reduce(s->data, x, len);
}

// Over context last (the outermost level of the tree), the summed part only: under ZeRO-1
// the piece this replica updates (optim/optimizer.c:update_shard).
static void context_reduce(const StateShard *s, float *x, size_t len) {
    size_t off, n = shard_zero1_piece(s, len, &off);
    coll_all_reduce(s->context, x + off, n);
}

void fsdp_grad_finish(Model *m, float *buf) {
    const StateShard *s = &m->shard;
    if (buf != m->grads_mem) {   // the chunk slots along the tree over this device's chunks
        tree_reduce_inplace(buf, s->grad_slots, s->local_n);
        mem_copy(m->grads_mem, buf, sizeof(float) * s->local_n);
    }
    if (s->nctx > 1)
        for (int u = 0; u < s->nunits; u++) context_reduce(s, m->grads_mem + s->local_off[u], shard_len(s, u));
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
            data_reduce(s, pj, len);
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
        data_reduce(s, dst, len);
    }
    // Over context last: each context device holds whole chunks, the tree's outermost level
    // (after the microbatches, in fsdp_grad_finish, while accumulating).
    if (!m->grad_partial && s->nctx > 1) context_reduce(s, dst, len);
}

// The global gradient norm, the same bits on every mesh. Each device adds the squares of
// the gradient elements it owns in 128-bit fixed point (kernels/optim.h:squares_add),
// where addition is exact: the total does not depend on the order, so neither on how the
// elements are spread over devices. What a device owns: its fsdp shard of each unit; of a
// tensor split over `tensor` or `expert`, its piece; of a tensor replicated along an axis,
// only the copy at coordinate 0 of that axis (and only the copy at context coordinate 0:
// that axis holds replicas). The data axis holds replicas of the whole gradient too (it
// is all-reduced by now), so the work is spread over it: the replica at data coordinate r
// of D adds part r of D of every piece it would own at coordinate 0. Under ZeRO-1 only
// the replica's own piece of each shard was summed (data_reduce), and that is its part.

static int owns_tensor(const Mesh *mesh, int dev, const ParamSpec *sp) {
    unsigned split = AXIS_BIT(AX_DATA);   // every data replica takes its part, below
    for (int d = 0; d < sp->ndim; d++) split |= sp->part.axes[d];
    return shard_first_copy(mesh, dev, split);
}

float fsdp_grad_norm(Model *m) {
    const StateShard *s = &m->shard;
    const Mesh *mesh = mesh_current();
    int dev = mesh_device_id(), n = mesh ? mesh->ndev : 1;
    int nd = mesh ? mesh->size[AX_DATA] : 1, rd = mesh ? mesh_coord(mesh, dev, AX_DATA) : 0;
    // (n) every device's sum; this device's is entry 0 until the all-gather places them.
    Squares *each = mem_alloc(MEM_COMM, sizeof(Squares) * (size_t)n, "grad norm sums");
    Squares *mine = each;
    if (n > 1) mine = mem_alloc(MEM_COMM, sizeof(Squares), "grad norm sum (this device)");
    // The parts are summed in runs: parts that lie one after another in the gradient make
    // one call (on one device, usually the whole gradient; on a GPU, one launch instead of
    // one per tensor). The sum is exact, so the grouping does not change it.
    const float *run = NULL;
    size_t run_n = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const ParamSpec *sp = &m->specs[i];
        if (!owns_tensor(mesh, dev, sp)) continue;
        int u = model_unit_of(&m->cfg, sp->name);
        // The part of this tensor inside this device's shard of unit u.
        size_t g0 = shard_first(s, u), g1 = g0 + shard_len(s, u);
        size_t a = MM_MAX(g0, sp->offset), b = MM_MIN(g1, sp->offset + sp->size);
        if (a < b && s->Z > 1) {   // ZeRO-1: the part in this replica's piece, the only one summed here
            size_t off, n = shard_zero1_piece(s, g1 - g0, &off);
            a = MM_MAX(a, g0 + off);
            b = MM_MIN(b, g0 + off + n);
        } else if (a < b && nd > 1) {   // this data replica's part of [a, b)
            size_t len = b - a;
            b = a + len * (size_t)(rd + 1) / (size_t)nd;
            a = a + len * (size_t)rd / (size_t)nd;
        }
        if (a >= b) continue;
        const float *x = m->grads_mem + s->local_off[u] + (a - g0);
        if (run && x == run + run_n) { run_n += b - a; continue; }   // this tensor follows the run
        if (run) kern()->optim->squares_add(&mine->sum, &mine->bad, run, run_n);
        run = x;
        run_n = b - a;
    }
    if (run) kern()->optim->squares_add(&mine->sum, &mine->bad, run, run_n);
    if (n > 1) coll_all_gather(mesh_group(mesh, dev, MESH_ALL_AXES), mine, each, sizeof(Squares));
    Squares *host = malloc(sizeof(Squares) * (size_t)n);
    if (!host) die("host out of memory (grad norm sums)");
    mem_download(host, each, sizeof(Squares) * (size_t)n);
    fixed128 total = 0;
    int bad = 0;
    for (int d = 0; d < n; d++) { total += host[d].sum; bad |= host[d].bad; }
    free(host);
    if (mine != each) mem_free(mine);
    mem_free(each);
    if (bad) return NAN;   // the training loop stops on it, naming a non-finite gradient
    return (float)sqrt((double)total / SQUARES_SCALE);
}
