#!/usr/bin/env bash
# tests/strict.sh: device=cpu_strict (kernels/strict.h, docs/gpu.md#the-strict-mode-devicecpu_strict), the
# check without a GPU that host code reads and writes device data only through the backend.
# 1. It runs the CPU kernels, so its losses are the cpu run's bit for bit (with profile=true
#    watching too, and on a mesh).
#    The parity dump too, tensor for tensor.
# 2. A planted host access stops it, naming the buffer (build/plant/train: a host read and a
#    host write of a layer's output, a memcpy in a collective), and the same plants train
#    on device=cpu (they are harmless there, as such bugs are until a GPU runs them).
# 3. The end-to-end, mesh, pipeline and checkpoint tests pass under it (TRAIN_ARGS).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train build/plant/train >/dev/null || { echo "build failed"; exit 1; }
T=$(mktemp -d /tmp/meshmoe-strict.XXXXXX)
trap 'rm -rf "$T"' EXIT
TRAIN=./train
FAST="steps=3 per_device_batch_size=2 max_target_length=32 sample_length=0 eval_steps=1 log_period=100"

echo "== the CPU kernels: the cpu run's loss bits"
for p in mixtral-tiny deepseek-tiny; do
    run $p $p
    run $p-strict $p device=cpu_strict
    check "$p: device=cpu_strict, loss bits as device=cpu: $(bits $p)" same $p $p-strict
    run $p-strict-prof $p device=cpu_strict profile=true
    check "$p: device=cpu_strict with profile=true, the same bits, and the profile's table" \
        bash -c 'same() { [ -n "$1" ] && [ "$1" = "$2" ]; }; same "$1" "$2" && grep -q "^| all kernels |" "$3"' _ \
        "$(bits $p)" "$(bits $p-strict-prof)" "$T/$p-strict-prof.out"
    MESH="ici_fsdp_parallelism=2 ici_expert_parallelism=2 num_devices=4"
    run $p-mesh $p $MESH
    run $p-mesh-strict $p $MESH device=cpu_strict
    check "$p: fsdp=2,expert=2 under device=cpu_strict, loss bits as device=cpu: $(bits $p-mesh)" same $p-mesh $p-mesh-strict
done

# One device catches every host access (kernels/strict.h): the paths the four scripts below
# take on meshes only, or not at all, on one device here (the load-balance loss's sequence
# sums, the dense path's capacity, offload, bf16, Adafactor; deepseek-tiny above updates its
# routing bias every step).
for args in "load_balance_loss_weight=0.01 sparse_matmul=false capacity_factor=1.0" \
            "remat_policy=minimal_offloaded optimizer_memory_host_offload=true dtype=bfloat16 opt_type=adafactor"; do
    run lb mixtral-tiny $args
    run lb-strict mixtral-tiny $args device=cpu_strict
    check "mixtral-tiny $args: device=cpu_strict, the cpu run's bits" same lb lb-strict
done

echo "== the parity dump (every weight, gradient, logit and routing choice) under device=cpu_strict"
for d in cpu cpu_strict; do
    ./train configs/deepseek-tiny.yml per_device_batch_size=2 max_target_length=32 parity_steps=2 \
        dump_parity=$T/dump-$d device=$d > $T/dump-$d.out 2>&1
done
check "deepseek-tiny: dump_parity's tensors equal device=cpu's, byte for byte" python3 - $T/dump-cpu $T/dump-cpu_strict <<'PY'
import json, struct, sys
def tensors(d):
    b = open(d + "/dump.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
diff = [k for k in a if a[k] != b.get(k)]
print(f"       {len(a)} tensors, {len(diff)} differ {diff[:3]}")
sys.exit(not a or sorted(a) != sorted(b) or bool(diff))
PY

echo "== a planted host access of device data stops the run, naming the buffer"
# planted KIND VERB BUFFER ARGS...: MESHMOE_PLANT=KIND must stop device=cpu_strict with exit 1
# and the message (VERB: read, wrote, or either for a memcpy) naming BUFFER, and train on
# device=cpu.
planted() {
    local kind=$1 verb=$2 buffer=$3; shift 3
    local out rc
    out=$(MESHMOE_PLANT=$kind build/plant/train configs/mixtral-tiny.yml $FAST "$@" device=cpu_strict 2>&1); rc=$?
    local msg; msg=$(printf '%s\n' "$out" | grep '^meshmoe: device=cpu_strict' | head -1)
    check "plant $kind: exit $rc, $(printf '%s' "$msg" | cut -c1-150)" \
        bash -c '[ "$1" -eq 1 ] && printf "%s" "$2" | grep -qE "host code ($3) device memory at 0x" &&
                 printf "%s" "$2" | grep -qF "(buffer \"$4\"" && printf "%s" "$2" | grep -qF "outside a kernel"' \
        _ "$rc" "$msg" "$verb" "$buffer"
    check "plant $kind: the stack is printed" bash -c 'printf "%s" "$1" | grep -q "^build/plant/train(+0x"' _ "$out"
    MESHMOE_PLANT=$kind build/plant/train configs/mixtral-tiny.yml $FAST "$@" device=cpu > $T/plant-cpu.out 2>&1
    check "plant $kind: harmless on device=cpu (trains, exit $?)" grep -q "^step .* | eval loss" $T/plant-cpu.out
}
planted read read "attention norm out"
planted write wrote "attention norm out"
# Each device's buffers are a region of their own, closed while the other devices compute.
planted read read "attention norm out" ici_fsdp_parallelism=4 num_devices=4
# The first collective of a step sums the token count into a staging buffer (base/collectives.c).
planted memcpy "read|wrote" "all-reduce pieces" ici_data_parallelism=2 num_devices=2

echo "== the end-to-end, mesh, pipeline and checkpoint tests under device=cpu_strict"
for s in e2e mesh pipeline checkpoint; do
    t0=$SECONDS
    # MESH_STEPS: the mesh and pipeline tests' runs take 2 steps rather than 5 here; the second step already
    # runs every kernel and collective the later ones do.
    MESH_STEPS=2 TRAIN_ARGS=device=cpu_strict bash tests/$s.sh > $T/$s.txt 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' $T/$s.txt | tail -1)
    grep '^  FAIL' $T/$s.txt
    check "tests/$s.sh with TRAIN_ARGS=device=cpu_strict: ${line:-no summary} (exit $rc, $((SECONDS - t0)) s)" \
        bash -c '[ "$1" -eq 0 ] && printf "%s" "$2" | grep -qE "^[1-9][0-9]* passed, 0 failed$"' _ "$rc" "$line"
done
summary
