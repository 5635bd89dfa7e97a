#!/usr/bin/env bash
# tests/tsan_run.sh BINARY: 2 training steps on 8 devices under ThreadSanitizer: Mixtral on
# fsdp=2 tensor=2 expert=2 (the experts' all-to-all) for 1 step, saving a checkpoint (every
# device copies its slices into the host image of the file), then resuming it on data=2
# fsdp=4 for the second (every device reads its slices); DeepSeek on data=2 fsdp=2 tensor=2
# with ZeRO-1; pipeline x context x fsdp, sampling after its steps (the stages and context parts
# hand the logits of the last position to every device). The devices are threads that share the data, the config and the collectives'
# slots: any data race between them is reported, and a report stops the run with exit
# code 66 (a failed check). Then two dry runs planned by class.
#
# num_threads=1: OpenMP's runtime (libgomp) is not built with TSan, so TSan cannot see the
# synchronisation inside its thread pool and reports the workers of any `omp parallel` loop
# as racing with each other (seen: attn_core_forward's rows against a later mem_free).
# With one OpenMP thread per device, every thread is a device thread (a pthread, whose
# barriers TSan sees), so what is checked is the mesh itself: collectives, allocators,
# shared data. The OpenMP loops write disjoint rows and are left to their own tests.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
BIN=$1
T=$(mktemp -d /tmp/meshmoe-tsan.XXXXXX)
trap 'rm -rf "$T"' EXIT
export TSAN_OPTIONS="halt_on_error=1 exitcode=66"
A="per_device_batch_size=1 max_target_length=32 steps=2 eval_steps=1 eval_interval=0 sample_length=0
   log_period=1 num_threads=1"
while read -r preset mesh; do
    t0=$(date +%s)
    out=$($BIN configs/$preset.yml $A $mesh 2>&1); rc=$?   # (the mesh's keys last: they may set A's)
    printf '%s\n' "$out" | grep -E '^(mesh:|step) ' | sed 's/^/    /'
    printf '%s\n' "$out" | grep -A20 -m1 'WARNING: ThreadSanitizer' | sed 's/^/    /'
    check "tsan: $preset, 8 devices, $(sed 's/ici_//g; s/_parallelism//g; s#=/[^ ]*/#=#g' <<<"$mesh"), no report (exit $rc, $(($(date +%s) - t0)) s)" \
        [ "$rc" -eq 0 ]
done <<RUNS
mixtral-tiny  ici_fsdp_parallelism=2 ici_tensor_parallelism=2 ici_expert_parallelism=2 run_steps=1 save_checkpoint=$T/ck.st
deepseek-tiny ici_data_parallelism=2 ici_fsdp_parallelism=2 ici_tensor_parallelism=2 shard_optimizer_over_data=true
mixtral-tiny  ici_data_parallelism=2 ici_fsdp_parallelism=4 load_checkpoint=$T/ck.st
mixtral-tiny  ici_fsdp_parallelism=2 ici_tensor_parallelism=2 ici_expert_parallelism=2 opt_type=adafactor
deepseek-tiny ici_fsdp_parallelism=2 ici_tensor_parallelism=2 ici_expert_parallelism=2 opt_type=muon
mixtral-tiny  ici_pipeline_parallelism=2 ici_context_parallelism=2 ici_fsdp_parallelism=2 remat_policy=minimal_offloaded sample_length=6
RUNS
# load_hf of a model in shards (the first run's checkpoint exported, then split in two): every
# device reads the index and the shards' headers, and takes its part of each tensor.
if $BIN export-hf $T/ck.st $T/hf > /dev/null 2>&1 && python3 tests/st_tool.py shard $T/hf 2; then
    out=$($BIN configs/mixtral-tiny.yml ici_fsdp_parallelism=2 ici_tensor_parallelism=2 ici_expert_parallelism=2 \
          load_hf=$T/hf $A 2>&1); rc=$?
    printf '%s\n' "$out" | grep -A20 -m1 'WARNING: ThreadSanitizer' | sed 's/^/    /'
    loaded=$(printf '%s\n' "$out" | grep -c '^loaded the Hugging Face model')
    check "tsan: mixtral-tiny, 8 devices, load_hf of a model in 2 shards, no report (exit $rc, loaded: $loaded)" \
        [ "$rc" -eq 0 -a "$loaded" -eq 1 ]
else
    fail "tsan: the checkpoint could not be exported and split for load_hf"
fi
# The dry run's representatives (base/mesh.h:mesh_run_classes): one device per class walks
# the step alone, as many at a time as there are cores, their collectives waiting for
# nobody while they write their slots of groups they share (stages, experts, the fsdp
# prefetch helpers).
while read -r preset mesh; do
    out=$($BIN configs/$preset.yml $mesh dry_run=true per_device_batch_size=1 num_threads=1 2>&1); rc=$?
    printf '%s\n' "$out" | grep -E '^dry run: [0-9]+ classes' | sed 's/^/    /'
    printf '%s\n' "$out" | grep -A20 -m1 'WARNING: ThreadSanitizer' | sed 's/^/    /'
    check "tsan: dry run by class, $preset, $(sed 's/ici_//g; s/_parallelism//g' <<<"$mesh"), no report (exit $rc)" [ "$rc" -eq 0 ]
done <<RUNS
deepseek-tiny ici_pipeline_parallelism=3 ici_expert_parallelism=2 ici_data_parallelism=2 num_pipeline_microbatches=3
mixtral-tiny  ici_fsdp_parallelism=4 ici_context_parallelism=2 overlap_collectives=true
mixtral-tiny  ici_pipeline_parallelism=2 ici_context_parallelism=2 ici_expert_parallelism=2
RUNS
summary
