// model/config.c: the table of every config key, the preset-file reader, overrides and
// the consistency checks. One key, one row: adding a switch means adding a row here and
// reading the field in exactly one place.
#include "model/config.h"
#include "model/remat.h"
#include "sharding/offload.h"
#include "common.h"
#include "data/paths.h"
#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <sys/stat.h>
#include <errno.h>
#include <stddef.h>

typedef enum { K_INT, K_FLOAT, K_BOOL, K_STR, K_BYTES } KeyType;

typedef struct {
    const char *name;
    KeyType type;
    size_t offset;      // offsetof(Config, field)
    const char *dflt;   // default, as it would be written in a preset
    const char *help;   // one line of meaning
} KeyDef;

#define KEY(field, type, dflt, help) { #field, type, offsetof(Config, field), dflt, help }

static const KeyDef KEYS[] = {
    // model shape
    KEY(decoder_block, K_STR, "mixtral", "model family: mixtral (GQA + softmax top-k MoE) or deepseek (MLA + sigmoid routing)"),
    KEY(attention_type, K_STR, "global", "global = grouped-query attention; mla = DeepSeek multi-head latent attention"),
    KEY(base_emb_dim, K_INT, "64", "D, the model (embedding) width"),
    KEY(base_num_query_heads, K_INT, "4", "N, query heads"),
    KEY(base_num_kv_heads, K_INT, "2", "Nkv, key/value heads (GQA: query head h uses kv head h/(N/Nkv))"),
    KEY(head_dim, K_INT, "16", "Dh, width of one attention head (GQA)"),
    KEY(base_mlp_dim, K_INT, "128", "dense SwiGLU width; also the expert width for Mixtral"),
    KEY(base_moe_mlp_dim, K_INT, "64", "expert width for DeepSeek"),
    KEY(base_num_decoder_layers, K_INT, "2", "L, decoder layers"),
    KEY(vocab_size, K_INT, "256", "V; 256 for byte-level text"),
    KEY(max_target_length, K_INT, "64", "S, tokens per training sequence"),
    KEY(normalization_layer_epsilon, K_FLOAT, "1e-5", "RMSNorm epsilon (Mixtral 1e-5, DeepSeek 1e-6)"),
    KEY(rope_min_timescale, K_FLOAT, "1", "RoPE shortest timescale"),
    KEY(rope_max_timescale, K_FLOAT, "10000", "RoPE longest timescale (Mixtral uses 1e6)"),
    // MLA
    KEY(q_lora_rank, K_INT, "0", "MLA: rank of the query down-projection (0 = full query projection)"),
    KEY(kv_lora_rank, K_INT, "32", "MLA: width of the compressed key/value latent"),
    KEY(qk_nope_head_dim, K_INT, "16", "MLA: per-head query/key width without RoPE"),
    KEY(qk_rope_head_dim, K_INT, "8", "MLA: per-head query/key width with RoPE (key part shared by all heads)"),
    KEY(v_head_dim, K_INT, "16", "MLA: per-head value width"),
    // MoE
    KEY(num_experts, K_INT, "4", "E, routed experts per MoE layer"),
    KEY(num_experts_per_tok, K_INT, "2", "K, experts each token is sent to"),
    KEY(capacity_factor, K_FLOAT, "-1", "dense path only: drop tokens beyond capacity_factor * S*K/E per expert and sequence (<= 0: no dropping)"),
    KEY(sparse_matmul, K_BOOL, "true", "true: sort tokens by expert and run one matmul per expert (dropless); false: every expert on every token"),
    KEY(load_balance_loss_weight, K_FLOAT, "0", "weight of the Switch/Mixtral load-balance loss (0 = off)"),
    KEY(routed_score_func, K_STR, "", "\"\": Mixtral's rule (top-k of the gate logits, softmax over the k); softmax: softmax over all experts, then top-k (weights: a softmax of the k probabilities, or for deepseek the k probabilities times routed_scaling_factor); sigmoid: DeepSeek routing"),
    KEY(routed_bias, K_BOOL, "false", "DeepSeek: a per-expert bias added to the scores for selection only"),
    KEY(routed_bias_update_rate, K_FLOAT, "0", "DeepSeek aux-loss-free balancing: bias step per optimizer step (0 = off)"),
    KEY(routed_scaling_factor, K_FLOAT, "1", "DeepSeek: multiplies the normalised routing weights"),
    KEY(n_routing_groups, K_INT, "-1", "DeepSeek: expert groups for group-limited routing (-1 = off)"),
    KEY(topk_routing_group, K_INT, "-1", "DeepSeek: groups kept per token (-1 with the groups off)"),
    KEY(shared_experts, K_INT, "0", "DeepSeek: shared experts (a dense SwiGLU of width shared_experts*base_moe_mlp_dim)"),
    KEY(first_num_dense_layers, K_INT, "0", "DeepSeek: the first layers use a dense SwiGLU FFN instead of MoE"),
    // training
    KEY(per_device_batch_size, K_INT, "8", "B, sequences per device per microbatch"),
    KEY(gradient_accumulation_steps, K_INT, "1", "A, microbatches summed into one optimizer step"),
    KEY(steps, K_INT, "100", "optimizer steps (also the length of the learning-rate schedule)"),
    KEY(learning_rate, K_FLOAT, "3e-3", "peak learning rate"),
    KEY(warmup_steps_fraction, K_FLOAT, "0.1", "share of steps spent in linear warm-up from 0"),
    KEY(cosine_learning_rate_final_fraction, K_FLOAT, "0.1", "final learning rate as a share of the peak"),
    KEY(adam_b1, K_FLOAT, "0.9", "AdamW first-moment decay"),
    KEY(adam_b2, K_FLOAT, "0.95", "AdamW second-moment decay"),
    KEY(adam_eps, K_FLOAT, "1e-8", "AdamW epsilon"),
    KEY(adam_weight_decay, K_FLOAT, "0.1", "AdamW decoupled weight decay (every trained parameter)"),
    KEY(gradient_clipping_threshold, K_FLOAT, "1.0", "clip the global gradient norm to this (0 = off)"),
    KEY(z_loss_multiplier, K_FLOAT, "0", "adds z_loss_multiplier * logsumexp(z)^2 per token"),
    KEY(seed, K_INT, "0", "weight-initialisation seed (MaxText: init_weights_seed)"),
    KEY(dtype, K_STR, "float32", "activation precision: float32, or bfloat16 (bf16 activations, float32 master weights; model/precision.h)"),
    KEY(weight_dtype, K_STR, "float32", "master weights and optimizer state: float32"),
    KEY(grad_dtype, K_STR, "float32", "gradients: float32"),
    KEY(float32_weight_sum, K_BOOL, "true", "bf16: the MoE combine sums in float32 and rounds once (false: every product and partial sum in bf16)"),
    KEY(float32_gate_logits, K_BOOL, "false", "bf16: the router's gate kernel and logits stay float32"),
    KEY(float32_logits, K_BOOL, "false", "bf16: attention's exp weights and e@v stay float32"),
    KEY(float32_qk_product, K_BOOL, "false", "bf16: attention scores q.k stay float32"),
    KEY(cast_logits_to_fp32, K_BOOL, "true", "the loss reads the (bf16) logits as float32; false is refused: this trainer's loss is float32 only"),
    // data, eval, output
    KEY(dataset_path, K_STR, "synthetic", "training text (bytes are tokens), an llm.c token file, or 'synthetic'"),
    KEY(eval_fraction, K_FLOAT, "0.1", "share of the data held out for the eval loss"),
    KEY(eval_interval, K_INT, "0", "compute the eval loss every N steps (0 = at the start and end only)"),
    KEY(eval_steps, K_INT, "4", "batches of per_device_batch_size sequences per eval"),
    KEY(log_period, K_INT, "1", "print a step line every N steps"),
    KEY(metrics_file, K_STR, "", "write one JSON object per step to this file"),
    KEY(save_checkpoint, K_STR, "", "write a safetensors checkpoint here (atomically) at the end"),
    KEY(load_checkpoint, K_STR, "", "resume from this checkpoint (weights, optimizer, step, data position), saved on any mesh; every key that changes the math must hold the checkpoint's value"),
    KEY(load_hf, K_STR, "", "start from a Hugging Face model directory written by ./train export-hf (weights only, step 0)"),
    KEY(checkpoint_period, K_INT, "0", "also save every N steps (0 = only at the end)"),
    KEY(run_steps, K_INT, "0", "stop this run after N optimizer steps, schedule unchanged (0 = run to steps); for resuming"),
    KEY(sample_length, K_INT, "200", "bytes of text sampled from the model at the end (0 = none)"),
    KEY(sample_temperature, K_FLOAT, "0.8", "sampling temperature"),
    KEY(dump_parity, K_STR, "", "write a parity dump for the JAX reference into this directory and exit"),
    KEY(parity_steps, K_INT, "10", "optimizer steps recorded in the parity dump"),
    KEY(reduce_leaf_tokens, K_INT, "0", "tokens per leaf of the canonical gradient-sum tree (0 = one chunk, see context_reduce_chunks)"),
    KEY(context_reduce_chunks, K_INT, "0", "chunks each sequence is cut into for the canonical sums over tokens, chunk outermost (sharding/context.h); a power of two that ici_context_parallelism divides; 0 = ici_context_parallelism (1 without context parallelism)"),
    KEY(tensor_reduce_chunks, K_INT, "4", "pieces every tensor-parallel sum (heads, MLP width, vocab) is cut into and added along the canonical tree; the tensor size must divide it"),
    KEY(matmul_impl, K_STR, "ordered", "ordered: each output element one in-order FMA chain (bit-identical under any sharding); openblas: faster, not row-stable"),
    KEY(num_threads, K_INT, "0", "compute threads per device (0 = the cores shared out over the devices)"),
    // the mesh (sharding/mesh.c): MaxText's ici_<axis>_parallelism; -1 fills the rest
    KEY(num_devices, K_INT, "0", "simulated devices (threads); 0 = the product of the ici_* sizes"),
    KEY(ici_data_parallelism, K_INT, "1", "devices along 'data': batch split, weights replicated, grads all-reduced"),
    KEY(ici_fsdp_parallelism, K_INT, "1", "devices along 'fsdp': batch split, weights/grads/optimizer sharded"),
    KEY(ici_tensor_parallelism, K_INT, "1", "devices along 'tensor' (heads, MLP width, vocab)"),
    KEY(ici_expert_parallelism, K_INT, "1", "devices along 'expert' (experts; tokens exchanged by all-to-all)"),
    KEY(ici_context_parallelism, K_INT, "1", "devices along 'context' (the sequence)"),
    KEY(ici_pipeline_parallelism, K_INT, "1", "devices along 'stage' (pipeline stages)"),
    KEY(shard_optimizer_over_data, K_BOOL, "false", "ZeRO-1: AdamW moments sharded over 'data' too"),
    // pipeline parallelism (pipeline/): MaxText's keys, plus this trainer's shift and schedule switches
    KEY(num_pipeline_microbatches, K_INT, "-1", "pipeline: microbatches per step, a multiple of the stages (-1 = ici_pipeline_parallelism)"),
    KEY(num_pipeline_repeats, K_INT, "-1", "pipeline: circular repeats R, layer l on stage (l / layers_per_stage) mod stages (-1 = derived)"),
    KEY(num_layers_per_pipeline_stage, K_INT, "0", "pipeline: layers per stage and repeat (0 = derived; MaxText's 1 when num_pipeline_repeats is -1)"),
    KEY(pipeline_schedule, K_STR, "gpipe", "pipeline: gpipe (MaxText's loop: all forwards, then all backwards) or 1f1b (live activations bounded by the stages)"),
    KEY(pipeline_shift_impl, K_STR, "ppermute", "pipeline: ppermute (collective with its own buffers in the loop state) or slice (the stacked state's rows, shifted)"),
    KEY(pipeline_save_decoder_layer_input, K_BOOL, "true", "pipeline remat: also save every layer's input (a second stacked buffer) besides iteration_input"),
    KEY(pipeline_fsdp_ag_once, K_BOOL, "false", "pipeline: all-gather the stage's weights over fsdp once before the loop, not at every iteration"),
    // temporaries and fused ops (docs/temporaries-and-fused-ops.md): each switch's costlier side really
    // allocates and uses the buffer it names, so the figures measured are real.
    KEY(rmsnorm_fused_scale, K_BOOL, "true", "RMSNorm multiplies by its scale inside the loop; false: the einsum form materialises the broadcast [B,S,D] scale first (one activation-sized temporary)"),
    KEY(implicit_causal_mask, K_BOOL, "true", "attention masks keys by comparing positions; false: a [B,1,S,S] boolean causal mask is materialised and read, forward and backward"),
    KEY(moe_skip_redundant_cast, K_BOOL, "true", "skip the no-op float32 cast of the expert intermediate; false: an extra [tokens,H] copy (and of its gradient)"),
    KEY(moe_reshard_io, K_BOOL, "false", "DeepSeek MoE layers: reshard the block's input and output, two activation-sized copies (MaxText before its temp-memory change); false: none"),
    KEY(shard_variables_at_init, K_BOOL, "false", "a sharding constraint on every variable as it is created: each is made whole, then copied into its shard (raises the init-time peak by the largest variable); false: only where asked"),
    KEY(skip_noop_grad_cast, K_BOOL, "true", "skip the gradient cast to grad_dtype when it is a no-op (float32 -> float32); false: one gradient-sized copy read by the optimizer"),
    KEY(donate_buffers, K_BOOL, "true", "AdamW updates the parameters in place (donated); false: each step writes a new parameter buffer (one model-sized copy)"),
    KEY(eval_per_device_batch_size, K_INT, "0", "sequences per device in an eval batch (0 = per_device_batch_size); eval only, training is unchanged"),
    // ---- rematerialisation, host offload, EMA, optimizer type ----
    KEY(remat_policy, K_STR, "full", "what the backward keeps (model/remat.c): none (everything), minimal (all but the norm outputs), save_dot_except_mlp (attention kept, FFN recomputed), save_qkv_proj (x and attention's q, k, v kept; the attention core, out_proj, norms and FFN recomputed), save_out_proj (x and the residual after out_proj kept, both blocks recomputed), full (only each layer's input), custom (the keys below), minimal_offloaded (minimal, kept tensors in host memory), qkv_proj_offloaded (save_qkv_proj, q, k, v in host memory)"),
    KEY(decoder_layer_input, K_STR, "device", "remat_policy=custom: each layer's input: device or offload"),
    KEY(query_proj, K_STR, "remat", "remat_policy=custom: attention's saved q (device, offload or remat; MLA: with the projections' low-rank intermediates). query_proj, key_proj and value_proj must agree; context equals them or is remat"),
    KEY(key_proj, K_STR, "remat", "remat_policy=custom: attention's saved k (see query_proj)"),
    KEY(value_proj, K_STR, "remat", "remat_policy=custom: attention's saved v (see query_proj)"),
    KEY(context, K_STR, "remat", "remat_policy=custom: attention's output before out_proj and its softmax stats: as query_proj, or remat with q, k, v kept (recomputed from them)"),
    KEY(out_proj, K_STR, "remat", "remat_policy=custom: the residual after attention's out projection (device, offload or remat)"),
    KEY(mlpwi, K_STR, "remat", "remat_policy=custom: the FFN's wi products and routing (device, offload or remat; must agree with mlpwo)"),
    KEY(mlpwo, K_STR, "remat", "remat_policy=custom: the experts' wo outputs (see mlpwi)"),
    KEY(remat_nested_block, K_INT, "0", "sqrt(L) checkpointing: keep only the input of every block of N layers, recompute the block's layer inputs in the backward (0 = off, -1 = round(sqrt(L)); needs remat_policy=full)"),
    KEY(optimizer_memory_host_offload, K_BOOL, "false", "optimizer state lives in host memory between updates, copied to the device for the update"),
    KEY(parameter_memory_host_offload, K_BOOL, "false", "weights live in host memory between steps, copied to the device for the step"),
    KEY(ema_decay, K_FLOAT, "0", "keep an EMA copy of the weights: ema = decay*ema + (1-decay)*params after each update (0 = off)"),
    KEY(ema_host_offload, K_BOOL, "false", "the EMA copy lives in host memory (the weights are copied there for its update)"),
    KEY(opt_type, K_STR, "adamw", "optimizer: adamw (two moments per weight), sgd (plain, no state) or adafactor (optax defaults: factored second moment for tensors with two dims >= 128)"),
    // ---- scanned vs unrolled layers (docs/optimizations.md#scan_layers) ----
    KEY(scan_layers, K_BOOL, "true", "the layers reuse one set of temporaries (MaxText's scanned layer stack); false: unrolled, each layer's temporaries (forward and backward) are its own and stay allocated until the step's backward pass ends"),
    // ---- collectives overlapping compute (sharding/overlap.h) ----
    KEY(overlap_collectives, K_BOOL, "false", "under FSDP, all-gather the next layer's weights on a helper thread while this layer computes (forward and backward): faster when the gather waits, one more unit of gathered weights held; same losses"),
    // ---- sharding constraints on activations (sharding/constraint.h) ----
    KEY(skip_trivial_specs, K_BOOL, "true", "a sharding constraint whose spec is all-unsharded on this mesh emits no copy; false: it materialises an activation-sized copy that the next op reads (as XLA does)"),
    KEY(remove_size_one_mesh_axis, K_BOOL, "true", "partition specs drop mesh axes of size 1; false: a constraint whose spec names a size-1 axis is an identity reshard that copies the tensor"),
    KEY(shard_mode, K_STR, "auto", "auto: the runtime places reshards (a row-parallel matmul's partial sums are all-reduced in its output); explicit: each matmul declares its output sharding, the partial sums are reduced in a temporary and resharded into the output"),
    // ---- vocabulary tiling and the one-hot embedding (model/vocab_tiling.c, model/embedding.c) ----
    KEY(num_vocab_tiling, K_INT, "1", "output head + cross-entropy in this many token tiles: only a [T/n, V] logits tile exists at a time, forward and backward (recomputed), never the [B,S,V] logits; must divide this device's leaves (1 = off)"),
    KEY(use_iota_embed, K_BOOL, "false", "embedding lookup as a one-hot [B,S,V] matrix times the table instead of a gather (same bits; costs the one-hot tensor)"),
    KEY(iota_embed_max_bytes, K_BYTES, "2GiB", "use_iota_embed guard: when this device's one-hot tensor would exceed this many bytes, the gather is used instead"),
    // ---- blocked online-softmax attention (model/attn_flash.c) ----
    KEY(attention, K_STR, "dot_product", "dot_product: each query row scores its keys in one pass (model/attn_core.c); flash: blocked online softmax over key blocks, forward and backward (model/attn_flash.c)"),
    KEY(attn_block_q, K_INT, "64", "attention=flash: query rows per block (any value >= 1; a last, shorter block takes the remainder)"),
    KEY(attn_block_kv, K_INT, "64", "attention=flash: keys per block (any value >= 1; a last, shorter block takes the remainder)"),
    KEY(attn_block_autotune, K_BOOL, "false", "attention=flash: before training, time a few (attn_block_q, attn_block_kv) pairs on the first step's shapes, print the table and use the fastest"),
    // ---- ring attention over the context axis (model/attn_ring.h) ----
    KEY(context_parallel_strategy, K_STR, "all_gather", "how attention reaches the other context devices' keys and values: all_gather (gather every part's K/V, reduce-scatter dK/dV) or ring (pass one K/V block at a time round the context devices, log-sum-exp merge; dK/dV travel back round the ring)"),
    KEY(hbm_capacity, K_BYTES, "0", "bytes of memory per device, e.g. 80GB or 512MiB (0 = unlimited)"),
    KEY(print_sharding, K_BOOL, "false", "print every tensor's global shape, sharding and per-device shape"),
    // ---- `./train sweep` (sweep/sweep.c) ----
    KEY(sweep_steps, K_INT, "5", "sweep: training steps of every run the sweep compares"),
    KEY(sweep_only, K_STR, "", "sweep: run only the rows of these keys (comma-separated; a catalog row number or 'mesh' works too)"),
    KEY(sweep_num_devices, K_INT, "4", "sweep: devices of the mesh-shape sweep (every data x fsdp x tensor x expert factorisation)"),
    // ---- the dry-run planner and the memory timeline (sharding/plan.h) ----
    KEY(dry_run, K_BOOL, "false", "walk one training step's allocations without computing, print each device's memory plan and whether it fits hbm_capacity"),
    KEY(dry_run_all_devices, K_BOOL, "false", "dry run: plan every device (every thread runs the step) instead of one device per class of devices whose plans are equal (sharding/mesh.h); the same figures, slower"),
    KEY(memory_trace, K_STR, "", "write each device's live bytes by tag over the first step, one CSV row per alloc/free/phase (./train plot TRACE DIR draws it)"),
};
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))

static const KeyDef *find_key(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

// Edit distance, to suggest the closest valid key for a typo.
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            d[i][j] = MM_MIN(sub, MM_MIN(d[i - 1][j] + 1, d[i][j - 1] + 1));
        }
    return d[la][lb];
}

static const char *closest_key(const char *name) {
    int best = 1 << 30;
    const char *bestname = KEYS[0].name;
    int n = (int)strlen(name);
    for (int i = 0; i < NKEYS; i++) {
        if (abs(n - (int)strlen(KEYS[i].name)) >= best) continue;   // the distance is at least that
        int d = edit_distance(name, KEYS[i].name);
        if (d < best) { best = d; bestname = KEYS[i].name; }
    }
    return bestname;
}

// An unknown key: the closest valid one is suggested when the name could be a key at all
// (lowercase letters, digits and '_'), so that a stray byte is not compared with every key.
static void die_unknown_key(const char *where, const char *key) {
    size_t n = strlen(key);
    if (n > 0 && n < 64 && strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") == n)
        die("%s: unknown config key '%s' (did you mean '%s'? ./train --help-config lists them all)", where, key,
            closest_key(key));
    die("%s: unknown config key '%.100s' (keys are lowercase letters, digits and '_'; ./train --help-config lists "
        "them all)", where, key);
}

static void set_value(Config *c, const KeyDef *k, const char *v, const char *where) {
    char *end;
    void *field = (char *)c + k->offset;
    switch (k->type) {
    case K_INT: {
        errno = 0;
        long x = strtol(v, &end, 10);
        if (*v == '\0' || *end != '\0' || errno || x < -2147483647L || x > 2147483647L)
            die("%s: key '%s' wants an integer, got '%s'", where, k->name, v);
        *(int *)field = (int)x;
        break;
    }
    case K_FLOAT: {   // a 32-bit float: a value it cannot hold is refused, never rounded to inf or 0
        errno = 0;
        double x = strtod(v, &end);
        if (*v == '\0' || *end != '\0' || isnan(x))
            die("%s: key '%s' wants a number, got '%s'", where, k->name, v);
        if ((errno == ERANGE && x != 0) || fabs(x) > FLT_MAX)
            die("%s: key '%s' = %s is too large for a 32-bit float (largest %g)", where, k->name, v, (double)FLT_MAX);
        if (errno == ERANGE || (x != 0 && fabs(x) < FLT_MIN))
            die("%s: key '%s' = %s is too small for a 32-bit float (smallest nonzero %g)", where, k->name, v,
                (double)FLT_MIN);
        *(float *)field = (float)x;
        break;
    }
    case K_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *(int *)field = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *(int *)field = 0;
        else die("%s: key '%s' wants true or false, got '%s'", where, k->name, v);
        break;
    case K_BYTES: {   // a count of bytes, with an optional KB/MB/GB (1e3) or KiB/MiB/GiB (2^10) suffix
        errno = 0;
        double x = strtod(v, &end);
        const char *units[] = {"", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
        const double mult[] = {1, 1, 1e3, 1e6, 1e9, 1e12, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
        int u = -1;
        for (int i = 0; i < 10; i++)
            if (!strcmp(end, units[i])) u = i;
        if (*v == '\0' || u < 0 || errno || !(x >= 0) || x * mult[u] > 9e18)
            die("%s: key '%s' wants a byte count such as 80GB, 512MiB or 1000000, got '%s'", where, k->name, v);
        *(int64_t *)field = (int64_t)(x * mult[u]);
        break;
    }
    case K_STR:
        if (strlen(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[strlen(v) - 1] == v[0]) {   // a quoted value: "" is empty
            char q[CFG_STR + 2];
            snprintf(q, sizeof q, "%.*s", (int)strlen(v) - 2, v + 1);
            set_value(c, k, q, where);
            return;
        }
        if (strlen(v) >= CFG_STR) die("%s: value of '%s' is longer than %d characters", where, k->name, CFG_STR - 1);
        strcpy((char *)field, v);
        break;
    }
}

void config_set(Config *c, const char *key, const char *value, const char *where) {
    const KeyDef *k = find_key(key);
    if (!k) die_unknown_key(where, key);
    set_value(c, k, value, where);
}

// ---- for the sweep: questions about the key table, so that the sweep's row list can be
// data (a row whose key this build lacks is reported as not implemented, never faked).
int config_has_key(const char *key) { return find_key(key) != NULL; }

int config_value_is(const Config *c, const char *key, const char *value) {
    const KeyDef *k = find_key(key);
    if (!k) die("internal: config_value_is: unknown key '%s'", key);
    Config t = *c;
    set_value(&t, k, value, "sweep");
    return memcmp(&t, c, sizeof t) == 0;
}

void config_format_value(const Config *c, const char *key, char *buf, int cap) {
    const KeyDef *k = find_key(key);
    if (!k) die("internal: config_format_value: unknown key '%s'", key);
    const void *field = (const char *)c + k->offset;
    switch (k->type) {
    case K_INT: snprintf(buf, (size_t)cap, "%d", *(const int *)field); break;
    case K_FLOAT: snprintf(buf, (size_t)cap, "%g", (double)*(const float *)field); break;
    case K_BYTES: snprintf(buf, (size_t)cap, "%lld", (long long)*(const int64_t *)field); break;
    case K_BOOL: snprintf(buf, (size_t)cap, "%s", *(const int *)field ? "true" : "false"); break;
    case K_STR: snprintf(buf, (size_t)cap, "%s", *(const char *)field ? (const char *)field : "\"\""); break;   // "" shown as such
    }
}

int config_num_keys(void) { return NKEYS; }
const char *config_key_name(int i) { return i >= 0 && i < NKEYS ? KEYS[i].name : NULL; }

int config_key_equal(const Config *a, const Config *b, const char *key) {
    const KeyDef *k = find_key(key);
    if (!k) die("internal: config_key_equal: unknown key '%s'", key);
    const void *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;
    switch (k->type) {
    case K_INT: case K_BOOL: return *(const int *)fa == *(const int *)fb;
    case K_FLOAT: return memcmp(fa, fb, sizeof(float)) == 0;
    case K_BYTES: return *(const int64_t *)fa == *(const int64_t *)fb;
    case K_STR: return strcmp((const char *)fa, (const char *)fb) == 0;
    }
    return 0;
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < NKEYS; i++) set_value(c, &KEYS[i], KEYS[i].dflt, "default");
}

// Strip spaces at both ends, and matching quotes around a value.
static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    size_t n = strlen(s);
    if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) { s[n - 1] = '\0'; s++; }
    return s;
}

// A '#' starts a comment at the start of a line or after a space or tab, outside a quoted
// value; elsewhere it is part of the value (dataset_path: runs/data#1.txt).
static void strip_comment(char *s) {
    char quote = 0;
    for (char *p = s; *p; p++) {
        int after_blank = p == s || p[-1] == ' ' || p[-1] == '\t';
        if (quote) { if (*p == quote) quote = 0; }
        else if ((*p == '"' || *p == '\'') && (after_blank || p[-1] == ':')) quote = *p;
        else if (*p == '#' && after_blank) { *p = '\0'; return; }
    }
}

// One `key: value` line. seen[k] is the line that set key k in this file (0: none yet).
static void load_line(Config *c, char *line, const char *path, int lineno, int *seen) {
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    strip_comment(line);
    char *s = trim(line);
    if (*s == '\0') return;
    char *colon = strchr(s, ':');
    if (!colon) die("%s: expected 'key: value', got '%.200s'", where, s);
    *colon = '\0';
    char *key = trim(s), *val = trim(colon + 1);
    const KeyDef *k = find_key(key);
    if (!k) die_unknown_key(where, key);
    if (seen[k - KEYS])
        die("%s: key '%s' is set twice in this file, on lines %d and %d (a preset sets each key once; "
            "the command line may override it)", path, key, seen[k - KEYS], lineno);
    seen[k - KEYS] = lineno;
    set_value(c, k, val, where);
}

void config_load_text(Config *c, const char *text, size_t n, const char *path) {
    int seen[NKEYS];
    memset(seen, 0, sizeof seen);
    size_t i = 0;
    if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) i = 3;   // a UTF-8 byte-order mark is skipped
    char line[1024];
    for (int lineno = 1; i < n; lineno++) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (text + i)) : n - i;
        if (len >= sizeof line) die("%s:%d: line too long (%zu bytes, at most %zu)", path, lineno, len, sizeof line - 1);
        if (memchr(text + i, '\0', len)) die("%s:%d: the line holds a NUL byte (is this a text file?)", path, lineno);
        memcpy(line, text + i, len);
        line[len] = '\0';
        i += len + 1;
        load_line(c, line, path, lineno, seen);
    }
}

void config_load_file(Config *c, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open config file '%s': %s", path, strerror(errno));
    struct stat st;
    const size_t max = 1 << 20;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max) {
        fclose(f);
        if (S_ISDIR(st.st_mode)) die("config file '%s' is a directory; give a preset such as configs/mixtral-tiny.yml", path);
        if (!S_ISREG(st.st_mode)) die("config file '%s' is not a regular file", path);
        die("config file '%s' is %lld bytes, too large for a preset (at most %zu)", path, (long long)st.st_size, max);
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t n = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    int bad = !text || ferror(f);
    fclose(f);
    if (bad) { free(text); die("cannot read config file '%s'", path); }
    die_set_cleanup(free, text);
    config_load_text(c, text, n, path);
    die_set_cleanup(NULL, NULL);
    free(text);
}

static int divides(int a, int b) { return a > 0 && b % a == 0; }

void config_validate(const Config *c) {
    if (strcmp(c->decoder_block, "mixtral") && strcmp(c->decoder_block, "deepseek"))
        die("decoder_block must be 'mixtral' or 'deepseek', got '%s'", c->decoder_block);
    if (strcmp(c->attention_type, "global") && strcmp(c->attention_type, "mla"))
        die("attention_type must be 'global' or 'mla', got '%s'", c->attention_type);
    if (strcmp(c->shard_mode, "auto") && strcmp(c->shard_mode, "explicit"))
        die("shard_mode must be 'auto' or 'explicit', got '%s'", c->shard_mode);
    if (c->routed_score_func[0] && !cfg_softmax_router(c) && !cfg_sigmoid_router(c))
        die("routed_score_func must be \"\" (Mixtral's rule), 'softmax' or 'sigmoid', got '%s'", c->routed_score_func);
    if (c->n_routing_groups == 0 || c->n_routing_groups < -1)
        die("n_routing_groups must be -1 (groups off) or positive, got %d", c->n_routing_groups);
    if (strcmp(c->dtype, "float32") && strcmp(c->dtype, "bfloat16"))
        die("dtype must be 'float32' or 'bfloat16', got '%s'", c->dtype);
    if (strcmp(c->weight_dtype, "float32") || strcmp(c->grad_dtype, "float32"))
        die("weight_dtype and grad_dtype must be float32 (master weights, gradients and optimizer state "
            "stay float32 in every mode), got '%s' and '%s'", c->weight_dtype, c->grad_dtype);
    if (!c->scan_layers && c->ici_pipeline_parallelism > 1)
        die("scan_layers=false is not supported with a pipeline (ici_pipeline_parallelism=%d): the pipeline "
            "runs its stage's layers in its own loop; use scan_layers=true or ici_pipeline_parallelism=1",
            c->ici_pipeline_parallelism);
    if (!c->cast_logits_to_fp32)
        die("cast_logits_to_fp32=false is not supported: the loss is computed in float32 from the logits");
    struct { const char *name; int v; } pos[] = {
        {"base_emb_dim", c->base_emb_dim}, {"base_num_query_heads", c->base_num_query_heads},
        {"base_num_decoder_layers", c->base_num_decoder_layers}, {"vocab_size", c->vocab_size},
        {"max_target_length", c->max_target_length}, {"per_device_batch_size", c->per_device_batch_size},
        {"gradient_accumulation_steps", c->gradient_accumulation_steps}, {"steps", c->steps},
        {"num_experts", c->num_experts}, {"num_experts_per_tok", c->num_experts_per_tok},
        {"eval_steps", c->eval_steps}, {"log_period", c->log_period}, {"parity_steps", c->parity_steps},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0) die("%s must be positive, got %d", pos[i].name, pos[i].v);
    // (a dry run reads no tokens: the planner takes DeepSeek-V3's 129280)
    if (c->vocab_size > 65536 && !c->dry_run)
        die("vocab_size %d does not fit uint16 token files (max 65536); only dry_run=true plans such a model", c->vocab_size);
    if (cfg_is_mla(c)) {
        if (c->kv_lora_rank <= 0 || c->qk_nope_head_dim <= 0 || c->v_head_dim <= 0)
            die("attention_type=mla needs kv_lora_rank, qk_nope_head_dim and v_head_dim > 0 "
                "(got %d, %d, %d)", c->kv_lora_rank, c->qk_nope_head_dim, c->v_head_dim);
        if (c->qk_rope_head_dim <= 0 || c->qk_rope_head_dim % 2)
            die("qk_rope_head_dim must be positive and even (RoPE rotates pairs), got %d", c->qk_rope_head_dim);
        if (c->q_lora_rank < 0) die("q_lora_rank must be >= 0, got %d", c->q_lora_rank);
    } else {
        if (c->base_num_kv_heads <= 0 || c->head_dim <= 0)
            die("base_num_kv_heads and head_dim must be positive (got %d, %d)", c->base_num_kv_heads, c->head_dim);
        if (!divides(c->base_num_kv_heads, c->base_num_query_heads))
            die("base_num_kv_heads (%d) must divide base_num_query_heads (%d)",
                c->base_num_kv_heads, c->base_num_query_heads);
        if (c->head_dim % 2) die("head_dim must be even (RoPE rotates pairs), got %d", c->head_dim);
    }
    if (c->num_experts_per_tok > c->num_experts)
        die("num_experts_per_tok (%d) cannot exceed num_experts (%d)", c->num_experts_per_tok, c->num_experts);
    if (cfg_expert_dim(c) <= 0) die("expert width must be positive (base_mlp_dim / base_moe_mlp_dim)");
    if (c->first_num_dense_layers < 0 || c->first_num_dense_layers > c->base_num_decoder_layers)
        die("first_num_dense_layers (%d) must be between 0 and base_num_decoder_layers (%d)",
            c->first_num_dense_layers, c->base_num_decoder_layers);
    if (c->first_num_dense_layers > 0 && c->base_mlp_dim <= 0)
        die("dense layers need base_mlp_dim > 0, got %d", c->base_mlp_dim);
    if (c->n_routing_groups > 0) {
        if (!cfg_sigmoid_router(c)) die("n_routing_groups needs routed_score_func=sigmoid (DeepSeek routing)");
        if (c->num_experts % c->n_routing_groups)
            die("n_routing_groups (%d) must divide num_experts (%d)", c->n_routing_groups, c->num_experts);
        if (c->num_experts / c->n_routing_groups < 2)
            die("each routing group needs at least 2 experts (group score = sum of its top 2); "
                "num_experts %d / n_routing_groups %d < 2", c->num_experts, c->n_routing_groups);
        if (c->topk_routing_group <= 0 || c->topk_routing_group > c->n_routing_groups)
            die("topk_routing_group (%d) must be between 1 and n_routing_groups (%d)",
                c->topk_routing_group, c->n_routing_groups);
        if (c->topk_routing_group * (c->num_experts / c->n_routing_groups) < c->num_experts_per_tok)
            die("topk_routing_group %d groups of %d experts hold fewer than num_experts_per_tok (%d) experts",
                c->topk_routing_group, c->num_experts / c->n_routing_groups, c->num_experts_per_tok);
    }
    if (c->routed_bias && !cfg_sigmoid_router(c))
        die("routed_bias needs routed_score_func=sigmoid (DeepSeek routing)");
    if (c->shared_experts < 0) die("shared_experts must be >= 0, got %d", c->shared_experts);
    if (c->capacity_factor > 0 && c->sparse_matmul)
        die("capacity_factor=%g drops tokens only on the dense path: set sparse_matmul=false "
            "(the sparse path is dropless)", c->capacity_factor);
    int chunks = cfg_context_chunks(c);
    if (chunks < 1 || (chunks & (chunks - 1)))
        die("context_reduce_chunks must be a power of two (the chunks of a sequence form a pairwise tree), got %d",
            chunks);
    if (!divides(chunks, c->max_target_length))
        die("context_reduce_chunks (%d) must divide max_target_length (%d): every sequence is cut into that many "
            "equal chunks", chunks, c->max_target_length);
    int leaf = cfg_leaf_tokens(c);
    if (!divides(leaf, cfg_chunk_tokens(c)))
        die("reduce_leaf_tokens (%d) must divide the chunk length, max_target_length / context_reduce_chunks = "
            "%d / %d = %d: a leaf never spans two chunks", leaf, c->max_target_length, chunks, cfg_chunk_tokens(c));
    if (c->eval_fraction <= 0 || c->eval_fraction >= 1)
        die("eval_fraction must be between 0 and 1, got %g", c->eval_fraction);
    if (c->eval_per_device_batch_size < 0)
        die("eval_per_device_batch_size must be >= 0 (0 = per_device_batch_size), got %d", c->eval_per_device_batch_size);
    if (c->learning_rate < 0) die("learning_rate must be >= 0, got %g", c->learning_rate);
    if (c->warmup_steps_fraction < 0 || c->warmup_steps_fraction > 1)
        die("warmup_steps_fraction must be in [0,1], got %g", c->warmup_steps_fraction);
    if (c->num_vocab_tiling < 1)
        die("num_vocab_tiling must be >= 1 (1 = the whole logits at once), got %d", c->num_vocab_tiling);
    // attention kernels and context parallelism
    if (strcmp(c->attention, "dot_product") && strcmp(c->attention, "flash"))
        die("attention must be 'dot_product' or 'flash', got '%s'", c->attention);
    if (c->attn_block_q < 1 || c->attn_block_kv < 1)
        die("attn_block_q and attn_block_kv must be >= 1, got %d and %d", c->attn_block_q, c->attn_block_kv);
    if (strcmp(c->context_parallel_strategy, "all_gather") && strcmp(c->context_parallel_strategy, "ring"))
        die("context_parallel_strategy must be 'all_gather' or 'ring', got '%s'", c->context_parallel_strategy);
    if (!strcmp(c->context_parallel_strategy, "ring") && !strcmp(c->attention, "flash"))
        die("context_parallel_strategy=ring with attention=flash is not supported: the ring already runs attention "
            "block by block (one K/V block per ring step, merged by log-sum-exp); use attention=dot_product with ring");
    config_check_ranges(c);   // every numeric key inside its range (model/config_ranges.c)
    config_check_sizes(c);
    remat_plan(c);        // dies on a bad remat_policy or checkpoint value
    state_offload_check(c);   // and on a bad opt_type, ema_decay or offload combination
}

void config_print_help(void) {
    printf("%-36s %-10s %s\n", "key", "default", "meaning");
    char range[200];
    for (int i = 0; i < NKEYS; i++) {
        printf("%-36s %-10s %s", KEYS[i].name, KEYS[i].dflt[0] ? KEYS[i].dflt : "\"\"", KEYS[i].help);
        if (config_range_text(KEYS[i].name, range, sizeof range)) printf(" [range: %s]", range);
        else if (KEYS[i].type == K_INT || KEYS[i].type == K_FLOAT || KEYS[i].type == K_BYTES) printf(" [range: none declared]");
        printf("\n");
    }
}

// The files the run reads and writes, checked before anything is computed (data/paths.h).
void config_check_paths(const Config *c) {
    if (strcmp(c->dataset_path, "synthetic")) check_input_file("dataset_path", c->dataset_path);
    if (c->load_checkpoint[0]) check_input_file("load_checkpoint", c->load_checkpoint);
    if (c->save_checkpoint[0]) check_output_path("save_checkpoint", c->save_checkpoint);
    if (c->metrics_file[0]) check_output_path("metrics_file", c->metrics_file);
    if (c->memory_trace[0]) check_output_path("memory_trace", c->memory_trace);
    if (c->dump_parity[0]) check_output_dir("dump_parity", c->dump_parity);
}

// Append to buf with bounds checking.
static void jcat(char *buf, int cap, int *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#include <stdarg.h>
static void jcat(char *buf, int cap, int *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, (size_t)(cap - *len), fmt, ap);
    va_end(ap);
    if (n < 0 || *len + n >= cap) die("internal: config JSON buffer too small (%d bytes)", cap);
    *len += n;
}

int config_to_json(const Config *c, char *buf, int cap) {
    int len = 0;
    jcat(buf, cap, &len, "{");
    for (int i = 0; i < NKEYS; i++) {
        const KeyDef *k = &KEYS[i];
        const void *field = (const char *)c + k->offset;
        jcat(buf, cap, &len, "%s\"%s\": ", i ? ", " : "", k->name);
        switch (k->type) {
        case K_INT: jcat(buf, cap, &len, "%d", *(const int *)field); break;
        case K_FLOAT:   // JSON has no inf or nan; set_value never lets one in
            if (!isfinite(*(const float *)field)) die("internal: config key '%s' is not finite", k->name);
            jcat(buf, cap, &len, "%.9g", (double)*(const float *)field);
            break;
        case K_BYTES: jcat(buf, cap, &len, "%lld", (long long)*(const int64_t *)field); break;
        case K_BOOL: jcat(buf, cap, &len, "%s", *(const int *)field ? "true" : "false"); break;
        case K_STR: {
            jcat(buf, cap, &len, "\"");
            for (const char *p = (const char *)field; *p; p++) {
                if (*p == '"' || *p == '\\') jcat(buf, cap, &len, "\\%c", *p);
                else if ((unsigned char)*p < 0x20) jcat(buf, cap, &len, "\\u%04x", *p);
                else jcat(buf, cap, &len, "%c", *p);
            }
            jcat(buf, cap, &len, "\"");
            break;
        }
        }
    }
    jcat(buf, cap, &len, "}");
    return len;
}

// Reads the flat object written by config_to_json: "key": value pairs, values are numbers,
// true/false or strings with \" \\ \uXXXX escapes.
void config_from_json(Config *c, const char *json, const char *where) {
    const char *p = json;
    char key[128], val[CFG_STR + 8];
    while (*p && *p != '{') p++;
    if (*p != '{') die("%s: config metadata is not a JSON object", where);
    p++;
    for (;;) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (*p == '}') return;
        if (*p != '"') die("%s: malformed config metadata near '%.20s'", where, p);
        int n = 0;
        for (p++; *p && *p != '"'; p++) if (n < 127) key[n++] = *p;
        key[n] = '\0';
        if (*p != '"') die("%s: malformed config metadata", where);
        p++;
        while (isspace((unsigned char)*p) || *p == ':') p++;
        n = 0;
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                char ch = *p;
                if (ch == '\\') {
                    p++;
                    if (*p == 'u') {   // \uXXXX: four hex digits, all before the end of the text
                        for (int d = 1; d <= 4; d++)
                            if (!isxdigit((unsigned char)p[d])) die("%s: malformed \\u escape in config metadata", where);
                        ch = (char)strtol((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
                        p += 4;
                    } else if (*p == '\0') {
                        break;   // a '\\' ending the text: reported as unterminated below
                    } else {
                        ch = *p;
                    }
                }
                if (n < CFG_STR) val[n++] = ch;
            }
            if (*p != '"') die("%s: malformed config metadata", where);
            p++;
        } else {
            while (*p && *p != ',' && *p != '}' && !isspace((unsigned char)*p)) if (n < CFG_STR) val[n++] = *p++; else p++;
        }
        val[n] = '\0';
        const KeyDef *k = find_key(key);
        if (!k) die("%s: config metadata has unknown key '%s' (written by another version of meshmoe?)", where, key);
        set_value(c, k, val, where);
    }
}
