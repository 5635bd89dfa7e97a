#!/usr/bin/env bash
# tests/overlap_bench.sh: step time with and without overlap_collectives (the prefetch of
# the next FSDP unit's all-gather, sharding/overlap.h) on fsdp=2 and fsdp=4, for
# mixtral-tiny and a wider Mixtral (base_emb_dim=256, base_mlp_dim=1024: 16 MiB per gathered
# layer). A benchmark, not a test: it prints a markdown table of the median step time
# (steps 1.., the first step left out) and the params peak per device. Off and on runs
# alternate ROUNDS times so that a change in the machine's load hits both alike.
# Timings are this machine's; on a shared machine with few cores a helper thread competes
# with the device threads for the same cores, so the prefetch may not pay here.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train}
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-2}
T=$(mktemp -d /tmp/meshmoe-ovbench.XXXXXX)
trap 'rm -rf "$T"' EXIT
A="steps=$STEPS sample_length=0 eval_steps=1 eval_interval=0 log_period=100"
WIDE="base_emb_dim=256 base_mlp_dim=1024 head_dim=64"
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "| model | mesh | overlap_collectives | median ms/step | step times (ms) | params peak per device (bytes) |"
echo "|---|---|---|---|---|---|"
for model in tiny wide; do
    extra=""; [ $model = wide ] && extra=$WIDE
    for F in 2 4; do
        for o in false true; do : > "$T/$model$F$o.ms"; done
        for ((r = 0; r < ROUNDS; r++)); do
            for o in false true; do
                # shellcheck disable=SC2086
                $TRAIN configs/mixtral-tiny.yml $A $extra ici_fsdp_parallelism=$F per_device_batch_size=$((8 / F)) \
                    overlap_collectives=$o metrics_file="$T/m.jsonl" > /dev/null 2>&1 || { echo "run failed: $model F=$F $o"; exit 1; }
                grep -o '"ms": [0-9.]*' "$T/m.jsonl" | tail -n +2 | grep -o '[0-9.]*$' >> "$T/$model$F$o.ms"
                grep -o '"devices": \[{"device": 0, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {"params": [0-9]*' "$T/m.jsonl" |
                    tail -1 | grep -o '[0-9]*$' > "$T/$model$F$o.params"
            done
        done
        for o in false true; do
            echo "| mixtral-$model | fsdp=$F | $o | $(median < "$T/$model$F$o.ms") | $(tr '\n' ' ' < "$T/$model$F$o.ms") | $(cat "$T/$model$F$o.params") |"
        done
    done
done
