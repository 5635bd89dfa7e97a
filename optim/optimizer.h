// optim/optimizer.h: the optimizer step (opt_type: AdamW as optax does it, plain SGD,
// Adafactor, optim/adafactor.h, Muon, optim/muon.h, or MaxText's Pax-style Adam), the
// learning-rate schedule and global-norm clipping
// (docs/model.md#optimizer-and-schedule). The arithmetic is in kernels/optim.h.
#ifndef MESHMOE_OPTIMIZER_H
#define MESHMOE_OPTIMIZER_H
#include <stddef.h>
#include "base/config.h"
#include "kernels/optim.h"   // GradClip

struct Model;

// Learning rate for optimizer update number `step` (0-based), MaxText's schedule over the
// schedule's length L (cfg_lr_schedule_length: learning_rate_schedule_steps, or steps when
// it is -1), as optax.join_schedules joins its pieces:
//   warm-up, W = int(warmup_steps_fraction * L) steps: linear from 0, step W-1 at the peak;
//   lr_schedule_type=cosine: a cosine over the other L - W steps from the peak down to
//     learning_rate_final_fraction of it, reached at step L-1;
//   lr_schedule_type=wsd: the peak held, then over the last D = int(wsd_decay_steps_fraction
//     * L) steps a decay (wsd_decay_style linear or cosine) to the same final rate;
// from L to steps, 0 (MaxText's constant-zero piece). Below steps, a step's rate depends on
// the schedule's length and not on steps, so a resume that raises steps with the length
// kept takes the same rates as one run of the higher steps (trainer/checkpoint_meta.c).
float lr_schedule(const Config *c, int step);

// optax.clip_by_global_norm: if norm >= threshold, g (n) = g / norm * threshold.
void grad_clip(float *g, size_t n, float norm, float threshold);
// The same clipping as an update applies it while reading g (kernels/optim.h GradClip).
GradClip grad_clip_of(float norm, float threshold);

// The optimizer state kept per weight, in floats: 2 for adamw and adam_pax (mu and nu), 0
// for sgd, 1 for adafactor (at most one: its state is per tensor, sized by
// adafactor_state_floats, optim/adafactor.h), 2 for muon (at most: nu only for its AdamW
// half, muon_nu_floats, optim/muon.h). Dies on an opt_type that names no optimizer here.
int optimizer_state_floats(const Config *c);
// Bytes of AdamW's first moment per weight: 2 with mu_dtype=bfloat16, else 4.
static inline size_t optimizer_mu_bytes(const Config *c) { return c->mu_dtype == MU_DTYPE_BFLOAT16 ? 2 : 4; }
// This device's optimizer state (MEM_OPTIMIZER), zero: adamw's and adam_pax's moments m_mem
// (m16_mem with mu_dtype=bfloat16) and v_mem (its shard, or its ZeRO-1 piece), adafactor's
// v_mem, muon's m_mem (or m16_mem) and its AdamW half's v_mem, nothing for sgd (model_init).
void optimizer_state_alloc(struct Model *m);
// One update of this device's parameters from its gradients with the optimizer opt_type
// names; t is the 1-based update count; the gradient is clipped by grad_norm, its global
// norm (gradient_clipping_threshold). With optimizer_memory_host_offload the state is
// on the device only during the update (optim/offload.h).
void optimizer_step(struct Model *m, float lr, int t, float grad_norm);

// DeepSeek aux-loss-free balancing: bias[e] += rate * sign(T*K/E - counts[e]).
void router_bias_update(float *bias, const long *counts, long tokens, int E, int K, float rate);
#endif
