// optim/offload.h: where the model state lives between steps. With
// parameter_memory_host_offload / optimizer_memory_host_offload the weights / optimizer
// state stay in the device's host memory and are copied to the device only while a step
// (or the update) uses them; the EMA copy of the weights (ema_decay) lives on the device
// or, with ema_host_offload, in host memory.
#ifndef MESHMOE_OFFLOAD_H
#define MESHMOE_OFFLOAD_H
#include "base/config.h"

struct Model;
// Checks ema_decay and the offload keys against opt_type (called by trainer/step.c:step_check_config).
void state_offload_check(const Config *c);
// End of model_init: the EMA copy made, the offloaded state moved to host memory.
void state_offload_init(struct Model *m);
// The weights on the device for a step or an eval (a no-op without the offload), and back.
void state_params_in(struct Model *m);
void state_params_out(struct Model *m);
// The optimizer state on the device for the update (a no-op without the offload), and back
// (optim/optimizer.c:optimizer_step).
void state_optimizer_in(struct Model *m);
void state_optimizer_out(struct Model *m);
// ema = ema_decay * ema + (1 - ema_decay) * params, after an update (a no-op when off).
void ema_update(struct Model *m);
// ema = params: after weights are loaded, the EMA starts from them (a no-op when off).
void ema_restart(struct Model *m);
#endif
