// base/mesh.h: the simulated device mesh. Devices are real threads,
// each with its own allocator (base/memory.h), laid out on a grid whose
// axes carry MaxText's names. A device's id is its row-major index over the axes in the
// order below (the last axis varies fastest), as in MaxText's mesh_axes.
//
// Groups: for any set of axes, the devices that differ only along those axes form a group;
// collectives (base/collectives.h) run over a group, and a member's rank in it is its
// row-major index over the chosen axes.
#ifndef MESHMOE_MESH_H
#define MESHMOE_MESH_H
#include "base/config.h"
#include "base/memory.h"

typedef enum { AX_DATA, AX_STAGE, AX_FSDP, AX_CONTEXT, AX_TENSOR, AX_EXPERT, MESH_NAXES } MeshAxis;
extern const char *const MESH_AXIS_NAMES[MESH_NAXES];   // "data", "stage", "fsdp", ...
#define AXIS_BIT(a) (1u << (a))
#define MESH_ALL_AXES ((1u << MESH_NAXES) - 1)   // the mask of every axis: the whole mesh's group

typedef struct Group Group;   // defined in collectives.c

typedef struct Mesh {
    int size[MESH_NAXES];     // devices along each axis
    int ndev;                 // product of the sizes
    Device *devices;          // (ndev)
    Group **groups;           // (1 << MESH_NAXES, ndev): groups[mask * ndev + dev]
    Group **prefetch;         // (ndev) a second fsdp group for the prefetch helper threads
                              // (sharding/overlap.h): its own barrier and slots
    // A dry run plans one device per class (mesh_run_classes): rep[d] is the device whose
    // plan d shares, the lowest id of its class; solo is set while the representatives run.
    int *rep;                 // (ndev)
    int nclasses;
    int solo;
    int per_tensor_state;     // opt_type=adafactor or muon: its state's size depends on the fsdp rank
    int zero1;                // shard_optimizer_over_data: ... and, with per_tensor_state, on the data rank
    int num_threads;          // the num_threads key: OpenMP threads per device (0 = shared out)
    // Processes (base/hybrid.c, MaxText's hybrid mesh): dcn[a] processes along axis a, each
    // with size[a] / dcn[a] devices along it; this process's number, the count, and how many
    // devices each process runs. One process (./train): dcn all 1, nlocal = ndev.
    int dcn[MESH_NAXES];
    int process, nprocess, nlocal;
} Mesh;

// Sizes from ici_<axis>_parallelism (-1 = whatever is left of num_devices). Dies with a
// message naming the numbers if they do not multiply to the device count.
void mesh_init(Mesh *mesh, const Config *c);
// mesh_init's checks of the sizes alone (no allocation): train.c runs them where every
// process of a run agrees on one message (its agreed()). Returns the device count.
int mesh_check(const Config *c);
// The same, with each axis's size (a -1 axis filled) in sizes, in MESH_AXIS order.
int mesh_check_sizes(const Config *c, int sizes[MESH_NAXES]);

// MaxText's hybrid mesh (base/hybrid.c). mesh_hybrid_config, right after the config is
// read: checks that the dcn_<axis>_parallelism keys multiply to the run's processes (one
// process without a Net, base/net.h) and makes every ici_* size (and num_devices) the
// global one, dcn x ici, so that the rest of the trainer sees the mesh of the one-process
// run. mesh_hybrid_init (from mesh_init) fills the Mesh's process fields.
void mesh_hybrid_config(Config *c);
void mesh_hybrid_init(Mesh *mesh, const Config *c);
// The process that runs device dev; dev's index among that process's devices; the device
// with index k on process p.
int mesh_process_of(const Mesh *mesh, int dev);
int mesh_local_index(const Mesh *mesh, int dev);
int mesh_device_of(const Mesh *mesh, int process, int k);
// Device dev's place among the devices of every process on its host (base/net.h): the
// process's number there times its devices, plus dev's index among them; dev itself in one
// process. A GPU backend runs it on the host's GPU number slot mod the GPUs there, so the
// processes of a host share out its GPUs in order whatever their devices' global numbers.
int mesh_gpu_slot(const Mesh *mesh, int dev);
// After a run over several processes: process 0 gets every device's figures for its report.
void mesh_collect_devices(Mesh *mesh);
void mesh_free(Mesh *mesh);
int mesh_coord(const Mesh *mesh, int dev, MeshAxis axis);
// The group of `dev` along the axes in `mask`, and dev's rank in it.
Group *mesh_group(const Mesh *mesh, int dev, unsigned mask);
int mesh_rank(const Mesh *mesh, int dev, unsigned mask);
// The member of dev's group along `mask` whose rank in it is `rank` (mesh_rank's inverse).
int mesh_member(const Mesh *mesh, int dev, unsigned mask, int rank);
// The same members as the fsdp group of dev, but a group of its own: the helper threads of
// overlap_collectives gather over it, so their all-gathers never share a barrier with the
// collectives the device threads run meanwhile (a reduce-scatter over fsdp, say).
Group *mesh_prefetch_group(const Mesh *mesh, int dev);
// "data=2 fsdp=4" (axes of size 1 left out; "1 device" when all are 1).
const char *mesh_describe(const Mesh *mesh, char *buf, size_t cap);

// The OpenMP threads of device dev: num_threads if set, else the C cores shared out over the
// N devices, C/N each and one more for the first C mod N, at least one: the devices' threads
// together are never more than the cores (unless there are more devices than cores).
int mesh_threads_of(const Mesh *mesh, int dev);

// Runs fn(dev, arg) on one thread per device of this process, each with its device set as the thread's
// current device and its OpenMP threads set (mesh_threads_of; nested parallel regions off:
// a parallel loop inside another runs on the thread that reaches it), and returns when all
// have finished.
void mesh_run(Mesh *mesh, void (*fn)(int dev, void *arg), void *arg);

// Dry run (the planner): devices whose plans are equal form a class, and only the first
// device of each class walks the step, alone: its collectives wait for nobody and see every
// member post what it posts (base/collectives.c); then every device of the class is given
// its figures (peaks, live bytes, bytes sent, the planner's watch). mesh.c says which
// coordinates make two plans differ. As many representatives run at a time as there are
// cores; progress goes to stderr once the run takes more than a moment, and a last line on
// stderr says how many devices walked the step. With all_devices, every device runs
// together as in training (mesh_run): the check that the classes are right.
void mesh_run_classes(Mesh *mesh, void (*fn)(int dev, void *arg), void *arg, int all_devices);

// The calling thread's mesh and device id (set by mesh_run; 1-device runs set them too).
const Mesh *mesh_current(void);
int mesh_device_id(void);
void mesh_set_current(const Mesh *mesh, int dev);
// The calling device along one axis: the axis's size (1 without a mesh), the device's
// coordinate on it (0 without a mesh), and its group along it (NULL without a mesh).
int mesh_axis_size(MeshAxis axis);
int mesh_axis_rank(MeshAxis axis);
Group *mesh_axis_group(MeshAxis axis);

#endif
