// pipeline/pipe.h: the state of one pipeline run on one device, shared by the loop
// (pipeline/pipeline.c) and the stage's computations (pipeline/stage.c).
//
// A job is one microbatch through one chunk of the stage: j = repeat * M + microbatch.
// Buffers, in MaxText's names:
//   state_io         the stream at the two ends of the pipeline, one slot per microbatch:
//                    on stage 0 the pipeline's inputs (embedding and dense layers) and, in
//                    the backward pass, their gradients; on the last stage the outputs and
//                    then the loss gradients the head sends back.
//   shift            what the previous stage sent (forward) or the next one (backward),
//                    waiting for the job that uses it: one tick in MaxText's loop, longer
//                    under 1F1B.
//   circ_storage     the same on stage 0 for repeats after the first: the last stage's
//                    outputs wait there for their next pass (M - P ticks when M > P).
//   iteration_input  the saved input of every job (remat: the backward recomputes the
//                    chunk from it), and decoder_layer_input: every layer's input, saved
//                    as well when pipeline_save_decoder_layer_input is on. Under a
//                    remat_policy other than full, each layer's saved tensors instead
//                    (pipeline/stage.c).
#ifndef MESHMOE_PIPE_H
#define MESHMOE_PIPE_H
#include "pipeline/pipeline.h"
#include "pipeline/schedule.h"
#include "pipeline/shift.h"
#include "pipeline/gradtree.h"

typedef struct {
    Model *m;
    PipeShape p;
    Schedule sc;
    int s;                  // this device's stage
    Group *stage;           // the devices along `stage` (same data/fsdp/expert/tensor coordinates)
    int train;              // 0: forward only (eval)
    int Bm, S, Tm, D;       // sequences per microbatch, tokens per sequence, Bm*S, model width
    const int *ids, *targets;   // (M*Bm, S) this device's rows, microbatch k first
    float scale, lb_coef;
    // Statistics of the batch (summed over `stage` at the end: every entry has one writer).
    long seq0, stride;      // microbatch k, row i is sequence seq0 + k*stride + i of the batch
    int nseq;               // sequences in the batch
    int crank;              // this device's chunk of every sequence (context parallelism)
    long leaves_per_seq;    // of one chunk
    double *loss_leaf;      // (nctx * nseq * leaves_per_seq): chunk, sequence, leaf (base/context.h)
    double *aux;            // (nmoe, nseq)
    long *counts;           // (L, E), or NULL
    float *logits;          // sampling: (V / tensor) the last stage's logits of row logits_at of
    int logits_at;          // microbatch 0, this device's part of the vocabulary (-1: no row
                            // here); NULL otherwise
    // Per job and per microbatch (see above); NULL where nothing is held.
    float **shift_in;       // (J) activations that arrived (shift, or circ_storage on stage 0)
    float **grad_in;        // (J) gradients that arrived (or the loss gradient on the last stage)
    float **saved;          // (J) iteration_input
    float **dli;            // (J * lps) decoder_layer_input
    float **state_io;       // (M)
    LayerActs *dense;       // (M * first_num_dense_layers) stage 0: the dense layers' activations
    LayerActs *acts;        // (J * lps) what remat_policy keeps of each job's layers; NULL under
                            // remat_policy=full (saved and dli instead)
    GradTree *tree;         // (units) the microbatch gradients of each unit this stage holds
    unsigned char *held;    // (units) gathered once for the whole loop (pipeline_fsdp_ag_once)
    Shift fwd, bwd;
} Pipe;

static inline int pipe_job(const Pipe *P, int mb, int rep) { return rep * P->p.M + mb; }

// pipeline/stage.c: what a stage computes.
float *stage_embed(Pipe *P, int mb);                      // stage 0: the pipeline input of mb
void stage_embed_backward(Pipe *P, int mb, float *dx);    // stage 0: dense layers + embedding backward
float *stage_head(Pipe *P, int mb, float *y);             // last stage: loss (+ its gradient, training)
float *stage_forward(Pipe *P, int mb, int rep, float *x); // the chunk's layers; saves for remat
float *stage_backward(Pipe *P, int mb, int rep, float *dy); // recompute, then backward; dy becomes dx

#endif
