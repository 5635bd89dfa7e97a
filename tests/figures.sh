#!/usr/bin/env bash
# tests/figures.sh: `./train figure` (sweep/figure.c), the figures of the course. Each kind
# is drawn from a real one-step run (or a schedule) and must be well-formed XML whose
# numbers are the run's own: the peaks drawn equal the peaks the metrics measured, the
# schedule's cells and bubble equal the closed form for gpipe (idle 2*P*(P-1) of
# 2*P*(M+P-1) stage-ticks). Bad input: one message, no SVG written.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-figures.XXXXXX)
trap 'rm -rf "$T"' EXIT

xml_ok() {   # xml_ok FILE: parses as XML and is an <svg>
    if command -v xmllint > /dev/null; then xmllint --noout "$1" || return 1
    elif command -v python3 > /dev/null; then python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$1" || return 1
    fi
    grep -q '^<svg ' "$1" && tail -1 "$1" | grep -q '^</svg>$'
}
# mib BYTES: as the figures print it ("19.55 MiB").
mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
peak_of() { grep -o '"peak_bytes": [0-9]*' "$T/$1.jsonl" | head -1 | grep -o '[0-9]*$'; }   # step 0, highest device

ONE="configs/mixtral-tiny.yml steps=1 eval_steps=1 eval_interval=0 sample_length=0 max_target_length=32"
for n in 1 2; do
    $TRAIN $ONE ici_fsdp_parallelism=$n per_device_batch_size=$((4 / n)) memory_trace=$T/fsdp$n.csv \
        metrics_file=$T/fsdp$n.jsonl > $T/fsdp$n.out 2>&1 || fail "fsdp=$n run failed: $(tail -1 $T/fsdp$n.out)"
done
p1=$(mib "$(peak_of fsdp1)"); p2=$(mib "$(peak_of fsdp2)")

$TRAIN figure timelines $T/tl.svg "two runs" "1 device" $T/fsdp1.csv "fsdp=2" $T/fsdp2.csv > /dev/null
check "timelines: well-formed SVG" xml_ok $T/tl.svg
check "timelines: both panels, each peak the measured one ($p1, $p2)" \
    bash -c "grep -q '>1 device<' $T/tl.svg && grep -q '>fsdp=2<' $T/tl.svg && grep -q '>peak $p1<' $T/tl.svg && grep -q '>peak $p2<' $T/tl.svg"

$TRAIN figure peaks $T/pk.svg "fsdp" "1 device" $T/fsdp1.csv "fsdp=2" $T/fsdp2.csv > /dev/null
check "peaks: well-formed SVG" xml_ok $T/pk.svg
check "peaks: each bar ends with the measured peak ($p1, $p2)" \
    bash -c "grep -q '>$p1<' $T/pk.svg && grep -q '>$p2  (x' $T/pk.svg"

# gpipe, P=4 stages, M=8 microbatches: 2*(M+P-1) = 22 ticks, 24 of 88 stage-ticks idle,
# 32 forward and 32 backward cells.
$TRAIN figure schedule $T/gp.svg configs/mixtral-tiny.yml ici_pipeline_parallelism=4 num_pipeline_microbatches=8 \
    per_device_batch_size=2 > /dev/null
check "schedule: well-formed SVG" xml_ok $T/gp.svg
check "schedule: gpipe P=4 M=8 has 22 ticks and a bubble of 24 of 88 = 27.3%" \
    bash -c "grep -q '22 ticks<' $T/gp.svg && grep -q 'bubble: 24 of 88 stage-ticks idle = 27.3%' $T/gp.svg"
cells() { grep -c "$1" $T/gp.svg; }
check "schedule: 24 idle cells, 32 F and 32 B" \
    [ "$(cells 'fill="url(#idle)" stroke="white"')" -eq 24 -a "$(cells '>F<')" -eq 32 -a "$(cells '>B<')" -eq 32 ]

# The mesh-shape table of a sweep, here written by hand: two meshes, one refused.
cat > $T/sweep.md <<'MD'
## `./train sweep configs/mixtral-tiny.yml`: 3 steps per run

### Mesh shapes: every factorisation of 2 devices over data x fsdp x tensor x expert

| mesh | devices | result vs 1 device | peak bytes | params | grads | optimizer | activations | temp | sent per step | step ms (vs 1 device) |
|---|---|---|---|---|---|---|---|---|---|---|
| 1 device (baseline) | 1 | bit-identical | 3145728 | 1048576 | 1048576 | 2097152 | 524288 | 262144 | 0 | 10.0 (x1.00) |
| fsdp=2 | 2 | bit-identical | 2097152 (lowest device 1048576) | 524288 | 524288 | 1048576 | 262144 | 131072 | 5242880 | 12.0 (x1.20) |
| tensor=2 | 2 | not possible on this model: heads do not divide | - | - | - | - | - | - | - | - |
MD
$TRAIN figure meshes $T/ms.svg "meshes" $T/sweep.md > /dev/null
check "meshes: well-formed SVG" xml_ok $T/ms.svg
check "meshes: the peaks (3.00, 2.00 MiB), bytes sent (5.00 MiB) and the refused mesh" \
    bash -c "grep -q '>3.00 MiB<' $T/ms.svg && grep -q '>2.00 MiB<' $T/ms.svg && grep -q '>5.00 MiB<' $T/ms.svg &&
             grep -q '>not possible on this model<' $T/ms.svg"

expect_error "figure of a file that is not a trace" "not a memory_trace file" \
    $TRAIN figure timelines $T/bad.svg "t" "x" configs/mixtral-tiny.yml
check "no SVG written for the bad trace" [ ! -e $T/bad.svg ]
expect_error "meshes of a file with no mesh table" "has no mesh-shape table" \
    $TRAIN figure meshes $T/bad.svg "t" configs/mixtral-tiny.yml
expect_error "schedule without a pipeline" "ici_pipeline_parallelism must be at least 2" \
    $TRAIN figure schedule $T/bad.svg configs/mixtral-tiny.yml
expect_error "unknown figure" "'bars' is no figure" $TRAIN figure bars $T/bad.svg
summary
