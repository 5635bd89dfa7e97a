#!/usr/bin/env bash
# tests/memory_tables.sh (make tables): the measured per-device memory tables of the
# sharding chapter, from real runs of mixtral-small (a few steps each; the figures are the
# allocator's peaks of the last step, read from metrics_file):
#   1. FSDP: fsdp = 1, 2, 4, 8 with the same global batch: peak per device by tag, step time;
#   2. pipeline, 4 stages: per-stage peak by tag for ppermute vs slice, save-list on/off,
#      gpipe vs 1f1b, and pipeline_fsdp_ag_once off/on (stage=4 x fsdp=2), with the
#      communication bytes; the bubble printed by the trainer next to its formula.
# Timings are this machine's and move with its load; memory does not.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train}
STEPS=${STEPS:-3}
C=configs/mixtral-small.yml
S=${SEQ:-64}   # tokens per sequence (short, so that fsdp=8 on 2 cores stays quick)
T=$(mktemp -d /tmp/meshmoe-tables.XXXXXX)
trap 'rm -rf "$T"' EXIT

run() {   # run NAME ARGS...: STEPS steps with a metrics file $T/NAME.jsonl
    local name=$1; shift
    "$TRAIN" $C steps=$STEPS max_target_length=$S eval_steps=1 eval_interval=0 sample_length=0 \
        metrics_file="$T/$name.jsonl" "$@" > "$T/$name.log" 2>&1 || { echo "run $name failed:"; tail -n 3 "$T/$name.log"; exit 1; }
}

# table KIND NAME... : one markdown row per run from the last metrics line.
table() {
    local kind=$1; shift
    python3 - "$kind" "$T" "$@" <<'EOF'
import json, sys
kind, d, names = sys.argv[1], sys.argv[2], sys.argv[3:]
mib = lambda b: f"{b / 2**20:.2f}"
tags = ["params", "grads", "optimizer", "activations", "temp", "comm"]
for name in names:
    lines = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    last = lines[-1]
    ms = sorted(l["ms"] for l in lines[1:] or lines)[len(lines[1:] or lines) // 2]
    devs = last["devices"]
    if kind == "fsdp":
        p = max(devs, key=lambda x: x["peak_bytes"])
        sent = sum(sum(x["comm_bytes_sent"].values()) for x in devs) / len(devs)
        print(f"| {name} | {mib(p['peak_bytes'])} | " + " | ".join(mib(p["peak_bytes_by_tag"][t]) for t in tags) +
              f" | {mib(sent)} | {ms / 1000:.2f} | {last['loss_bits']} |")
    else:   # pipeline: one row per stage (the devices of a stage: the largest peak)
        stages = 4
        per = len(devs) // stages
        for s in range(stages):
            p = max(devs[s * per:(s + 1) * per], key=lambda x: x["peak_bytes"])
            sent = sum(p["comm_bytes_sent"].values())
            print(f"| {name} | {s} | {mib(p['peak_bytes'])} | " +
                  " | ".join(mib(p["peak_bytes_by_tag"][t]) for t in tags) + f" | {mib(sent)} | {last['loss_bits']} |")
EOF
}

PARTS=${TABLES:-fsdp pipeline}   # TABLES=fsdp or TABLES=pipeline: one table only
if [[ " $PARTS " == *" fsdp "* ]]; then
echo "## FSDP on mixtral-small (global batch 8 x $S tokens, $STEPS steps; MiB per device, the largest)"
echo
run "1 device" per_device_batch_size=8
for f in 2 4 8; do run "fsdp=$f" ici_fsdp_parallelism=$f per_device_batch_size=$((8 / f)); done
echo "| mesh | peak | params | grads | optimizer | activations | temp | comm | sent per device per step | s/step | loss bits (last step) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
table fsdp "1 device" "fsdp=2" "fsdp=4" "fsdp=8"
echo
fi
[[ " $PARTS " == *" pipeline "* ]] || exit 0

echo "## Pipeline, mixtral-small on 4 stages (8 microbatches of 1 sequence x $S tokens; MiB)"
echo
P="ici_pipeline_parallelism=4 per_device_batch_size=2 num_pipeline_microbatches=8"
run "gpipe ppermute" $P
run "gpipe slice" $P pipeline_shift_impl=slice
run "save-list off" $P pipeline_save_decoder_layer_input=false
run "1f1b" $P pipeline_schedule=1f1b
Q="ici_pipeline_parallelism=4 ici_fsdp_parallelism=2 per_device_batch_size=2 num_pipeline_microbatches=8"   # 16 sequences, 8 per fsdp shard
run "fsdp=2 ag_once off" $Q
run "fsdp=2 ag_once on" $Q pipeline_fsdp_ag_once=true
run "1 device (reference)" per_device_batch_size=8
echo "| run | stage | peak | params | grads | optimizer | activations | temp | comm | sent per step | loss bits (last step) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
table pipeline "gpipe ppermute" "gpipe slice" "save-list off" "1f1b" "fsdp=2 ag_once off" "fsdp=2 ag_once on"
echo
echo "1 device, same batch: loss bits (last step) $(grep -o '"loss_bits": "[^"]*"' "$T/1 device (reference).jsonl" | tail -1 | cut -d'"' -f4)"
echo
echo "Schedules and bubbles as the trainer prints them:"
for name in "gpipe ppermute" "1f1b"; do grep -A1 -E "^pipeline:|bubble" "$T/$name.log" | grep -E "^pipeline:|bubble" ; done
"$TRAIN" $C $P num_pipeline_repeats=2 num_pipeline_microbatches=8 base_num_decoder_layers=8 steps=1 dry_run=true max_target_length=$S \
    eval_steps=1 sample_length=0 2>&1 | grep -E "^pipeline:|bubble"
"$TRAIN" $C $P num_pipeline_repeats=2 num_pipeline_microbatches=8 base_num_decoder_layers=8 steps=1 dry_run=true max_target_length=$S \
    eval_steps=1 sample_length=0 pipeline_schedule=1f1b 2>&1 | grep -E "^pipeline:|bubble"
