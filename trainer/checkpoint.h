// trainer/checkpoint.h: save and resume training in the safetensors format, on any mesh.
//
// A checkpoint holds global tensors under MaxText's names, whatever mesh wrote it:
//   params/<name>              every trained parameter, its whole (global) shape
//   opt_state/mu/<name>        opt_type=adamw: the first and second moments, like params
//   opt_state/nu/<name>
//   opt_state/v_row/<name>     opt_type=adafactor, a factored tensor (optax's FactoredState):
//   opt_state/v_col/<name>       the running row means, shape = the tensor's without its
//                                column dim (the largest); the column means, without its
//                                row dim (the second largest)
//   opt_state/v/<name>         opt_type=adafactor, any other tensor: the running mean of g^2
//   state/<gate>/bias          DeepSeek's routing bias of each MoE layer, named after the
//                              layer's gate kernel (.../gate/kernel -> .../gate/bias)
// (opt_type=sgd keeps no optimizer state) and the metadata: "config" (the run's config as
// JSON), "step" (optimizer updates done), "format", and "dataset" (the count of the data's
// tokens and their hash, data/tokens.h's data_hash, as "COUNT HEX"). The data position is a
// pure function of the step (data/loader.h), so resuming on the same tokens continues with
// exactly the batches it would have seen; the tokens, not dataset_path's text, are checked
// (a file moved or named another way resumes, another file with the name does not). FSDP's padding, ZeRO-1's pieces, tensor/expert cuts and pipeline stages are layouts
// of the devices only: the file's tensors are the same bytes from every mesh.
//
// The EMA copy of the weights (ema_decay) is not saved: a resumed run restarts it from the
// loaded weights.
#ifndef MESHMOE_CHECKPOINT_H
#define MESHMOE_CHECKPOINT_H
#include "model/model.h"
#include "data/safetensors.h"

// The metadata a checkpoint carries: "format" (this), "step" and "config" (every key).
#define CHECKPOINT_FORMAT "meshmoe checkpoint 1"
// Checks that f has the three and that "format" is CHECKPOINT_FORMAT, else dies naming who
// (the key or command: "load_checkpoint", "export-hf") and path.
void checkpoint_check_meta(const StFile *f, const char *who, const char *path);

// Every device calls it (a collective): each copies the elements it owns (one copy of each
// replicated element) into a host image of the file's tensors, then device 0 writes PATH
// through st_write_file (atomic: no half-written PATH).
void checkpoint_save(const Model *m, const char *path);
// 1 when a save at `step` writes the loaded checkpoint's state unchanged (no step taken since
// the load): it then keeps that file's config and "dataset" metadata, not this run's.
int checkpoint_saves_loaded(int step);
// Dies, naming what (the key or command and the file) and the tensor, where one of the n values
// x (elements g0 on of tensor `name`) is not finite: meshmoe saves none (a non-finite loss stops
// a run before its update), so such a file was damaged after it was written.
void checkpoint_check_finite(const float *x, size_t n, const char *what, const char *name, size_t g0);
// Before the devices start: opens PATH's header, checks the step and the config against the
// run's (trainer/checkpoint_meta.h) and that the file holds exactly the tensors of this model
// and optimizer, each with its global shape. Dies with one message naming the file.
void checkpoint_check(const Config *c, const char *path);
// Every device calls it on its initialised model: reads its own slices of each tensor (its
// shard, piece and stage) from PATH and the step. checkpoint_check has passed.
void checkpoint_load(Model *m, const char *path);
// load_parameters_path: before the devices start, checks that PATH is a checkpoint holding each
// of this model's weights (and routing biases) with its global shape, and no weight of
// another model; any optimizer's state may be there, and is not read. Dies naming the file.
void checkpoint_check_params(const Config *c, const char *path);
// Every device calls it on its initialised model: its own slices of the weights and routing
// biases of PATH; the step, the optimizer's state and the data position stay the run's own.
void checkpoint_load_params(Model *m, const char *path);
// Every device calls it: its own elements of parameter i (its shard, tensor or expert piece,
// stage; none where it holds none) from `whole`, the tensor in host memory with its global
// shape, as checkpoint_load takes them from a file (load_hf).
void checkpoint_load_param(Model *m, int i, const float *whole);
// The run's data (its token count and data_hash), once loaded: checkpoint_save writes them
// as the "dataset" metadata (not written before this is called).
void checkpoint_set_dataset(size_t ntok, uint64_t hash);
// Once the data is loaded, before training: a checkpoint with the "dataset" metadata must
// have been trained on these tokens (count and hash), wherever dataset_path now finds them;
// one without it (written before meshmoe kept it) was checked by its dataset_path's text in
// checkpoint_check. Dies naming the file, both paths and both counts; a run that takes no
// step (steps at the checkpoint's step: its eval and sample) may read other data, and says so.
void checkpoint_check_dataset(const Config *c, const char *path, size_t ntok, uint64_t hash);
#endif
