// trainer/step.h: one optimizer step (gradient accumulation, clipping, the optimizer
// opt_type chooses (optim/optimizer.c: AdamW, SGD or Adafactor), routing-bias update) and
// the eval loss.
#ifndef MESHMOE_STEP_H
#define MESHMOE_STEP_H
#include "model/model.h"

typedef struct {
    float loss;         // total loss: CE (+ z-loss) mean over tokens + aux loss
    float ce_loss;      // CE (+ z-loss) mean
    float aux_loss;     // load-balance loss (mean over MoE layers)
    float grad_norm;    // global gradient norm before clipping
    float lr;           // learning rate used by this update
    long ntok;          // tokens with a target in the global batch
    size_t fwd_peak[MEM_NTAGS];   // this device's peak bytes per tag during the forward passes
} StepResult;

// Every check a run makes on its config before anything starts: the keys and shapes
// (config_validate), the remat policy (model/remat.h) and the optimizer with its offload and
// EMA (optim/offload.h). Dies with one message naming the key.
void step_check_config(const Config *c);

// Everything a training run's model needs on this device, in the order memory is laid out:
// the layout, parameters and gradients (model/model.h), the optimizer state (opt_type:
// AdamW's two moments, Adafactor's factored second moments, none for SGD), the weights, the
// sharding strategy (sharding/fsdp.h) and the host offload and EMA copy (optim/offload.h).
void step_init(Model *m, const Config *c);

// Hooks for the parity dump: called after each microbatch's forward pass, before its
// backward pass overwrites the logits. NULL when not dumping.
typedef void (*MicrobatchHook)(Model *m, int microbatch, void *ctx);

// Forward + backward over A microbatches of B sequences (ids, targets: (A*B, S)), leaving
// the summed gradient of the mean loss in m->grads_mem (not yet clipped). Fills r except lr.
void compute_gradients(Model *m, const int *ids, const int *targets, int A, int B, int S,
                       StepResult *r, long *expert_counts, MicrobatchHook hook, void *hook_ctx);
// Clip, the optimizer's update (opt_type) and the routing-bias update; increments m->step.
void apply_update(Model *m, StepResult *r, const long *expert_counts, long tokens);
// One training step of the trainer (train.c): compute_gradients, then apply_update; dies
// naming the step on a non-finite loss or gradient norm, before the update. ids, targets:
// (A*B, S) this device's sequences (S: the tokens of each held here).
void train_step(Model *m, const int *ids, const int *targets, int A, int B, int S, StepResult *r);
// Mean loss (CE + z-loss + aux) of B sequences without updating anything.
float eval_loss(Model *m, const int *ids, const int *targets, int B, int S);
#endif
