#!/usr/bin/env bash
# tests/pipeline.sh: pipeline parallelism over 'stage' (pipeline/) must not change the math:
# 5 training steps (MESH_STEPS) on pipelined meshes give every step's loss with the same bits (float32,
# hex) as one device with the same global batch; across stage counts, microbatch counts
# (M = P and 2P), repeats (R = 1 and 2), both rotations (ppermute, slice), both schedules
# (gpipe, 1f1b), both remat save-lists, and stage=2 combined with fsdp=2 (and ag_once), with
# expert=2, tensor=2, data=2 with ZeRO-1, and gradient accumulation; in bf16 mode too; and
# remat policies other than full inside the pipeline, with their saved bytes; and context
# parallelism inside the pipeline (against one device with the same context chunks); the
# evaluation's loss, also with eval_per_device_batch_size; the sample's text, on context
# meshes too.
# Then the printed schedule, each stage's share of the weights, and the configurations
# the pipeline refuses, each with one clear message.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=train_with_args   # $TRAIN (./train) with $TRAIN_ARGS (tests/lib.sh)
T=$(mktemp -d /tmp/meshmoe-pp.XXXXXX)
trap 'rm -rf "$T"' EXIT
STEPS=${MESH_STEPS:-5}   # steps per run (tests/strict.sh runs fewer: a host access shows in any step)
FAST="steps=$STEPS sample_length=0 eval_steps=1 eval_interval=0 max_target_length=32 log_period=100"

run_losses() {   # run_losses NAME ARGS...: prints the loss bits of every step
    local name=$1; shift
    rm -f $T/$name.jsonl   # (an earlier run's file is not this run's)
    if ! $TRAIN "$@" $FAST metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        echo "run failed: $(tail -1 $T/$name.out)"; return 1
    fi
    grep -o '"loss_bits": "[^"]*"' $T/$name.jsonl | cut -d'"' -f4 | tr '\n' ' '
}

# same_losses GOT BASE: both runs trained and printed the same loss bits (two runs that failed
# alike print the same "run failed" line, and two without loss_bits print nothing).
same_losses() { [ -n "$1" ] && [ "${1#run failed}" = "$1" ] && [ "$1" = "$2" ]; }

compare() {   # compare LABEL BASE_LOSSES ARGS... (read from stdin: NAME ARGS per line)
    local label=$1 base=$2; shift 2
    while read -r name args; do
        [ -z "$name" ] && continue
        got=$(run_losses x "$@" $args)
        printf '  %-44s %s\n' "$name" "$got"
        check "$label $name: $STEPS losses bit-identical to 1 device" same_losses "$got" "$base"
    done
}

# Mixtral: 4 pipelined layers. Global batch 8 sequences everywhere.
C=configs/mixtral-tiny.yml
echo "== mixtral-tiny (4 layers)"
base=$(run_losses mixtral $C per_device_batch_size=8)
echo "  1 device                                     $base"
compare mixtral-tiny "$base" $C <<'RUNS'
P=2,M=2,R=1,gpipe,ppermute                   ici_pipeline_parallelism=2 per_device_batch_size=4 num_pipeline_repeats=1
P=2,M=4,R=2,gpipe,slice,no-dli               ici_pipeline_parallelism=2 per_device_batch_size=4 num_pipeline_microbatches=4 pipeline_shift_impl=slice pipeline_save_decoder_layer_input=false
P=2,M=2,R=2,1f1b,ppermute                    ici_pipeline_parallelism=2 per_device_batch_size=4 pipeline_schedule=1f1b
P=2,M=4,R=1,1f1b,slice,no-dli                ici_pipeline_parallelism=2 per_device_batch_size=4 num_pipeline_microbatches=4 num_layers_per_pipeline_stage=2 pipeline_schedule=1f1b pipeline_shift_impl=slice pipeline_save_decoder_layer_input=false
P=4,M=4,R=1,1f1b,slice                       ici_pipeline_parallelism=4 per_device_batch_size=2 pipeline_schedule=1f1b pipeline_shift_impl=slice
P=4,M=8,R=1,gpipe,ppermute                   ici_pipeline_parallelism=4 per_device_batch_size=2 num_pipeline_microbatches=8
P=2,M=2,R=1,accumulation=2                   ici_pipeline_parallelism=2 per_device_batch_size=2 gradient_accumulation_steps=2 num_pipeline_repeats=1
P=2,fsdp=2,M=2,R=2,gpipe,ag_once             ici_pipeline_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 pipeline_fsdp_ag_once=true
P=2,fsdp=2,M=4,R=1,1f1b,slice                ici_pipeline_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4 num_pipeline_repeats=1 pipeline_schedule=1f1b pipeline_shift_impl=slice
P=2,expert=2,M=2,R=2,gpipe                   ici_pipeline_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2
P=2,expert=2,M=4,R=1,1f1b,slice              ici_pipeline_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4 num_pipeline_repeats=1 pipeline_schedule=1f1b pipeline_shift_impl=slice
P=2,tensor=2,M=4,R=2,gpipe                   ici_pipeline_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4
P=2,data=2,zero1,M=2,R=2,1f1b                ici_pipeline_parallelism=2 ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2 pipeline_schedule=1f1b
RUNS

# DeepSeek: the dense first layer runs on stage 0 before the pipeline, the 3 MoE layers
# are pipelined: 3 stages (2 and 4 do not divide 3 layers). With 5 layers (4 MoE) also
# 2 and 4 stages and 2 repeats.
C=configs/deepseek-tiny.yml
echo "== deepseek-tiny (1 dense + 3 MoE layers): 3 stages"
base=$(run_losses base $C per_device_batch_size=6)
echo "  1 device                                     $base"
compare deepseek-tiny "$base" $C <<'RUNS'
P=3,M=3,R=1,gpipe,ppermute                   ici_pipeline_parallelism=3 per_device_batch_size=2
P=3,M=6,R=1,1f1b,slice                       ici_pipeline_parallelism=3 per_device_batch_size=2 num_pipeline_microbatches=6 pipeline_schedule=1f1b pipeline_shift_impl=slice
RUNS
echo "== deepseek-tiny with 5 layers (1 dense + 4 MoE)"
base=$(run_losses base $C base_num_decoder_layers=5 per_device_batch_size=8)
echo "  1 device                                     $base"
compare deepseek-5 "$base" $C base_num_decoder_layers=5 <<'RUNS'
P=2,M=2,R=2,gpipe,ppermute                   ici_pipeline_parallelism=2 per_device_batch_size=4
P=2,M=4,R=1,1f1b,slice,no-dli                ici_pipeline_parallelism=2 per_device_batch_size=4 num_pipeline_microbatches=4 num_pipeline_repeats=1 pipeline_schedule=1f1b pipeline_shift_impl=slice pipeline_save_decoder_layer_input=false
P=4,M=8,R=1,gpipe,slice                      ici_pipeline_parallelism=4 per_device_batch_size=2 num_pipeline_microbatches=8 pipeline_shift_impl=slice
P=2,fsdp=2,M=2,R=1,1f1b                      ici_pipeline_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 num_pipeline_repeats=1 pipeline_schedule=1f1b
P=2,expert=2,M=4,R=2,gpipe,slice             ici_pipeline_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4 pipeline_shift_impl=slice
RUNS

# bf16 mode: the saved iteration_input and decoder_layer_input are 16-bit like the other
# saved activations; the numbers are still those of one device.
C=configs/mixtral-tiny.yml
echo "== mixtral-tiny, dtype=bfloat16"
base=$(run_losses base $C dtype=bfloat16 per_device_batch_size=8)
echo "  1 device                                     $base"
compare mixtral-bf16 "$base" $C dtype=bfloat16 <<'RUNS'
P=2,M=4,R=2,gpipe,ppermute                   ici_pipeline_parallelism=2 per_device_batch_size=4 num_pipeline_microbatches=4
P=2,fsdp=2,M=2,R=1,1f1b,slice,no-dli,ag_once ici_pipeline_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 num_pipeline_repeats=1 pipeline_schedule=1f1b pipeline_shift_impl=slice pipeline_save_decoder_layer_input=false pipeline_fsdp_ag_once=true
RUNS

# remat_policy inside the pipeline: each job's layers keep what the policy keeps (its
# offloaded tensors on the host) until the job's backward, which recomputes the rest layer
# by layer: the same numbers, and the saved activations ordered as the policies save.
C=configs/mixtral-tiny.yml
echo "== mixtral-tiny: remat policies inside the pipeline"
base=$(run_losses base $C per_device_batch_size=8)
echo "  1 device                                     $base"
compare mixtral-remat "$base" $C ici_pipeline_parallelism=2 per_device_batch_size=4 <<'RUNS'
none,M=4,R=2,gpipe                           remat_policy=none num_pipeline_microbatches=4
minimal,M=2,R=2,1f1b,slice                   remat_policy=minimal pipeline_schedule=1f1b pipeline_shift_impl=slice
save_qkv_proj,M=4,R=1,1f1b                   remat_policy=save_qkv_proj num_pipeline_microbatches=4 num_layers_per_pipeline_stage=2 num_pipeline_repeats=1 pipeline_schedule=1f1b
save_out_proj,M=2,R=2,gpipe                  remat_policy=save_out_proj
minimal_offloaded,M=4,R=2,gpipe              remat_policy=minimal_offloaded num_pipeline_microbatches=4
custom,x+ffn-offloaded,M=2,R=2,1f1b         remat_policy=custom decoder_layer_input=offload mlpwi=offload mlpwo=offload out_proj=device pipeline_schedule=1f1b
none,fsdp=2,ag_once,M=2,R=2,gpipe            remat_policy=none ici_fsdp_parallelism=2 per_device_batch_size=2 pipeline_fsdp_ag_once=true
minimal,expert=2,M=4,R=2,1f1b                remat_policy=minimal ici_expert_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4 pipeline_schedule=1f1b
qkv_proj_offloaded,tensor=2,M=2,R=2,gpipe    remat_policy=qkv_proj_offloaded ici_tensor_parallelism=2 per_device_batch_size=2
save_dot_except_mlpwi,M=4,R=2,1f1b           remat_policy=save_dot_except_mlpwi num_pipeline_microbatches=4 pipeline_schedule=1f1b
custom,mlpwo-offloaded,expert=2,M=2,R=2      remat_policy=custom mlpwi=remat mlpwo=offload ici_expert_parallelism=2 per_device_batch_size=2
RUNS
C=configs/deepseek-tiny.yml
base=$(run_losses base $C per_device_batch_size=6)
echo "  deepseek-tiny, 1 device                      $base"
compare deepseek-remat "$base" $C ici_pipeline_parallelism=3 per_device_batch_size=2 <<'RUNS'
minimal,P=3,M=3,R=1,gpipe                    remat_policy=minimal
save_dot_except_mlpwi,P=3,M=3,R=1,1f1b       remat_policy=save_dot_except_mlpwi pipeline_schedule=1f1b
none,P=3,M=6,R=1,1f1b                        remat_policy=none num_pipeline_microbatches=6 pipeline_schedule=1f1b
RUNS
# Device 0's activations peak in the first step (the stage with the embedding).
acts_of() { sed -n 1p "$1" | grep -o '"device": 0, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' |
            grep -o '"activations": [0-9]*' | grep -o '[0-9]*$'; }
host_of() { grep -o 'device 0 peak.*host peak [0-9.]* [KMG]iB' "$1" | grep -o 'host peak.*'; }
C=configs/mixtral-tiny.yml
for pol in full none minimal save_qkv_proj minimal_offloaded; do
    run_losses pol_$pol $C ici_pipeline_parallelism=2 per_device_batch_size=4 num_pipeline_microbatches=4 \
        remat_policy=$pol > /dev/null
done
a_full=$(acts_of $T/pol_full.jsonl); a_none=$(acts_of $T/pol_none.jsonl); a_min=$(acts_of $T/pol_minimal.jsonl)
a_qkv=$(acts_of $T/pol_save_qkv_proj.jsonl); a_off=$(acts_of $T/pol_minimal_offloaded.jsonl)
echo "  stage 0's activations peak (bytes): full $a_full, save_qkv_proj $a_qkv, minimal $a_min, none $a_none," \
     "minimal_offloaded $a_off"
check "pipeline: none > minimal > save_qkv_proj > full in saved activations" \
    [ "$a_none" -gt "$a_min" -a "$a_min" -gt "$a_qkv" -a "$a_qkv" -gt "$a_full" ]
check "pipeline: minimal_offloaded keeps less on the device than full" [ "$a_off" -lt "$a_full" ]
$TRAIN $C $FAST ici_pipeline_parallelism=2 per_device_batch_size=4 remat_policy=minimal_offloaded > $T/off.out 2>&1
check "pipeline: minimal_offloaded's tensors go to the host and back ($(host_of $T/off.out))" \
    grep -q "device 0 peak.*host peak [1-9][0-9.]* [KM]iB: activations.*copied to host [1-9]" $T/off.out
check "pipeline: the schedule line names what the policy keeps" \
    grep -q "saved: what remat_policy=minimal_offloaded keeps of each layer" $T/off.out

# Context parallelism inside the pipeline: each device holds one chunk of every sequence;
# a microbatch's gradient is summed over the batch devices, the microbatches along their
# tree, and over context last (the tree's outermost level): the bits of one device with
# context_reduce_chunks = the context size.
C=configs/mixtral-tiny.yml
echo "== mixtral-tiny: context parallelism inside the pipeline"
base=$(run_losses base $C per_device_batch_size=8 context_reduce_chunks=2)
echo "  1 device, context_reduce_chunks=2            $base"
compare mixtral-context "$base" $C ici_context_parallelism=2 ici_pipeline_parallelism=2 <<'RUNS'
context=2,M=2,R=2,gpipe                      per_device_batch_size=2
context=2,M=4,R=2,1f1b,slice                 per_device_batch_size=2 num_pipeline_microbatches=4 pipeline_schedule=1f1b pipeline_shift_impl=slice
context=2,fsdp=2,ag_once,M=2,R=2             per_device_batch_size=1 ici_fsdp_parallelism=2 pipeline_fsdp_ag_once=true
context=2,accumulation=2,M=2,R=2             per_device_batch_size=1 gradient_accumulation_steps=2
context=2,expert=2,minimal,M=2,R=2,1f1b      per_device_batch_size=1 ici_expert_parallelism=2 remat_policy=minimal pipeline_schedule=1f1b
context=2,data=2,zero1,M=2,R=2               per_device_batch_size=1 ici_data_parallelism=2 shard_optimizer_over_data=true
context=2,tensor=2,flash,M=2,R=2             per_device_batch_size=1 ici_tensor_parallelism=2 attention=flash
RUNS
base=$(run_losses base $C per_device_batch_size=8 context_reduce_chunks=4)
echo "  1 device, context_reduce_chunks=4            $base"
compare mixtral-context4 "$base" $C <<'RUNS'
context=4,P=2,M=2,R=2                        ici_context_parallelism=4 ici_pipeline_parallelism=2 per_device_batch_size=1
RUNS
base=$(run_losses base $C per_device_batch_size=4 ici_context_parallelism=2 context_parallel_strategy=ring)
echo "  context=2, ring, no pipeline                 $base"
compare mixtral-ring "$base" $C context_parallel_strategy=ring <<'RUNS'
context=2,ring,M=4,R=2,1f1b                  ici_context_parallelism=2 ici_pipeline_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4 pipeline_schedule=1f1b
RUNS
base=$(run_losses base $C per_device_batch_size=8 context_reduce_chunks=2 dtype=bfloat16)
echo "  bf16, 1 device, context_reduce_chunks=2      $base"
compare mixtral-context-bf16 "$base" $C dtype=bfloat16 <<'RUNS'
context=2,bf16,M=2,R=2                       ici_context_parallelism=2 ici_pipeline_parallelism=2 per_device_batch_size=2
RUNS
C=configs/deepseek-tiny.yml
base=$(run_losses base $C per_device_batch_size=6 context_reduce_chunks=2)
echo "  deepseek-tiny, 1 device, chunks=2            $base"
compare deepseek-context "$base" $C ici_context_parallelism=2 ici_pipeline_parallelism=3 per_device_batch_size=1 <<'RUNS'
context=2,P=3,M=3,gpipe                      num_pipeline_microbatches=3
context=2,P=3,M=6,1f1b,none                  num_pipeline_microbatches=6 pipeline_schedule=1f1b remat_policy=none
RUNS
# The evaluation's loss too (the pipeline places each chunk's loss leaves itself).
C=configs/mixtral-tiny.yml
EV="steps=2 sample_length=0 eval_steps=1 eval_interval=2 max_target_length=32 log_period=100"
$TRAIN $C $EV per_device_batch_size=8 context_reduce_chunks=2 > $T/ev1.out 2>&1
$TRAIN $C $EV per_device_batch_size=2 ici_context_parallelism=2 ici_pipeline_parallelism=2 > $T/ev2.out 2>&1
e1=$(grep -o 'eval loss [0-9.]*' $T/ev1.out | tr '\n' ' '); e2=$(grep -o 'eval loss [0-9.]*' $T/ev2.out | tr '\n' ' ')
echo "  eval: 1 device $e1| context=2 x stage=2 $e2"
check "context=2 x stage=2: the evaluation's losses are one device's (to the 4 decimals printed)" [ -n "$e1" -a "$e1" = "$e2" ]
# eval_per_device_batch_size inside the pipeline: the eval batch set apart from the training
# batch (the same global eval batch as one device's) is cut in M microbatches too; its loss
# is one device's, and its peak below the pipeline's eval of the whole training batch.
EB="steps=2 sample_length=0 eval_steps=2 eval_interval=2 max_target_length=32 log_period=100"
evals() { grep -o 'eval loss [0-9.]*' "$1" | tr '\n' ' '; }
evalpeak() { sed -n 's/^eval peak \([0-9]*\) bytes.*/\1/p' "$1"; }
$TRAIN $C $EB per_device_batch_size=8 eval_per_device_batch_size=4 > $T/eb1.out 2>&1
$TRAIN $C $EB per_device_batch_size=2 ici_pipeline_parallelism=4 num_pipeline_microbatches=4 \
    eval_per_device_batch_size=1 > $T/eb4.out 2>&1
$TRAIN $C $EB per_device_batch_size=2 ici_pipeline_parallelism=4 num_pipeline_microbatches=4 > $T/ebw.out 2>&1
echo "  eval batch 4: 1 device $(evals $T/eb1.out)| stage=4 M=4 $(evals $T/eb4.out)"
check "eval_per_device_batch_size=1, stage=4, M=4: the evaluation's losses are one device's" \
    [ -n "$(evals $T/eb1.out)" -a "$(evals $T/eb1.out)" = "$(evals $T/eb4.out)" ]
check "eval_per_device_batch_size=1, stage=4: eval peak $(evalpeak $T/ebw.out) -> $(evalpeak $T/eb4.out) bytes" \
    [ -n "$(evalpeak $T/eb4.out)" -a "$(evalpeak $T/eb4.out)" -lt "$(evalpeak $T/ebw.out)" ]
D=configs/deepseek-tiny.yml
$TRAIN $D $EB per_device_batch_size=6 eval_per_device_batch_size=3 > $T/ed1.out 2>&1
$TRAIN $D $EB per_device_batch_size=2 ici_pipeline_parallelism=3 eval_per_device_batch_size=1 > $T/ed3.out 2>&1
echo "  deepseek eval batch 3: 1 device $(evals $T/ed1.out)| stage=3 M=3 $(evals $T/ed3.out)"
check "deepseek eval_per_device_batch_size=1, stage=3: the evaluation's losses are one device's" \
    [ -n "$(evals $T/ed1.out)" -a "$(evals $T/ed1.out)" = "$(evals $T/ed3.out)" ]

# The sample on pipeline and context meshes: the stages run the growing sequence in turn (a
# copy of it a stage on a circular pipeline, whose repeats need a microbatch a stage); the
# context devices each run their part of it, padded to a whole number of parts; the logits
# of the last real position reach every device (the MoE capacity counted over the real
# tokens). The text is one device's, character for character (the same weights, bit for bit: a context mesh against one device with its
# context_reduce_chunks; the same logits).
echo "== the sample on pipeline and context meshes"
SM="steps=5 eval_steps=1 eval_interval=0 max_target_length=32 log_period=100 sample_length=40"
sample_of() { $TRAIN "$@" $SM > $T/sample.out 2>&1 && sed -n '/^---- sample/{n;p;}' $T/sample.out; }
same_sample() {   # same_sample LABEL BASE_TEXT ARGS...
    local label=$1 base=$2; shift 2
    local got; got=$(sample_of "$@")
    printf '  %-44s %s\n' "$label" "$got"
    check "sample on $label: one device's text (40 tokens)" [ -n "$base" -a "$got" = "$base" ]
}
C=configs/mixtral-tiny.yml
base=$(sample_of $C per_device_batch_size=8)
printf '  %-44s %s\n' "mixtral-tiny, 1 device" "$base"
same_sample "mixtral-tiny P=2,M=2,R=2,gpipe" "$base" $C ici_pipeline_parallelism=2 per_device_batch_size=4
same_sample "mixtral-tiny P=4,R=1,1f1b" "$base" $C ici_pipeline_parallelism=4 per_device_batch_size=2 \
    pipeline_schedule=1f1b
same_sample "mixtral-tiny P=2,tensor=2,M=4,R=2" "$base" $C ici_pipeline_parallelism=2 ici_tensor_parallelism=2 \
    per_device_batch_size=2 num_pipeline_microbatches=4
same_sample "mixtral-tiny P=2,fsdp=2,ag_once" "$base" $C ici_pipeline_parallelism=2 ici_fsdp_parallelism=2 \
    per_device_batch_size=2 pipeline_fsdp_ag_once=true
for k in 2 4; do
    base=$(sample_of $C per_device_batch_size=8 context_reduce_chunks=$k)
    same_sample "mixtral-tiny context=$k" "$base" $C ici_context_parallelism=$k per_device_batch_size=$((8 / k))
done
base=$(sample_of $C per_device_batch_size=8 context_reduce_chunks=2)
same_sample "mixtral-tiny context=2,ring" "$base" $C ici_context_parallelism=2 per_device_batch_size=4 \
    context_parallel_strategy=ring
same_sample "mixtral-tiny context=2,fsdp=2,tensor=2" "$base" $C ici_context_parallelism=2 ici_fsdp_parallelism=2 \
    ici_tensor_parallelism=2 per_device_batch_size=1
same_sample "mixtral-tiny context=2,P=2,M=2,R=2" "$base" $C ici_context_parallelism=2 ici_pipeline_parallelism=2 \
    per_device_batch_size=2
# The dense path dropping assignments (capacity_factor): the capacity counts the real
# tokens, not the padding (with it counted, context=4 kept assignments one device dropped at
# these four factors: 0.5, 1.0, 1.25 and 1.5 tried, each a different text).
for cf in 1.0 1.5; do
    base=$(sample_of $C per_device_batch_size=8 context_reduce_chunks=4 sparse_matmul=false capacity_factor=$cf)
    same_sample "mixtral-tiny context=4,capacity_factor=$cf" "$base" $C ici_context_parallelism=4 \
        per_device_batch_size=2 sparse_matmul=false capacity_factor=$cf
done
base=$(sample_of $C dtype=bfloat16 per_device_batch_size=8)
same_sample "mixtral-tiny bf16 P=2,M=4,R=2" "$base" $C dtype=bfloat16 ici_pipeline_parallelism=2 \
    per_device_batch_size=4 num_pipeline_microbatches=4
D=configs/deepseek-tiny.yml
base=$(sample_of $D per_device_batch_size=6)
same_sample "deepseek-tiny P=3 (dense layer on stage 0)" "$base" $D ici_pipeline_parallelism=3 per_device_batch_size=2
base=$(sample_of $D base_num_decoder_layers=5 per_device_batch_size=8)
same_sample "deepseek-5 P=2,expert=2,R=2" "$base" $D base_num_decoder_layers=5 ici_pipeline_parallelism=2 \
    ici_expert_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4
base=$(sample_of $D per_device_batch_size=4 context_reduce_chunks=2)
same_sample "deepseek-tiny context=2,expert=2 (MLA)" "$base" $D ici_context_parallelism=2 ici_expert_parallelism=2 \
    per_device_batch_size=1

echo "== the printed schedule and each stage's weights"
C=configs/mixtral-tiny.yml
$TRAIN $C $FAST ici_pipeline_parallelism=4 per_device_batch_size=2 num_pipeline_microbatches=8 \
    metrics_file=$T/four.jsonl > $T/sched.out 2>&1
sed -n '/^pipeline:/,/bubble/p' $T/sched.out
check "gpipe P=4 M=8: the bubble measured is the formula's 3/11" grep -q "idle = 0.2727; (P-1)/(R\*M+P-1) = 3/11 = 0.2727" $T/sched.out
check "gpipe P=4 M=8: every stage row has 22 ticks" \
    [ "$(grep -c '^  stage [0-3] |\( ..\)\{11\} |\( ..\)\{11\}$' $T/sched.out)" = 4 ]
# The params tag's peak of each device in the first step's metrics.
params_of() { sed -n 1p "$1" | grep -o "{\"device\": $2, \"peak_bytes\": [0-9]*, \"peak_bytes_by_tag\": {\"params\": [0-9]*" | grep -o '[0-9]*$'; }
one=$(params_of $T/mixtral.jsonl 0)
p=(); for d in 0 1 2 3; do p[$d]=$(params_of $T/four.jsonl $d); done
sum=$((p[0] + p[1] + p[2] + p[3]))
echo "  params: 1 device $one bytes; stages 0-3: ${p[*]}, together $sum"
check "stage=4: each stage holds its own weights, together the model's (no copy)" \
    [ "$sum" = "$one" -a "${p[1]}" -lt "$one" -a "${p[0]}" -gt "${p[1]}" -a "${p[3]}" -gt "${p[1]}" ]

echo "== what the pipeline refuses: one clear message"
expect_error "M a multiple of P" "num_pipeline_microbatches (3) must be a multiple of ici_pipeline_parallelism (2)" \
    $TRAIN $C $FAST ici_pipeline_parallelism=2 num_pipeline_microbatches=3
expect_error "layers divisible" "the 4 pipelined layers (base_num_decoder_layers 4 - first_num_dense_layers 0) do not split into 4 stages x num_layers_per_pipeline_stage=2" \
    $TRAIN $C $FAST ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=2
expect_error "layers x stages x repeats" "are not 2 stages x num_layers_per_pipeline_stage=1 x num_pipeline_repeats=4 = 8" \
    $TRAIN $C $FAST ici_pipeline_parallelism=2 num_layers_per_pipeline_stage=1 num_pipeline_repeats=4
expect_error "DeepSeek's pipelined layers are its MoE layers" "the 3 pipelined layers (base_num_decoder_layers 4 - first_num_dense_layers 1)" \
    $TRAIN configs/deepseek-tiny.yml $FAST ici_pipeline_parallelism=2
expect_error "batch into microbatches" "the 4 sequences each pipeline runs per step (per_device_batch_size 1 x 4 devices / 1 devices sharing the batch) do not split into num_pipeline_microbatches=8" \
    $TRAIN $C $FAST ici_pipeline_parallelism=4 per_device_batch_size=1 num_pipeline_microbatches=8
expect_error "eval batch into microbatches" "eval_per_device_batch_size 1 x 2 devices / 1 devices sharing the batch = 2 eval sequences per pipeline, which do not split into num_pipeline_microbatches=4" \
    $TRAIN $C $FAST ici_pipeline_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=4 eval_per_device_batch_size=1
expect_error "schedule name" "pipeline_schedule must be 'gpipe' or '1f1b', got 'zb'" \
    $TRAIN $C $FAST ici_pipeline_parallelism=2 pipeline_schedule=zb
expect_error "layer inputs under a policy" "pipeline_save_decoder_layer_input=false with remat_policy=minimal" \
    $TRAIN $C $FAST ici_pipeline_parallelism=2 remat_policy=minimal pipeline_save_decoder_layer_input=false
expect_error "nested blocks" "remat_nested_block=2 with ici_pipeline_parallelism=2" \
    $TRAIN $C $FAST ici_pipeline_parallelism=2 remat_nested_block=2
expect_error "one chunk per context device" "context_reduce_chunks=4 on 2 context devices is not supported" \
    $TRAIN $C $FAST ici_pipeline_parallelism=2 ici_context_parallelism=2 context_reduce_chunks=4
expect_error "shift name" "pipeline_shift_impl must be 'ppermute' or 'slice', got 'psum'" \
    $TRAIN $C $FAST pipeline_shift_impl=psum
summary
