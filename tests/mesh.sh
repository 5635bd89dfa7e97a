#!/usr/bin/env bash
# tests/mesh.sh: the same 5 training steps on several meshes must give bit-identical
# losses (docs/model.md#summation-order). The global batch is 8 sequences everywhere
# (per_device_batch_size * num_devices); each config's losses are printed as float32 bits.
# The grad norms of the 5 steps must be equal too: the loss's float32 rounding can hide a
# difference in the last bits of the gradients, the grad norm of step 0 shows it.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=train_with_args   # $TRAIN (./train) with $TRAIN_ARGS (tests/lib.sh)
T=$(mktemp -d /tmp/meshmoe-mesh.XXXXXX)
trap 'rm -rf "$T"' EXIT
MESH_STEPS=${MESH_STEPS:-5}   # steps per run (tests/strict.sh runs fewer: a host access shows in any step)
FAST="steps=$MESH_STEPS sample_length=0 eval_steps=1 eval_interval=0 max_target_length=64 log_period=100"

run_losses() {   # run_losses NAME ARGS...: prints the loss bits of every step
    local name=$1; shift
    if ! $TRAIN "$@" $FAST metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        echo "run failed: $(tail -1 $T/$name.out)"; return 1
    fi
    grep -o '"loss_bits": "[^"]*"' $T/$name.jsonl | cut -d'"' -f4 | tr '\n' ' '
}
# same_as NAME GOT WANT WANT_NAME: the losses printed are equal and so are the grad norms.
same_as() { [ "$2" = "$3" ] && [ -n "$(norms $1)" ] && [ "$(norms $1)" = "$(norms $4)" ]; }

for preset in mixtral-tiny deepseek-tiny; do
    C=configs/$preset.yml
    echo "== $preset"
    base=$(run_losses base $C per_device_batch_size=8)
    echo "  1 device                        $base"
    while read -r name args; do
        got=$(run_losses x $C $args)
        printf '  %-31s %s\n' "$name" "$got"
        check "$preset $name: $MESH_STEPS losses and grad norms bit-identical to 1 device" same_as x "$got" "$base" base
    done <<'MESHES'
data=2                   ici_data_parallelism=2 per_device_batch_size=4
fsdp=2                   ici_fsdp_parallelism=2 per_device_batch_size=4
fsdp=4                   ici_fsdp_parallelism=4 per_device_batch_size=2
data=2,fsdp=2            ici_data_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2
fsdp=8                   ici_fsdp_parallelism=8 per_device_batch_size=1
data=2+zero1             ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=4
data=2,fsdp=2+zero1      ici_data_parallelism=2 ici_fsdp_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2
fsdp=-1,num_devices=4    ici_fsdp_parallelism=-1 num_devices=4 per_device_batch_size=2
tensor=2                 ici_tensor_parallelism=2 per_device_batch_size=4
data=2,tensor=2          ici_data_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2
fsdp=2,tensor=2          ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2
expert=2                 ici_expert_parallelism=2 per_device_batch_size=4
expert=4                 ici_expert_parallelism=4 per_device_batch_size=2
data=2,expert=2          ici_data_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2
fsdp=2,expert=2          ici_fsdp_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2
fsdp=2,expert=2,tensor=2 ici_fsdp_parallelism=2 ici_expert_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=1
MESHES
    # Context parallelism: every sum over tokens is cut into context_reduce_chunks chunks of
    # each sequence, chunk outermost (base/context.h); its default is one chunk per
    # context device, so context=2 runs with 2 chunks and is compared, bit for bit, with
    # one device run with context_reduce_chunks=2 (the same canonical order).
    base2=$(run_losses base2 $C per_device_batch_size=8 context_reduce_chunks=2)
    echo "  1 device, 2 chunks              $base2"
    while read -r name args; do
        got=$(run_losses x $C $args)
        printf '  %-31s %s\n' "$name" "$got"
        check "$preset $name: $MESH_STEPS losses and grad norms bit-identical to 1 device with 2 chunks" \
            same_as x "$got" "$base2" base2
    done <<'MESHES'
context=2                ici_context_parallelism=2 per_device_batch_size=4
data=2,context=2         ici_data_parallelism=2 ici_context_parallelism=2 per_device_batch_size=2
fsdp=2,context=2         ici_fsdp_parallelism=2 ici_context_parallelism=2 per_device_batch_size=2
tensor=2,context=2       ici_tensor_parallelism=2 ici_context_parallelism=2 per_device_batch_size=2
expert=2,context=2       ici_expert_parallelism=2 ici_context_parallelism=2 per_device_batch_size=2
context=2,accumulation=2 ici_context_parallelism=2 per_device_batch_size=2 gradient_accumulation_steps=2
data=2,chunks=2          ici_data_parallelism=2 per_device_batch_size=4 context_reduce_chunks=2
MESHES
    # context=4: 4 chunks per sequence, on one device too.
    base4=$(run_losses base4 $C per_device_batch_size=8 context_reduce_chunks=4)
    ctx4=$(run_losses ctx4 $C ici_context_parallelism=4 per_device_batch_size=2 context_reduce_chunks=4)
    echo "  1 device, 4 chunks              $base4"
    echo "  context=4, 4 chunks             $ctx4"
    check "$preset context=4: $MESH_STEPS losses and grad norms bit-identical to 1 device with 4 chunks" \
        same_as ctx4 "$ctx4" "$base4" base4
    # Gradient accumulation: 2 microbatches of 4 on one device = of 2 per device on data=2.
    acc1=$(run_losses acc1 $C per_device_batch_size=4 gradient_accumulation_steps=2)
    acc2=$(run_losses acc2 $C per_device_batch_size=2 gradient_accumulation_steps=2 ici_fsdp_parallelism=2)
    echo "  accumulation 2, 1 device        $acc1"
    echo "  accumulation 2, fsdp=2          $acc2"
    check "$preset: accumulation 2 on fsdp=2 bit-identical to 1 device" same_as acc2 "$acc2" "$acc1" acc1
done

echo "== print_sharding=true: rules, every tensor's spec and per-device shape, activations, then training"
C=configs/mixtral-tiny.yml
out=$($TRAIN $C $FAST steps=1 ici_tensor_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 print_sharding=true 2>&1)
row() { grep -E "^ +$1 " <<<"$out" | head -1 | tr -s ' ' | sed 's/^ //'; }
q=$(row decoder/layers_0/self_attention/query/kernel)
echo "  $q"
check "query kernel: (128, 4, 32) [embed, q_heads, kv] -> (fsdp, tensor, -), local (128, 2, 32), 1/2 of its unit" \
    [ "$q" = "decoder/layers_0/self_attention/query/kernel (128, 4, 32) [embed, q_heads, kv] (fsdp, tensor, -) (128, 2, 32) 32.0 KiB 1/2 of unit 1" ]
x=$(row "residual stream x")
echo "  $x"
check "residual stream: (8, 64, 128) -> (fsdp, -, -), (4, 64, 128) per device" \
    grep -qF "[activation_batch, activation_length, activation_embed] (8, 64, 128) (fsdp, -, -) (4, 64, 128)" <<<"$x"
check "logits: (8, 64, 256) -> (fsdp, -, tensor), (4, 64, 128) per device" \
    grep -qF "[activation_batch, activation_length, activation_vocab] (8, 64, 256) (fsdp, -, tensor) (4, 64, 128)" <<<"$(row logits)"
check "rule table printed (embed -> fsdp)" grep -qE '^  embed +-> fsdp$' <<<"$out"
check "printed before step 0, and training proceeds" \
    awk '/^---- sharding/ { s = NR } /^step +0 \| loss/ { t = NR } END { exit !(s && t && s < t) }' <<<"$out"
out=$($TRAIN $C $FAST steps=1 ici_expert_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 print_sharding=true 2>&1)
w=$(row decoder/layers_0/MoeBlock_0/wi_0)
echo "  $w"
check "expert=2 fsdp=2: wi_0 [exp, embed_no_exp, mlp] -> (expert, fsdp, -), local (2, 128, 256)" \
    [ "$w" = "decoder/layers_0/MoeBlock_0/wi_0 (4, 128, 256) [exp, embed_no_exp, mlp] (expert, fsdp, -) (2, 128, 256) 256.0 KiB 1/2 of unit 1" ]
check "expert=2 fsdp=2: residual stream (8, 64, 128) -> (fsdp+expert, -, -), (2, 64, 128) per device" \
    grep -qF "(8, 64, 128) (fsdp+expert, -, -) (2, 64, 128)" <<<"$(row "residual stream x")"

echo "== a device's share of the sum tree: a power of two of sequences, or a note"
# 12 sequences over data=2: 6 a device, not a subtree of the 12's tree (8 + 4), said at
# start-up; 8 over data=2 is silent. (The 12's losses do leave one device's here: at
# learning_rate=0.0031, the second step's last bit.)
C=configs/mixtral-tiny.yml
$TRAIN $C $FAST steps=1 ici_data_parallelism=2 per_device_batch_size=6 > $T/six.out 2>&1
check "6 sequences a device: the note names the block" grep -q "^note: a gradient block here holds 6 leaves (6 sequences x 1)" $T/six.out
$TRAIN $C $FAST steps=1 ici_data_parallelism=2 per_device_batch_size=4 > $T/four.out 2>&1
check "4 sequences a device: no note" bash -c "grep -q '^data:' $T/four.out && ! grep -q '^note: a gradient block' $T/four.out"
$TRAIN $C $FAST steps=1 per_device_batch_size=12 > $T/one12.out 2>&1
check "12 sequences on one device, nothing split: no note" bash -c "grep -q '^data:' $T/one12.out && ! grep -q '^note: a gradient block' $T/one12.out"

echo "== impossible meshes and out-of-memory: one clear message"
C=configs/mixtral-tiny.yml
expect_error "axes do not multiply to num_devices" "multiply to 4 devices but num_devices is 8" \
    $TRAIN $C ici_fsdp_parallelism=4 num_devices=8
expect_error "-1 cannot fill" "num_devices (6) is not a multiple of the other axes' product (4)" \
    $TRAIN $C ici_data_parallelism=4 ici_fsdp_parallelism=-1 num_devices=6
expect_error "tensor size must divide the kv heads" "key/kernel: its dimension 1 ('kv_heads', size 2) is split over 4 devices" \
    $TRAIN $C $FAST ici_tensor_parallelism=4
expect_error "tensor size must divide tensor_reduce_chunks" "ici_tensor_parallelism=2 must divide tensor_reduce_chunks (1)" \
    $TRAIN $C $FAST ici_tensor_parallelism=2 tensor_reduce_chunks=1
expect_error "expert size must divide the experts" "MoeBlock_0/wi_0: its dimension 0 ('exp', size 4) is split over 8 devices" \
    $TRAIN $C $FAST ici_expert_parallelism=8 per_device_batch_size=1
expect_error "expert parallelism needs the sparse path" "expert parallelism runs the dropless sparse path" \
    $TRAIN $C $FAST ici_expert_parallelism=2 sparse_matmul=false
expect_error "context size not dividing the chunks" "ici_context_parallelism=4 must divide context_reduce_chunks (2)" \
    $TRAIN $C ici_context_parallelism=4 context_reduce_chunks=2
expect_error "chunks not dividing the sequence" "context_reduce_chunks (4) must divide max_target_length (66)" \
    $TRAIN $C context_reduce_chunks=4 max_target_length=66
expect_error "leaf spanning two chunks" "reduce_leaf_tokens (128) must divide the chunk length" \
    $TRAIN $C reduce_leaf_tokens=128 context_reduce_chunks=2
expect_error "simulated out of memory names the device and buffer" "device 0 out of memory" \
    $TRAIN $C $FAST hbm_capacity=20MB
expect_error "bad byte count" "wants a byte count" $TRAIN $C hbm_capacity=lots
summary
