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
// (base/treesum.h). Per microbatch each weight gradient is reduced over the batch devices
// (as model_backward does), and the M microbatch gradients of a weight are added along the
// same tree as step.c's accumulation, whatever order the schedule finishes them in
// (pipeline/gradtree.h). The loss leaves, the aux loss per sequence and the expert counts
// are written by the stage that computes them and summed over `stage` exactly (every entry
// has one writer). So every mesh with a pipeline gives the 1-device loss, bit for bit,
// when the sequences per microbatch and device are a power of two.
#ifndef MESHMOE_PIPELINE_H
#define MESHMOE_PIPELINE_H
#include "model/model.h"
#include "base/mesh.h"
#include "base/placement.h"

// One (accumulation) microbatch through the pipeline: forward, loss, backward. ids, targets:
// (B,S) this device's sequences, pipeline microbatch k in rows [k*B/M, (k+1)*B/M), which
// are sequences k*Bg/M + brank*B/M + i of the batch (Bg = B * batch devices). st points at
// the batch's first sequence: loss leaves, aux rows of stride st->aux_stride, expert counts
// (+=). Gradients land in m->grad_dst like model_backward's.
void pipeline_train(Model *m, const int *ids, const int *targets, int B, int S, float scale, float lb_coef,
                    FwdStats *st);
// Forward only (eval): this device's B sequences are brank*B + i of the eval batch.
void pipeline_eval(Model *m, const int *ids, const int *targets, int B, int S, float lb_coef, FwdStats *st);

// Forward only, for sampling: one sequence through the pipeline, given as
// pipeline_sample_copies rows of ids and targets (S tokens each, this device's part under
// context parallelism): one, or on a circular pipeline (num_pipeline_repeats > 1) one a
// stage, since a microbatch's next repeat needs a microbatch a stage before it. The last
// stage writes into `row` its tensor part of the logits of row `at` of the first copy (at -1:
// none on this device), as model_logits_rows gives them; the other devices leave `row` as
// they were given it (zeros, by trainer/sample.c).
int pipeline_sample_copies(const Config *c, int stages);
void pipeline_sample_logits(Model *m, const int *ids, const int *targets, int S, int at, float *row);

// Prints the schedule (per stage one row of F/B/idle per tick) and the bubble fraction
// measured next to (P-1)/(R*M+P-1).
void pipeline_print_schedule(const Config *c, int stages);

#endif
