#!/usr/bin/env bash
# tests/asan_run.sh BINARY: a short training of both presets (both MoE paths, with
# checkpoint save + resume and gradient accumulation, and a checkpoint saved on one
# 4-device mesh and resumed on another; adafactor and muon over tensor and expert pieces; flash and ring attention; bf16_storage=kept) under AddressSanitizer + UBSan;
# then a dry run.
# Any report makes the run exit non-zero.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
BIN=$1
T=$(mktemp -d /tmp/meshmoe-asan.XXXXXX)
trap 'rm -rf "$T"' EXIT
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=23 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
A="per_device_batch_size=2 max_target_length=32 eval_steps=1 sample_length=16 log_period=100"
for preset in mixtral-tiny deepseek-tiny; do
    for sparse in true false; do
        check "asan: $preset sparse_matmul=$sparse, 3 of 4 steps, accumulation 2, checkpoint" \
            $BIN configs/$preset.yml $A steps=4 run_steps=3 sparse_matmul=$sparse gradient_accumulation_steps=2 \
            save_checkpoint=$T/ck.safetensors
        check "asan: $preset resume for the 4th step, the same global batch in one microbatch" \
            $BIN configs/$preset.yml $A steps=4 sparse_matmul=$sparse per_device_batch_size=4 \
            load_checkpoint=$T/ck.safetensors
    done
done
check "asan: deepseek saved on fsdp=2 x tensor=2" $BIN configs/deepseek-tiny.yml $A steps=2 run_steps=1 \
    ici_fsdp_parallelism=2 ici_tensor_parallelism=2 save_checkpoint=$T/mesh.safetensors
check "asan: deepseek resumed on data=2 (ZeRO-1) x expert=2" $BIN configs/deepseek-tiny.yml $A steps=2 \
    ici_data_parallelism=2 shard_optimizer_over_data=true ici_expert_parallelism=2 load_checkpoint=$T/mesh.safetensors
check "asan: adafactor saved on fsdp=2 x tensor=2 (the experts' and the head's moments gathered)" $BIN \
    configs/mixtral-tiny.yml $A steps=2 run_steps=1 opt_type=adafactor ici_fsdp_parallelism=2 ici_tensor_parallelism=2 \
    save_checkpoint=$T/af.safetensors
check "asan: adafactor resumed on data=2 with ZeRO-1" $BIN configs/mixtral-tiny.yml $A steps=2 opt_type=adafactor \
    per_device_batch_size=4 ici_data_parallelism=2 shard_optimizer_over_data=true load_checkpoint=$T/af.safetensors
check "asan: attention=flash (the attention tiles' blocked path)" $BIN configs/mixtral-tiny.yml $A steps=2 \
    attention=flash attn_block_q=5 attn_block_kv=7
check "asan: ring attention over context=2" $BIN configs/deepseek-tiny.yml $A steps=2 ici_context_parallelism=2 \
    context_parallel_strategy=ring
check "asan: muon on fsdp=2 x tensor=2 (matrices gathered and orthogonalized), saved" $BIN configs/deepseek-tiny.yml $A \
    steps=2 run_steps=1 opt_type=muon ici_fsdp_parallelism=2 ici_tensor_parallelism=2 save_checkpoint=$T/mu.safetensors
check "asan: muon resumed on data=2 with ZeRO-1" $BIN configs/deepseek-tiny.yml $A steps=2 opt_type=muon \
    per_device_batch_size=4 ici_data_parallelism=2 shard_optimizer_over_data=true load_checkpoint=$T/mu.safetensors
check "asan: minimal_offloaded on expert=2 (the experts' rows and plan to the host and back)" $BIN \
    configs/deepseek-tiny.yml $A steps=2 remat_policy=minimal_offloaded ici_expert_parallelism=2 dtype=bfloat16
check "asan: save_dot_except_mlpwi on expert=2, bf16 (the experts' outputs kept, the wi products recomputed)" $BIN \
    configs/deepseek-tiny.yml $A steps=2 remat_policy=save_dot_except_mlpwi ici_expert_parallelism=2 dtype=bfloat16
check "asan: custom mlpwo=offload, mlpwi=remat (the experts' outputs to the host and back)" $BIN \
    configs/mixtral-tiny.yml $A steps=2 remat_policy=custom mlpwi=remat mlpwo=offload
check "asan: capacity dropping" $BIN configs/mixtral-tiny.yml $A steps=2 sparse_matmul=false capacity_factor=1.0
check "asan: load-balance and z-loss" $BIN configs/mixtral-tiny.yml $A steps=2 load_balance_loss_weight=0.01 z_loss_multiplier=1e-4
check "asan: pipeline, mixtral 2 stages, 2 repeats, 1f1b, slice, load-balance loss" \
    $BIN configs/mixtral-tiny.yml $A steps=2 ici_pipeline_parallelism=2 num_pipeline_microbatches=4 \
    pipeline_schedule=1f1b pipeline_shift_impl=slice load_balance_loss_weight=0.01
check "asan: pipeline, deepseek 3 stages, gpipe" \
    $BIN configs/deepseek-tiny.yml $A steps=2 ici_pipeline_parallelism=3 num_pipeline_microbatches=6
check "asan: pipeline under minimal_offloaded, mixtral 2 stages, 1f1b (each job's layers kept, some on the host)" \
    $BIN configs/mixtral-tiny.yml $A steps=2 ici_pipeline_parallelism=2 num_pipeline_microbatches=4 \
    pipeline_schedule=1f1b remat_policy=minimal_offloaded
check "asan: rope_type=yarn, deepseek's interleaved pairs over context=2 (MLA's q from inside a row)" \
    $BIN configs/deepseek-tiny.yml $A steps=2 rope_type=yarn original_max_position_embeddings=1024 \
    max_position_embeddings=163840 ici_context_parallelism=2
check "asan: pipeline under remat_policy=minimal, deepseek 3 stages, bf16" \
    $BIN configs/deepseek-tiny.yml $A steps=2 ici_pipeline_parallelism=3 remat_policy=minimal dtype=bfloat16
# (the 16-bit weights' copy, SwiGLU's arrays, the logits, the saved norm outputs read in place)
check "asan: bf16_storage=kept, mixtral over tensor=2, z-loss, sampling, every tensor kept" \
    $BIN configs/mixtral-tiny.yml $A steps=2 dtype=bfloat16 bf16_storage=kept ici_tensor_parallelism=2 \
    z_loss_multiplier=1e-4 remat_policy=none
check "asan: bf16_storage=kept, deepseek's grouped experts over 3 pipeline stages" \
    $BIN configs/deepseek-tiny.yml $A steps=2 dtype=bfloat16 bf16_storage=kept megablox=true ici_pipeline_parallelism=3 \
    num_pipeline_microbatches=3
# 4096 sequences of 8 tokens: the per-sequence sums (aux loss, 4 layers x 4096 doubles) are
# 128 KiB, large enough that the dry run gives them overlapping addresses (base/memory.c, the
# void), which its collectives and the pipeline must never memcpy between.
check "asan: dry run by class, pipeline, per-sequence sums in the dry run's shared address space" \
    $BIN configs/mixtral-tiny.yml dry_run=true ici_pipeline_parallelism=2 num_pipeline_microbatches=2 \
    per_device_batch_size=2048 max_target_length=8
summary
