// base/placement.h: the pipeline's shape from the config keys and which stage holds
// which unit of the model (pipeline/pipeline.h explains the pipeline). Pure arithmetic on
// the config and the mesh's sizes, so that the layout of the state (base/shard.c) and
// the mesh's checks can use it without the pipeline itself.
#ifndef MESHMOE_PLACEMENT_H
#define MESHMOE_PLACEMENT_H
#include "base/config.h"
#include "base/mesh.h"

enum { PP_GPIPE, PP_1F1B };          // pipeline_schedule
enum { PP_PPERMUTE, PP_SLICE };      // pipeline_shift_impl

// The pipeline's shape, derived from the keys (base/placement.c).
typedef struct {
    int nstages;        // P: stages (ici_pipeline_parallelism)
    int M;              // microbatches per step (per accumulation microbatch)
    int R;              // repeats: chunks per stage
    int lps;            // layers per chunk (num_layers_per_pipeline_stage)
    int first;          // the first pipelined layer (first_num_dense_layers)
    int schedule;       // PP_GPIPE or PP_1F1B
    int shift;          // PP_PPERMUTE or PP_SLICE
    int save_dli;       // pipeline_save_decoder_layer_input
    int ag_once;        // pipeline_fsdp_ag_once
} PipeShape;

// The shape for `stages` stages. Dies with one line naming the numbers on a bad combination.
PipeShape pipeline_shape(const Config *c, int stages);
// Called by mesh_init with the mesh's axis sizes: every check that needs the mesh (the
// batch per pipeline, the axes the pipeline does not combine with). No-op for 1 stage.
void pipeline_check(const Config *c, const int size[MESH_NAXES], int ndev);
// The stage that holds unit u (sharding/fsdp.h: 0 embedding, 1+l layer l, L+1 head).
int pipeline_stage_of_unit(const Config *c, int stages, int u);
// The model layer run by stage s in repeat r, at place j of its chunk.
static inline int pipeline_layer(const PipeShape *p, int s, int r, int j) {
    return p->first + (r * p->nstages + s) * p->lps + j;
}

// For the running device (mesh_current()): 1 when its mesh has more than one stage.
int pipeline_active(void);
// Pipeline microbatches per step (1 without a pipeline): the batch layout (train.c).
int pipeline_microbatches(const Config *c);

#endif
