#!/usr/bin/env bash
# tests/planner.sh: the dry-run planner (dry_run=true) against measurement, and the memory
# trace and its SVG. For each case, a dry run and a real run of one step write metrics
# files; every device's peak bytes, peak bytes by tag and live bytes by tag after the step
# must be equal, byte for byte (the planner walks the allocations a step makes): the tiny presets on several meshes
# and switches, and the -small presets (short sequences, to stay quick). Then memory_trace: the trace's
# largest total equals the measured peak of each device, and `./train plot` writes one
# well-formed SVG per device.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# Each device's peaks and live bytes, one line per device.
peaks() { grep -o '"device": [0-9]*, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}, "live_bytes_by_tag": {[^}]*}' "$1"; }

plan_equals_measured() {   # plan_equals_measured ARGS...
    ./train "$@" steps=1 dry_run=true metrics_file="$T/dry.json" > "$T/dry.out" 2>&1 || { cat "$T/dry.out"; return 1; }
    ./train "$@" steps=1 eval_steps=1 sample_length=0 metrics_file="$T/real.json" > /dev/null 2>&1 || return 1
    local a b
    a=$(peaks "$T/dry.json"); b=$(peaks "$T/real.json")
    [ -n "$a" ] && [ "$a" = "$b" ] && grep -q '^plan: ' "$T/dry.out" || { echo "plan:     $a"; echo "measured: $b"; return 1; }
    echo "    $(echo "$b" | head -1 | cut -c1-150)..."
}

for args in "configs/mixtral-tiny.yml" \
            "configs/deepseek-tiny.yml" \
            "configs/mixtral-small.yml per_device_batch_size=1 max_target_length=64" \
            "configs/deepseek-small.yml per_device_batch_size=1 max_target_length=64" \
            "configs/mixtral-tiny.yml ici_fsdp_parallelism=2 per_device_batch_size=4" \
            "configs/mixtral-tiny.yml ici_expert_parallelism=2 per_device_batch_size=4" \
            "configs/deepseek-tiny.yml ici_expert_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2" \
            "configs/deepseek-tiny.yml ici_tensor_parallelism=2 per_device_batch_size=4" \
            "configs/mixtral-tiny.yml dtype=bfloat16 gradient_accumulation_steps=2 per_device_batch_size=4" \
            "configs/mixtral-tiny.yml sparse_matmul=false capacity_factor=1.0" \
            "configs/deepseek-tiny.yml rmsnorm_fused_scale=false implicit_causal_mask=false moe_skip_redundant_cast=false moe_reshard_io=true skip_noop_grad_cast=false donate_buffers=false" \
            "configs/deepseek-tiny.yml remat_policy=minimal_offloaded rmsnorm_fused_scale=false" \
            "configs/deepseek-tiny.yml remat_policy=minimal_offloaded ici_expert_parallelism=2 per_device_batch_size=4 dtype=bfloat16" \
            "configs/mixtral-tiny.yml remat_policy=full remat_nested_block=2 optimizer_memory_host_offload=true ema_decay=0.99 ema_host_offload=true" \
            "configs/mixtral-tiny.yml remat_policy=none parameter_memory_host_offload=true opt_type=sgd" \
            "configs/deepseek-tiny.yml scan_layers=false ici_expert_parallelism=2 per_device_batch_size=4" \
            "configs/deepseek-tiny.yml megablox=true dtype=bfloat16" \
            "configs/mixtral-tiny.yml dtype=bfloat16 bf16_storage=kept ici_expert_parallelism=2 per_device_batch_size=4" \
            "configs/deepseek-tiny.yml dtype=bfloat16 bf16_storage=per_unit ici_expert_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2" \
            "configs/mixtral-tiny.yml megablox=true ici_expert_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2" \
            "configs/mixtral-tiny.yml ici_fsdp_parallelism=2 per_device_batch_size=4 overlap_collectives=true" \
            "configs/deepseek-tiny.yml ici_tensor_parallelism=2 per_device_batch_size=4 skip_trivial_specs=false remove_size_one_mesh_axis=false shard_mode=explicit" \
            "configs/mixtral-tiny.yml num_vocab_tiling=4 use_iota_embed=true ici_fsdp_parallelism=2 per_device_batch_size=4 context_reduce_chunks=2" \
            "configs/deepseek-tiny.yml attention=flash attn_block_q=24 attn_block_kv=40" \
            "configs/mixtral-tiny.yml attention=flash attn_block_q=16 attn_block_kv=16 implicit_causal_mask=false dtype=bfloat16" \
            "configs/deepseek-tiny.yml ici_context_parallelism=4 context_parallel_strategy=ring per_device_batch_size=2 base_num_decoder_layers=2" \
            "configs/mixtral-tiny.yml opt_type=adafactor ici_fsdp_parallelism=2 per_device_batch_size=4" \
            "configs/deepseek-tiny.yml opt_type=adafactor ici_data_parallelism=2 per_device_batch_size=4 optimizer_memory_host_offload=true" \
            "configs/mixtral-tiny.yml opt_type=adafactor ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2" \
            "configs/deepseek-tiny.yml opt_type=muon ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2" \
            "configs/mixtral-tiny.yml opt_type=muon ici_expert_parallelism=2 optimizer_memory_host_offload=true per_device_batch_size=2" \
            "configs/mixtral-tiny.yml opt_type=muon ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2" \
            "configs/deepseek-tiny.yml opt_type=adafactor ici_data_parallelism=2 ici_tensor_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2" \
            "configs/mixtral-tiny.yml remat_policy=save_qkv_proj ici_context_parallelism=2 dtype=bfloat16" \
            "configs/mixtral-tiny.yml remat_policy=qkv_proj_offloaded ici_fsdp_parallelism=2 per_device_batch_size=4" \
            "configs/deepseek-tiny.yml remat_policy=save_qkv_proj rmsnorm_fused_scale=false ici_tensor_parallelism=2 per_device_batch_size=4" \
            "configs/deepseek-tiny.yml remat_policy=qkv_proj_offloaded ici_context_parallelism=2 context_parallel_strategy=ring dtype=bfloat16"; do
    # shellcheck disable=SC2086
    check "dry-run plan equals the measured step, byte for byte: $args" plan_equals_measured $args
done

# The plan says whether it fits, with the bytes.
out=$(./train configs/mixtral-tiny.yml dry_run=true hbm_capacity=40MiB 2>&1); rc=$?
check "a plan over hbm_capacity says by how many bytes, exit status 2 ($rc)" \
    bash -c '[ "$1" -eq 2 ] && grep -q "^plan: DOES NOT FIT: .* by [0-9]* bytes" <<< "$2"' _ "$rc" "$out"
out=$(./train configs/mixtral-tiny.yml dry_run=true hbm_capacity=1GiB 2>&1); rc=$?
check "a plan under hbm_capacity says it fits, exit status 0 ($rc)" bash -c '[ "$1" -eq 0 ] && grep -q "^plan: FITS" <<< "$2"' _ "$rc" "$out"

# memory_trace and the SVG, mixtral-tiny on fsdp=2.
./train configs/mixtral-tiny.yml ici_fsdp_parallelism=2 per_device_batch_size=4 steps=1 eval_steps=1 sample_length=0 \
    memory_trace="$T/trace.csv" metrics_file="$T/m.json" > /dev/null 2>&1
trace_max_is_peak() {
    for d in 0 1; do
        local tmax peak
        tmax=$(awk -F, -v d=$d 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "total") t = i }
                                   NR > 1 && $1 == d && $t + 0 > m { m = $t + 0 } END { print m }' "$T/trace.csv")
        peak=$(grep -o "\"device\": $d, \"peak_bytes\": [0-9]*" "$T/m.json" | grep -o '[0-9]*$')
        echo "    device $d: trace maximum $tmax, measured peak $peak"
        [ -n "$peak" ] && [ "$tmax" = "$peak" ] || return 1
    done
}
check "the trace's largest total equals each device's measured peak" trace_max_is_peak
svg_ok() {
    ./train plot "$T/trace.csv" "$T/plots" > /dev/null || return 1
    for d in 0 1; do
        local f="$T/plots/memory_device_$d.svg"
        if command -v xmllint > /dev/null; then xmllint --noout "$f" || return 1
        elif command -v python3 > /dev/null; then python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$f" || return 1
        else grep -q '^<svg ' "$f" && tail -1 "$f" | grep -q '^</svg>$' || return 1; fi
        grep -q '>peak ' "$f" && grep -q '>backward<' "$f" || return 1
    done
}
check "./train plot writes a well-formed SVG per device, with the peak and the passes marked" svg_ok
expect_error "plot of a file that is not a trace" "not a memory_trace file" ./train plot configs/mixtral-tiny.yml "$T/p2"
summary
