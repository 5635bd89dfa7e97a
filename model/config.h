// model/config.h: every run-time setting of meshmoe, under MaxText's key names.
// A run is `./train CONFIG.yml [key=value ...]`: the preset file is read first, then the
// overrides. Every key is declared once, in the table in config.c, with its type, default
// and one line of meaning (`./train --help-config` prints that table).
#ifndef MESHMOE_CONFIG_H
#define MESHMOE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CFG_STR 256

typedef struct {
    // ---- model shape (MaxText names) ----
    char decoder_block[CFG_STR];     // "mixtral" or "deepseek"
    char attention_type[CFG_STR];    // "global" (GQA) or "mla"
    int base_emb_dim;                // D
    int base_num_query_heads;        // N
    int base_num_kv_heads;           // Nkv
    int head_dim;                    // Dh
    int base_mlp_dim;                // dense SwiGLU width (and Mixtral expert width)
    int base_moe_mlp_dim;            // DeepSeek expert width
    int base_num_decoder_layers;     // L
    int vocab_size;                  // V
    int max_target_length;           // S
    float normalization_layer_epsilon;
    float rope_min_timescale, rope_max_timescale;
    // ---- MLA (attention_type=mla) ----
    int q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    // ---- MoE ----
    int num_experts;                 // E
    int num_experts_per_tok;         // K
    float capacity_factor;           // <= 0: dropless
    int sparse_matmul;               // 1: grouped GEMM over sorted tokens; 0: every expert on every token
    float load_balance_loss_weight;
    char routed_score_func[CFG_STR]; // MaxText's: "" (Mixtral's rule), "softmax" (over all experts first) or "sigmoid" (DeepSeek)
    int routed_bias;
    float routed_bias_update_rate;
    float routed_scaling_factor;
    int n_routing_groups, topk_routing_group;
    int shared_experts;
    int first_num_dense_layers;
    // ---- training ----
    int per_device_batch_size;       // B (sequences per device per microbatch)
    int gradient_accumulation_steps; // A
    int steps;
    float learning_rate;
    float warmup_steps_fraction;
    float cosine_learning_rate_final_fraction;
    float adam_b1, adam_b2, adam_eps, adam_weight_decay;
    float gradient_clipping_threshold;
    float z_loss_multiplier;
    int seed;                        // init_weights_seed in MaxText
    char dtype[CFG_STR];             // "float32" or "bfloat16" (model/precision.h)
    char weight_dtype[CFG_STR], grad_dtype[CFG_STR];   // "float32"
    int float32_weight_sum, float32_gate_logits, float32_logits, float32_qk_product, cast_logits_to_fp32;
    // ---- data, evaluation, output ----
    char dataset_path[CFG_STR];      // text file, token file, or "synthetic"
    float eval_fraction;             // held-out share of the data
    int eval_interval;               // steps between eval losses (0: at the start and the end only)
    int eval_steps;                  // eval batches per evaluation
    int log_period;                  // print every N steps
    char metrics_file[CFG_STR];
    char save_checkpoint[CFG_STR];
    char load_checkpoint[CFG_STR];
    char load_hf[CFG_STR];
    int checkpoint_period;           // save every N steps (0: only at the end)
    int run_steps;                   // stop this run after N updates (0: run to `steps`)
    int sample_length;               // bytes of text generated at the end (0: none)
    float sample_temperature;
    char dump_parity[CFG_STR];       // directory for the JAX parity dump ("" = off)
    int parity_steps;
    // ---- canonical reduction (docs/model.md#summation-order) ----
    int reduce_leaf_tokens;          // tokens per leaf of the gradient-sum tree (0 = one chunk)
    int context_reduce_chunks;       // chunks every sequence is cut into for sums over tokens (sharding/context.h)
    int tensor_reduce_chunks;        // pieces of every tensor-parallel sum (sharding/tensor.h)
    char matmul_impl[CFG_STR];       // "ordered" (row-stable, model/matmul.c) or "openblas"
    // ---- run control ----
    int num_threads;                 // OpenMP threads per device (0 = cores / devices)
    // ---- the mesh (sharding/) ----
    int num_devices;
    int ici_data_parallelism, ici_fsdp_parallelism, ici_tensor_parallelism;
    int ici_expert_parallelism, ici_context_parallelism, ici_pipeline_parallelism;
    int shard_optimizer_over_data;   // ZeRO-1
    // ---- pipeline parallelism over 'stage' (pipeline/) ----
    int num_pipeline_microbatches;   // M per step (per accumulation microbatch); -1 = the stage count
    int num_pipeline_repeats;        // R (circular pipeline); -1 = derived from the layers
    int num_layers_per_pipeline_stage; // layers a stage runs per repeat; 0 = derived (1 if R is not given)
    char pipeline_schedule[CFG_STR]; // "gpipe" (MaxText's loop) or "1f1b"
    char pipeline_shift_impl[CFG_STR]; // "ppermute" or "slice": how stage outputs rotate to the next stage
    int pipeline_save_decoder_layer_input; // remat in the pipeline also saves each layer's input
    int pipeline_fsdp_ag_once;       // all-gather the stage's weights once before the loop
    // ---- temporaries and fused ops (docs/temporaries-and-fused-ops.md) ----
    int rmsnorm_fused_scale;         // RMSNorm multiplies by its scale in the loop (false: a broadcast [T,D] scale)
    int implicit_causal_mask;        // attention masks from positions (false: a materialised [B,1,S,S] mask)
    int moe_skip_redundant_cast;     // no copy of the expert intermediate for a float32->float32 cast
    int moe_reshard_io;              // DeepSeek MoE block: copies of its input and output (reshards) around it
    int shard_variables_at_init;     // a sharding constraint (a copy) on every variable at creation
    int skip_noop_grad_cast;         // no gradient-sized copy for the float32->float32 grad_dtype cast
    int donate_buffers;              // AdamW updates the parameters in place (false: a new copy each step)
    int eval_per_device_batch_size;  // eval sequences per device (0 = per_device_batch_size)
    // ---- rematerialisation, host offload, EMA, optimizer type (model/remat.h,
    //      sharding/offload.h) ----
    char remat_policy[CFG_STR];      // none, minimal, save_dot_except_mlp, save_qkv_proj, save_out_proj, full,
                                     // minimal_offloaded, qkv_proj_offloaded or custom (model/remat.c:remat_plan)
    char decoder_layer_input[CFG_STR], query_proj[CFG_STR], key_proj[CFG_STR], value_proj[CFG_STR];
    char context[CFG_STR], out_proj[CFG_STR], mlpwi[CFG_STR], mlpwo[CFG_STR];   // custom: device/offload/remat
    int remat_nested_block;          // layers per remat block (sqrt(L) checkpointing); 0 = off, -1 = round(sqrt(L))
    int optimizer_memory_host_offload, parameter_memory_host_offload;
    float ema_decay;                 // 0 = no EMA copy of the weights
    int ema_host_offload;            // the EMA copy lives in host memory
    char opt_type[CFG_STR];          // adamw, sgd or adafactor
    // ---- scanned vs unrolled layers ----
    int scan_layers;                 // one set of layer temporaries reused by every layer (false: a set per layer)
    // ---- collectives overlapping compute (sharding/overlap.h) ----
    int overlap_collectives;         // prefetch the next FSDP unit's all-gather on a helper thread
    // ---- sharding constraints on activations (sharding/constraint.h) ----
    int skip_trivial_specs;          // an all-unsharded constraint emits no copy (false: one activation copy)
    int remove_size_one_mesh_axis;   // specs drop size-1 mesh axes (false: naming one is an identity reshard, a copy)
    char shard_mode[CFG_STR];        // "auto" or "explicit": where reshards of matmul outputs happen
    // ---- vocabulary tiling and the one-hot embedding ----
    int num_vocab_tiling;            // token tiles of the output head + loss (1 = whole logits)
    int use_iota_embed;              // embedding as one-hot @ table instead of a gather
    int64_t iota_embed_max_bytes;    // use_iota_embed falls back to the gather above this one-hot size
    // ---- blocked online-softmax attention (model/attn_flash.h) ----
    char attention[CFG_STR];         // "dot_product" or "flash"
    int attn_block_q, attn_block_kv; // flash: query rows / keys per block
    int attn_block_autotune;         // flash: time a few block pairs before training, use the fastest
    // ---- ring attention over the context axis (model/attn_ring.h) ----
    char context_parallel_strategy[CFG_STR];   // all_gather (K/V gathered) or ring (K/V passed round)
    int64_t hbm_capacity;            // bytes per device (0 = unlimited)
    int print_sharding;
    // ---- `./train sweep` (sweep/sweep.c) ----
    int sweep_steps;                 // steps of every run the sweep compares
    char sweep_only[CFG_STR];        // comma-separated keys (or row numbers, or "mesh"): the rows to run
    int sweep_num_devices;           // devices of the mesh-shape sweep
    // ---- the dry-run planner and the memory timeline (sharding/plan.h) ----
    int dry_run;                     // the planner: allocate, do not compute (sharding/plan.h)
    int dry_run_all_devices;         // plan every device, not one per class (sharding/mesh.h)
    char memory_trace[CFG_STR];      // CSV of every device's allocations over the first step ("" = off)
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
// Check consistency of shapes and values; dies with a message naming the numbers.
void config_validate(const Config *c);
// Every numeric key inside its range (model/config_ranges.c), and the sizes a run reaches
// within what 32-bit indices and this host's memory can hold; each dies naming the figures.
void config_check_ranges(const Config *c);
void config_check_sizes(const Config *c);
// A key's range as text ("> 0", "in [0, 1)"); 0 when the key has none.
int config_range_text(const char *key, char *buf, int cap);
// Every file the run reads or writes, checked before training (data/paths.h).
void config_check_paths(const Config *c);
// Print every key, its default, its meaning and its range.
void config_print_help(void);
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
static inline int cfg_is_deepseek(const Config *c) { return strcmp(c->decoder_block, "deepseek") == 0; }
static inline int cfg_is_mla(const Config *c) { return strcmp(c->attention_type, "mla") == 0; }
// (not a first-letter test: "softmax" and "sigmoid" both start with 's')
static inline int cfg_sigmoid_router(const Config *c) { return strcmp(c->routed_score_func, "sigmoid") == 0; }
static inline int cfg_softmax_router(const Config *c) { return strcmp(c->routed_score_func, "softmax") == 0; }
// Expert hidden width H: base_mlp_dim for Mixtral, base_moe_mlp_dim for DeepSeek.
static inline int cfg_expert_dim(const Config *c) {
    return cfg_is_deepseek(c) ? c->base_moe_mlp_dim : c->base_mlp_dim;
}
static inline int cfg_layer_is_moe(const Config *c, int l) { return l >= c->first_num_dense_layers; }
// Tokens per chunk of a sequence in the canonical sums (sharding/context.h), and per leaf.
// The chunks each sequence is cut into for sums over tokens (sharding/context.h). The key's
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

#endif
