// optim/adafactor.h: opt_type=adafactor, optax.adafactor with MaxText's (= optax's)
// defaults: a factored second moment for tensors whose two largest dimensions are both
// >= 128 (a row and a column running mean of g^2 + 1e-30 per leading index), a full one
// for the others; decay 1 - t^-0.8 at update t; each tensor's update clipped to RMS 1,
// times the learning rate, times max(RMS(param), 1e-3).
//
// The state is kept per tensor, on the devices that hold part of it. A factored tensor keeps
// its row and column means for a box: the leading indices of the device's piece (all of
// them unless tensor or expert parallelism cuts a leading dim: an expert stack's experts,
// attention's heads), every row and every column (lead * (R + C) floats, replicated over
// fsdp and over the axes that cut the rows or columns); a full one keeps its running mean
// only for the elements this device holds. Every per-tensor reduction gives the same bits
// on any mesh: the row and column sums are taken in index order over the box's gradient,
// gathered whole (over fsdp, one unit at a time, MEM_COMM, and over the tensor or expert
// axes that cut the rows or columns, one tensor at a time); the RMS of the update and of
// the parameter add each device's squares in 128-bit fixed point (exact, like the gradient
// norm in sharding/fsdp.c). Supported meshes: every axis. Under ZeRO-1
// (shard_optimizer_over_data) a data replica updates its piece of each shard: it keeps the
// state of the tensors that meet its piece (a full one's for its elements), gathers the
// other replicas' reduced gradient pieces for the row and column sums, and optimizer_step
// gathers the updated weights after (as AdamW's ZeRO-1).
#ifndef MESHMOE_ADAFACTOR_H
#define MESHMOE_ADAFACTOR_H
#include <stddef.h>
#include "base/config.h"

struct Model;

// Which two dimensions optax factors over: *drow (the second largest, ties to the later
// index) and *dcol (the largest); 0 if the tensor keeps a full second moment.
int adafactor_factored_dims(const int *shape, int ndim, int *drow, int *dcol);
// Floats of adafactor state this device keeps (its MEM_OPTIMIZER allocation).
size_t adafactor_state_floats(const struct Model *m);
// Where tensor i's state lies in this device's m->v_mem (checkpoints read and write it):
// 0 if the device holds no element of the tensor. Factored: lead*(R+C) floats from `off`,
// the row means v_row[l*R + r] then the column means v_col[l*C + c], where l runs over
// the piece's indices of the dimensions other than drow and dcol in order (R and C are
// whole); otherwise the running mean of elements [k0, k1) of the piece (row-major over its
// local shape, ParamSpec.shape), one float each, from `off`.
typedef struct { size_t off, k0, k1, R, C, lead; int factored, drow, dcol; } AdafactorSlot;
int adafactor_slot(const struct Model *m, int i, AdafactorSlot *slot);
// One update of this device's parameters (under ZeRO-1 its piece of them; m->v_mem holds the
// state); t is 1-based.
void adafactor_update(struct Model *m, float lr, int t);

#endif
