#!/usr/bin/env bash
# tests/gpu_selftest.sh: tests/gpu.sh's checks tried here, without a GPU (make test, after
# make gpu), so that the script a scarce GPU session runs is known to work: the CPU's
# references made by tests/gpu_ref.sh, then tests/gpu_checks.sh's parity, peaks and resume
# checks on the very same command lines with device=cpu (GPU_CHECKS_DEVICE=cpu), which must
# all pass (./train_gpu's CPU backend has ./train's bits); then a reference changed by a
# little must make its check fail; and tests/gpu.sh itself must stop with its table when
# there is no GPU. One case of each kind (GPU_ONLY below) keeps it to seconds.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
T=$(mktemp -d /tmp/meshmoe-gpuself.XXXXXX)
trap 'rm -rf "$T"' EXIT
export GPU_ONLY='mixtral-sparse|deepseek-bf16|deepseek-bf16\+megablox|mixtral-fsdp2|mixtral-offload|mixtral-muon|deepseek-resume' GPU_REF=$T/ref GPU_CHECKS_DEVICE=cpu
[ -x ./train_gpu ] || { fail "no ./train_gpu: run make gpu first"; summary; exit 1; }

out=$(bash tests/gpu_ref.sh "$T/ref" 2>&1); rc=$?
check "tests/gpu_ref.sh made the references (exit $rc): $(printf '%s' "$out" | tail -1)" test $rc -eq 0
last() { printf '%s\n' "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1; }
checks="parity peaks resume"
# the GPU trainer over processes, where OpenMPI is here (make gpu-mpi)
command -v mpicc > /dev/null && command -v mpirun > /dev/null && make -s gpu-mpi > /dev/null 2>&1 && checks="$checks mpi"
for c in $checks; do
    out=$(bash tests/gpu_checks.sh $c "$T/w" 2>&1); rc=$?
    [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -E 'FAIL|\|' | head -10
    check "gpu_checks.sh $c with device=cpu against ./train's references: exit $rc, $(last "$out")" \
        sh -c '[ "$1" -eq 0 ] && echo "$2" | grep -qE "^[1-9][0-9]* passed, 0 failed$"' _ $rc "$(last "$out")"
done

# Planted differences: a step loss 2e-5 relative off (over the 1e-5 bound), a peak 256
# bytes off: the checks must fail and name them.
python3 - "$T/ref" <<'PY'
import json, sys
sys.path.insert(0, "tests")
import gpu_compare as g
ref = sys.argv[1]
t = g.read(ref + "/parity/mixtral-sparse.st")
a = g.floats(t["c/step_losses"]); a[4] *= 1 + 2e-5
t["c/step_losses"] = (t["c/step_losses"][0], t["c/step_losses"][1], a.tobytes())
g.write(ref + "/parity/mixtral-sparse.st", t)
p = ref + "/mesh/mixtral-fsdp2.jsonl"
lines = [json.loads(l) for l in open(p)]
lines[1]["devices"][1]["peak_bytes_by_tag"]["comm"] += 256
open(p, "w").write("".join(json.dumps(l) + "\n" for l in lines))
p = ref + "/mesh/mixtral-offload.jsonl"
lines = [json.loads(l) for l in open(p)]
lines[0]["devices"][0]["host_transfer_bytes"]["to_host"] += 64
open(p, "w").write("".join(json.dumps(l) + "\n" for l in lines))
PY
out=$(bash tests/gpu_checks.sh parity "$T/w" 2>&1); rc=$?
check "a step loss planted 2e-5 off fails the parity check: $(printf '%s' "$out" | grep -m1 FAIL | cut -c1-110)" \
    sh -c '[ "$1" -ne 0 ] && printf "%s" "$2" | grep -q "FAIL c/step_losses .*first bad index 4"' _ $rc "$out"
out=$(bash tests/gpu_checks.sh peaks "$T/w" 2>&1); rc=$?
check "a peak planted 256 bytes off fails the peaks check: $(printf '%s' "$out" | grep -m1 FAIL | cut -c1-110)" \
    sh -c '[ "$1" -ne 0 ] && printf "%s" "$2" | grep -q "FAIL step 1 device 1: peak_bytes_by_tag .*comm"' _ $rc "$out"
check "offload's copies planted 64 bytes off fail the peaks check: $(printf '%s' "$out" | grep FAIL | grep -m1 host_transfer | cut -c1-110)" \
    sh -c 'printf "%s" "$1" | grep -q "FAIL step 0 device 0: host_transfer_bytes .*to_host"' _ "$out"

# The workspace check on the CPU's run (no cuBLAS: 0 bytes under the tag) must fail when
# asked for cuBLAS's sizes, as on a GPU a run without the workspace would.
out=$(python3 tests/gpu_compare.py workspace "$T/w/mesh/mixtral-fsdp2-cublas.jsonl" 4194304,33554432 2>&1); rc=$?
check "a workspace of 0 bytes fails the check for cuBLAS's: $(printf '%s' "$out" | grep -m1 FAIL | cut -c1-110)" \
    sh -c '[ "$1" -ne 0 ] && printf "%s" "$2" | grep -q "FAIL step 0 device 0: peak bytes under the tag workspace 0"' _ $rc "$out"

# Without a GPU the session's script fails every step that needs one, quickly, and prints
# its table (the mesh step's runs each stop at the device check).
if ! ls /dev/nvidia0 > /dev/null 2>&1; then
    t0=$SECONDS
    out=$(GPU_CHECKS_DEVICE=gpu bash tests/gpu.sh "$T/session" 2>&1); rc=$?
    check "without a GPU, tests/gpu.sh exits $rc in $((SECONDS - t0)) s with its table: $(printf '%s\n' "$out" | grep -m1 '^parity')" \
        sh -c '[ "$1" -ne 0 ] && printf "%s\n" "$2" | grep -q "^parity .*FAIL" && printf "%s\n" "$2" | tail -1 | grep -q "^total"' \
        _ $rc "$out"
fi
summary
