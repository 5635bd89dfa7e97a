// sharding/overlap.c: the prefetch of the next FSDP unit on a helper thread (overlap.h).
#include "sharding/overlap.h"
#include "sharding/fsdp.h"
#include "model/model.h"
#include "kernels/kernels.h"   // kern_bind: the helper on its device's GPU
#include "core/common.h"
#include <pthread.h>

// One prefetch in flight per device.
typedef struct Prefetch {
    int unit;              // the unit being gathered, or -1
    float *full;           // (unit_pad) its full buffer, tag params
    const float *shard;    // this device's shard of it (shard_len floats)
    size_t bytes_each;     // bytes of one shard
    Group *group;          // the helpers' twin of the fsdp group
    Device *dev;           // the device the helper works for
    const Mesh *mesh;
    int dev_id;
    pthread_t thread;
} Prefetch;

// The helper: it acts as the device (its collectives count on it) and gathers the unit.
static void *helper_main(void *arg) {
    Prefetch *p = (Prefetch *)arg;
    mem_set_device(p->dev);
    mesh_set_current(p->mesh, p->dev_id);
    kern_bind(p->dev_id, mesh_gpu_slot(p->mesh, p->dev_id));   // a GPU backend: the device's GPU and pool, a stream of its own
    coll_all_gather(p->group, p->shard, p->full, p->bytes_each);
    kern_unbind();          // (after its copies are done: the device thread reads p->full next)
    return NULL;
}

void overlap_prefetch(Model *m, int u) {
    const StateShard *s = &m->shard;
    if (!m->cfg.overlap_collectives || s->F == 1 || u < 0 || u >= s->nunits || !s->here[u]) return;
    if (!m->prefetch) {
        m->prefetch = calloc(1, sizeof(Prefetch));
        m->prefetch->unit = -1;
    }
    Prefetch *p = m->prefetch;
    if (p->unit >= 0) return;   // one at a time: the helpers' gathers stay in one order
    // Allocated here, by the device thread, at a fixed point of the pass: the peak does
    // not depend on when the helper runs.
    p->full = mem_floats(MEM_PARAMS, s->unit_pad[u], "all-gathered weights (fsdp), prefetched");
    p->unit = u;
    p->shard = m->params_mem + s->local_off[u];
    p->bytes_each = sizeof(float) * shard_len(s, u);
    p->mesh = mesh_current();
    p->dev_id = mesh_device_id();
    p->dev = mem_device();
    p->group = mesh_prefetch_group(p->mesh, p->dev_id);
    // The helper's stream reads the shard and writes full: what this thread queued on them
    // (full's zeroing, the weights' move back from host memory under parameter offload,
    // which a GPU's copy stream may still be making) is done first. Nothing on the CPU.
    kern_sync();
    if (pthread_create(&p->thread, NULL, helper_main, p) != 0)
        die("cannot start the prefetch thread of device %d (overlap_collectives)", p->dev_id);
}

float *overlap_take(Model *m, int u) {
    Prefetch *p = m->prefetch;
    if (!p || p->unit != u) return NULL;
    pthread_join(p->thread, NULL);
    float *full = p->full;
    p->unit = -1;
    p->full = NULL;
    return full;
}

void overlap_drain(Model *m) {
    Prefetch *p = m->prefetch;
    if (p && p->unit >= 0) mem_free(overlap_take(m, p->unit));
}

void overlap_free(Model *m) {
    overlap_drain(m);
    free(m->prefetch);
    m->prefetch = NULL;
}
