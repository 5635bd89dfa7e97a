// trainer/hf_weights.h: the tensors of a Hugging Face model directory, read by their names in
// transformers 5's layout, whatever form the files hold them in (trainer/hf_weights.c).
#ifndef MESHMOE_HF_WEIGHTS_H
#define MESHMOE_HF_WEIGHTS_H
#include <stddef.h>
#include <stdint.h>

typedef struct HfWeights HfWeights;

// DIR's model.safetensors, or the shards its model.safetensors.index.json names (headers
// only), and config.json's quantization_config; dies "load_hf: ..." naming the file or key.
// With headers_only (a dry run) every check below is made but no value is read.
HfWeights *hfw_open(const char *dir, int headers_only);
// The float32 values of tensor `name` (transformers 5's name) of the shape given: the file's
// tensor of that name, or its experts' tensors one by one as published checkpoints hold them;
// BF16 and F16 widened, FP8 dequantized. Dies naming the tensor and file for a shape or dtype
// this cannot take. The values are in *scratch (realloc'd), which the caller frees; NULL
// under headers_only.
float *hfw_tensor(HfWeights *w, const char *name, int ndim, const int64_t *shape, float **scratch);
// Every tensor of the files must have been read by now but for DeepSeek's multi-token
// prediction layers (config.json's num_nextn_predict_layers, after num_hidden_layers), which
// are left out; dies naming the first other one left unread. Writes into said what the files
// held beyond one tensor per name (the per-expert form, FP8, the layers left out), "" if nothing.
void hfw_all_read(HfWeights *w, char *said, size_t cap);
// "DIR/model.safetensors" or "DIR/model.safetensors.index.json (N files)", for messages.
const char *hfw_what(const HfWeights *w);
void hfw_close(HfWeights *w);

// The published name of expert `expert`'s projection `which` (0 gate, 1 up, 2 down) in layer
// `layer`: Mixtral-8x7B's block_sparse_moe.experts.<e>.w1 / w3 / w2 (mixtral), else
// DeepSeek-V3's mlp.experts.<e>.gate_proj / up_proj / down_proj (".weight" after each).
void hf_expert_name(char *out, size_t cap, int mixtral, int layer, int expert, int which);
#define HF_MIXTRAL_ROUTER "block_sparse_moe.gate.weight"   // Mixtral-8x7B's router, after "model.layers.<l>."

// The files a sharded model's index (model.safetensors.index.json at path) names in its
// "weight_map", each once, in the order first named (malloc'd, *n >= 1 of them); dies naming
// the index for a name that is not a plain file name beside it (a '/', a '\\', a leading '.').
char **hf_shard_names(const char *path, int *n);
#define HF_INDEX "model.safetensors.index.json"
// The shards load_hf=DIR reads: where DIR has no model.safetensors and its index can be read,
// the files the index names (hf_shard_names: *n of them, malloc'd), else NULL (*n = 1: DIR's
// model.safetensors alone).
char **hf_dir_shards(const char *dir, int *n);
#endif
