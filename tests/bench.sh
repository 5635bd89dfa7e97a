#!/usr/bin/env bash
# tests/bench.sh (make bench): step time, tokens/s and achieved matmul GFLOP/s of the
# -small presets, both MoE paths. Prints a markdown table. Timings are this machine's.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train}
STEPS=${STEPS:-6}
first=1
echo "| preset | path | ms/step (median of steps 2..$STEPS) | tokens/s | GFLOP/s | peak memory |"
echo "|---|---|---|---|---|---|"
for preset in mixtral-small deepseek-small; do
    for sparse in true false; do
        out=$($TRAIN configs/$preset.yml steps=$STEPS sparse_matmul=$sparse log_period=1 eval_steps=1 2>&1)
        # step lines: "step N | loss .. | .. | X ms | Y tok/s | Z GFLOP/s | peak P"
        stats=$(printf '%s\n' "$out" | grep -E '^step +[0-9]+ \| loss' | tail -n +2 |
            awk -F'|' '{ gsub(/ ms/,"",$6); gsub(/ tok\/s/,"",$7); gsub(/ GFLOP\/s/,"",$8); print $6, $7, $8 }' |
            sort -n | awk '{ a[NR]=$0 } END { print a[int((NR+1)/2)] }')
        peak=$(printf '%s\n' "$out" | grep -E '^step +[0-9]+ \| loss' | tail -1 | sed 's/.*peak //')
        [ $first = 1 ] && blas=$(printf '%s\n' "$out" | grep '^BLAS' | cut -c7-) && first=0
        read -r ms toks gf <<<"$stats"
        echo "| $preset | $([ $sparse = true ] && echo sparse || echo dense) | $ms | $toks | $gf | $peak |"
    done
done
echo
echo "BLAS: $blas"
