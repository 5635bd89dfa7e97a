#!/usr/bin/env bash
# tests/adafactor.sh: opt_type=adafactor (optim/adafactor.c, docs/optimizations.md#opt_type).
# The loss goes down; the losses are the same bits on one device, fsdp=2, data=2,
# data=2 x fsdp=2, context=2, 2 pipeline stages, tensor=2, expert=2, their mixes, and with
# the state offloaded to the host; the optimizer bytes of every device equal what optax's
# rule gives from the tensors' shapes (a factored tensor keeps lead * (rows + cols) floats,
# the rest one per element), computed here from the shapes and fsdp's even split of each
# padded unit, and under tensor and expert parallelism from each device's piece (every row
# and column, its part of the other dims), and under ZeRO-1 from each data replica's piece.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-adafactor.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=32 opt_type=adafactor"


echo "== mixtral-tiny: the loss goes down; the same bits on every supported mesh"
run one mixtral-tiny per_device_batch_size=4
run fsdp mixtral-tiny per_device_batch_size=2 ici_fsdp_parallelism=2
run data mixtral-tiny per_device_batch_size=2 ici_data_parallelism=2
run dfsdp mixtral-tiny per_device_batch_size=1 ici_data_parallelism=2 ici_fsdp_parallelism=2
run off mixtral-tiny per_device_batch_size=4 optimizer_memory_host_offload=true
run ctx mixtral-tiny per_device_batch_size=2 ici_context_parallelism=2
run pp mixtral-tiny per_device_batch_size=2 ici_pipeline_parallelism=2
run tp mixtral-tiny per_device_batch_size=2 ici_tensor_parallelism=2
run ep mixtral-tiny per_device_batch_size=2 ici_expert_parallelism=2
run tpfsdp mixtral-tiny per_device_batch_size=1 ici_tensor_parallelism=2 ici_fsdp_parallelism=2
run tpep mixtral-tiny per_device_batch_size=1 ici_tensor_parallelism=2 ici_expert_parallelism=2
first=$(grep -o '"loss": [0-9.]*' $T/one.jsonl | head -1 | grep -o '[0-9.]*$')
lastl=$(grep -o '"loss": [0-9.]*' $T/one.jsonl | tail -1 | grep -o '[0-9.]*$')
check "loss $first -> $lastl over 3 steps" awk -v a="$first" -v b="$lastl" 'BEGIN { exit !(b < a - 0.3) }'
check "fsdp=2: $(bits fsdp)" same fsdp one
check "data=2: $(bits data)" same data one
check "data=2 x fsdp=2" same dfsdp one
check "optimizer_memory_host_offload" same off one
check "context=2" same ctx one
check "pipeline stages=2" same pp one
check "tensor=2 (the experts' columns, the head's vocabulary cut: their moments gathered)" same tp one
check "expert=2 (the experts cut along their leading dim: moments of their own)" same ep one
check "tensor=2 x fsdp=2" same tpfsdp one
check "tensor=2 x expert=2" same tpep one
run wide mixtral-tiny per_device_batch_size=4 base_emb_dim=256 base_mlp_dim=128
run wide_tp mixtral-tiny per_device_batch_size=1 base_emb_dim=256 base_mlp_dim=128 ici_tensor_parallelism=2 ici_fsdp_parallelism=2
check "emb 256, mlp 128 on tensor=2 x fsdp=2 (the experts' rows cut: their moments gathered)" same wide_tp wide
run adamw mixtral-tiny per_device_batch_size=4 opt_type=adamw
check "adafactor and adamw differ" test "$(bits one)" != "$(bits adamw)"

echo "== mixtral-tiny: optimizer bytes from the shapes (D=128 H=4 KV=2 hd=32 F=256 E=4 V=256 L=4)"
# The layout in order, one tensor a line: unit and shape (tests/lib.sh).
layout() { mixtral_tiny_layout | cut -d' ' -f1,3-; }
# expected F DEVICE: adafactor's state bytes on fsdp rank DEVICE of F. A unit is padded to a
# multiple of F*256 floats (F > 1) and cut into F equal pieces; a factored tensor (its two
# largest dims >= 128) keeps lead*(R+C) floats on every device holding part of it, another
# tensor one float per element held.
expected() {
    layout | awk -v F="$1" -v f="$2" '
    { u = $1; n = 1; for (i = 2; i <= NF; i++) { s[i-1] = $i; n *= $i } nd = NF - 1
      # the two largest dims (the later one wins a tie, as a stable argsort)
      c = 1; for (i = 2; i <= nd; i++) if (s[i] >= s[c]) c = i
      r = (c == 1) ? 2 : 1; for (i = 1; i <= nd; i++) if (i != c && s[i] >= s[r]) r = i
      fact = nd >= 2 && s[r] >= 128
      k = ++cnt; unit[k] = u; size[k] = n; st[k] = fact ? n / (s[r] * s[c]) * (s[r] + s[c]) : -1
      off[k] = used[u]; used[u] += n }
    END { total = 0
      for (k = 1; k <= cnt; k++) {
        u = unit[k]; pad = F > 1 ? int((used[u] + F * 256 - 1) / (F * 256)) * F * 256 : used[u]
        lo = f * pad / F; hi = lo + pad / F
        a = off[k] > lo ? off[k] : lo; b = off[k] + size[k] < hi ? off[k] + size[k] : hi
        if (a >= b) continue
        total += st[k] >= 0 ? st[k] : b - a }
      print total * 4 }'
}
e1=$(expected 1 0); a1=$(opt_bytes one 0); adam=$(opt_bytes adamw 0)
check "1 device: optimizer $a1 B = $e1 B from the shapes (adamw: $adam B)" test -n "$a1" -a "$a1" = "$e1"
check "adafactor keeps under a quarter of adamw's bytes" test $((a1 * 4)) -lt "$adam"
check "data=2: each device $(opt_bytes data 0) B = $e1 B" test "$(opt_bytes data 0)" = "$e1" -a "$(opt_bytes data 1)" = "$e1"
for d in 0 1; do
    e=$(expected 2 $d); a=$(opt_bytes fsdp $d)
    check "fsdp=2 device $d: optimizer $a B = $e B from the shapes" test -n "$a" -a "$a" = "$e"
done

echo "== mixtral-tiny on tensor=2 x expert=2: optimizer bytes from each device's piece"
# The layout with each tensor's global shape, then its piece on a device of tensor=2 x
# expert=2 (the rules: vocab, heads, kv_heads and mlp cut by tensor, exp by expert).
layout_te() {
    echo "256 128 : 128 128"                                # token_embedder/embedding
    for l in 1 2 3 4; do
        echo "128 : 128"; echo "128 4 32 : 128 2 32"; echo "128 2 32 : 128 1 32"; echo "128 2 32 : 128 1 32"
        echo "4 32 128 : 2 32 128"; echo "128 : 128"; echo "128 4 : 128 4"
        echo "4 128 256 : 2 128 128"; echo "4 128 256 : 2 128 128"; echo "4 256 128 : 2 128 128"
    done
    echo "128 : 128"; echo "128 256 : 128 128"              # decoder_norm, logits_dense
}
# A factored tensor keeps, for its piece's leading indices, every row's and every column's
# mean: (piece size / (piece rows * piece cols)) * (R + C); another, one float per element.
expected_te() {
    layout_te | awk -F' : ' '
    { nd = split($1, g, " "); split($2, l, " "); n = 1; for (i = 1; i <= nd; i++) n *= l[i]
      c = 1; for (i = 2; i <= nd; i++) if (g[i] >= g[c]) c = i
      r = (c == 1) ? 2 : 1; for (i = 1; i <= nd; i++) if (i != c && g[i] >= g[r]) r = i
      total += (nd >= 2 && g[r] >= 128) ? n / (l[r] * l[c]) * (g[r] + g[c]) : n }
    END { print total * 4 }'
}
e=$(expected_te)
for d in 0 1 2 3; do
    a=$(opt_bytes tpep $d)
    check "tensor=2 x expert=2 device $d: optimizer $a B = $e B from its piece" test -n "$a" -a "$a" = "$e"
done

echo "== deepseek-tiny (MLA, shared expert, dense first layer, routing bias): the same bits on 1 device, fsdp=2, data=2, tensor=2 x expert=2"
run ds deepseek-tiny per_device_batch_size=4
run ds_fsdp deepseek-tiny per_device_batch_size=2 ici_fsdp_parallelism=2
run ds_data deepseek-tiny per_device_batch_size=2 ici_data_parallelism=2
check "deepseek fsdp=2: $(bits ds_fsdp)" same ds_fsdp ds
check "deepseek data=2" same ds_data ds
run ds_te deepseek-tiny per_device_batch_size=1 ici_tensor_parallelism=2 ici_expert_parallelism=2
check "deepseek tensor=2 x expert=2" same ds_te ds

echo "== ZeRO-1 (shard_optimizer_over_data): the same bits; each replica's state from its piece"
run z1 mixtral-tiny per_device_batch_size=2 ici_data_parallelism=2 shard_optimizer_over_data=true
run z1ft mixtral-tiny per_device_batch_size=1 ici_data_parallelism=2 ici_fsdp_parallelism=2 shard_optimizer_over_data=true
run z1te mixtral-tiny per_device_batch_size=1 ici_data_parallelism=2 ici_tensor_parallelism=2 shard_optimizer_over_data=true
check "data=2 + ZeRO-1" same z1 one
check "data=2 x fsdp=2 + ZeRO-1" same z1ft one
check "data=2 x tensor=2 + ZeRO-1" same z1te one
# A replica keeps a full tensor's state for the elements of its piece and a factored
# tensor's whole where its piece meets it: fsdp's rule with the replicas as the ranks, on
# the shard cut into data=2 pieces (padded as fsdp=2 pads, to a multiple of 2 x 256).
for d in 0 1; do
    e=$(expected 2 $d); a=$(opt_bytes z1 $d)
    check "data=2 ZeRO-1 device $d: optimizer $a B = $e B from the shapes" test -n "$a" -a "$a" = "$e"
done
summary
