#!/usr/bin/env bash
# tests/overlap.sh: overlap_collectives (sharding/overlap.h), the prefetch of the next FSDP
# unit's all-gather on a helper thread. The losses are those of the run without it, bit for
# bit (the same gathers of the same shards); the same collectives move the same bytes; the
# params tag peaks exactly one gathered layer higher, on every device, a figure computed
# here from the model's shapes; the dry-run plan equals the measured step; without FSDP it
# changes nothing; a bad value gives one clear message. (Step time: tests/overlap_bench.sh.)
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-overlap.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=2 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=32 per_device_batch_size=1"

run() {   # run NAME ARGS...: mixtral-tiny into $T/NAME.jsonl
    local name=$1; shift
    if ! $TRAIN configs/mixtral-tiny.yml $FAST "$@" metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        fail "$name: run failed: $(tail -1 $T/$name.out)"; : > $T/$name.jsonl
    fi
}
# Device D's peak of tag TAG in the last step; and its all-gather bytes received.
tag() { tail -1 "$T/$1.jsonl" | grep -o "\"device\": $2, \"peak_bytes\": [0-9]*, \"peak_bytes_by_tag\": {[^}]*}" |
    grep -o "\"$3\": [0-9]*" | grep -o '[0-9]*$'; }
gathered() { tail -1 "$T/$1.jsonl" | grep -o '"comm_bytes_received": {"all-gather": [0-9]*' | grep -o '[0-9]*$' | tr '\n' ' '; }

# One gathered decoder layer of mixtral-tiny, from configs/mixtral-tiny.yml: two norms (D),
# q and o (D x H*hd), k and v (D x KV*hd), the gate (D x E), E experts' wi_0, wi_1, wo
# (3 x D x M), padded to a multiple of F*256 floats (sharding/fsdp.h). The embedding
# (V x D) and the head (D + D x V) are smaller, so the largest pair held at once is two
# layers: the extra bytes are one layer's.
D=128 H=4 KV=2 HD=32 E=4 M=256
layer=$((2 * D + 2 * D * H * HD + 2 * D * KV * HD + D * E + 3 * E * D * M))
expect_extra() { local mult=$(($1 * 256)); echo $(((layer + mult - 1) / mult * mult * 4)); }

extra_is() {   # extra_is OFF ON F: on every device, params peak(ON) - params peak(OFF) = one layer
    local want; want=$(expect_extra "$3")
    for ((d = 0; d < $3; d++)); do
        local a b; a=$(tag "$1" $d params); b=$(tag "$2" $d params)
        echo "    device $d: params peak $a -> $b bytes (+$((b - a)), expected +$want)"
        [ -n "$a" ] && [ $((b - a)) -eq "$want" ] || return 1
    done
}

for F in 2 4; do
    echo "== fsdp=$F ($layer floats per layer)"
    run off$F ici_fsdp_parallelism=$F
    run on$F ici_fsdp_parallelism=$F overlap_collectives=true
    check "fsdp=$F: losses bit-identical: $(bits on$F)" same on$F off$F
    check "fsdp=$F: the same all-gather bytes received per device: $(gathered on$F)" \
        [ -n "$(gathered on$F)" -a "$(gathered on$F)" = "$(gathered off$F)" ]
    check "fsdp=$F: the params peak is one gathered layer higher" extra_is off$F on$F $F
done

echo "== bf16, gradient accumulation, nested remat"
A="ici_fsdp_parallelism=2 dtype=bfloat16 gradient_accumulation_steps=2 per_device_batch_size=2 remat_nested_block=2"
# shellcheck disable=SC2086
run boff $A
# shellcheck disable=SC2086
run bon $A overlap_collectives=true
check "bf16 + accumulation + remat_nested_block: losses bit-identical: $(bits bon)" same bon boff

echo "== without FSDP it does nothing"
run doff ici_data_parallelism=2
run don ici_data_parallelism=2 overlap_collectives=true
same_peak() { same "$1" "$2" && [ -n "$(tag "$1" 0 params)" ] && [ "$(tag "$1" 0 params)" = "$(tag "$2" 0 params)" ]; }
check "data=2: losses bit-identical and the same peak" same_peak don doff

echo "== the dry-run plan equals the measured step"
peaks() { grep -o '"device": [0-9]*, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}, "live_bytes_by_tag": {[^}]*}' "$1"; }
$TRAIN configs/mixtral-tiny.yml $FAST ici_fsdp_parallelism=4 overlap_collectives=true steps=1 dry_run=true \
    metrics_file=$T/dry.jsonl > $T/dry.out 2>&1
run real ici_fsdp_parallelism=4 overlap_collectives=true steps=1
check "fsdp=4: plan = measured, byte for byte" [ -n "$(peaks $T/dry.jsonl)" -a "$(peaks $T/dry.jsonl)" = "$(peaks $T/real.jsonl)" ]

expect_error "a bad value" "overlap_collectives' wants true or false" \
    $TRAIN configs/mixtral-tiny.yml overlap_collectives=maybe
summary
