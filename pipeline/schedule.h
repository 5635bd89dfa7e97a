// pipeline/schedule.h: the tick tables of the pipeline schedules. A tick is one step of
// the loop: every stage does at most one task (the forward F or the backward B of one
// microbatch through one of its chunks), then the outputs move one stage on. The table is
// the same on every device, so every device knows what every stage does at every tick
// (and so which collectives happen). P stages (ici_pipeline_parallelism), M microbatches,
// R repeats (pipeline/pipeline.h).
//
//   gpipe  MaxText's loop: M*R + P - 1 iterations; at iteration t stage s runs microbatch
//          (t - s) mod M of repeat (t - s) div M (idle when t - s is outside [0, M*R)).
//          The backward pass is that loop transposed: the same iterations in reverse
//          order, gradients moving from stage s+1 to stage s. Live activations: all M*R
//          microbatch-chunks of a stage are saved before the first backward.
//   1f1b   one forward, one backward: each stage runs a backward as soon as one is ready,
//          else its next forward while fewer than (P - s) microbatches are in flight
//          (Megatron's warm-up), so a stage holds at most P - s of them, not M. With
//          R > 1, the interleaved order: microbatches in groups of P go through all R
//          chunks before the next group, warm-up 2(P-s-1) + (R-1)P.
// Both take 2(M*R + P - 1) ticks; each stage idles 2(P - 1) of them: the bubble fraction
// is (P-1)/(R*M + P - 1).
#ifndef MESHMOE_SCHEDULE_H
#define MESHMOE_SCHEDULE_H
#include <stdio.h>

enum { PP_IDLE, PP_F, PP_B };

typedef struct {
    int op;             // PP_IDLE, PP_F or PP_B
    int mb, rep;        // the microbatch and the repeat (which chunk of the stage)
} PipeTask;

typedef struct {
    int kind;           // PP_GPIPE or PP_1F1B (pipeline/pipeline.h)
    int nstages, M, R;  // P stages, M microbatches, R repeats
    int nticks;
    int nfwd;           // gpipe: the forward loop's ticks (the backward loop follows); 1f1b: 0
    PipeTask *task;     // (nticks, P)
} Schedule;

// forward_only: the forward loop alone (evaluation).
void schedule_build(Schedule *sc, int kind, int P, int M, int R, int forward_only);
void schedule_free(Schedule *sc);
static inline const PipeTask *schedule_at(const Schedule *sc, int t, int s) { return &sc->task[(size_t)t * sc->nstages + s]; }
// Idle stage-ticks in the whole table.
long schedule_idle(const Schedule *sc);
// Per stage a row of F/B/. per tick (with the microbatch), then the bubble measured and
// the formula.
void schedule_print(const Schedule *sc, FILE *f);

#endif
