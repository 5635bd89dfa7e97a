// base/hybrid.c: MaxText's hybrid mesh, devices over several processes (base/mesh.h).
//
// MaxText builds its mesh with create_device_mesh (maxtext_utils, formerly max_utils),
// which for a run over several slices calls JAX's mesh_utils.create_hybrid_device_mesh:
// each slice's devices form the ici mesh (ici_<axis>_parallelism), the slices form the dcn
// mesh (dcn_<axis>_parallelism), and the global mesh is the block matrix of the slices'
// meshes, slice i at the dcn coordinates of i in row-major order. So along each axis a the
// global coordinate is dcn_coord * ici_a + ici_coord: the dcn coordinate is the outer,
// slower varying factor. Here a slice is a process (base/net.h): process p holds the
// devices whose dcn coordinates, in row-major order over the axes, number p.
#include "base/mesh.h"
#include "base/net.h"
#include "core/common.h"

static const char *const DCN_KEYS[MESH_NAXES] = {"dcn_data_parallelism", "dcn_pipeline_parallelism",
    "dcn_fsdp_parallelism", "dcn_context_parallelism", "dcn_tensor_parallelism", "dcn_expert_parallelism"};

void mesh_hybrid_config(Config *c) {
    int *dcn[MESH_NAXES] = {&c->dcn_data_parallelism, &c->dcn_pipeline_parallelism, &c->dcn_fsdp_parallelism,
                            &c->dcn_context_parallelism, &c->dcn_tensor_parallelism, &c->dcn_expert_parallelism};
    int *ici[MESH_NAXES] = {&c->ici_data_parallelism, &c->ici_pipeline_parallelism, &c->ici_fsdp_parallelism,
                            &c->ici_context_parallelism, &c->ici_tensor_parallelism, &c->ici_expert_parallelism};
    const Net *net = net_current();
    int nproc = net ? net->nprocess : 1, known = 1, fill = -1;
    for (int a = 0; a < MESH_NAXES; a++) {   // (the keys' ranges, checked here before they are used)
        if (*dcn[a] != -1 && (*dcn[a] < 1 || *dcn[a] > 256))
            die("%s must be in [1, 256], or -1 (-1 = the processes left over), got %d", DCN_KEYS[a], *dcn[a]);
        if (*dcn[a] != -1) { known *= *dcn[a]; continue; }
        if (fill >= 0) die("only one dcn axis may be -1 (fill the rest): %s and %s both are", DCN_KEYS[fill], DCN_KEYS[a]);
        fill = a;
    }
    if (fill >= 0 && nproc % known == 0) { *dcn[fill] = nproc / known; known = nproc; }
    char msg[320];
    snprintf(msg, sizeof msg, "the dcn_*_parallelism keys ask for %s%d processes (one per slice) but the run has %d",
             fill >= 0 ? "a multiple of " : "", known, nproc);
    if (!net && known != nproc)
        die("%s: ./train is one process; build ./train_mpi (make mpi) and start it with mpirun -np %d (docs/mpi.md)",
            msg, known);
    if (known != nproc) die("%s", msg);
    // From here on the ici_* sizes (and num_devices) are the global mesh's: dcn x ici. A
    // message that names them says so.
    for (int a = 0; a < MESH_NAXES; a++)
        if (*ici[a] > 0) *ici[a] *= *dcn[a];
    if (c->num_devices > 0) c->num_devices *= known;
    if (known > 1) {
        static const char *const words[] = {"ici_", "num_devices", NULL};
        static char note[160];
        snprintf(note, sizeof note, " (over the %d processes: each ici_* value and num_devices here is the whole "
                 "mesh's, the value given times its dcn_* axis)", known);
        die_set_note(words, note);
    }
}

void mesh_hybrid_init(Mesh *mesh, const Config *c) {
    const int dcn[MESH_NAXES] = {c->dcn_data_parallelism, c->dcn_pipeline_parallelism, c->dcn_fsdp_parallelism,
                                 c->dcn_context_parallelism, c->dcn_tensor_parallelism, c->dcn_expert_parallelism};
    const Net *net = net_current();
    mesh->nprocess = 1;
    for (int a = 0; a < MESH_NAXES; a++) {
        mesh->dcn[a] = dcn[a] > 0 ? dcn[a] : 1;
        if (mesh->size[a] % mesh->dcn[a])
            die("internal: axis %s has %d devices, not a multiple of %s=%d", MESH_AXIS_NAMES[a], mesh->size[a],
                DCN_KEYS[a], mesh->dcn[a]);
        mesh->nprocess *= mesh->dcn[a];
    }
    mesh->process = net ? net->process : 0;
    mesh->nlocal = mesh->ndev / mesh->nprocess;
}

int mesh_process_of(const Mesh *mesh, int dev) {
    int p = 0;
    for (int a = 0; a < MESH_NAXES; a++) {
        int ici = mesh->size[a] / mesh->dcn[a];
        p = p * mesh->dcn[a] + mesh_coord(mesh, dev, (MeshAxis)a) / ici;
    }
    return p;
}

int mesh_local_index(const Mesh *mesh, int dev) {
    int k = 0;
    for (int a = 0; a < MESH_NAXES; a++) {
        int ici = mesh->size[a] / mesh->dcn[a];
        k = k * ici + mesh_coord(mesh, dev, (MeshAxis)a) % ici;
    }
    return k;
}

int mesh_gpu_slot(const Mesh *mesh, int dev) {
    const Net *net = net_current();
    int host_process = mesh->nprocess > 1 && net ? net->host_process : 0;
    return host_process * mesh->nlocal + mesh_local_index(mesh, dev);
}

int mesh_device_of(const Mesh *mesh, int process, int k) {
    int coord[MESH_NAXES], dev = 0;
    for (int a = MESH_NAXES - 1; a >= 0; a--) {   // the last axis varies fastest
        int ici = mesh->size[a] / mesh->dcn[a];
        coord[a] = (process % mesh->dcn[a]) * ici + k % ici;
        process /= mesh->dcn[a];
        k /= ici;
    }
    for (int a = 0; a < MESH_NAXES; a++) dev = dev * mesh->size[a] + coord[a];
    return dev;
}

// Process 0 receives every process's Device records for the report. Their pointers (live
// blocks, the planner's hook) belong to the process that sent them and are cleared.
void mesh_collect_devices(Mesh *mesh) {
    const Net *net = net_current();
    if (mesh->nprocess == 1 || !net) return;
    size_t each = sizeof(Device) * (size_t)mesh->nlocal;
    Device *mine = malloc(each), *all = mesh->process == 0 ? malloc(each * (size_t)mesh->nprocess) : NULL;
    for (int k = 0; k < mesh->nlocal; k++) mine[k] = mesh->devices[mesh_device_of(mesh, mesh->process, k)];
    net->gather(mine, all, each);
    for (int p = 1; all && p < mesh->nprocess; p++)
        for (int k = 0; k < mesh->nlocal; k++) {
            Device *d = &mesh->devices[mesh_device_of(mesh, p, k)];
            *d = all[(size_t)p * mesh->nlocal + k];
            d->head = NULL;
            d->hook = NULL;
            d->hook_ctx = NULL;
            d->peak_name = NULL;
        }
    free(mine);
    free(all);
}
