// model/optimizer.h: learning-rate schedule, global-norm clipping and AdamW as optax does
// them (docs/model.md#optimizer-and-schedule).
#ifndef MESHMOE_OPTIMIZER_H
#define MESHMOE_OPTIMIZER_H
#include <stddef.h>
#include "model/config.h"

// Learning rate for optimizer update number `step` (0-based): linear warm-up from 0, then
// cosine down to cosine_learning_rate_final_fraction * learning_rate.
float lr_schedule(const Config *c, int step);

// Global L2 norm of n gradient values, summed in double in index order.
float grad_global_norm(const float *g, size_t n);
// optax.clip_by_global_norm: if norm >= threshold, g = g / norm * threshold.
void grad_clip(float *g, size_t n, float norm, float threshold);

// One AdamW update of n parameters; t is the 1-based update count (bias correction).
void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, int t, const Config *c);

// opt_type (the one place it is read): the optimizer state kept per weight, in floats:
// 2 for adamw (mu and nu), 0 for sgd, 1 for adafactor (at most one: its state is per tensor,
// sized by adafactor_state_floats, model/adafactor.h). Dies on another name.
int optimizer_state_floats(const Config *c);
// One update of n parameters with the optimizer opt_type names: adamw_update, or plain SGD
// (optax.sgd without momentum: p -= lr * g; m and v unused and may be NULL).
void optimizer_update(float *p, const float *g, float *m, float *v, size_t n, float lr, int t, const Config *c);

// DeepSeek aux-loss-free balancing: bias[e] += rate * sign(T*K/E - counts[e]).
void router_bias_update(float *bias, const long *counts, long tokens, int E, int K, float rate);
#endif
