#!/usr/bin/env bash
# tests/gpu_ref.sh [DIR]: the CPU's references for tests/gpu.sh, made here with ./train (make
# gpu-carry runs it; default DIR build/gpu_ref), to be carried to the GPU machine with
# ./train_gpu, so that the GPU is compared with this machine's CPU runs and not with
# anything made there. The runs are tests/gpu_cases.sh's:
#   DIR/parity/NAME.st      the parity dump of each case, reduced to what is compared
#                           (losses, step 0's gradients, logits: tests/gpu_compare.py reduce)
#   DIR/mesh/NAME.jsonl     the metrics file of each mesh case (peak bytes by tag)
#   DIR/resume/NAME.jsonl   the metrics of each case's steps 2 and 3, resumed from its
#                           checkpoint of step 2
#   DIR/made.txt            what made them: the commit, ./train's kernels line, the CPU
set -eu
cd "$(dirname "$0")/.."
source tests/gpu_cases.sh
DIR=${1:-build/gpu_ref}
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-gpuref.XXXXXX)
trap 'rm -rf "$T"' EXIT
rm -rf "$DIR.new"
mkdir -p "$DIR.new/parity" "$DIR.new/mesh" "$DIR.new/resume"
run() {   # run LOG ARGS...: ./train, its output kept; stops the script with its tail if it fails
    local log=$1; shift
    $TRAIN "$@" > "$log" 2>&1 || { tail -5 "$log"; echo "gpu_ref: $TRAIN $* failed"; exit 1; }
}
while read -r name preset dtype args; do
    run "$T/$name.log" configs/$preset.yml dump_parity=$T/$name $PARITY_COMMON $args
    python3 tests/gpu_compare.py reduce $T/$name/dump.safetensors "$DIR.new/parity/$name.st" $dtype
    rm -rf "$T/$name"
done < <(cases "$PARITY_CASES")
while read -r name preset args; do
    run "$T/$name.log" configs/$preset.yml $MESH_COMMON $args metrics_file="$DIR.new/mesh/$name.jsonl"
done < <(cases "$MESH_CASES")
while read -r name preset _; do   # (the third column: the GPU check's bound)
    run "$T/$name.a.log" configs/$preset.yml $RESUME_COMMON run_steps=2 save_checkpoint=$T/$name.ck
    run "$T/$name.b.log" configs/$preset.yml $RESUME_COMMON load_checkpoint=$T/$name.ck \
        metrics_file="$DIR.new/resume/$name.jsonl"
done < <(cases "$RESUME_CASES")
{
    echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!tests/gpu*' 2>/dev/null || echo ' (with changes)')"
    grep -h -m1 "^kernels:" "$T"/*.log | head -1
    grep -m1 '^model name' /proc/cpuinfo
    date -u
    [ -z "${GPU_ONLY:-}" ] || echo "only the runs matching GPU_ONLY=$GPU_ONLY"
} > "$DIR.new/made.txt"
rm -rf "$DIR"
mv "$DIR.new" "$DIR"
echo "gpu_ref: $(find "$DIR" -type f | wc -l) files, $(du -sh "$DIR" | cut -f1) in $DIR"
