// tests/test_hybrid.c: MaxText's hybrid mesh (base/hybrid.c). The process of each device
// and its index there, against tables written out by hand from the rule of JAX's
// create_hybrid_device_mesh (slice i's ici mesh is the block at dcn position i, row-major:
// along each axis the dcn coordinate is the outer factor), and against a construction
// that lays the blocks out as that function does; and the config fold without processes.
#include "base/mesh.h"
#include "base/config.h"
#include "base/net.h"
#include "tests/test.h"
#include <stdlib.h>

// A mesh with these global sizes and dcn sizes (data, stage, fsdp, context, tensor, expert).
static Mesh shape(const int size[MESH_NAXES], const int dcn[MESH_NAXES]) {
    Mesh m;
    memset(&m, 0, sizeof m);
    m.ndev = m.nprocess = 1;
    for (int a = 0; a < MESH_NAXES; a++) {
        m.size[a] = size[a];
        m.dcn[a] = dcn[a];
        m.ndev *= size[a];
        m.nprocess *= dcn[a];
    }
    m.nlocal = m.ndev / m.nprocess;
    return m;
}

static void check_table(const char *what, const Mesh *m, const int *process, const int *local) {
    for (int d = 0; d < m->ndev; d++) {
        CHECK(mesh_process_of(m, d) == process[d], "%s: device %d on process %d, want %d", what, d,
              mesh_process_of(m, d), process[d]);
        CHECK(mesh_local_index(m, d) == local[d], "%s: device %d is number %d of its process, want %d", what, d,
              mesh_local_index(m, d), local[d]);
    }
}

// The blocks laid out as create_hybrid_device_mesh does: slice p (row-major over the dcn
// shape) at block position p, its device k (row-major over the ici shape) inside the block.
static void check_blocks(const char *what, const Mesh *m) {
    int bad = 0, ici[MESH_NAXES];
    for (int a = 0; a < MESH_NAXES; a++) ici[a] = m->size[a] / m->dcn[a];
    for (int p = 0; p < m->nprocess; p++)
        for (int k = 0; k < m->nlocal; k++) {
            int dc[MESH_NAXES], ic[MESH_NAXES], pp = p, kk = k, id = 0;
            for (int a = MESH_NAXES - 1; a >= 0; a--) {
                dc[a] = pp % m->dcn[a]; pp /= m->dcn[a];
                ic[a] = kk % ici[a]; kk /= ici[a];
            }
            for (int a = 0; a < MESH_NAXES; a++) id = id * m->size[a] + dc[a] * ici[a] + ic[a];
            bad += mesh_device_of(m, p, k) != id || mesh_process_of(m, id) != p || mesh_local_index(m, id) != k;
        }
    CHECK(bad == 0, "%s: %d of %d devices placed unlike the blocks of create_hybrid_device_mesh", what, bad, m->ndev);
}

// The GPU slots (mesh_gpu_slot) with `per_host` processes on each host: on every host the
// devices of its processes take the slots 0 .. per_host * nlocal - 1, one each, so a host
// with that many GPUs gives every device its own. (Device number mod the GPUs, the rule of
// one process, does not: on dcn expert=2 over ici data=2 tensor=2 expert=2, process 0 holds
// devices 0, 1, 4, 5, 8, 9, 12, 13, which would take 4 of a host's 8 GPUs, two each.)
static void check_slots(const char *what, const Mesh *m, int per_host) {
    Net net = {0};
    net.nprocess = m->nprocess;
    net.host_nprocess = per_host;
    net_set(&net);
    int bad = 0, hosts = m->nprocess / per_host, n = per_host * m->nlocal;
    for (int h = 0; h < hosts; h++) {
        int *seen = calloc((size_t)n, sizeof(int));
        for (int q = 0; q < per_host; q++) {
            net.process = h * per_host + q;
            net.host_process = q;
            for (int k = 0; k < m->nlocal; k++) {
                int slot = mesh_gpu_slot(m, mesh_device_of(m, net.process, k));
                if (slot < 0 || slot >= n) bad++;
                else seen[slot]++;
            }
        }
        for (int i = 0; i < n; i++) bad += seen[i] != 1;
        free(seen);
    }
    net_set(NULL);
    CHECK(bad == 0, "%s, %d processes a host: %d slots missing, doubled or out of 0..%d", what, per_host, bad, n - 1);
}

int main(void) {
    // dcn data=2, ici fsdp=2: devices (data, fsdp) = 0 (0,0), 1 (0,1), 2 (1,0), 3 (1,1).
    Mesh a = shape((int[]){2, 1, 2, 1, 1, 1}, (int[]){2, 1, 1, 1, 1, 1});
    check_table("dcn data=2, ici fsdp=2", &a, (int[]){0, 0, 1, 1}, (int[]){0, 1, 0, 1});
    // dcn fsdp=2, ici fsdp=2: fsdp coordinates 0,1 on process 0 and 2,3 on process 1 (the
    // dcn coordinate outer; inner would give 0,2 and 1,3).
    Mesh b = shape((int[]){1, 1, 4, 1, 1, 1}, (int[]){1, 1, 2, 1, 1, 1});
    check_table("dcn fsdp=2, ici fsdp=2", &b, (int[]){0, 0, 1, 1}, (int[]){0, 1, 0, 1});
    // dcn data=2 fsdp=2, ici fsdp=2: device = data*4 + fsdp, process = data*2 + fsdp/2.
    Mesh c = shape((int[]){2, 1, 4, 1, 1, 1}, (int[]){2, 1, 2, 1, 1, 1});
    check_table("dcn data=2 fsdp=2, ici fsdp=2", &c, (int[]){0, 0, 1, 1, 2, 2, 3, 3}, (int[]){0, 1, 0, 1, 0, 1, 0, 1});
    // dcn expert=2, ici data=2 tensor=2: device = data*8 + tensor*4 + expert (expert of 4,
    // ici 2), process = expert/2, index = data*4 + tensor*2 + expert%2.
    Mesh e = shape((int[]){2, 1, 1, 1, 2, 4}, (int[]){1, 1, 1, 1, 1, 2});
    int pe[16], le[16];
    for (int d = 0; d < 16; d++) {
        int data = d / 8, tensor = d / 4 % 2, expert = d % 4;
        pe[d] = expert / 2;
        le[d] = data * 4 + tensor * 2 + expert % 2;
    }
    check_table("dcn expert=2, ici data=2 tensor=2 expert=2", &e, pe, le);
    check_blocks("dcn data=2 fsdp=2, ici fsdp=2", &c);
    check_blocks("dcn expert=2, ici data=2 tensor=2 expert=2", &e);
    Mesh f = shape((int[]){2, 2, 3, 2, 4, 1}, (int[]){2, 2, 1, 1, 2, 1});
    check_blocks("dcn data=2 stage=2 tensor=2, ici fsdp=3 context=2 tensor=2", &f);
    check_slots("dcn data=2 fsdp=2, ici fsdp=2", &c, 2);
    check_slots("dcn data=2 fsdp=2, ici fsdp=2", &c, 1);
    check_slots("dcn expert=2, ici data=2 tensor=2 expert=2", &e, 2);
    check_slots("dcn data=2 stage=2 tensor=2, ici fsdp=3 context=2 tensor=2", &f, 4);
    // One process: a device's slot is its own number.
    Mesh one = shape((int[]){2, 1, 2, 1, 2, 1}, (int[]){1, 1, 1, 1, 1, 1});
    int off = 0;
    for (int d = 0; d < one.ndev; d++) off += mesh_gpu_slot(&one, d) != d;
    CHECK(off == 0, "one process: %d of %d devices' GPU slots are not their numbers", off, one.ndev);
    // Without processes (./train): dcn keys of 1, or -1 (the processes left over: one),
    // leave the ici sizes as they are.
    Config cf;
    config_defaults(&cf);
    cf.ici_fsdp_parallelism = 2;
    cf.dcn_data_parallelism = -1;
    mesh_hybrid_config(&cf);
    CHECK(cf.dcn_data_parallelism == 1 && cf.ici_fsdp_parallelism == 2 && cf.ici_data_parallelism == 1,
          "one process: dcn_data_parallelism=-1 becomes %d (want 1), ici fsdp %d data %d (want 2, 1)",
          cf.dcn_data_parallelism, cf.ici_fsdp_parallelism, cf.ici_data_parallelism);
    TEST_SUMMARY();
}
