#!/usr/bin/env bash
# tests/scaling.sh: do the device threads share the cores? The same global batch trained on
# one device and on ici_data_parallelism=2 (per_device_batch_size halved), the two runs taken
# in turns so that both see the same machine; each run's step times from step 2 on (step 1
# warms up), the median over all of them. Prints both with each run's own median (a run the
# machine slowed shows itself), the tokens/s ratio, and passes if data=2 reaches MIN_RATIO
# (1.7) times one device's tokens/s. Not part of `make test`: timings are this machine's,
# and only meaningful on a machine that is otherwise idle. `make bench` trains 8 x 256
# tokens; ARGS=max_target_length=256 measures at that shape.
#
#   bash tests/scaling.sh                       # mixtral-small, 8 sequences of 64 tokens
#   PRESET=deepseek-small ROUNDS=3 STEPS=6 MIN_RATIO=1.8 bash tests/scaling.sh
#   SINGLE_ARGS=num_threads=1 bash tests/scaling.sh   # against one device on one thread: data=2
#                                                     # then has twice the cores
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
PRESET=${PRESET:-mixtral-small}
BATCH=${BATCH:-8}                   # global batch, in sequences
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-2}
MIN_RATIO=${MIN_RATIO:-1.7}
ARGS=${ARGS:-max_target_length=64}
SINGLE_ARGS=${SINGLE_ARGS:-}         # the one-device run's own settings (num_threads=1)
DATA2_ARGS=${DATA2_ARGS:-}           # the data=2 run's own (shard_optimizer_over_data=true)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

median() { sort -n "$1" | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : 0) }'; }
runs() { paste -sd, "$1" | sed 's/,/, /g'; }
one() {   # one NAME ARGS...: a run; appends the step times (ms) of steps 2.. to $T/NAME.ms
          # and their median to $T/NAME.runs
    local name=$1; shift
    # shellcheck disable=SC2086
    $TRAIN configs/$PRESET.yml steps=$STEPS log_period=1 eval_steps=1 eval_interval=0 sample_length=0 $ARGS "$@" \
        > "$T/$name.out" 2>&1 || { fail "$name: run failed: $(tail -1 "$T/$name.out")"; return 1; }
    grep '^mesh:' "$T/$name.out" | head -1 | sed 's/^/    /'
    grep -E '^step +[0-9]+ \| loss' "$T/$name.out" | tail -n +2 | awk -F'|' '{ gsub(/ ms/, "", $6); print $6 + 0 }' > "$T/$name.run"
    cat "$T/$name.run" >> "$T/$name.ms"
    median "$T/$name.run" >> "$T/$name.runs"
}

for r in $(seq "$ROUNDS"); do
    # shellcheck disable=SC2086
    one single per_device_batch_size="$BATCH" $SINGLE_ARGS || break
    # shellcheck disable=SC2086
    one data2 per_device_batch_size=$((BATCH / 2)) ici_data_parallelism=2 $DATA2_ARGS || break
done
S=$(sed -n 's/^data: .* batch [0-9]* x [0-9]* x \([0-9]*\) tokens$/\1/p' "$T/single.out" | head -1)
m1=$(median "$T/single.ms"); m2=$(median "$T/data2.ms")
echo "| run | ms/step (median of steps 2..$STEPS, $ROUNDS rounds) | tokens/s | each run's median, ms |"
echo "|---|---|---|---|"
awk -v m="$m1" -v b="$BATCH" -v s="$S" -v a="$SINGLE_ARGS" -v r="$(runs "$T/single.runs")" 'BEGIN { printf "| 1 device, batch %d %s | %.1f | %.0f | %s |\n", b, a, m, b * s / (m / 1000), r }'
awk -v m="$m2" -v b="$BATCH" -v s="$S" -v a="$DATA2_ARGS" -v r="$(runs "$T/data2.runs")" 'BEGIN { printf "| data=2, batch %d x 2 %s | %.1f | %.0f | %s |\n", b / 2, a, m, b * s / (m / 1000), r }'
ratio=$(awk -v a="$m1" -v b="$m2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
echo "tokens/s ratio, data=2 over 1 device: $ratio"
check "data=2 reaches $MIN_RATIO x one device's tokens/s ($ratio)" awk -v r="$ratio" -v m="$MIN_RATIO" 'BEGIN { exit !(r >= m) }'
summary
