// sweep/sweep_int.h: what the files of sweep/ share (not for the rest of the trainer).
#ifndef MESHMOE_SWEEP_INT_H
#define MESHMOE_SWEEP_INT_H
#include "trainer/rows.h"
#include "sweep/run.h"
#include "sweep/progress.h"
#include "base/config.h"
#include <stddef.h>

#define SW_MAXRUNS 160
#define SW_MAXSHAPES SW_MAXRUNS   // meshes of the mesh-shape sweep (each one run)

typedef struct {
    char args[700];   // the row's key=value arguments (the cache key)
    RunResult r;
} SweepRun;

typedef struct {
    char *exe;                 // this program, as /proc/self/exe names it
    char *config_path;         // the preset
    char **user;               // the command line's key=value (sweep_* keys left out)
    int nuser;
    Config cfg;                // preset + command line
    int global_batch;          // sequences per optimizer step in every run
    int stages;                // stage count of the pipeline rows
    char dir[256];             // temporary files of the runs (under TMPDIR)
    SweepRun runs[SW_MAXRUNS]; // every configuration run so far (a baseline is shared by rows)
    int nruns;
    int rows_run, unimplemented, refused, failures;
    char *mesh_table;          // the mesh-shape sweep's table, printed after the main one
    Progress progress;         // the progress lines on stderr
} Sweep;

// Runs the configuration "k=v k=v" (on top of the preset and command line), or returns
// the result of the same configuration run before.
const RunResult *sweep_config(Sweep *sw, const char *args);
// "fsdp=2,tensor=2" or "1 device".
void sweep_describe_mesh(const Config *c, char *buf, size_t cap);
// Whether every loss and grad norm of the two runs has the same bits.
int sweep_bit_identical(const RunResult *a, const RunResult *b);
// The result cell of a comparison (bit-identical, the loss difference, or why there is
// none); *bad when it must fail the sweep.
void sweep_result_cell(const RunResult *base, const RunResult *tog, SweepClass cls, char *buf, size_t cap, int *bad);
// "a -> b (+x.x%)".
void sweep_bytes_change(size_t a, size_t b, char *buf, size_t cap);
// The mesh-shape sweep's meshes as run arguments ("ici_fsdp_parallelism=2
// ici_tensor_parallelism=2"): every factorisation of sweep_num_devices over data, fsdp,
// tensor and expert. Returns their count.
int sweep_mesh_shapes(const Sweep *sw, char args[SW_MAXSHAPES][256]);
// The mesh-shape sweep: every factorisation of sweep_num_devices over data/fsdp/tensor/expert
// (sweep/meshes.c); prints its line of the main table and fills sw->mesh_table.
void sweep_meshes(Sweep *sw, const SweepRow *row);

#endif
