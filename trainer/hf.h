// trainer/hf.h: export to and load from Hugging Face transformers' MixtralForCausalLM and
// DeepseekV3ForCausalLM (config.json + model.safetensors), the mapping in trainer/hf.c.
#ifndef MESHMOE_HF_H
#define MESHMOE_HF_H
#include "model/model.h"
#include "base/runfiles.h"
#include "trainer/hf_weights.h"   // hf_shard_names

// ./train export-hf CKPT DIR [per-expert]: the checkpoint's weights (and DeepSeek's routing
// biases) in HF's names and layouts, transformers 5's (a layer's experts two 3-D tensors), or
// with per_expert a tensor per expert and projection as the published checkpoints have them
// (older transformers, and tools that read those, take that form). Dies, before writing
// anything, naming the key, for a model HF's classes cannot express.
int hf_export(const char *ckpt, const char *dir, int per_expert);
// load_hf=DIR, checked before the devices start (every process of a run checks its own copy):
// DIR's config.json says what c says (hf_check_config), and its files hold every tensor of
// c's model by name, shape and dtype, and nothing else; else dies "load_hf: ..." naming the
// file, key or tensor. Reads the headers only.
void hf_check(const Config *c, const char *dir);
// load_hf=DIR: m's weights (and routing biases) from DIR, which hf_check has checked against
// m's config. The optimizer state stays as init. The
// files may hold the tensors in any form trainer/hf_weights.c reads; said gets what they held
// beyond one tensor per name in transformers 5's layout ("" if nothing). Returns how many
// query kernels came exactly from meshmoe_query_kernels.safetensors.
int hf_load(Model *m, const char *dir, char *said, size_t cap);
// DIR/config.json must say what c says, key by key (every key HF's config class reads that
// meshmoe's export writes, but the context length and the dtype, the run's own choice); else
// dies "WHO: ..." naming the first that differs, with the meshmoe key behind it.
void hf_check_config(const Config *c, const char *dir, const char *who);
// ./train hf-preset DIR: the model keys of a preset for the Hugging Face model in DIR (its
// config.json), printed as YAML: what `load_hf=DIR` then accepts (trainer/hf_preset.c).
int hf_preset(const char *dir);
// The files of an export in directory dir (none when dir is empty), added to r under key:
// the ones export-hf writes (written = 1: dir is an output directory) or load_hf reads.
void hf_files(RunFiles *r, const char *key, const char *dir, int written);
// The files load_hf=DIR reads, by their names in DIR, in the order it reads them: config.json,
// model.safetensors or the index and the shards it names, and the exact query kernels where
// they are (*n names, each malloc'd, in a malloc'd array).
char **hf_read_names(const char *dir, int *n);
#endif
