#!/usr/bin/env bash
# tests/state.sh: the model state each device holds, measured by its allocator, equals the
# closed form of fp32 AdamW exactly (4 bytes each of weight, gradient, mu and nu).
#
# P  = the model's parameters (printed: "parameters: P (stored padded for fsdp=F zero1=Z: P')");
# P' = the same floats once each unit (embedding, each layer, head) is padded with zeros
#      to a multiple of F*Z*256 floats, so that it cuts into F fsdp shards of Z ZeRO-1
#      pieces each (sharding/fsdp.h). Nothing is padded when nothing is split (P' = P).
# Per device, with N = data*fsdp = 4 devices:
#   data=4 (replicated)          16P                (P' = P)
#   fsdp=4                       16P'/4
#   data=4 + ZeRO-1              8P' + 8P'/4        (weights and grads whole, moments cut 4 ways)
#   data=2 fsdp=2 + ZeRO-1       8P'/2 + 8P'/4      (weights and grads 1/F, moments 1/(F*Z))
# The figures are the live bytes of the tags params + grads + optimizer after a step
# (metrics_file, every device); mixtral-tiny has no parameter-tagged state besides the
# weights (DeepSeek's routing bias would add L*E*4 bytes to params).
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-state.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=1 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=64 log_period=100"

# state NAME FORMULA SPLIT ARGS...: FORMULA is an awk expression in P and Pp (P'), both from
# the shapes (lib.sh's mixtral_tiny_params, each unit split SPLIT = fsdp x zero1 ways); the
# trainer's "parameters:" line must say the same.
state() {
    local name=$1 formula=$2 split=$3; shift 3
    if ! $TRAIN configs/mixtral-tiny.yml "$@" $FAST metrics_file=$T/m.jsonl > $T/out 2>&1; then
        fail "$name: run failed: $(tail -1 $T/out)"; return
    fi
    local P Pp
    read -r P Pp <<<"$(mixtral_tiny_params $split)"
    check "$name: the trainer counts P=$P, P'=$Pp as the shapes do" grep -q "^parameters: $P (stored padded for .*: $Pp)$" $T/out
    # One number per device: live params + grads + optimizer bytes.
    local got
    got=$(grep -o '"live_bytes_by_tag": {[^}]*}' $T/m.jsonl |
        sed 's/.*"params": \([0-9]*\), "grads": \([0-9]*\), "optimizer": \([0-9]*\),.*/\1 \2 \3/' |
        awk '{ printf "%.0f ", $1 + $2 + $3 }')
    local want
    want=$(awk -v P="$P" -v Pp="$Pp" "BEGIN { printf \"%.0f\", $formula }")
    local ndev bad ok=1
    ndev=$(wc -w <<<"$got")
    bad=$(tr ' ' '\n' <<<"$got" | grep -v '^$' | grep -cvx "$want")
    [ "$ndev" -eq 4 ] && [ "$bad" -eq 0 ] || ok=0
    printf '  %-24s P=%s P\x27=%s  %-16s = %s bytes; measured per device: %s\n' "$name" "$P" "$Pp" "$formula" "$want" "$got"
    check "$name: all 4 devices hold exactly $formula = $want bytes" [ "$ok" -eq 1 ]
}

echo "== model state per device (params + grads + optimizer) = fp32 AdamW closed form, mixtral-tiny"
state "data=4"                 "16*P"          1 ici_data_parallelism=4 per_device_batch_size=2
# An unsplit layout is not padded.
P=$(mixtral_tiny_params 1 | cut -d' ' -f1)
check "data=4: P' = P = $P" grep -q "^parameters: $P (stored padded for fsdp=1 zero1=1: $P)" $T/out
state "fsdp=4"                 "16*Pp/4"       4 ici_fsdp_parallelism=4 per_device_batch_size=2
state "data=4+zero1"           "8*Pp + 8*Pp/4" 4 ici_data_parallelism=4 shard_optimizer_over_data=true per_device_batch_size=2
state "data=2,fsdp=2+zero1"    "8*Pp/2 + 8*Pp/4" 4 ici_data_parallelism=2 ici_fsdp_parallelism=2 \
    shard_optimizer_over_data=true per_device_batch_size=2
summary
