// base/mesh.c: mesh shape from the config, device coordinates, groups, and the
// threads that run the devices.
#include "base/mesh.h"
#include "base/collectives.h"
#include "base/placement.h"
#include "base/context.h"
#include "kernels/kernels.h"   // kern_bind: a device thread on its GPU
#include "core/common.h"
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

const char *const MESH_AXIS_NAMES[MESH_NAXES] = {"data", "stage", "fsdp", "context", "tensor", "expert"};

// Defined in collectives.c: the backend builds its own group objects; `tag` tells the
// groups apart between processes.
Group *group_new(const Mesh *mesh, int n, const int *members, int tag);
void group_free(Group *g);

static _Thread_local const Mesh *cur_mesh;
static _Thread_local int cur_dev;

const Mesh *mesh_current(void) { return cur_mesh; }
int mesh_device_id(void) { return cur_dev; }
void mesh_set_current(const Mesh *mesh, int dev) { cur_mesh = mesh; cur_dev = dev; }

int mesh_axis_size(MeshAxis axis) { return cur_mesh ? cur_mesh->size[axis] : 1; }
int mesh_axis_rank(MeshAxis axis) { return cur_mesh ? mesh_coord(cur_mesh, cur_dev, axis) : 0; }
Group *mesh_axis_group(MeshAxis axis) { return cur_mesh ? mesh_group(cur_mesh, cur_dev, AXIS_BIT(axis)) : NULL; }

int mesh_coord(const Mesh *mesh, int dev, MeshAxis axis) {
    for (int a = MESH_NAXES - 1; a > (int)axis; a--) dev /= mesh->size[a];
    return dev % mesh->size[axis];
}

int mesh_rank(const Mesh *mesh, int dev, unsigned mask) {
    int r = 0;
    for (int a = 0; a < MESH_NAXES; a++)
        if (mask & AXIS_BIT(a)) r = r * mesh->size[a] + mesh_coord(mesh, dev, (MeshAxis)a);
    return r;
}

int mesh_member(const Mesh *mesh, int dev, unsigned mask, int rank) {
    int coord[MESH_NAXES];
    for (int a = MESH_NAXES - 1; a >= 0; a--) {
        coord[a] = mesh_coord(mesh, dev, (MeshAxis)a);
        if (mask & AXIS_BIT(a)) { coord[a] = rank % mesh->size[a]; rank /= mesh->size[a]; }
    }
    int id = 0;
    for (int a = 0; a < MESH_NAXES; a++) id = id * mesh->size[a] + coord[a];
    return id;
}

Group *mesh_group(const Mesh *mesh, int dev, unsigned mask) {
    return mesh->groups[(size_t)mask * mesh->ndev + dev];
}

Group *mesh_prefetch_group(const Mesh *mesh, int dev) { return mesh->prefetch[dev]; }

// The axes' sizes (want, -1 filled) and the device count, or a message naming the numbers.
static int mesh_sizes(const Config *c, int want[MESH_NAXES]) {
    const int given[MESH_NAXES] = {c->ici_data_parallelism, c->ici_pipeline_parallelism, c->ici_fsdp_parallelism,
                                   c->ici_context_parallelism, c->ici_tensor_parallelism, c->ici_expert_parallelism};
    const char *keys[MESH_NAXES] = {"ici_data_parallelism", "ici_pipeline_parallelism", "ici_fsdp_parallelism",
                                    "ici_context_parallelism", "ici_tensor_parallelism", "ici_expert_parallelism"};
    int known = 1, fill = -1;
    for (int a = 0; a < MESH_NAXES; a++) {
        want[a] = given[a];
        if (want[a] == -1) {
            if (fill >= 0) die("only one axis may be -1 (fill the rest): %s and %s both are", keys[fill], keys[a]);
            fill = a;
        } else if (want[a] < 1) {
            die("%s must be a positive number of devices or -1, got %d", keys[a], want[a]);
        } else {
            known *= want[a];
        }
    }
    int n = c->num_devices > 0 ? c->num_devices : known;
    if (fill >= 0) {
        if (c->num_devices <= 0) die("%s=-1 needs num_devices to say how many devices there are", keys[fill]);
        if (n % known) die("num_devices (%d) is not a multiple of the other axes' product (%d), so %s=-1 cannot fill it",
                           n, known, keys[fill]);
        want[fill] = n / known;
    } else if (n != known) {
        die("the mesh axes multiply to %d devices but num_devices is %d", known, n);
    }
    cp_check(c, want[AX_CONTEXT]);
    pipeline_check(c, want, n);
    if (n > 256) die("num_devices (%d) is more than this simulator runs (256 threads)", n);
    return n;
}

int mesh_check(const Config *c) {
    int want[MESH_NAXES];
    return mesh_sizes(c, want);
}

int mesh_check_sizes(const Config *c, int sizes[MESH_NAXES]) { return mesh_sizes(c, sizes); }

void mesh_init(Mesh *mesh, const Config *c) {
    memset(mesh, 0, sizeof *mesh);
    int want[MESH_NAXES];
    int n = mesh_sizes(c, want);
    for (int a = 0; a < MESH_NAXES; a++) mesh->size[a] = want[a];
    mesh->ndev = n;
    mesh->num_threads = c->num_threads;
    mesh->per_tensor_state = c->opt_type == OPT_ADAFACTOR || c->opt_type == OPT_MUON;
    mesh->zero1 = c->shard_optimizer_over_data;
    mesh_hybrid_init(mesh, c);
    mesh->devices = calloc((size_t)n, sizeof(Device));
    for (int d = 0; d < n; d++) device_init(&mesh->devices[d], d, (size_t)c->hbm_capacity);
    // Groups: for each axis mask, the devices that share all coordinates outside the mask.
    // Each process builds the groups its devices are in; the group's first member on this
    // process builds it, and its other members here share it.
    unsigned nmask = 1u << MESH_NAXES;
    mesh->groups = calloc((size_t)nmask * n, sizeof(Group *));
    mesh->prefetch = calloc((size_t)n, sizeof(Group *));
    int *members = malloc(sizeof(int) * (size_t)n);
    for (unsigned mask = 0; mask < nmask; mask++)
        for (int d = 0; d < n; d++) {
            if (mesh_process_of(mesh, d) != mesh->process || mesh->groups[(size_t)mask * n + d]) continue;
            int k = 0;
            for (int e = 0; e < n; e++) {
                int same = 1;
                for (int a = 0; a < MESH_NAXES && same; a++)
                    same = (mask & AXIS_BIT(a)) || mesh_coord(mesh, e, (MeshAxis)a) == mesh_coord(mesh, d, (MeshAxis)a);
                if (same) members[k++] = e;   // ascending id = ascending rank (row-major)
            }
            // The tag: the mask and the group's first member, the same on every process.
            Group *g = group_new(mesh, k, members, (int)mask * n + members[0]);
            for (int i = 0; i < k; i++) mesh->groups[(size_t)mask * n + members[i]] = g;
            if (mask == AXIS_BIT(AX_FSDP)) {   // its twin for the prefetch helpers
                Group *twin = group_new(mesh, k, members, (int)nmask * n + members[0]);
                for (int i = 0; i < k; i++) mesh->prefetch[members[i]] = twin;
            }
        }
    free(members);
}

// The first member of dev's group (along mask) that this process runs: it frees the group.
static int first_here(const Mesh *mesh, int dev, unsigned mask) {
    for (int e = 0; e < dev; e++)
        if (mesh_process_of(mesh, e) == mesh->process && mesh_group(mesh, e, mask) == mesh_group(mesh, dev, mask))
            return 0;
    return 1;
}

void mesh_free(Mesh *mesh) {
    unsigned nmask = 1u << MESH_NAXES;
    for (int d = 0; d < mesh->ndev; d++) {
        if (mesh_process_of(mesh, d) != mesh->process) continue;
        for (unsigned mask = 0; mask < nmask; mask++)
            if (first_here(mesh, d, mask)) group_free(mesh_group(mesh, d, mask));
        if (first_here(mesh, d, AXIS_BIT(AX_FSDP))) group_free(mesh->prefetch[d]);
    }
    free(mesh->groups);
    free(mesh->prefetch);
    free(mesh->rep);
    free(mesh->devices);
    memset(mesh, 0, sizeof *mesh);
}

const char *mesh_describe(const Mesh *mesh, char *buf, size_t cap) {
    buf[0] = 0;
    for (int a = 0; a < MESH_NAXES; a++)
        if (mesh->size[a] > 1)
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s=%d", buf[0] ? " " : "", MESH_AXIS_NAMES[a], mesh->size[a]);
    if (!buf[0]) snprintf(buf, cap, "1 device");
    return buf;
}

// Finished devices, for the dry run's progress and its limit on threads running at once.
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done, running;
} Tally;

typedef struct { Mesh *mesh; int dev; void (*fn)(int, void *); void *arg; Tally *tally; } Launch;

int mesh_threads_of(const Mesh *mesh, int dev) {
    if (mesh->num_threads > 0) return mesh->num_threads;
#ifdef _OPENMP
    int cores = omp_get_num_procs(), n = mesh->nlocal, k = mesh_local_index(mesh, dev);
    return MM_MAX(1, cores / n + (k < cores % n));
#else
    (void)dev;
    return 1;
#endif
}

// A GPU backend's library scratch (cuBLAS's workspace) comes from the allocator under a tag
// of its own, so that the device's report and memory_trace show it; none on the CPU.
static void *workspace_begin(void) {
    const Backend *b = kern();
    size_t n = b->workspace_bytes ? b->workspace_bytes() : 0;
    if (!n) return NULL;
    void *p = mem_alloc_uninit(MEM_WORKSPACE, n, "matrix product library workspace (cuBLAS)");
    b->set_workspace(p, n);
    return p;
}

static void workspace_end(void *p) {
    if (!p) return;
    kern_sync();   // no product still uses it
    kern()->set_workspace(NULL, 0);
    mem_free(p);
}

static void *device_main(void *p) {
    Launch *l = (Launch *)p;
    mem_set_device(&l->mesh->devices[l->dev]);
    mesh_set_current(l->mesh, l->dev);
#ifdef _OPENMP
    omp_set_num_threads(mesh_threads_of(l->mesh, l->dev));
    omp_set_max_active_levels(1);
#endif
    kern_bind(l->dev, mesh_gpu_slot(l->mesh, l->dev));   // a GPU backend: this device's GPU, stream and memory pool
    void *workspace = workspace_begin();
    l->fn(l->dev, l->arg);
    workspace_end(workspace);   // while the device's pool is still attached
    kern_unbind();
    if (l->tally) {
        pthread_mutex_lock(&l->tally->lock);
        l->tally->done++;
        l->tally->running--;
        pthread_cond_signal(&l->tally->cond);
        pthread_mutex_unlock(&l->tally->lock);
    }
    return NULL;
}

void mesh_run(Mesh *mesh, void (*fn)(int dev, void *arg), void *arg) {
    int n = mesh->nlocal;
    Launch *l = calloc((size_t)n, sizeof(Launch));
    pthread_t *th = calloc((size_t)n, sizeof(pthread_t));
    for (int k = 0; k < n; k++) {
        int d = mesh_device_of(mesh, mesh->process, k);
        l[k] = (Launch){mesh, d, fn, arg, NULL};
        if (n == 1) { device_main(&l[k]); break; }   // one device: run on this thread
        if (pthread_create(&th[k], NULL, device_main, &l[k]) != 0) die("cannot start the thread of device %d", d);
    }
    if (n > 1)
        for (int k = 0; k < n; k++) pthread_join(th[k], NULL);
    free(l);
    free(th);
}

// The classes of the dry run. A device's plan is every allocation of one step: a function
// of the config, the mesh's sizes, its coordinates, and what it receives. In a dry run only
// sizes are received (the expert all-to-all's row counts, equal on every device of the
// group: the dry run's balanced routing gives every device the same counts, model/moe.c
// build_rows). Of the coordinates:
//   data, fsdp  choose the device's sequences and its slice of each unit, which is padded to
//               a multiple of fsdp x data so that every slice has the same length
//               (sharding/fsdp.c shard_init); ZeRO-1's piece of the slice likewise; but
//               adafactor and muon keep state per tensor that meets the slice
//               (optim/adafactor.c; muon's AdamW half, optim/muon.c), so with them
//               the fsdp rank changes its size, and under ZeRO-1 (muon) the data rank;
//   tensor      chooses its heads, widths and vocabulary slice, all of one size since the
//               mesh must divide every split dimension (model/model.c);
// so these change which bytes, never how many, and devices that differ only there share a
// plan. The others keep devices apart:
//   stage       a stage holds its own layers, stage 0 the embedding, the last the head;
//   expert      the rank decides which global experts are local; under the balanced routing
//               an expert can get no rows (fewer assignments than experts), and a local
//               expert without rows allocates nothing (model/moe.c);
//   context     a part's position q0 sets how many keys its queries see: the attention score
//               rows hold q0 + S keys (model/attn_core.c:attn_core_forward), as does a
//               materialised causal mask, so the parts' temporaries differ in size.
// tests/plan_classes.sh plans meshes both ways (dry_run_all_devices) and compares every
// figure and the memory trace, event by event.
static int class_rep(const Mesh *mesh, int d) {
    unsigned apart = AXIS_BIT(AX_STAGE) | AXIS_BIT(AX_EXPERT) | AXIS_BIT(AX_CONTEXT) |
                     (mesh->per_tensor_state ? AXIS_BIT(AX_FSDP) : 0) |
                     (mesh->per_tensor_state && mesh->zero1 ? AXIS_BIT(AX_DATA) : 0);
    int id = 0;
    for (int a = 0; a < MESH_NAXES; a++)
        id = id * mesh->size[a] + (apart & AXIS_BIT(a) ? mesh_coord(mesh, d, (MeshAxis)a) : 0);
    return id;
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void mesh_run_classes(Mesh *mesh, void (*fn)(int dev, void *arg), void *arg, int all_devices) {
    int n = mesh->ndev;
    mesh->rep = malloc(sizeof(int) * (size_t)n);
    int *todo = malloc(sizeof(int) * (size_t)n), total = 0;
    for (int d = 0; d < n; d++) {
        mesh->rep[d] = all_devices ? d : class_rep(mesh, d);
        if (mesh->rep[d] == d) todo[total++] = d;
    }
    mesh->nclasses = total;
    mesh->solo = !all_devices;
    // Representatives run alone, so a few at a time keep the cores busy; every device of a
    // whole mesh waits for the others in its collectives, so they all run at once.
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int limit = all_devices ? n : (int)MM_MAX(1, cores);
    const char *what = all_devices ? "devices" : "classes of devices";
    Tally t = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    Launch *l = calloc((size_t)total, sizeof(Launch));
    pthread_t *th = calloc((size_t)total, sizeof(pthread_t));
    double t0 = seconds(), shown = t0;
    int started = 0;
    pthread_mutex_lock(&t.lock);
    while (t.done < total) {
        for (; started < total && t.running < limit; started++) {
            l[started] = (Launch){mesh, todo[started], fn, arg, &t};
            if (pthread_create(&th[started], NULL, device_main, &l[started]) != 0)
                die("cannot start the thread of device %d", todo[started]);
            t.running++;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&t.cond, &t.lock, &until);
        double now = seconds();
        if (now - t0 >= 2.0 && now - shown >= 2.0 && t.done < total) {   // a long plan: say how far it is
            fprintf(stderr, "dry run: %d of %d %s planned, %.1f s elapsed", t.done, total, what, now - t0);
            if (t.done) fprintf(stderr, ", about %.0f s left", (now - t0) / t.done * (total - t.done));
            fprintf(stderr, "\n");
            shown = now;
        }
    }
    pthread_mutex_unlock(&t.lock);
    for (int k = 0; k < total; k++) pthread_join(th[k], NULL);
    if (all_devices) fprintf(stderr, "dry run: all %d devices planned in %.1f s\n", n, seconds() - t0);
    else fprintf(stderr, "dry run: %d class%s of devices (%d device%s) planned in %.1f s\n", total, total == 1 ? "" : "es",
                 n, n == 1 ? "" : "s", seconds() - t0);
    mesh->solo = 0;
    // Every device of a class gets its representative's figures; the blocks stay with it.
    for (int d = 0; d < n; d++) {
        if (mesh->rep[d] == d) continue;
        Device *dev = &mesh->devices[d];
        int id = dev->id;
        *dev = mesh->devices[mesh->rep[d]];
        dev->id = id;
        dev->head = NULL;
    }
    free(l);
    free(th);
    free(todo);
}
