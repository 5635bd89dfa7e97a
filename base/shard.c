// base/shard.c: the units and each device's share of them (base/shard.h).
#include "base/shard.h"
#include "base/placement.h"
#include "base/context.h"
#include "core/common.h"

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
    // splits every sequence instead (base/context.h).
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
    // those are added in: it keeps one gradient per chunk (base/context.h, "what the
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

int shard_first_copy(const Mesh *mesh, int dev, unsigned split) {
    if (!mesh) return 1;
    const MeshAxis replicas[] = {AX_DATA, AX_CONTEXT, AX_TENSOR, AX_EXPERT};
    for (int i = 0; i < 4; i++)
        if (!(split & AXIS_BIT(replicas[i])) && mesh_coord(mesh, dev, replicas[i]) != 0) return 0;
    return 1;
}
