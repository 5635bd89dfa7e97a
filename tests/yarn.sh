#!/usr/bin/env bash
# tests/yarn.sh: rope_type=yarn (model/rope.c, docs/model.md#yarn) and MLA's softmax scale
# past the original context. Under yarn the losses are the same bits on one device and on
# tensor, fsdp, expert, context (against one device with the same context chunks) and
# pipeline meshes, in float32 and bf16, interleaved pairs or halves; yarn, its interleaving
# and its rope_attention_scaling each change the run; max_position_embeddings changes
# DeepSeek's (MLA's mscale^2) and not Mixtral's; what cannot be run or exported is refused
# with one message; an export under yarn loads back (load_hf) with every weight's bits.
# (Against JAX: tests/parity, cases *-yarn*; against Hugging Face: tests/hf/check.sh.)
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-yarn.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=32"
# An original context of 1024 positions: some of the rotated dimensions kept, some slowed,
# some mixed (docs/model.md#yarn).
YARN="rope_type=yarn original_max_position_embeddings=1024 rope_factor=8"

# (Batches of a power of two of sequences per device and microbatch, the blocks of the
# canonical sum tree: docs/model.md#summation-order.)
for preset in mixtral-tiny deepseek-tiny; do
    echo "== $preset: yarn on every mesh"
    run one $preset $YARN per_device_batch_size=16
    run chunks $preset $YARN per_device_batch_size=16 context_reduce_chunks=2
    run plain $preset per_device_batch_size=16
    check "$preset: yarn changes the run" test "$(bits one)" != "$(bits plain)"
    pipe="ici_pipeline_parallelism=2 per_device_batch_size=8"
    if [ $preset = deepseek-tiny ]; then   # 3 pipelined layers: 3 stages, 3 microbatches of 4
        run one12 $preset $YARN per_device_batch_size=12
        pipe="ici_pipeline_parallelism=3 per_device_batch_size=4"
    fi
    while read -r name base args; do
        run x $preset $YARN $args
        check "$preset $name: $(bits x | sed 's/"loss_bits": //g')" same_run x $base
    done <<MESHES
tensor=2                  one     ici_tensor_parallelism=2 per_device_batch_size=8
fsdp=2,expert=2           one     ici_fsdp_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=4
context=2                 chunks  ici_context_parallelism=2 per_device_batch_size=8
stage,minimal             $([ $preset = deepseek-tiny ] && echo one12 || echo one)   $pipe remat_policy=minimal
MESHES
    run x $preset $YARN ici_tensor_parallelism=2 ici_context_parallelism=2 context_reduce_chunks=2 \
        per_device_batch_size=4 dtype=bfloat16
    run chunks_bf $preset $YARN per_device_batch_size=16 dtype=bfloat16 context_reduce_chunks=2
    check "$preset bf16 tensor=2,context=2: $(bits x | sed 's/"loss_bits": //g')" same_run x chunks_bf
done

echo "== what each key changes"
run il mixtral-tiny $YARN per_device_batch_size=4
run halves mixtral-tiny $YARN per_device_batch_size=4 rope_interleave=false
run scaled mixtral-tiny $YARN per_device_batch_size=4 rope_attention_scaling=true
check "rope_interleave changes the run" test "$(bits il)" != "$(bits halves)"
check "rope_attention_scaling changes the run" test "$(bits il)" != "$(bits scaled)"
run mx_short mixtral-tiny per_device_batch_size=4 max_position_embeddings=4096
run mx_long mixtral-tiny per_device_batch_size=4 max_position_embeddings=163840
check "Mixtral (GQA): max_position_embeddings past the original changes nothing" same_run mx_short mx_long
run ds_short deepseek-tiny per_device_batch_size=4 max_position_embeddings=4096
run ds_long deepseek-tiny per_device_batch_size=4 max_position_embeddings=163840
run ds_m0 deepseek-tiny per_device_batch_size=4 max_position_embeddings=163840 mscale=0
check "DeepSeek (MLA): past the original context the softmax scale grows (mscale^2)" \
    test "$(bits ds_short)" != "$(bits ds_long)"
check "DeepSeek (MLA): with mscale=0 the scale is the original's" same_run ds_short ds_m0

echo "== export under yarn, loaded back"
C=configs/deepseek-tiny.yml
Y="$YARN max_position_embeddings=163840"
$TRAIN $C $FAST $Y per_device_batch_size=4 save_checkpoint=$T/ck.safetensors > $T/save.out 2>&1
$TRAIN export-hf $T/ck.safetensors $T/hf > $T/export.out 2>&1
check "export-hf writes yarn's rope_parameters with the MLA scale's mscale_all_dim" \
    grep -q '"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 1024.*"mscale_all_dim": 1.0}' $T/hf/config.json
check "export-hf: the pairs interleaved" grep -q '"rope_interleave": true' $T/hf/config.json
$TRAIN $C $FAST $Y per_device_batch_size=4 load_hf=$T/hf dump_parity=$T/d parity_steps=1 > $T/load.out 2>&1 ||
    fail "load_hf: $(tail -1 $T/load.out)"
r=$(python3 tests/st_tool.py match $T/ck.safetensors params/ $T/d/dump.safetensors param/ 2>&1)
check "load_hf of the export gives back every weight: $r" grep -q "bit-identical" <<<"$r"

echo "== refused, with one message"
expect_error "a position past yarn's table" "max_target_length 32 is past max_position_embeddings 16" \
    $TRAIN configs/mixtral-tiny.yml $FAST rope_type=yarn max_position_embeddings=16
expect_error "Llama 3.1's RoPE" "rope_type=llama3.1 is MaxText's, which meshmoe does not have" \
    $TRAIN configs/mixtral-tiny.yml $FAST rope_type=llama3.1
expect_error "load_hf into another RoPE" "rope_interleave" \
    $TRAIN $C $FAST $Y rope_interleave=false load_hf=$T/hf
$TRAIN $C $FAST per_device_batch_size=4 max_position_embeddings=163840 save_checkpoint=$T/ck2.safetensors > /dev/null 2>&1
expect_error "export: MLA's mscale without yarn" "applies under yarn only" $TRAIN export-hf $T/ck2.safetensors $T/hf2
check "the refused export wrote nothing" test ! -e $T/hf2
$TRAIN configs/mixtral-tiny.yml $FAST $YARN save_checkpoint=$T/ck3.safetensors > /dev/null 2>&1
expect_error "export: Mixtral with interleaved pairs" "HF's Mixtral rotates half-split pairs only" \
    $TRAIN export-hf $T/ck3.safetensors $T/hf3
summary
