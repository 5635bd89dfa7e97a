// trainer/checkpoint_meta.h: a checkpoint's metadata checked against the run that loads it,
// before any device starts: the step, and the config key by key.
//
// A resumed run must compute what the uninterrupted run would have computed. So every key
// that changes the math (shapes, routing, optimizer, schedule, data, precision) must hold
// the checkpoint's value, and the first one that does not is named:
//   load_checkpoint ck.safetensors: base_emb_dim is 64 in the checkpoint, 128 in this run
// Keys that change only the mesh, the speed or the memory may differ: the mesh axes, the
// per-device batch (the global batch per step must stay), where output goes, and every
// switch the optimization sweep classes as bit-identical (trainer/rows.c). The list of those
// keys is checkpoint_key_may_differ, in checkpoint_meta.c. Keys that change only where the
// same math rounds (the device, the kernels, the order of the canonical sums) and the
// learning rate may change too, and the run says so at start-up (MAY_CHANGE there).
#ifndef MESHMOE_CHECKPOINT_META_H
#define MESHMOE_CHECKPOINT_META_H
#include "base/config.h"

// Metadata "step": digits only, a non-negative int. Dies naming the key and the file.
int checkpoint_parse_step(const char *value, const char *path);
// Whether key may hold another value in the run that loads a checkpoint.
int checkpoint_key_may_differ(const char *key);
// Dies naming the first key (or derived quantity: the global batch) whose value in the
// checkpoint's config `ck` differs from the run's config `run` and that changes the math;
// names on stdout the keys that change only the rounding (and the reduction chunks). step:
// the checkpoint's; a run that takes no step from it (steps = step: its eval and sample)
// reads no learning rate, and its schedule's length is not compared.
void checkpoint_check_config(const Config *ck, const Config *run, const char *path, int step);
// The config as a checkpoint's metadata records it (JSON into buf): the mesh is the global
// one, in the ici_* keys (base/hybrid.c made them dcn x ici), with every dcn_* key 1, as the
// one-process run of that mesh writes it; so N processes save the bytes one process saves.
int checkpoint_config_json(const Config *c, char *buf, int cap);
#endif
