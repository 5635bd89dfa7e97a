// trainer/dump.h: the parity dump read by the JAX reference (tests/parity/README.md).
#ifndef MESHMOE_DUMP_H
#define MESHMOE_DUMP_H
#include "model/model.h"
#include "data/loader.h"

// Runs parity_steps optimizer steps from the current weights on the first batches of the
// data and writes DIR/dump.safetensors: config, initial weights, batches, the weights and
// routing bias before each step, and the C results (logits, routing, losses, gradients,
// final weights; loss, gradient norm and routing of every step). parity_snapshots=false
// leaves out what is kept a step beyond its loss and gradient norm (the weights, routing
// bias and routing before each step), so that a long trajectory fits.
// (parity_dump_check has passed.) DIR is made, if it is not there, only once the file is
// ready to write, and removed again if the write fails.
void parity_dump(Model *m, const DataLoader *dl, const char *dir);
// dump_parity's checks, from the config and the mesh's device count (ndev) before the mesh
// starts: one device, num_vocab_tiling=1, no dry run, none of the keys it would not honour
// (save_checkpoint, metrics_file, memory_trace, profile), and its snapshots of the weights
// (parity_steps of them, unless parity_snapshots=false) within the host's memory; else dies
// naming the key.
void parity_dump_check(const Config *c, int ndev);
#endif
