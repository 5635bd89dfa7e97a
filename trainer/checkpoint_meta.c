// trainer/checkpoint_meta.c: the step and the config of a checkpoint against the run's (see
// checkpoint_meta.h).
#include "trainer/checkpoint_meta.h"
#include "trainer/rows.h"
#include "optim/optimizer.h"
#include "base/mesh.h"     // mesh_check_sizes
#include "core/common.h"
#include <errno.h>

int checkpoint_parse_step(const char *value, const char *path) {
    int digits = value[0] != '\0';
    for (const char *p = value; *p; p++) digits &= *p >= '0' && *p <= '9';
    errno = 0;
    long v = digits ? strtol(value, NULL, 10) : -1;
    if (!digits || errno || v > 2147483647L)
        die("load_checkpoint %s: metadata key 'step' must be a non-negative integer, got '%s'", path, value);
    return (int)v;
}

// Keys that may differ besides the sweep's bit-identical switches: the mesh and the batch
// per device (checked below as the global batch and the reduction chunks, which must stay),
// what the backward keeps (remat_policy=custom's parts), evaluation and output.
static const char *const MAY_DIFFER[] = {
    // the mesh (tests/mesh.sh, tests/pipeline.sh: every mesh gives one device's bits)
    "num_devices", "ici_data_parallelism", "ici_fsdp_parallelism", "ici_tensor_parallelism",
    "ici_expert_parallelism", "ici_context_parallelism", "ici_pipeline_parallelism",
    "dcn_data_parallelism", "dcn_fsdp_parallelism", "dcn_tensor_parallelism", "dcn_expert_parallelism",
    "dcn_context_parallelism", "dcn_pipeline_parallelism", "per_device_batch_size", "context_reduce_chunks", "num_pipeline_microbatches", "num_pipeline_repeats",
    "num_layers_per_pipeline_stage", "pipeline_schedule", "num_threads", "hbm_capacity",
    // remat_policy=custom's parts (tests/remat.sh, tests/qkvremat.sh: the same bits)
    "decoder_layer_input", "query_proj", "key_proj", "value_proj", "context", "out_proj", "mlpwi", "mlpwo",
    // the flash kernel's query rows a block (tests/flash.sh: the same bits at any value)
    "attn_block_q",
    // where the first step's weights came from: a resumed run takes them from the checkpoint
    "load_hf", "load_parameters_path",
    // evaluation and output: what the run prints and writes, not what it trains
    "eval_interval", "eval_steps", "log_period", "metrics_file", "save_checkpoint", "load_checkpoint",
    "checkpoint_period", "run_steps", "sample_length", "sample_temperature", "prompt", "decode_sampling_strategy",
    "decode_sampling_top_k", "decode_sampling_nucleus_p", "dump_parity", "parity_steps", "parity_snapshots",
    "print_sharding", "dry_run", "profile", "memory_trace", "sweep_steps", "sweep_only", "sweep_num_devices",
};

// Keys a user changes on purpose when resuming: a lower learning rate after a loss that
// went non-finite, as train.c's message advises; and the keys that choose how the same math
// is computed, which change only where products and sums round: the device (a CPU
// checkpoint taken on to a GPU or back, docs/gpu.md), the products' and attention's kernels
// (cuBLAS on tensor cores for a checkpoint the ordered GEMM made, OpenBLAS, flash attention
// and its key blocks, the ring), and the order of the canonical sums (tensor_reduce_chunks,
// reduce_leaf_tokens; context_reduce_chunks, below). Allowed, and said at start-up, since
// the resumed run then leaves the uninterrupted run's trajectory, by rounding for the
// kernels and the sums (but for the values that keep the bits: tiles and rows, ordered
// and plain).
static const char *const MAY_CHANGE[] = {
    "learning_rate", "device", "gpu_attention", "gpu_matmul", "matmul_impl", "attention", "attn_block_kv",
    "attn_block_autotune", "context_parallel_strategy", "tensor_reduce_chunks", "reduce_leaf_tokens",
};

static int listed(const char *const *list, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], key)) return 1;
    return 0;
}

int checkpoint_key_may_differ(const char *key) {
    if (listed(MAY_DIFFER, sizeof MAY_DIFFER / sizeof MAY_DIFFER[0], key)) return 1;
    // A switch of the optimization sweep whose every row is "bit" (trainer/rows.c).
    int n, bit = 0, other = 0;
    const SweepRow *rows = sweep_rows(&n);
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].key, key)) continue;
        if (rows[i].cls == SW_BIT) bit = 1;
        else other = 1;
    }
    return bit && !other;
}

int checkpoint_config_json(const Config *c, char *buf, int cap) {
    Config g = *c;
    g.dcn_data_parallelism = g.dcn_fsdp_parallelism = g.dcn_tensor_parallelism = 1;
    g.dcn_expert_parallelism = g.dcn_context_parallelism = g.dcn_pipeline_parallelism = 1;
    return config_to_json(&g, buf, cap);
}

// num_devices, or the product of the ici_* sizes (a -1 axis needs num_devices).
static int devices_of(const Config *c) {
    if (c->num_devices > 0) return c->num_devices;
    return c->ici_data_parallelism * c->ici_fsdp_parallelism * c->ici_tensor_parallelism *
           c->ici_expert_parallelism * c->ici_context_parallelism * c->ici_pipeline_parallelism;
}

// 1 where the two configs cut the work into the same per-device pieces: the mesh's axes (a -1
// axis filled), the batch per device, the microbatches a step and a pipeline's.
static int same_pieces(const Config *a, const Config *b) {
    int x[MESH_NAXES + 3], y[MESH_NAXES + 3];
    mesh_check_sizes(a, x);
    mesh_check_sizes(b, y);
    x[MESH_NAXES] = a->per_device_batch_size, y[MESH_NAXES] = b->per_device_batch_size;
    x[MESH_NAXES + 1] = a->gradient_accumulation_steps, y[MESH_NAXES + 1] = b->gradient_accumulation_steps;
    x[MESH_NAXES + 2] = a->num_pipeline_microbatches, y[MESH_NAXES + 2] = b->num_pipeline_microbatches;
    return !memcmp(x, y, sizeof x);
}

// The kernel of this run, if any, whose results depend on the shapes it is given, so that
// other per-device pieces round otherwise (the ordered GEMM and the attention tiles and rows
// keep one device's bits on any mesh); NULL for none.
static const char *shape_rounding_kernel(const Config *c) {
    if (c->device == DEVICE_GPU) {
        if (c->gpu_matmul != GPU_MATMUL_ORDERED) return "gpu_matmul";
        if (c->gpu_attention == GPU_ATTENTION_TENSOR_CORES || c->gpu_attention == GPU_ATTENTION_CUDNN)
            return "gpu_attention";
        return NULL;
    }
    return c->matmul_impl == MATMUL_OPENBLAS ? "matmul_impl" : NULL;
}

// steps may change on a resume (to train longer, or to stop sooner) as long as the
// learning-rate schedule keeps its length: a step's rate depends on that length and not on
// steps (optim/optimizer.h), so the steps taken are the ones an uninterrupted run takes.
static void check_schedule(const Config *ck, const Config *run, const char *path) {
    int lck = cfg_lr_schedule_length(ck), lrun = cfg_lr_schedule_length(run);
    if (lck == lrun) return;
    char after[CFG_STR + 384] = "";   // what keeping it means for a run past its end (path: CFG_STR)
    const char *bias = run->routed_bias && run->routed_bias_update_rate > 0
                           ? "; the routing biases still move, by routed_bias_update_rate, which no schedule scales" : "";
    if (run->steps > lck)
        snprintf(after, sizeof after, ", whose rate is 0 from step %d on (MaxText's constant-zero piece%s); to train on "
                 "from these weights with a new schedule and optimizer, start from load_parameters_path=%s", lck, bias,
                 path);
    die("load_checkpoint %s: the learning-rate schedule's length is %d in the checkpoint "
        "(learning_rate_schedule_steps %d, steps %d), %d in this run (learning_rate_schedule_steps %d, steps %d): "
        "set learning_rate_schedule_steps=%d to keep the checkpoint's schedule%s", path, lck,
        ck->learning_rate_schedule_steps, ck->steps, lrun, run->learning_rate_schedule_steps, run->steps, lck, after);
}

void checkpoint_check_config(const Config *ck, const Config *run, const char *path, int step) {
    char a[CFG_STR + 16], b[CFG_STR + 16];
    if (step < run->steps) check_schedule(ck, run, path);
    for (int i = 0; i < config_num_keys(); i++) {
        const char *key = config_key_name(i);
        if (!strcmp(key, "steps") || !strcmp(key, "learning_rate_schedule_steps")) continue;   // check_schedule
        if (!strcmp(key, "dataset_path")) continue;   // by its tokens, or its text (trainer/checkpoint.c)
        if (checkpoint_key_may_differ(key) || config_key_equal(ck, run, key)) continue;
        config_format_value(ck, key, a, sizeof a);
        config_format_value(run, key, b, sizeof b);
        if (listed(MAY_CHANGE, sizeof MAY_CHANGE / sizeof MAY_CHANGE[0], key)) {
            printf("load_checkpoint %s: %s is %s in the checkpoint; this run continues with %s\n", path, key, a, b);
            continue;
        }
        die("load_checkpoint %s: %s is %s in the checkpoint, %s in this run (a key that changes the math must "
            "keep the checkpoint's value; the mesh and the switches that keep the bits may differ)", path, key, a, b);
    }
    // The global batch per optimizer step: the sequences of each step and their order.
    long gck = (long)ck->gradient_accumulation_steps * ck->per_device_batch_size * devices_of(ck);
    long grun = (long)run->gradient_accumulation_steps * run->per_device_batch_size * devices_of(run);
    if (gck != grun)
        die("load_checkpoint %s: the global batch is %ld sequences per step in the checkpoint "
            "(gradient_accumulation_steps %d x per_device_batch_size %d x %d devices), %ld in this run (%d x %d x %d)",
            path, gck, ck->gradient_accumulation_steps, ck->per_device_batch_size, devices_of(ck), grun,
            run->gradient_accumulation_steps, run->per_device_batch_size, devices_of(run));
    // The same kernels on other per-device pieces: said where those kernels round by shape.
    const char *kernel = shape_rounding_kernel(run);
    if (kernel && step < run->steps && !same_pieces(ck, run) && config_key_equal(ck, run, kernel)) {
        config_format_value(run, kernel, b, sizeof b);
        printf("load_checkpoint %s: this run cuts the step into other per-device pieces than the checkpoint's (the "
               "mesh, the batch per device or the microbatches), and %s=%s rounds by the shapes it is given: the "
               "losses leave the uninterrupted run's by rounding (the ordered GEMM and the attention tiles keep one "
               "device's bits on any mesh)\n", path, kernel, b);
    }
    // The chunks every sum over a sequence's tokens is cut into (0 = one per context device):
    // a mesh with another context size changes them by default, and one with more context
    // devices than the checkpoint's chunks cannot keep them, so this run goes on, and says so.
    if (cfg_context_chunks(ck) != cfg_context_chunks(run))
        printf("load_checkpoint %s: sums over tokens use %d chunk(s) per sequence in the checkpoint; this run "
               "continues with %d (context_reduce_chunks, whose 0 means one per context device: the losses leave "
               "the uninterrupted run's by rounding; context_reduce_chunks=%d keeps its bits where the mesh allows)\n",
               path, cfg_context_chunks(ck), cfg_context_chunks(run), cfg_context_chunks(ck));
}
