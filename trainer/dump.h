// trainer/dump.h: the parity dump read by the JAX reference (tests/parity/README.md).
#ifndef MESHMOE_DUMP_H
#define MESHMOE_DUMP_H
#include "model/model.h"
#include "data/loader.h"

// Runs parity_steps optimizer steps from the current weights on the first batches of the
// data and writes DIR/dump.safetensors: config, initial weights, batches, the weights and
// routing bias before each step, and the C results (logits, routing, losses, gradients,
// final weights; loss, gradient norm and routing of every step).
void parity_dump(Model *m, const DataLoader *dl, const char *dir);
#endif
