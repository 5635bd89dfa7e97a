// pipeline/shift.h: moving each stage's output to the next stage (`shift` in MaxText's
// loop state), in the two ways pipeline_shift_impl selects. Both give the same numbers;
// they differ in the buffers that hold the data (docs/optimizations.md#pipeline_shift_impl).
//
//   ppermute  MaxText's explicit-sharding loop (shard_map + jax.lax.ppermute): the loop
//             state carries the collective's own buffers. Here: a send and a receive
//             buffer of one microbatch's activations (T,D) per direction, tag `comm`,
//             allocated when the loop starts and held until it ends. A stage copies its
//             output into the send buffer, coll_ppermute moves it into the next stage's
//             receive buffer, and that stage copies it out into a buffer of its own.
//   slice     MaxText's later loop: the shift is a stage-stacked array [P, T, D] sharded
//             over `stage`, rotated with slice/pad/concatenate (jnp ops, no collective in
//             the program). A device holds its row of that array, which is the stage's
//             output itself; the rotation gives each device a new row, the previous
//             stage's. What is simulated: on a thread mesh the row still has to cross from
//             one device to the next (XLA emits a collective-permute for the rotation of a
//             sharded array), so the data moves with coll_ppermute too, but straight from
//             the old row into the new row (tag activations): no buffer lives in the loop
//             state, and nothing is copied twice. The bytes sent are the same.
#ifndef MESHMOE_SHIFT_H
#define MESHMOE_SHIFT_H
#include <stddef.h>
#include "base/collectives.h"

typedef struct {
    int impl;           // PP_PPERMUTE or PP_SLICE
    Group *group;       // the devices along `stage` (rank = stage)
    int nstages, s;     // stages (P), this device's stage
    int dir;            // +1: to the next stage (forward), -1: to the previous (gradients)
    size_t n;           // floats per message
    float *send, *recv; // ppermute: the loop state's buffers (comm); slice: NULL
} Shift;

void shift_init(Shift *sh, int impl, Group *group, int P, int s, int dir, size_t n);
void shift_free(Shift *sh);
// One rotation, made by every stage device at the same tick. sends[r]: whether stage r
// sends (every device passes the same flags); out: this stage's output when it sends (the
// shift takes it over and frees it). Returns a new buffer (tag activations, called `name`)
// with what the neighbour sent, or NULL when it sent nothing.
float *shift_rotate(Shift *sh, float *out, const int *sends, const char *name);

#endif
