#!/usr/bin/env bash
# tests/plan_classes.sh: the dry run plans one device per class of devices whose plans are
# equal (base/mesh.c:class_rep) and gives every member of a class its representative's
# figures. Each mesh below is planned both ways: by class, and with dry_run_all_devices=true,
# where every device walks the step with real collectives. Everything the two runs write
# must be the same bytes: the printed plan (with print_sharding's tables), every device's
# figures in the metrics file (timings masked) and the memory trace (every allocation, free
# and phase of every device, in order). The number of devices that walked the step must be
# the number of classes the definition gives: the product of the stage, expert and context
# sizes, times the fsdp size under opt_type=adafactor or muon (and the data size with ZeRO-1).
# Without that count, a shortcut that
# planned every device would pass the comparisons untested.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# The classes the definition gives for these ici_* arguments (none of them -1).
expected_classes() {
    local n=1 fsdp=1 data=1 ada=0 zero1=0 a
    for a in "$@"; do
        case $a in
            ici_pipeline_parallelism=*|ici_expert_parallelism=*|ici_context_parallelism=*) n=$((n * ${a#*=})) ;;
            ici_fsdp_parallelism=*) fsdp=${a#*=} ;;
            ici_data_parallelism=*) data=${a#*=} ;;
            shard_optimizer_over_data=true) zero1=1 ;;
            opt_type=adafactor | opt_type=muon) ada=1 ;;
        esac
    done
    [ "$ada" = 1 ] && n=$((n * fsdp))
    [ "$ada" = 1 ] && [ "$zero1" = 1 ] && n=$((n * data))
    echo "$n"
}
figures() { sed -E 's/"ms": [^,]*, "tokens_per_s": [^,]*, "gflops": [^,]*,//' "$1"; }   # no timings

plan() {   # plan NAME ARGS...: a dry run into $T/NAME.{out,err,json,csv}; the exit status on the last line
    local name=$1; shift
    ./train "$@" dry_run=true print_sharding=true metrics_file="$T/$name.json" memory_trace="$T/$name.csv" \
        > "$T/$name.out" 2> "$T/$name.err"
    echo "exit $?" >> "$T/$name.out"
    sed -i "s|$T/$name.csv|TRACE|g" "$T/$name.out"
}

classes_equal_all_devices() {   # classes_equal_all_devices ARGS...
    plan cls "$@"
    plan all "$@" dry_run_all_devices=true
    local walked ndev want
    walked=$(sed -n 's/^dry run: \([0-9]*\) class\(es\)\? of devices (\([0-9]*\) devices\?).*/\1 \3/p' "$T/cls.err")
    ndev=${walked#* }; walked=${walked% *}
    want=$(expected_classes "$@")
    local r=0
    [ -n "$walked" ] && [ "$walked" = "$want" ] || { echo "    walked '$walked' devices; the definition gives $want classes"; r=1; }
    grep -q '^exit 0$' "$T/cls.out" || { tail -3 "$T/cls.err"; r=1; }
    cmp -s "$T/cls.out" "$T/all.out" || { echo "    the printed plans differ:"; diff "$T/cls.out" "$T/all.out" | head -6; r=1; }
    [ "$(grep -o '"device": [0-9]*, "peak_bytes"' "$T/cls.json" | wc -l)" = "$ndev" ] &&
        cmp -s <(figures "$T/cls.json") <(figures "$T/all.json") || { echo "    the metrics differ"; r=1; }
    [ -s "$T/cls.csv" ] && cmp -s "$T/cls.csv" "$T/all.csv" ||
        { echo "    the memory traces differ:"; diff "$T/cls.csv" "$T/all.csv" | head -4; r=1; }
    [ "$r" = 0 ] && echo "    $walked of $ndev devices walked; $(grep -c '^device [0-9]*: peak' "$T/cls.out") distinct plan(s), $(wc -l < "$T/cls.csv") trace rows"
    return "$r"
}

# The meshes, each with what it puts to the test. Folded axes: data, fsdp, tensor; kept
# apart: stage, expert, context (and fsdp under adafactor).
while read -r preset args; do
    [ -z "$preset" ] || [ "${preset:0:1}" = "#" ] && continue
    # shellcheck disable=SC2086
    check "one plan per class equals every device planned: $preset $args" \
        classes_equal_all_devices configs/$preset.yml $args
done <<'MESHES'
# data, fsdp and tensor folded into one class; ZeRO-1's pieces
deepseek-tiny ici_data_parallelism=2 ici_fsdp_parallelism=2 ici_tensor_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=1
# fsdp=3: units that do not split evenly, padded; ZeRO-1 over data
mixtral-tiny  ici_fsdp_parallelism=3 ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=1
# fsdp=3 with tensor and expert, bf16, gradient accumulation
deepseek-tiny ici_fsdp_parallelism=3 ici_expert_parallelism=2 ici_tensor_parallelism=2 dtype=bfloat16 gradient_accumulation_steps=2 per_device_batch_size=2
# 2 tokens x top-2 on 8 experts: some experts get no rows, so the expert ranks' plans differ
deepseek-tiny ici_expert_parallelism=4 ici_fsdp_parallelism=2 max_target_length=2 context_reduce_chunks=1 per_device_batch_size=1
# unrolled layers (scan_layers=false) with experts
deepseek-tiny ici_expert_parallelism=2 ici_fsdp_parallelism=2 scan_layers=false remat_policy=none per_device_batch_size=1
# pipeline stages: embedding on the first, head on the last
mixtral-tiny  ici_pipeline_parallelism=4 ici_fsdp_parallelism=2 num_pipeline_microbatches=4 per_device_batch_size=1
# deepseek's dense layers on stage 0, 1f1b, experts
deepseek-tiny ici_pipeline_parallelism=3 ici_expert_parallelism=2 ici_data_parallelism=2 num_pipeline_microbatches=3 pipeline_schedule=1f1b per_device_batch_size=1
# a circular pipeline (2 repeats), fsdp=3, the weights gathered once
mixtral-tiny  ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=1 ici_fsdp_parallelism=3 num_pipeline_microbatches=2 pipeline_fsdp_ag_once=true per_device_batch_size=2
# context (all-gather): score rows and a materialised mask that grow with the position
deepseek-tiny ici_context_parallelism=4 ici_data_parallelism=2 remat_policy=save_qkv_proj implicit_causal_mask=false per_device_batch_size=1
# context (ring) with experts and tensor
deepseek-tiny ici_context_parallelism=2 context_parallel_strategy=ring ici_expert_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=1
# the fsdp prefetch helpers (overlap_collectives) and q/k/v offloaded to the host
mixtral-tiny  ici_fsdp_parallelism=4 ici_data_parallelism=2 overlap_collectives=true remat_policy=qkv_proj_offloaded per_device_batch_size=1
# parameters and optimizer state in host memory, activations offloaded
mixtral-tiny  ici_fsdp_parallelism=2 ici_tensor_parallelism=2 parameter_memory_host_offload=true optimizer_memory_host_offload=true remat_policy=minimal_offloaded per_device_batch_size=1
# adafactor: the state a device keeps depends on its fsdp rank
mixtral-tiny  ici_fsdp_parallelism=4 ici_data_parallelism=2 opt_type=adafactor per_device_batch_size=1
# adafactor with stages, fsdp=3 and data
mixtral-tiny  opt_type=adafactor ici_fsdp_parallelism=3 ici_data_parallelism=2 ici_pipeline_parallelism=2 num_pipeline_microbatches=2 per_device_batch_size=1
# adafactor on tensor and expert pieces with fsdp: the rows and columns gathered
deepseek-tiny opt_type=adafactor ici_tensor_parallelism=2 ici_expert_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=1
# muon: its AdamW half's nu, like adafactor's state, depends on the fsdp rank
mixtral-tiny  opt_type=muon ici_fsdp_parallelism=4 ici_tensor_parallelism=2 per_device_batch_size=1
# adafactor with ZeRO-1: the data rank's piece of each shard decides its state too
mixtral-tiny  opt_type=adafactor ici_data_parallelism=2 ici_fsdp_parallelism=2 ici_expert_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=1
# muon with ZeRO-1: the data rank's piece of each shard decides its nu too
deepseek-tiny opt_type=muon ici_data_parallelism=2 ici_fsdp_parallelism=2 ici_tensor_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=1
MESHES
summary
