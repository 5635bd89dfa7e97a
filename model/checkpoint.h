// model/checkpoint.h: save and resume training in the safetensors format.
// A checkpoint holds the config (metadata "config", JSON), the step, every parameter
// ("params/<name>"), both AdamW moments ("opt_state/mu/<name>", "opt_state/nu/<name>")
// and the routing biases ("state/<name>"). The data position is a pure function of the
// step (data/loader.h), so resuming continues with exactly the batches it would have seen.
#ifndef MESHMOE_CHECKPOINT_H
#define MESHMOE_CHECKPOINT_H
#include "model/model.h"

// Written to PATH.tmp, flushed, then renamed: a crash never leaves a half-written PATH.
void checkpoint_save(const Model *m, const char *path);
// Restores m (already initialised for the same config). Dies with a clear message if the
// file is missing, corrupt, or was written for a model of another shape.
void checkpoint_load(Model *m, const char *path);
#endif
