#!/usr/bin/env bash
# tests/mu_dtype.sh: mu_dtype=bfloat16, AdamW's first moment kept as bf16 (optim/optimizer.c,
# docs/optimizations.md#mu_dtype). The loss goes down; the first two losses are float32's
# (the first update uses its moment before rounding it), the third is not; the losses are the
# same bits on every mesh that shards the state (fsdp, ZeRO-1, tensor, expert, pipeline) and
# with the state offloaded to the host; the optimizer bytes are 6 a weight where float32's are
# 8, the weights counted here from the preset's shapes; the planner plans the run's peaks; a
# checkpoint round trip gives the uninterrupted run's bits (also under device=cpu_strict,
# resumed with the state offloaded); bad combinations (a resume with
# another mu_dtype among them) give one clear message.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-mu16.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=4 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=32"
MU="mu_dtype=bfloat16"

nth_bits() { bits "$1" | awk -v k="$2" '{ print $(2 * k) }'; }   # the loss bits of step k (1-based)
peaks() { grep -o '"device": [0-9]*, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' "$T/$1.jsonl"; }

echo "== mixtral-tiny: the loss goes down; float32's first two losses; the same bits on every mesh"
run one mixtral-tiny per_device_batch_size=4 $MU
run f32 mixtral-tiny per_device_batch_size=4
first=$(grep -o '"loss": [0-9.]*' $T/one.jsonl | head -1 | grep -o '[0-9.]*$')
lastl=$(grep -o '"loss": [0-9.]*' $T/one.jsonl | tail -1 | grep -o '[0-9.]*$')
check "loss $first -> $lastl over 4 steps" awk -v a="$first" -v b="$lastl" 'BEGIN { exit !(b < a - 0.3) }'
check "steps 1 and 2 as with a float32 moment ($(nth_bits one 1) $(nth_bits one 2))" \
    test -n "$(nth_bits one 2)" -a "$(nth_bits one 1) $(nth_bits one 2)" = "$(nth_bits f32 1) $(nth_bits f32 2)"
check "step 3 not ($(nth_bits one 3) against $(nth_bits f32 3))" test "$(nth_bits one 3)" != "$(nth_bits f32 3)"
run fsdp mixtral-tiny per_device_batch_size=2 ici_fsdp_parallelism=2 $MU
run zero1 mixtral-tiny per_device_batch_size=2 ici_data_parallelism=2 shard_optimizer_over_data=true $MU
run tp mixtral-tiny per_device_batch_size=2 ici_tensor_parallelism=2 $MU
run ep mixtral-tiny per_device_batch_size=2 ici_expert_parallelism=2 $MU
run pp mixtral-tiny per_device_batch_size=2 ici_pipeline_parallelism=2 $MU
run off mixtral-tiny per_device_batch_size=4 optimizer_memory_host_offload=true $MU
for m in fsdp zero1 tp ep pp off; do check "$m: $(bits $m)" same $m one; done

echo "== the optimizer's bytes: 4 (nu) + 2 (mu) a weight"
# mixtral-tiny (configs/mixtral-tiny.yml): V=256 D=128, L=4 layers of 4 query and 2 KV heads of
# 32, E=4 experts of F=256; weights: the embedding, per layer two norms, q, k, v, out, the
# router and three expert kernels, the final norm and the logits kernel.
V=256 D=128 L=4 H=4 KV=2 HD=32 E=4 F=256
P=$((V * D + L * (2 * D + D * H * HD + 2 * D * KV * HD + H * HD * D + D * E + 3 * E * D * F) + D + D * V))
check "1 device: $(opt_bytes one 0) B = 6 x $P weights (float32: $(opt_bytes f32 0) B = 8 x)" \
    test "$(opt_bytes one 0)" = $((6 * P)) -a "$(opt_bytes f32 0)" = $((8 * P))
run plan mixtral-tiny per_device_batch_size=2 ici_fsdp_parallelism=2 $MU dry_run=true
run fsdp1 mixtral-tiny per_device_batch_size=2 ici_fsdp_parallelism=2 $MU steps=1
check "fsdp=2: the planner's peaks by tag are the run's, every device" \
    test -n "$(peaks fsdp1)" -a "$(peaks plan)" = "$(peaks fsdp1)"

echo "== checkpoints: 2 + 2 steps = 4"
run ds deepseek-tiny per_device_batch_size=4 $MU
for preset in mixtral-tiny deepseek-tiny; do
    ref=one; [ $preset = deepseek-tiny ] && ref=ds
    run rt-$preset $preset ici_fsdp_parallelism=2 per_device_batch_size=2 $MU run_steps=2 save_checkpoint=$T/$preset.st
    run rt-$preset $preset per_device_batch_size=4 $MU load_checkpoint=$T/$preset.st
    check "$preset: fsdp=2 saved, 1 device resumed: $(bits rt-$preset)" same rt-$preset $ref
done
# Under device=cpu_strict (the host's code kept off device memory: the checkpoint's reads and
# writes of the 16-bit moment go through the allocator's copies), resumed with the state
# offloaded to the host.
run strict mixtral-tiny per_device_batch_size=2 ici_fsdp_parallelism=2 $MU device=cpu_strict run_steps=2 \
    save_checkpoint=$T/strict.st
run strict mixtral-tiny per_device_batch_size=2 ici_fsdp_parallelism=2 $MU device=cpu_strict \
    optimizer_memory_host_offload=true load_checkpoint=$T/strict.st
check "device=cpu_strict, fsdp=2, resumed with the state offloaded: $(bits strict)" same strict one
run from32 mixtral-tiny per_device_batch_size=4 run_steps=2 save_checkpoint=$T/f32.st

echo "== bad combinations: one clear message"
expect_error "sgd" "mu_dtype=bfloat16 is the dtype of AdamW's first moment: opt_type=sgd keeps none" \
    $TRAIN configs/mixtral-tiny.yml opt_type=sgd $MU
expect_error "adafactor" "opt_type=adafactor keeps none" $TRAIN configs/mixtral-tiny.yml opt_type=adafactor $MU
expect_error "a dtype it does not know" "mu_dtype" $TRAIN configs/mixtral-tiny.yml mu_dtype=float16
expect_error "resumed with another mu_dtype" "mu_dtype is \"\" in the checkpoint, bfloat16 in this run" \
    $TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 $MU load_checkpoint=$T/f32.st
summary
