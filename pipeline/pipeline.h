// pipeline/pipeline.h: pipeline parallelism over the mesh axis `stage`, as MaxText runs it
// (layers/pipeline.py), on the thread mesh.
//
// The decoder layers that are pipelined (all of Mixtral's; DeepSeek's MoE layers, not its
// dense first layers) are cut into chunks of `num_layers_per_pipeline_stage` layers; chunk
// k runs on stage k mod P (P = ici_pipeline_parallelism stages), so with R =
// num_pipeline_repeats > 1 every stage holds R chunks and a microbatch goes round the
// stages R times (a circular pipeline): pipelined layer p runs on stage
// (p / layers_per_stage) mod P. A stage device holds only the weights (and
// gradients and AdamW moments) of its own layers, and its fsdp/expert share of them.
//
// Where the parts outside the pipeline run (this trainer's choice, Megatron's placement):
// the embedding and DeepSeek's dense first layers live on stage 0 and run there on each
// microbatch before it enters the pipeline; the final norm, the logits and the loss live
// on the last stage and run there on each microbatch that leaves it. Only those stages
// hold those weights, so the first and last stages carry a little more than the others;
// the memory report shows it. (MaxText keeps them replicated over `stage` and runs them on
// every device for the whole batch; here nothing is computed twice.)
//
// The batch: the devices along `stage` share one batch (it is split over data, fsdp and
// expert only). Each step's batch, or each gradient-accumulation microbatch of it, is cut
// into M = num_pipeline_microbatches pipeline microbatches of Bg/M consecutive sequences,
// and each batch device holds its piece of every one: exactly how gradient accumulation
// cuts a batch, so a pipeline microbatch is a subtree of the canonical gradient tree
// (model/treesum.h). Per microbatch each weight gradient is reduced over the batch devices
// (as model_backward does), and the M microbatch gradients of a weight are added along the
// same tree as step.c's accumulation, whatever order the schedule finishes them in
// (pipeline/gradtree.h). The loss leaves, the aux loss per sequence and the expert counts
// are written by the stage that computes them and summed over `stage` exactly (every entry
// has one writer). So every mesh with a pipeline gives the 1-device loss, bit for bit,
// when the sequences per microbatch and device are a power of two.
#ifndef MESHMOE_PIPELINE_H
#define MESHMOE_PIPELINE_H
#include "model/model.h"
#include "sharding/mesh.h"

enum { PP_GPIPE, PP_1F1B };          // pipeline_schedule
enum { PP_PPERMUTE, PP_SLICE };      // pipeline_shift_impl

// The pipeline's shape, derived from the keys (pipeline/placement.c).
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

// One (accumulation) microbatch through the pipeline: forward, loss, backward. ids, targets:
// (B,S) this device's sequences, pipeline microbatch k in rows [k*B/M, (k+1)*B/M), which
// are sequences k*Bg/M + brank*B/M + i of the batch (Bg = B * batch devices). st points at
// the batch's first sequence: loss leaves, aux rows of stride st->aux_stride, expert counts
// (+=). Gradients land in m->grad_dst like model_backward's.
void pipeline_train(Model *m, const int *ids, const int *targets, int B, int S, float scale, float lb_coef,
                    FwdStats *st);
// Forward only (eval): this device's B sequences are brank*B + i of the eval batch.
void pipeline_eval(Model *m, const int *ids, const int *targets, int B, int S, float lb_coef, FwdStats *st);

// Prints the schedule (per stage one row of F/B/idle per tick) and the bubble fraction
// measured next to (P-1)/(R*M+P-1).
void pipeline_print_schedule(const Config *c, int stages);

#endif
