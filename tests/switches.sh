#!/usr/bin/env bash
# tests/switches.sh: the "temporaries and fused ops" switches of docs/optimizations.md
# (rmsnorm_fused_scale, implicit_causal_mask, moe_skip_redundant_cast, moe_reshard_io, megablox,
# skip_noop_grad_cast, shard_variables_at_init, donate_buffers, eval_per_device_batch_size), and
# bf16_storage. For each: 3 steps with the switch at its default and flipped, on a
# tiny preset; the loss trajectories must be bit-identical, and the costlier side's
# measured peak must exceed the default's by at least the buffer it adds, worked out here
# from the test's own shapes (not from the code under test).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train >/dev/null || { echo "build failed"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Mixtral shapes of the runs below (configs/mixtral-tiny.yml with these overrides).
B=2 S=32 L=2 D=128 V=256 N=4 Nkv=2 Dh=32 E=4 K=2 H=256
T=$((B * S))
TINY="steps=3 per_device_batch_size=$B max_target_length=$S base_num_decoder_layers=$L sample_length=0 eval_steps=1"

# run NAME PRESET ARGS...: train into $dir/NAME.json
run() { local name=$1 preset=$2; shift 2; ./train "$preset" "$@" metrics_file="$dir/$name.json" >"$dir/$name.out" 2>&1; }
# field NAME KEY [TAG]: KEY (or KEY's TAG) of the last metrics line of run NAME
field() { python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).readlines()[-1])[sys.argv[2]]; print(d[sys.argv[3]] if len(sys.argv) > 3 else d)" "$dir/$1.json" "${@:2}"; }
bits() { grep -o '"loss_bits": "[^"]*"' "$dir/$1.json" | tr '\n' ' '; }
same_bits() { [ -n "$(bits "$1")" ] && [ "$(bits "$1")" = "$(bits "$2")" ]; }
# grows NAME_ON NAME_OFF KEY TAG BYTES: off's KEY[TAG] >= on's + BYTES
grows() {
    local on off; on=$(field "$1" "$3" "$4"); off=$(field "$2" "$3" "$4")
    echo "       $3.$4: $on -> $off (+$((off - on)), at least +$5 expected)"
    [ $((off - on)) -ge "$5" ]
}

# rmsnorm_fused_scale=false: a broadcast (T,D) scale per norm call (2 per layer and
# the final norm; DeepSeek's MLA adds q_norm (T,q_lora_rank) and kv_norm (T,kv_lora_rank)),
# kept from the forward to the backward pass: all live at the end of the forward pass when
# nothing is rematerialised (remat_policy=none; under the default, full, a layer's scales
# are dropped with its other saved tensors and rebuilt by the recomputation).
run base configs/mixtral-tiny.yml $TINY
run norm configs/mixtral-tiny.yml $TINY rmsnorm_fused_scale=false
check "rmsnorm_fused_scale=false: losses bit-identical" same_bits base norm
run base_keep configs/mixtral-tiny.yml $TINY remat_policy=none
run norm_keep configs/mixtral-tiny.yml $TINY remat_policy=none rmsnorm_fused_scale=false
check "rmsnorm_fused_scale=false, remat_policy=none: (2L+1) broadcast (T,D) scales saved" \
    grows base_keep norm_keep peak_bytes_by_tag activations $(((2 * L + 1) * T * D * 4))
run ds configs/deepseek-tiny.yml $TINY
run ds_norm configs/deepseek-tiny.yml $TINY rmsnorm_fused_scale=false
check "rmsnorm_fused_scale=false, deepseek: losses bit-identical" same_bits ds ds_norm
run ds_keep configs/deepseek-tiny.yml $TINY remat_policy=none
run ds_norm_keep configs/deepseek-tiny.yml $TINY remat_policy=none rmsnorm_fused_scale=false
check "rmsnorm_fused_scale=false, deepseek, remat_policy=none: + q_norm (T,64) and kv_norm (T,32) per layer" \
    grows ds_keep ds_norm_keep peak_bytes_by_tag activations $(((2 * L + 1) * T * D * 4 + L * T * (64 + 32) * 4))

# matmul_impl=plain: the whole trainer on the plain kernels (kernels/cpu/backend.c:
# backend_cpu_plain: the GEMM as the in-order triple loop, attention in per-row loops):
# the same loss bits as the default's tiled kernels, on both presets.
run plain configs/mixtral-tiny.yml $TINY matmul_impl=plain
check "matmul_impl=plain: the plain backend ran ($(grep -o '^kernels: [^,]*' "$dir/plain.out"))" \
    grep -q "kernels: cpu-plain backend" "$dir/plain.out"
check "matmul_impl=plain: losses bit-identical to the tiled kernels'" same_bits base plain
run ds_plain configs/deepseek-tiny.yml $TINY matmul_impl=plain
check "matmul_impl=plain, deepseek: losses bit-identical to the tiled kernels'" same_bits ds ds_plain

# moe_reshard_io=true: DeepSeek's MoE block reads a copy of its input and writes
# into an output buffer copied afterwards: two (T,D) copies held across the block. Wider
# experts, so that the MoE block holds the step's temp peak.
run ds_wide configs/deepseek-tiny.yml $TINY base_moe_mlp_dim=256
run ds_reshard configs/deepseek-tiny.yml $TINY base_moe_mlp_dim=256 moe_reshard_io=true
check "moe_reshard_io=true, deepseek: losses bit-identical" same_bits ds_wide ds_reshard
check "moe_reshard_io=true, deepseek: two (T,D) copies around the block" \
    grows ds_wide ds_reshard peak_bytes_by_tag temp $((2 * T * D * 4))

# moe_skip_redundant_cast=false: a (rows,H) copy of the expert intermediate while
# the expert's wo product runs; the largest expert has at least T*K/E rows.
run cast configs/mixtral-tiny.yml $TINY moe_skip_redundant_cast=false
check "moe_skip_redundant_cast=false: losses bit-identical" same_bits base cast
check "moe_skip_redundant_cast=false: a (T*K/E, H) copy in the forward pass" \
    grows base cast forward_peak_bytes_by_tag temp $((T * K / E * H * 4))

# megablox=true: each of the experts' products one grouped call over all their T*K rows. The
# same arithmetic on the same rows (bit-identical, on one device and across expert and tensor
# parallelism); the forward's expert temporaries, the gathered input (rows,D) and the
# activation (rows,H), hold all T*K rows at once, where one expert's call held T (the most an
# expert can get).
run mega configs/mixtral-tiny.yml $TINY megablox=true
check "megablox=true: losses bit-identical" same_bits base mega
check "megablox=true: the forward's expert temporaries for T*K rows, not T" \
    grows base mega forward_peak_bytes_by_tag temp $(((T * K - T) * (D + H) * 4))
run ds_mega configs/deepseek-tiny.yml $TINY megablox=true
check "megablox=true, deepseek: losses bit-identical" same_bits ds ds_mega
run mega_ep configs/mixtral-tiny.yml $TINY per_device_batch_size=1 ici_expert_parallelism=2 megablox=true
check "megablox=true under expert=2: losses of one device" same_bits base mega_ep
run mega_tp configs/mixtral-tiny.yml $TINY per_device_batch_size=1 ici_tensor_parallelism=2 megablox=true
check "megablox=true under tensor=2: losses of one device" same_bits base mega_tp

# skip_noop_grad_cast=false and donate_buffers=false: one gradient-sized and one parameter-sized buffer during the update.
P=$((V * D + L * (2 * D + D * N * Dh + 2 * D * Nkv * Dh + N * Dh * D + D * E + 3 * E * D * H) + D + D * V))
run gcast configs/mixtral-tiny.yml $TINY skip_noop_grad_cast=false
check "skip_noop_grad_cast=false: losses bit-identical" same_bits base gcast
check "skip_noop_grad_cast=false: one gradient copy ($P floats)" grows base gcast peak_bytes_by_tag grads $((P * 4))
run donate configs/mixtral-tiny.yml $TINY donate_buffers=false
check "donate_buffers=false: losses bit-identical" same_bits base donate
check "donate_buffers=false: one parameter copy ($P floats)" grows base donate peak_bytes_by_tag params $((P * 4))
run donate_fsdp configs/mixtral-tiny.yml $TINY per_device_batch_size=1 ici_fsdp_parallelism=2 donate_buffers=false
check "donate_buffers=false under fsdp=2: losses of one device" same_bits base donate_fsdp

# shard_variables_at_init=true: each variable created whole, then copied into its
# shard: the init-time peak grows by the largest variable, an expert kernel (E,D,H).
init_peak() { sed -n 's/^init peak \([0-9]*\) bytes.*/\1/p' "$dir/$1.out"; }
run initc configs/mixtral-tiny.yml $TINY shard_variables_at_init=true
check "shard_variables_at_init=true: losses bit-identical" same_bits base initc
init_grows() { [ -n "$(init_peak base)" ] && [ $(($(init_peak initc) - $(init_peak base))) -ge $((E * D * H * 4)) ]; }
check "shard_variables_at_init=true: init peak $(init_peak base) -> $(init_peak initc), at least +$((E * D * H * 4))" init_grows
run initc_fsdp configs/mixtral-tiny.yml $TINY per_device_batch_size=1 ici_fsdp_parallelism=2 shard_variables_at_init=true
check "shard_variables_at_init=true under fsdp=2: losses of one device" same_bits base initc_fsdp

# implicit_causal_mask=false: a (B,1,S,S) boolean mask read by attention. Long
# sequences and narrow layers, so that attention's buffers dominate the forward pass: the
# forward peak must hold the mask (B*S*S bytes) next to the score rows (B*N*S floats).
MB=1 MS=512 MN=2
MASK="steps=3 per_device_batch_size=$MB max_target_length=$MS base_num_decoder_layers=1 base_emb_dim=16 base_mlp_dim=8 head_dim=8 base_num_query_heads=$MN base_num_kv_heads=1 sample_length=0 eval_steps=1"
run mask_on configs/mixtral-tiny.yml $MASK
run mask_off configs/mixtral-tiny.yml $MASK implicit_causal_mask=false
check "implicit_causal_mask=false: losses bit-identical" same_bits mask_on mask_off
check "implicit_causal_mask=false: the forward peak grows" grows mask_on mask_off forward_peak_bytes_by_tag temp 1
holds_mask() { [ "$(field mask_off forward_peak_bytes_by_tag temp)" -ge $((MB * MS * MS + MB * MN * MS * 4)) ]; }
check "implicit_causal_mask=false: forward peak holds the mask and the score rows" holds_mask
run ds_mask configs/deepseek-tiny.yml $TINY implicit_causal_mask=false
check "implicit_causal_mask=false, deepseek (MLA): losses bit-identical" same_bits ds ds_mask

# eval_per_device_batch_size: training unchanged, the eval peak smaller.
run evalb configs/mixtral-tiny.yml $TINY eval_per_device_batch_size=1
check "eval_per_device_batch_size=1: training losses bit-identical" same_bits base evalb
eval_peak() { sed -n 's/^eval peak \([0-9]*\) bytes.*/\1/p' "$dir/$1.out"; }
smaller_eval() { [ -n "$(eval_peak evalb)" ] && [ "$(eval_peak evalb)" -lt "$(eval_peak base)" ]; }
check "eval_per_device_batch_size=1: eval peak $(eval_peak base) -> $(eval_peak evalb) bytes" smaller_eval

# bf16_storage=kept (docs/bf16-storage.md): in bf16 mode the weights' compute copy
# is stored as 16-bit numbers (model/weights16.h); the products that read a weight run on it
# through the 16-bit kernels (kernels/matmul16.h), their other operand packed; the norms,
# the router's float32 backward and the embedding's gather read it widened or rounded. The
# values are the float32 copy's, so the losses are bit-identical, on the paths that reach
# each reader (dense and per-expert products, the experts' grouped ones, tensor-parallel
# pieces and MLA's norms, FSDP's gathered weights over microbatches, the dense MoE; the
# unrounded float32 gate, the einsum form of the norms' scale, the one-hot embedding;
# SwiGLU's activation and gradients made as 16-bit numbers and read in place by the
# products (model/mlp.h), with the weight gradients' leaves in several
# chunks, some of an expert's leaves without rows, and the cast copies). Where the device
# holds whole units the copy is kept from one update to the next (every case but the FSDP
# one): the params peak is then 6 bytes a weight (the float32 weights and the whole copy)
# where it was 4 and the largest unit's float32 copy; made for each use of a unit
# (bf16_storage=per_unit), that copy's bytes halve: the params peak, the copy of the
# largest unit (a layer), drops by 2 bytes a weight of it. Both counted here from the shapes;
# the planner counts what the run does.
P16_CASES=("mx16 configs/mixtral-tiny.yml"
           "ds16 configs/deepseek-tiny.yml megablox=true ici_tensor_parallelism=2 num_devices=2"
           "mxga16 configs/mixtral-tiny.yml gradient_accumulation_steps=2 ici_fsdp_parallelism=2 num_devices=2"
           "mxdense16 configs/mixtral-tiny.yml sparse_matmul=false capacity_factor=1.0"
           "mxgate16 configs/mixtral-tiny.yml float32_gate_logits=true rmsnorm_fused_scale=false use_iota_embed=true"
           "dsleaf16 configs/deepseek-tiny.yml context_reduce_chunks=2 moe_skip_redundant_cast=false")
for c in "${P16_CASES[@]}"; do
    set -- $c
    name=$1; shift
    run "$name" "$@" $TINY dtype=bfloat16
    run "$name-w16" "$@" $TINY dtype=bfloat16 bf16_storage=kept
    said=$(grep -c "the weights' bf16 copy as 16-bit numbers" "$dir/$name-w16.out")
    quiet=$(grep -c "the weights' bf16 copy as 16-bit numbers" "$dir/$name.out")
    check "bf16_storage=kept, $name: said at start-up ($said line), not without it ($quiet)" \
        test "$said" -eq 1 -a "$quiet" -eq 0
    check "bf16_storage=kept, $name: losses bit-identical ($(bits "$name-w16"))" same_bits "$name" "$name-w16"
done
run mx16-unit configs/mixtral-tiny.yml $TINY dtype=bfloat16 bf16_storage=per_unit
check "bf16_storage=per_unit, mx16: losses bit-identical ($(bits mx16-unit))" same_bits mx16 mx16-unit
check "bf16_storage=per_unit: said at start-up" grep -q "made for each use of a unit" "$dir/mx16-unit.out"
check "bf16_storage=kept with whole units: said at start-up" grep -q "kept from update to update" "$dir/mx16-w16.out"
# Sampling reads the logits: under bf16_storage=kept 16-bit numbers, widened (model_logits_rows),
# else floats; the same text, each device's columns gathered over tensor=2.
sample_of() { sed -n '/^---- sample/,/^----$/p' "$dir/$1.out"; }
run smp16 configs/mixtral-tiny.yml $TINY steps=2 sample_length=16 dtype=bfloat16 ici_tensor_parallelism=2
run smp16-w16 configs/mixtral-tiny.yml $TINY steps=2 sample_length=16 dtype=bfloat16 bf16_storage=kept \
    ici_tensor_parallelism=2
same_sample() { [ -n "$(sample_of smp16)" ] && [ "$(sample_of smp16)" = "$(sample_of smp16-w16)" ]; }
check "bf16_storage=kept: the sample's text as without it ($(sample_of smp16-w16 | sed -n 2p | head -c 40))" same_sample
# A layer's weights: attention's four kernels, two norm scales, the gate, the experts' three.
layer=$((D * N * Dh + 2 * D * Nkv * Dh + N * Dh * D + 2 * D + D * E + 3 * E * D * H))
halved() {
    local a b; a=$(field mx16 peak_bytes_by_tag params); b=$(field mx16-unit peak_bytes_by_tag params)
    echo "       peak_bytes_by_tag.params: $a -> $b (-$((a - b)), a layer's copy: 4 -> 2 bytes x $layer weights)"
    [ $((a - b)) -eq $((2 * layer)) ]
}
check "bf16_storage=per_unit: the params peak drops by half the largest unit's copy" halved
kept6() {   # default: 4 bytes a weight and a layer's float32 copy; kept: 4 + 2 bytes a weight
    local a b w=$((2 * V * D + D + L * layer))   # (the embedding, the head, the final norm, the layers)
    a=$(field mx16 peak_bytes_by_tag params); b=$(field mx16-w16 peak_bytes_by_tag params)
    echo "       peak_bytes_by_tag.params: $a -> $b ($w weights: 4 x $w + 4 x $layer -> 6 x $w)"
    [ "$a" -eq $((4 * w + 4 * layer)) ] && [ "$b" -eq $((6 * w)) ]
}
check "bf16_storage=kept: the params peak is 6 bytes a weight with the copy kept" kept6
peaks16() { grep -o '"device": [0-9]*, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' "$dir/$1.json"; }
run ds16-dry configs/deepseek-tiny.yml megablox=true ici_tensor_parallelism=2 num_devices=2 \
    $TINY dtype=bfloat16 bf16_storage=kept steps=1 dry_run=true
run ds16-one configs/deepseek-tiny.yml megablox=true ici_tensor_parallelism=2 num_devices=2 \
    $TINY dtype=bfloat16 bf16_storage=kept steps=1
plan_same() { [ -n "$(peaks16 ds16-one)" ] && [ "$(peaks16 ds16-dry)" = "$(peaks16 ds16-one)" ]; }
check "bf16_storage=kept: the planner's peaks by tag are the run's, every device" plan_same
expect_error "bf16_storage in float32" \
    "bf16_storage=kept stores bf16 mode's values as 16-bit numbers: it needs dtype=bfloat16" \
    ./train configs/mixtral-tiny.yml steps=1 bf16_storage=kept
expect_error "bf16_storage=2" "bf16_storage must be 'off', 'kept' or 'per_unit', got '2'" \
    ./train configs/mixtral-tiny.yml steps=1 dtype=bfloat16 bf16_storage=2
# The experiments among cuBLAS's ways (gpu/matmul.cu) stop a GPU run whose products are not
# cuBLAS's (the dry run of device=gpu takes the same start-up checks, with no GPU here).
expect_error "MESHMOE_GROUPED without cuBLAS" "MESHMOE_GROUPED chooses between cuBLAS's grouped call" \
    env MESHMOE_GROUPED=kernel ./train configs/mixtral-tiny.yml steps=1 dtype=bfloat16 device=gpu dry_run=true
expect_error "MESHMOE_CUBLAS_BF16 without cublas_bf16" "it needs gpu_matmul=cublas_bf16" \
    env MESHMOE_CUBLAS_BF16=convert ./train configs/mixtral-tiny.yml steps=1 dtype=bfloat16 device=gpu \
    gpu_matmul=cublas dry_run=true
expect_error "MESHMOE_CUBLAS_LT without cuBLAS" "MESHMOE_CUBLAS_LT chooses how cuBLAS's 16-bit products" \
    env MESHMOE_CUBLAS_LT=off ./train configs/mixtral-tiny.yml steps=1 dtype=bfloat16 device=gpu dry_run=true
expect_error "MESHMOE_CUBLAS_LT=maybe" "MESHMOE_CUBLAS_LT is 'on' (the default) or 'off', not 'maybe'" \
    env MESHMOE_CUBLAS_LT=maybe ./train configs/mixtral-tiny.yml steps=1 dtype=bfloat16 device=gpu \
    gpu_matmul=cublas_bf16 dry_run=true

expect_error "a bad switch value" "wants true or false" ./train configs/mixtral-tiny.yml rmsnorm_fused_scale=maybe
expect_error "a negative eval batch" "eval_per_device_batch_size must be >= 0" \
    ./train configs/mixtral-tiny.yml eval_per_device_batch_size=-1
summary
