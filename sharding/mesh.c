// sharding/mesh.c: mesh shape from the config, device coordinates, groups, and the
// threads that run the devices.
#include "sharding/mesh.h"
#include "sharding/collectives.h"
#include "pipeline/pipeline.h"
#include "sharding/context.h"
#include "common.h"
#include <pthread.h>

const char *const MESH_AXIS_NAMES[MESH_NAXES] = {"data", "stage", "fsdp", "context", "tensor", "expert"};

// Defined in collectives.c: the backend builds its own group objects.
Group *group_new(int n, const int *members);
void group_free(Group *g);

static _Thread_local const Mesh *cur_mesh;
static _Thread_local int cur_dev;

const Mesh *mesh_current(void) { return cur_mesh; }
int mesh_device_id(void) { return cur_dev; }
void mesh_set_current(const Mesh *mesh, int dev) { cur_mesh = mesh; cur_dev = dev; }

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

Group *mesh_group(const Mesh *mesh, int dev, unsigned mask) {
    return mesh->groups[(size_t)mask * mesh->ndev + dev];
}

Group *mesh_prefetch_group(const Mesh *mesh, int dev) { return mesh->prefetch[dev]; }

void mesh_init(Mesh *mesh, const Config *c) {
    memset(mesh, 0, sizeof *mesh);
    int want[MESH_NAXES] = {c->ici_data_parallelism, c->ici_pipeline_parallelism, c->ici_fsdp_parallelism,
                            c->ici_context_parallelism, c->ici_tensor_parallelism, c->ici_expert_parallelism};
    const char *keys[MESH_NAXES] = {"ici_data_parallelism", "ici_pipeline_parallelism", "ici_fsdp_parallelism",
                                    "ici_context_parallelism", "ici_tensor_parallelism", "ici_expert_parallelism"};
    int known = 1, fill = -1;
    for (int a = 0; a < MESH_NAXES; a++) {
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
    for (int a = 0; a < MESH_NAXES; a++) mesh->size[a] = want[a];
    mesh->ndev = n;
    mesh->devices = calloc((size_t)n, sizeof(Device));
    for (int d = 0; d < n; d++) device_init(&mesh->devices[d], d, (size_t)c->hbm_capacity);
    // Groups: for each axis mask, the devices that share all coordinates outside the mask.
    unsigned nmask = 1u << MESH_NAXES;
    mesh->groups = calloc((size_t)nmask * n, sizeof(Group *));
    mesh->prefetch = calloc((size_t)n, sizeof(Group *));
    int *members = malloc(sizeof(int) * (size_t)n);
    for (unsigned mask = 0; mask < nmask; mask++)
        for (int d = 0; d < n; d++) {
            int coord[MESH_NAXES];
            for (int a = 0; a < MESH_NAXES; a++) coord[a] = mesh_coord(mesh, d, (MeshAxis)a);
            // The group's first member (all masked coordinates 0) builds it; others share it.
            int first = 1;
            for (int a = 0; a < MESH_NAXES; a++) first &= !(mask & AXIS_BIT(a)) || coord[a] == 0;
            if (!first) continue;
            int k = 0;
            for (int e = 0; e < n; e++) {
                int same = 1;
                for (int a = 0; a < MESH_NAXES && same; a++)
                    same = (mask & AXIS_BIT(a)) || mesh_coord(mesh, e, (MeshAxis)a) == coord[a];
                if (same) members[k++] = e;   // ascending id = ascending rank (row-major)
            }
            Group *g = group_new(k, members);
            for (int i = 0; i < k; i++) mesh->groups[(size_t)mask * n + members[i]] = g;
            if (mask == AXIS_BIT(AX_FSDP)) {   // its twin for the prefetch helpers
                Group *twin = group_new(k, members);
                for (int i = 0; i < k; i++) mesh->prefetch[members[i]] = twin;
            }
        }
    free(members);
}

void mesh_free(Mesh *mesh) {
    unsigned nmask = 1u << MESH_NAXES;
    for (unsigned mask = 0; mask < nmask; mask++)
        for (int d = 0; d < mesh->ndev; d++) {
            Group *g = mesh->groups[(size_t)mask * mesh->ndev + d];
            if (g && mesh_rank(mesh, d, mask) == 0) group_free(g);
        }
    for (int d = 0; d < mesh->ndev; d++)
        if (mesh_rank(mesh, d, AXIS_BIT(AX_FSDP)) == 0) group_free(mesh->prefetch[d]);
    free(mesh->groups);
    free(mesh->prefetch);
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

typedef struct { Mesh *mesh; int dev; void (*fn)(int, void *); void *arg; } Launch;

static void *device_main(void *p) {
    Launch *l = (Launch *)p;
    mem_set_device(&l->mesh->devices[l->dev]);
    mesh_set_current(l->mesh, l->dev);
    l->fn(l->dev, l->arg);
    return NULL;
}

void mesh_run(Mesh *mesh, void (*fn)(int dev, void *arg), void *arg) {
    int n = mesh->ndev;
    Launch *l = calloc((size_t)n, sizeof(Launch));
    pthread_t *th = calloc((size_t)n, sizeof(pthread_t));
    for (int d = 0; d < n; d++) {
        l[d] = (Launch){mesh, d, fn, arg};
        if (n == 1) { device_main(&l[d]); break; }   // one device: run on this thread
        if (pthread_create(&th[d], NULL, device_main, &l[d]) != 0) die("cannot start the thread of device %d", d);
    }
    if (n > 1)
        for (int d = 0; d < n; d++) pthread_join(th[d], NULL);
    free(l);
    free(th);
}
