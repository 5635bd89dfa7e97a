// report/print.h: what a run says about where its tensors live.
//
// Every run prints one line with the parameter count and the model state per device.
// print_sharding=true also prints, before training (as MaxText prints its shardings), the
// logical-axis rule table, every parameter's global shape, logical axes, partition spec and
// per-device share, and the main activations' global and per-device shapes on this mesh.
#ifndef MESHMOE_PRINT_H
#define MESHMOE_PRINT_H
#include <stddef.h>
#include "model/model.h"

// Parameters of the whole model (the global shapes), whatever the mesh.
size_t sharding_global_params(const Model *m);
// "parameters: P (stored padded for fsdp=F zero1=Z: P')" and the model state per device.
void sharding_print_state(const Model *m);
// The print_sharding=true report. Bg: sequences in one microbatch of the global batch,
// S: tokens per sequence.
void sharding_print(const Model *m, int Bg, int S);

#endif
