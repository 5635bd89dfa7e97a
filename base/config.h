// base/config.h: every run-time setting of meshmoe, under MaxText's key names.
// A run is `./train CONFIG.yml [key=value ...]`: the preset file is read first, then the
// overrides. Every key is declared once, in base/config_keys.def, with its type, default,
// range and one line of meaning (`./train --help-config` prints that table).
#ifndef MESHMOE_CONFIG_H
#define MESHMOE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CFG_STR 256

// The enums of the enum-valued keys, and their names (base/config_keys.def).
#define V(constant, name) constant,
#define ENUM_TYPE(Type, prefix, values) typedef enum { values } Type; const char *prefix##_name(Type v);
#include "base/config_keys.def"
#undef V

// One field per key, named as the key (base/config_keys.def holds each key's meaning).
#define CFG_FIELD_INT(name) int name;
#define CFG_FIELD_FLOAT(name) float name;
#define CFG_FIELD_BOOL(name) int name;
#define CFG_FIELD_BYTES(name) int64_t name;
#define CFG_FIELD_STR(name) char name[CFG_STR];
typedef struct {
#define KEY(type, name, dflt, range, help) CFG_FIELD_##type(name)
#define ENUM(Type, name, dflt, help) Type name;
#include "base/config_keys.def"
} Config;

// Fill every field with its default.
void config_defaults(Config *c);
// Read a preset file (flat YAML subset: `key: value` lines). Dies on a bad line, on a key set
// twice (naming both lines), on a directory. A UTF-8 byte-order mark is skipped. A `#` starts a
// comment at the start of a line or after a space or tab, outside a quoted value; elsewhere it
// belongs to the value (`dataset_path: data#1.txt`).
void config_load_file(Config *c, const char *path);
// The same from text in memory (n bytes; the name is used in messages).
void config_load_text(Config *c, const char *text, size_t n, const char *name);
// Apply one `key=value` override. Dies naming the closest valid key if unknown.
void config_set(Config *c, const char *key, const char *value, const char *where);
// The same for one command-line argument "key=value" (argv is left as it is); dies if the
// argument has no '='.
void config_set_arg(Config *c, const char *arg);
// Check consistency of shapes and values; dies with a message naming the numbers. The
// checks that need the layers above (the remat policy, the optimizer and its offload) are
// added by trainer/step.c:step_check_config, which every entry point calls.
void config_validate(const Config *c);
// Every numeric key inside its range (base/config_ranges.c), and the sizes a run reaches
// within what 32-bit indices and this host's memory can hold; each dies naming the figures.
void config_check_ranges(const Config *c);
void config_check_sizes(const Config *c);
// A key's range as text ("> 0", "in [0, 1)"); 0 when the key has none.
int config_range_text(const char *key, char *buf, int cap);
// Every file the run reads or writes, checked before training (base/paths.h).
void config_check_paths(const Config *c);
// Print every key, its default, its meaning and its range or names; markdown: as the
// table of docs/config.md.
void config_print_help(int markdown);
// Write the whole config as a JSON object into buf (for checkpoint and dump metadata).
// Returns the length; dies if buf is too small.
int config_to_json(const Config *c, char *buf, int cap);
// Overwrite c from a JSON object written by config_to_json (checkpoint loading).
void config_from_json(Config *c, const char *json, const char *where);

// ---- for the sweep: the key table as data (sweep/) ----
// Whether this build has a key.
int config_has_key(const char *key);
// Whether setting key=value would leave c unchanged (value parsed as the key's type).
int config_value_is(const Config *c, const char *key, const char *value);
// The key's value in c, written as a preset would write it.
void config_format_value(const Config *c, const char *key, char *buf, int cap);

// The key table walked in order (checkpoint metadata checks): key i's name (NULL past the
// end), and whether a key holds the same value in a and b (floats compared bit for bit).
int config_num_keys(void);
const char *config_key_name(int i);
int config_key_equal(const Config *a, const Config *b, const char *key);

// Derived quantities, used everywhere.
static inline int cfg_is_deepseek(const Config *c) { return c->decoder_block == DECODER_DEEPSEEK; }
static inline int cfg_is_mla(const Config *c) { return c->attention_type == ATTENTION_MLA; }
static inline int cfg_sigmoid_router(const Config *c) { return c->routed_score_func == SCORE_FUNC_SIGMOID; }
static inline int cfg_softmax_router(const Config *c) { return c->routed_score_func == SCORE_FUNC_SOFTMAX; }
// Expert hidden width H: base_mlp_dim for Mixtral, base_moe_mlp_dim for DeepSeek.
static inline int cfg_expert_dim(const Config *c) {
    return cfg_is_deepseek(c) ? c->base_moe_mlp_dim : c->base_mlp_dim;
}
static inline int cfg_layer_is_moe(const Config *c, int l) { return l >= c->first_num_dense_layers; }
// Tokens per chunk of a sequence in the canonical sums (base/context.h), and per leaf.
// The chunks each sequence is cut into for sums over tokens (base/context.h). The key's
// default 0 means one per context device (1 without context parallelism), so that a context
// run is bit-identical to a one-device run given the same context_reduce_chunks.
static inline int cfg_context_chunks(const Config *c) {
    if (c->context_reduce_chunks != 0) return c->context_reduce_chunks;
    return c->ici_context_parallelism > 1 ? c->ici_context_parallelism : 1;
}
static inline int cfg_chunk_tokens(const Config *c) {
    return c->max_target_length / cfg_context_chunks(c);
}
static inline int cfg_leaf_tokens(const Config *c) {
    return c->reduce_leaf_tokens > 0 ? c->reduce_leaf_tokens : cfg_chunk_tokens(c);
}
// attention=flash, or autoselected over sequences of 128 tokens or more (MaxText's
// attention_op: dot_product below 128, flash from there).
static inline int cfg_attention_flash(const Config *c) {
    return c->attention == ATTENTION_FLASH || (c->attention == ATTENTION_AUTOSELECTED && c->max_target_length >= 128);
}
// The learning-rate schedule's length L (learning_rate_schedule_steps, or steps when it is
// -1), its warm-up's steps and lr_schedule_type=wsd's decay steps (optim/optimizer.h).
static inline int cfg_lr_schedule_length(const Config *c) {
    return c->learning_rate_schedule_steps > 0 ? c->learning_rate_schedule_steps : c->steps;
}
double cfg_decimal(float value);              // the decimal a float key was written as
int cfg_steps_fraction(float fraction, int n);   // int(n * fraction) of that decimal, as Python
static inline int cfg_lr_warmup_steps(const Config *c) {
    return cfg_steps_fraction(c->warmup_steps_fraction, cfg_lr_schedule_length(c));
}
static inline int cfg_lr_wsd_decay_steps(const Config *c) {
    return cfg_steps_fraction(c->wsd_decay_steps_fraction, cfg_lr_schedule_length(c));
}

#endif
