// trainer/rows.c: every row of the optimization catalog (docs/optimizations.md), as data.
//
// A row names the config key it toggles and the values it tries; the sweep runs the
// baseline (every key as the preset and the command line leave it) and one run per value,
// on the mesh the row names, and compares losses and per-device memory. A row whose key
// (or a key its mesh sets) is unknown to this build is printed as "not implemented in
// this build": adding the key to base/config_keys.def is what makes the row run.
//
// Key names follow MaxText where MaxText has the switch; a row's key must be the name
// base/config_keys.def gives it, or the row reads "not implemented in this build".
#include "trainer/rows.h"

static const SweepRow ROWS[] = {
    {"1", "float32_weight_sum", "true,false", "dtype=bfloat16", SW_TOL,
     "false sums the MoE combine in bf16 (every product and partial sum rounded) instead of in float32 rounded "
     "once: changes rounding only",
     "the float32 sum accumulates in the output row itself (no float32 copies of the operands, which XLA makes), "
     "so neither setting allocates anything"},
    {"2", "skip_trivial_specs", "true,false", "", SW_BIT,
     "a sharding constraint whose spec is all-unsharded emits no copy; off, it materialises a copy as XLA does",
     "the constraint copies are temporaries freed before the peak"},
    {"3", "remove_size_one_mesh_axis", "true,false", "ici_fsdp_parallelism=2", SW_BIT,
     "partition specs drop mesh axes of size 1; off, identity reshards copy the tensor",
     "the identity-reshard copies are temporaries freed before the peak"},
    {"4", "rmsnorm_fused_scale", "true,false", "", SW_BIT,
     "RMSNorm multiplies by its scale in place; off, the einsum form materialises the broadcast [B,S,D] scale",
     "the [B,S,D] scale is a temporary of one norm call, freed before the peak"},
    {"5", "use_iota_embed", "true,false", "", SW_BIT,
     "the embedding as a one-hot [B,S,V] matmul with the table instead of a gather: costs the one-hot tensor",
     "the one-hot tensor is freed before the peak"},
    {"5", "iota_embed_max_bytes", "1024", "use_iota_embed=true", SW_BIT,
     "the guard: above iota_embed_max_bytes the one-hot embedding falls back to the gather",
     "the one-hot tensor is freed before the peak"},
    {"6", "implicit_causal_mask", "true,false", "", SW_BIT,
     "causal masking from token indices; off, a materialised [B,1,S,S] mask (and segment-id mask)",
     "the masks are freed before the peak"},
    {"7", "moe_skip_redundant_cast", "true,false", "", SW_BIT,
     "no copy of the expert intermediate for a dtype cast that changes nothing; off, one [tokens,H] copy",
     "the [tokens,H] copy is a temporary freed before the peak"},
    {"8", "pipeline_shift_impl", "ppermute,slice", "ici_pipeline_parallelism=@stages", SW_BIT,
     "slice sends each stage output straight into the neighbour's new row and frees it (MaxText's slice and pad "
     "of the stacked state); ppermute sends it through send and receive buffers held in the loop state",
     "the shift buffers are one microbatch's activations, small next to the saved activations that set the "
     "peak, and the receive buffer is reused by the next iteration's input"},
    {"9", "pipeline_save_decoder_layer_input", "true,false", "ici_pipeline_parallelism=@stages", SW_BIT,
     "remat in the pipeline saves iteration_input only (false) or also every layer's input (a second stacked "
     "checkpoint buffer); false recomputes the layer inputs in the backward pass",
     "with one layer per stage and iteration the layer input is the iteration input, so the second buffer is "
     "one more copy of it, which may be alive after the peak"},
    {"10", "moe_reshard_io", "false,true", "", SW_BIT,
     "the DeepSeek MoE block reshards its input and output around the block: two activation-sized copies",
     "the two copies are temporaries freed before the peak; Mixtral has no DeepSeek MoE block, so there the "
     "switch changes nothing"},
    {"11", "skip_noop_grad_cast", "true,false", "", SW_BIT,
     "skip the gradient cast to grad_dtype when it is a no-op (float32 to float32); off, one gradient-sized copy",
     "the gradient copy is freed before the peak"},
    {"12", "shard_variables_at_init", "false,true", "ici_fsdp_parallelism=2", SW_BIT,
     "a sharding constraint on every variable at creation (copies) vs only where asked: an init-time cost",
     "the step peak is measured after initialisation, so an init-time copy does not show in it (the init peak, "
     "where the run prints one, is in the moved column)"},
    {"13", "ici_fsdp_parallelism", "2", "", SW_BIT,
     "FSDP: parameters, gradients and AdamW moments sharded over 'fsdp'; units all-gathered before use and "
     "gradients reduce-scattered, so model state per device halves (the batch is split too)",
     ""},
    {"14", "shard_optimizer_over_data", "true,false", "ici_data_parallelism=2", SW_BIT,
     "ZeRO-1: the AdamW moments sharded over 'data' as well, halving optimizer bytes per device on data=2",
     ""},
    {"15", "remat_policy",
     "full,minimal,minimal_with_context,save_dot_except_mlp,save_dot_with_context_except_mlp,save_qkv_proj,"
     "save_out_proj,none", "", SW_BIT,
     "what the backward pass keeps vs recomputes (MaxText's named checkpoints): full, the baseline, recomputes "
     "each layer from its input; the others keep more activations and recompute less",
     "the policy's saved tensors are not the ones at the peak"},
    {"16", "remat_policy", "minimal_offloaded,qkv_proj_offloaded", "", SW_BIT,
     "saved activations moved to host memory after the forward pass and back before the backward pass",
     "the offloaded tensors are not at the device peak"},
    {"17", "optimizer_memory_host_offload", "true,false", "", SW_BIT,
     "the AdamW moments live in host memory between steps and come to the device for the update",
     "the moments come back to the device for the update, which is the step's peak"},
    {"17", "parameter_memory_host_offload", "true,false", "", SW_BIT,
     "the parameters live in host memory between steps",
     "the parameters are back on the device during the step"},
    {"18", "mesh", "", "", SW_BIT,
     "every factorisation of sweep_num_devices over data/fsdp/tensor/expert: per-device peak, bytes "
     "communicated and step time, each compared with one device (the table below)",
     ""},
    {"19", "scan_layers", "true,false", "", SW_BIT,
     "one set of per-layer temporaries reused by every layer vs a set per layer (unrolled: each layer's forward "
     "and backward sets stay allocated until the backward ends, so the temp peak grows with the layers)",
     ""},
    {"20", "remat_nested_block", "2", "", SW_BIT,
     "sqrt(L) checkpointing: keep only block-boundary inputs, recompute inside the block",
     "with few layers the block boundaries are most of the layers"},
    {"21", "gradient_accumulation_steps", "2", "", SW_BIT,
     "the same global batch in 2 microbatches of half the sequences: saved activations and temporaries halve; "
     "the microbatch gradients are kept to be added along the canonical tree (the grads tag grows), so the "
     "total falls only where activations outweigh the gradients",
     ""},
    {"22", "donate_buffers", "true,false", "", SW_BIT,
     "parameters updated in place vs a new model-sized copy written each step",
     "the copy is made after the peak"},
    {"23", "opt_type", "adamw,sgd,adafactor,muon,adam_pax", "", SW_OTHER,
     "another optimizer: its state size (AdamW two moments, SGD none, Adafactor factored second moments, Muon "
     "one momentum and AdamW's second moment for the embedding, head and norm scales only, adam_pax AdamW's two)",
     "adam_pax keeps AdamW's two float32 moments, the same bytes"},
    {"24", "num_vocab_tiling", "4", "", SW_BIT,
     "cross-entropy in token chunks, never holding the [B,S,V] logits",
     "the logits are not at the peak"},
    {"25", "attention", "dot_product,flash", "", SW_TOL,
     "blocked online-softmax attention that never holds the [B,N,S,S] scores",
     "the scores are not at the peak"},
    {"26", "ema_decay", "0.999", "", SW_BIT,
     "an exponential moving average of the weights kept on the device: one model-sized copy",
     "the EMA copy is small next to the activations at the peak"},
    {"26", "ema_host_offload", "true,false", "ema_decay=0.999", SW_BIT,
     "the EMA copy of the weights kept in host memory instead of on the device",
     "the EMA copy is small next to the activations at the peak"},
    {"27", "dtype", "bfloat16,float32", "", SW_TOL,
     "bfloat16 activations (float32 master weights, gradients and moments): saved activations stored as 16-bit",
     ""},
    {"28", "eval_per_device_batch_size", "2", "", SW_BIT,
     "the eval batch set apart from the training batch, so eval can run smaller",
     "the sweep measures the training step's peak; the eval peak is apart from it (where the run prints one, "
     "it is in the moved column)"},
    {"29", "ici_context_parallelism", "2", "context_reduce_chunks=2", SW_BIT,
     "each sequence cut over 'context': activations per device halve, K/V all-gathered for attention and "
     "dK/dV reduce-scattered; the baseline is one device with the same 2 reduction chunks",
     ""},
    {"29", "context_parallel_strategy", "all_gather,ring", "ici_context_parallelism=2 context_reduce_chunks=2",
     SW_TOL, "K/V passed round a ring of context devices instead of all-gathered: a block of K/V at a time",
     "the gathered K/V are small next to the saved activations"},
    {"30", "sparse_matmul", "true,false", "", SW_TOL,
     "true: a grouped GEMM over tokens sorted by expert; false: every expert on every token with [B,S,E,H] "
     "temporaries, the unrouted products masked out",
     ""},
    {"31", "attn_block_q", "32", "attention=flash", SW_TOL,
     "block sizes of the blocked attention, chosen by measurement",
     "block sizes change the time, not the held tensors' sizes beyond one block"},
    {"32", "overlap_collectives", "true,false", "ici_fsdp_parallelism=2", SW_BIT,
     "collectives on a helper thread overlapping compute (prefetch of the next FSDP unit): an extra unit buffer",
     "the prefetched unit is small next to the activations at the peak"},
    {"33", "pipeline_fsdp_ag_once", "false,true", "ici_pipeline_parallelism=@stages ici_fsdp_parallelism=2", SW_BIT,
     "true all-gathers every stage's weights over fsdp once before the pipeline loop and holds them; false "
     "gathers them at every iteration (more bytes sent, less held)",
     "the highest device is stage 0, which also runs the embedding (and DeepSeek's dense first layer) outside "
     "the loop; its peak comes when the weights held for the loop are not what differs: its params tag rises, "
     "its total does not"},
    {"34", "shard_mode", "auto,explicit", "ici_tensor_parallelism=2", SW_BIT,
     "where reshards are inserted: by the runtime at op boundaries (auto) vs declared per op (explicit: each "
     "row-parallel matmul's partial sums are all-reduced in a temporary and resharded into its output)",
     "the reshard temporaries are freed before the peak"},
    {"35", "megablox", "false,true", "", SW_BIT,
     "true: each of the experts' products one grouped call over all of a layer's expert rows (on a GPU one "
     "grouped GEMM; here a call per expert inside it, the same bits); the experts' temporaries then hold all "
     "T*K rows at once, where one expert's call held T",
     "the experts' temporaries live inside one layer's call; the step's peak is set where the saved "
     "activations are largest"},
    {"36", "bf16_storage", "kept,per_unit", "dtype=bfloat16", SW_BIT,
     "bf16 mode's weights' compute copy and the activations at the cast points as 16-bit numbers: kept, the "
     "copy of every unit held from update to update (2 bytes a weight, where the default holds one unit's "
     "float32 copy at a time); per_unit, one unit's 16-bit copy at a time; the packed activations half the bytes",
     "the peak moves both ways: the params tag by the weights' copy (kept: up, 2 bytes a weight less one unit's "
     "float32 copy), the activations and temporaries down where SwiGLU's arrays, the experts' rows, the "
     "logits and their gradient are 16-bit"},
    {"37", "mu_dtype", "bfloat16", "", SW_TOL,
     "AdamW's first moment kept as bf16 (optax's mu_dtype): 2 bytes a weight fewer in the optimizer state and in "
     "each update's traffic; each update rounds the moment it keeps",
     "the optimizer state is held through the step, so its 2 bytes a weight come off every device's peak"},
};

const SweepRow *sweep_rows(int *n) {
    *n = (int)(sizeof(ROWS) / sizeof(ROWS[0]));
    return ROWS;
}

const char *sweep_class_name(SweepClass c) {
    return c == SW_BIT ? "bit" : c == SW_TOL ? "tol" : "other";
}
