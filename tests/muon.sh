#!/usr/bin/env bash
# tests/muon.sh: opt_type=muon (optim/muon.c, docs/optimizations.md#opt_type). The loss goes
# down; the losses and grad norms are the same bits on one device and on fsdp, data (ZeRO-1
# too), tensor, expert, context, pipeline meshes and their mixes, with the state offloaded too (each
# matrix is orthogonalized whole, the same numbers through the same products on every
# device that holds part of it); the optimizer bytes of every device are what muon keeps,
# computed here from the tensors' shapes and MaxText's dimension numbers: mu for every
# weight held, nu for the embedding, the head and the norm scales (the tensors AdamW
# updates), and with mu_dtype=bfloat16 2 bytes a weight fewer; muon_consistent_rms and
# muon_weight_decay change the run. (Parity against optax.contrib.muon: tests/parity, cases *-muon.)
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-muon.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=4 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=32 opt_type=muon"

for preset in mixtral-tiny deepseek-tiny; do
    echo "== $preset: the loss goes down; the same bits and grad norms on every mesh"
    run one $preset per_device_batch_size=4
    run adamw $preset per_device_batch_size=4 opt_type=adamw
    first=$(grep -o '"loss": [0-9.]*' $T/one.jsonl | head -1 | grep -o '[0-9.]*$')
    lastl=$(grep -o '"loss": [0-9.]*' $T/one.jsonl | tail -1 | grep -o '[0-9.]*$')
    check "$preset: loss $first -> $lastl over 4 steps" awk -v a="$first" -v b="$lastl" 'BEGIN { exit !(b < a - 0.5) }'
    check "$preset: muon and adamw differ after the first update" test "$(bits one)" != "$(bits adamw)"
    while read -r name args; do
        run x $preset $args
        check "$preset $name: $(bits x | sed 's/"loss_bits": //g')" same_run x one
    done <<'MESHES'
fsdp=2                 ici_fsdp_parallelism=2 per_device_batch_size=2
data=2                 ici_data_parallelism=2 per_device_batch_size=2
tensor=2               ici_tensor_parallelism=2 per_device_batch_size=2
expert=2               ici_expert_parallelism=2 per_device_batch_size=2
fsdp=2,tensor=2        ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=1
tensor=2,expert=2      ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=1
fsdp=4                 ici_fsdp_parallelism=4 per_device_batch_size=1
data=2+zero1           ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2
data=2,fsdp=2+zero1    ici_data_parallelism=2 ici_fsdp_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=1
optimizer_offload      optimizer_memory_host_offload=true per_device_batch_size=4
MESHES
done
# Context parallelism sums each sequence's gradient in 2 chunks (context_reduce_chunks follows
# the context axis): against one device with the same chunks.
run one_c2 mixtral-tiny per_device_batch_size=4 context_reduce_chunks=2
run ctx mixtral-tiny ici_context_parallelism=2 per_device_batch_size=2
check "mixtral-tiny context=2 (against 2 reduction chunks on 1 device)" same_run ctx one_c2
run one5 deepseek-tiny per_device_batch_size=4 base_num_decoder_layers=5
run pp deepseek-tiny ici_pipeline_parallelism=2 per_device_batch_size=2 base_num_decoder_layers=5
check "deepseek-tiny pipeline=2 (5 layers)" same_run pp one5

echo "== mixtral-tiny: optimizer bytes from the shapes (D=128 H=4 KV=2 hd=32 F=256 E=4 V=256 L=4)"
# Every tensor (tests/lib.sh): its elements, and whether AdamW updates it (MaxText's dimension
# numbers: the embedding, the head and the norm scales); muon keeps mu for each weight and nu for those.
want=$(mixtral_tiny_layout | awk '{ n = 1; for (i = 3; i <= NF; i++) n *= $i; all += n }
    $2 ~ /^(embedding|norm|post_norm|decoder_norm|logits_dense)$/ { adam += n } END { print 4 * (all + adam) }')
run one mixtral-tiny per_device_batch_size=4
check "1 device: optimizer $(opt_bytes one 0) B = $want B (mu for every weight, nu for the AdamW tensors)" \
    test "$(opt_bytes one 0)" = "$want"
run te mixtral-tiny ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=1
# tensor=2 x expert=2: each device holds a quarter of the experts' weights, half of
# attention's, the embedding's and the head's, all of the norms' and the gate's.
want_te=$(( 4 * ( (32768/2 + 4*(128 + 16384/2 + 8192/2 + 8192/2 + 16384/2 + 128 + 512 + 3*131072/4) + 128 + 32768/2) \
    + (32768/2 + 4*(2*128) + 128 + 32768/2) ) ))
for d in 0 1 2 3; do
    check "tensor=2 x expert=2 device $d: optimizer $(opt_bytes te $d) B = $want_te B" test "$(opt_bytes te $d)" = "$want_te"
done

# ZeRO-1 on data=2: each replica keeps mu for its half of the (padded) shard and nu for the
# AdamW tensors' elements of that half; the two together hold one device's state and the padding.
run z1 mixtral-tiny ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2
read -r P pad <<<"$(mixtral_tiny_params 2)"   # weights, and those stored padded for 2 (from the shapes, lib.sh)
check "data=2 ZeRO-1: the trainer stores $pad weights, as the shapes padded for 2 say" \
    grep -q "stored padded for fsdp=1 zero1=2: $pad)" $T/z1.out
z1sum=$(( $(opt_bytes z1 0) + $(opt_bytes z1 1) ))
check "data=2 ZeRO-1: optimizer $(opt_bytes z1 0) + $(opt_bytes z1 1) B = one device's $want B + 4 x ($pad - $P) B of padding" \
    test "$z1sum" -eq $((want + 4 * (pad - P)))

echo "== mu_dtype=bfloat16: both halves' first moment as bf16; the same bits on every mesh; 2 bytes a weight fewer"
run m16 mixtral-tiny per_device_batch_size=4 mu_dtype=bfloat16
run m16_te mixtral-tiny ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=1 mu_dtype=bfloat16
run m16_z1 mixtral-tiny ici_data_parallelism=2 ici_fsdp_parallelism=2 shard_optimizer_over_data=true \
    per_device_batch_size=1 mu_dtype=bfloat16
check "mu_dtype=bfloat16 tensor=2 x expert=2" same_run m16_te m16
check "mu_dtype=bfloat16 data=2 x fsdp=2 + ZeRO-1" same_run m16_z1 m16
check "mu_dtype=bfloat16 differs from float32's momentum" test "$(bits m16)" != "$(bits one)"
check "mu_dtype=bfloat16: optimizer $(opt_bytes m16 0) B = $want B - 2 x $P" test "$(opt_bytes m16 0)" -eq $((want - 2 * P))

echo "== the keys change the run"
run rms mixtral-tiny per_device_batch_size=4 muon_consistent_rms=0.2
run wd mixtral-tiny per_device_batch_size=4 muon_weight_decay=0.1
run beta mixtral-tiny per_device_batch_size=4 muon_beta=0.9
for k in rms wd beta; do check "$k differs from the default" test "$(bits $k)" != "$(bits one)"; done
summary
