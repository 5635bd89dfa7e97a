#!/usr/bin/env bash
# tests/gpu.sh OUTDIR: the checks a GPU session runs, in one call of at most 8 minutes
# (docs/gpu.md). Nothing is built here: the binaries come from `make gpu` on a machine with
# nvcc and are carried along with the working tree (build/conformance_gpu links the CUDA
# runtime statically and needs only libc, libm and the GPU driver; cuBLAS is loaded when
# the test asks for it).
#   1. probe: nvidia-smi, ldd of the binary, compute-sanitizer, cuBLAS, python packages
#   2. conformance: build/conformance_gpu (every kernel family, CUDA against the CPU), twice
#      with fresh seeds
#   3. compute-sanitizer memcheck and racecheck on the conformance binary
# The full log goes to OUTDIR/gpu.log, the table to OUTDIR/summary.txt and, last, to stdout.
# The steps' limits add up to 450 s (60 + 60 + 60 + 150 + 120), under the 8 minutes of a call.
set -u
cd "$(dirname "$0")/.."
OUT=${1:?usage: tests/gpu.sh OUTDIR}
mkdir -p "$OUT"
LOG=$OUT/gpu.log
: > "$LOG"
BIN=build/conformance_gpu
ROWS=()   # "step|result|checks|seconds|note"

# step NAME LIMIT_S COMMAND...: runs the command under a time limit, its output into the log
# (and OUTDIR/NAME.out); the result is PASS when it exits 0, FAIL otherwise, TIMEOUT past
# the limit; the checks column is its "N passed, N failed" line when it prints one.
step() {
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS rc
    echo "==== $name: $*" >> "$LOG"
    timeout "$limit" bash -c '"$@"' "$name" "$@" > "$OUT/$name.out" 2>&1; rc=$?
    cat "$OUT/$name.out" >> "$LOG"
    local result=PASS note=""
    [ $rc -ne 0 ] && result=FAIL note="exit $rc"
    [ $rc -eq 124 ] && result=TIMEOUT note="over ${limit}s"
    local checks; checks=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/$name.out" | tail -1)
    local first; first=$(grep -m1 -E 'meshmoe:|FAIL|ERROR SUMMARY: [1-9]|Error' "$OUT/$name.out" | cut -c1-110)
    [ -n "$first" ] && note="$note ${first}"
    ROWS+=("$name|$result|${checks:--}|$((SECONDS - t0))|$note")
    echo "(exit $rc, $((SECONDS - t0)) s)" >> "$LOG"
}
skip() { ROWS+=("$1|SKIPPED|-|0|$2"); echo "==== $1: SKIPPED ($2)" >> "$LOG"; }

probe() {
    echo "-- date: $(date -u)"; echo "-- host: $(uname -a)"; nproc
    echo "-- nvidia-smi"; nvidia-smi || echo "nvidia-smi: not found or failed"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>/dev/null
    echo "-- ldd $BIN"; ldd "$BIN"
    echo "-- cuBLAS on the library path"; ldconfig -p 2>/dev/null | grep -E 'libcublas(Lt)?\.so' || echo "no libcublas in ldconfig"
    echo "-- compute-sanitizer"; local cs; cs=$(sanitizer); [ -n "$cs" ] && "$cs" --version || echo "not found"
    echo "-- CUDA toolkits"; ls -d /usr/local/cuda* 2>/dev/null
    echo "-- python"; python3 --version 2>&1
    python3 -m pip list 2>/dev/null | grep -iE 'jax|torch|nvidia|cuda|numpy|triton' || echo "pip: none of jax, torch, nvidia-*"
    timeout 30 python3 -c 'import jax; print("jax", jax.__version__, jax.devices())' 2>&1 | tail -1
    true
}
sanitizer() { command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1; }
export -f probe sanitizer   # step runs commands in a child bash under timeout
export BIN

if [ ! -x "$BIN" ]; then
    skip probe "no $BIN: run make gpu where nvcc is, and carry build/conformance_gpu"
else
    step probe 60 probe
    step conformance 60 "$BIN"
    step conformance_seed2 60 "$BIN"
    CS=$(sanitizer)
    if [ -z "$CS" ]; then
        skip memcheck "no compute-sanitizer on this machine"
        skip racecheck "no compute-sanitizer on this machine"
    else
        step memcheck 150 "$CS" --tool memcheck --leak-check full --error-exitcode 9 "$BIN"
        step racecheck 120 "$CS" --tool racecheck --error-exitcode 9 "$BIN"
    fi
fi

{
    printf '%-18s %-8s %-22s %6s  %s\n' step result checks seconds note
    for r in "${ROWS[@]}"; do
        IFS='|' read -r name result checks secs note <<< "$r"
        printf '%-18s %-8s %-22s %6s  %s\n' "$name" "$result" "$checks" "$secs" "$note"
    done
} > "$OUT/summary.txt"
echo "==== summary" >> "$LOG"
cat "$OUT/summary.txt" >> "$LOG"
cat "$OUT/summary.txt"
! grep -qE ' (FAIL|TIMEOUT) ' "$OUT/summary.txt"
