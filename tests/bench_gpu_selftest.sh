#!/usr/bin/env bash
# tests/bench_gpu_selftest.sh: `make bench-gpu`'s report (tests/bench_gpu.py) tried here, without
# a GPU (make test), so that the script a scarce GPU session runs for its last minutes is known
# to read what the programs print and to write every row. The programs are stand-ins that
# print what their GPU runs print, with step times chosen here: the trainer (./train's own
# `describe` for the configs, canned step lines, peak and profile otherwise), the peers'
# python (the GPU's limits, PyTorch's and JAX's steps, PyTorch's SDPA lines) and
# nvidia-smi (an H200). The expected figures are worked out by hand from those times below;
# the model FLOPs per step are the ones docs/performance-gpu.md gives for the two presets.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
T=$(mktemp -d /tmp/meshmoe-benchself.XXXXXX)
trap 'rm -rf "$T"' EXIT
[ -x ./train ] || { fail "no ./train: run make first"; summary; exit 1; }

# The trainer: 8 steps, the first 900 ms, the others 300 ms (450 under bf16_storage=off,
# 900 with the attention on tiles, 250 with it by cuDNN); profile=true adds the family table;
# peak 50 GiB.
cat > "$T/train" << 'EOF'
#!/usr/bin/env bash
[ "$1" = describe ] && exec "$REAL_TRAIN" "$@"
for a; do [ "$a" = dry_run=true ] && exec "$REAL_TRAIN" "$@"; done   # (the planner: ./train's own)
ms=300.0 steps=8 profile=0
for a; do
    case $a in
        steps=*) steps=${a#steps=} ;;
        bf16_storage=off) ms=450.0 ;;
        gpu_attention=tiles) ms=900.0 ;;
        gpu_attention=cudnn) ms=250.0 ;;
        profile=true) profile=1 ;;
    esac
done
for ((i = 0; i < steps; i++)); do
    t=$ms; [ $i -eq 0 ] && t=900.0
    printf 'step %5d | loss %.4f | aux 0.0000 | lr 3.00e-04 | grad norm 1.000 | %7.1f ms |  27307 tok/s |\n' \
        $i "$((10 - i)).5" $t
done
if [ $profile = 1 ]; then
    echo "profile: device 0, mean of $((steps - 1)) steps after the first, $ms ms per step"
    echo "| kernel family | calls/step | ms/step | % of step | GFLOP/step | GB/step | GFLOP/s | GB/s |"
    echo "|---|---|---|---|---|---|---|---|"
    echo "| matmul | 760 | 148.20 | 49.4% | 42830.0 | 120.0 | 289000.0 | 809.7 |"
    echo "| attention | 16 | 49.20 | 16.4% | 1920.0 | 10.0 | 39024.4 | 203.3 |"
    echo "| cast | 853 | 45.80 | 15.3% | 0.0 | 146.6 | 0.0 | 3200.9 |"
fi
echo "device 0 peak 50.00 GiB: params 11.37 GiB grads 11.37 GiB"
case " $* " in *" gpu_attention=cudnn "*)
    echo "device 0: gpu_attention=cudnn: cuDNN ran 112 attention calls, the tensor-core kernels 0" ;; esac
lt=1216; [ "${MESHMOE_CUBLAS_LT:-on}" = off ] && lt=0
echo "device 0: cuBLASLt ran $lt of its 16-bit products, cublasGemmEx $((1216 - lt)); its heuristic asked 40 times, 0 calls refused a kept algorithm"
EOF
# The peers' python: -c (the limits), -u bench_peers.py WHICH DESCRIBE STEPS (a peer's steps:
# the first 5 s, then torch 0.5 s, torch.compile 0.45, jax 0.4), attention_peer.py FILES.
cat > "$T/python" << 'EOF'
#!/usr/bin/env bash
case $1 in
    -c) printf 'matmul bf16 TFLOP/s 778.1\nmatmul fp32 TFLOP/s 51.2\ncopy GB/s 4136.0\non stand-in GPU\n' ;;
    -u) case $3 in torch) s=0.5 ;; torch-compile) s=0.45 ;; *) s=0.4 ;; esac
        for ((i = 0; i < $5; i++)); do t=$s; [ $i -eq 0 ] && t=5.0; echo "step $i seconds $t loss 10.5"; done
        printf 'params 3050000000\npeak_bytes 53687091200\n'
        [ "$3" = jax ] && [ -d "${BENCH_XLA_DUMP:-}" ] && echo "xla ragged_dot: 2 of 9 stand-in ops in $BENCH_XLA_DUMP"
        true ;;
    *attention_peer.py) shift
        for p; do
            printf 'describe %s\nshapes B 4\nlayer_tflop 0.2405\n' "$p"
            echo "sdpa flash forward_ms 1.000 forward_backward_ms 3.000"
            echo "sdpa cudnn forward_ms 0.800 forward_backward_ms 2.500"
            echo "sdpa efficient refused: RuntimeError: no kernel for these shapes"
        done ;;
esac
EOF
printf '#!/bin/sh\necho "NVIDIA H200"\n' > "$T/nvidia-smi"
chmod +x "$T/train" "$T/python" "$T/nvidia-smi"

out=$(PATH="$T:$PATH" REAL_TRAIN=./train TRAIN="$T/train" PEERS="$T/python" NCU=/nonexistent BUDGET=300 \
      BENCH_LOG="$T/bench.log" python3 tests/bench_gpu.py 2>&1); rc=$?
check "tests/bench_gpu.py exits 0 without a traceback (exit $rc)" \
    sh -c '[ "$1" -eq 0 ] && ! printf "%s" "$2" | grep -q Traceback' _ $rc "$out"
[ $rc -ne 0 ] && printf '%s\n' "$out" | tail -15
has() {   # has DESCRIPTION LINE: the report holds LINE exactly
    check "$1: $2" sh -c 'printf "%s\n" "$1" | grep -qxF -- "$2"' _ "$out" "$2"
}
has "the GPU and its peak" "GPU: NVIDIA H200; dense bf16 peak 989.4 TFLOP/s"
# mixtral-medium, 46.11 TFLOP a step of 8192 tokens: 300 ms is 27307 tokens/s and 46.11 /
# 0.3 / 989.4 = 15.5% MFU; PyTorch's 0.5 s 16384 and 9.3%, 1.67 times meshmoe's step;
# torch.compile 0.45 s 18204, 10.4%, 1.50; JAX 0.4 s 20480, 11.7%, 1.33; the variant
# without 16-bit storage 450 ms 18204, 10.4%, 1.50.
M="| mixtral-medium"
has "meshmoe's row" "$M | meshmoe gpu_matmul=cublas_bf16 gpu_attention=tensor_cores | 0.300 | 27307 | 50.00 GiB | 15.5% | 1.00 | 10.5000 -> 3.5000 |"
has "PyTorch's row" "$M | PyTorch eager | 0.500 | 16384 | 50.00 GiB | 9.3% | 1.67 | 10.5 -> 10.5 |"
has "torch.compile's row" "$M | torch.compile | 0.450 | 18204 | 50.00 GiB | 10.4% | 1.50 | 10.5 -> 10.5 |"
has "JAX's row" "$M | JAX jit | 0.400 | 20480 | 50.00 GiB | 11.7% | 1.33 | 10.5 -> 10.5 |"
has "the variant without 16-bit storage" \
    "$M | meshmoe, bf16_storage=off, profile=true | 0.450 | 18204 | 50.00 GiB | 10.4% | 1.50 | 10.5000 -> 3.5000 |"
has "the tiles' row" "$M | meshmoe, gpu_attention=tiles | 0.900 | 9102 | 50.00 GiB | 5.2% | 3.00 | 10.5000 -> 3.5000 |"
# cuDNN's attention: 250 ms is 32768 tokens/s, 46.11 / 0.25 / 989.4 = 18.6%, 0.83 of meshmoe's step.
has "cuDNN's attention row" \
    "$M | meshmoe, gpu_attention=cudnn, profile=true | 0.250 | 32768 | 50.00 GiB | 18.6% | 0.83 | 10.5000 -> 3.5000 |"
has "cuDNN's attention's kernel table" "mixtral-medium, meshmoe, gpu_attention=cudnn, profile=true: profile: device 0, mean of 7 steps after the first, 250.0 ms per step"
# deepseek-medium, 29.50 TFLOP a step: 29.50 / 0.3 / 989.4 = 9.9%.
has "deepseek-medium's meshmoe row" \
    "| deepseek-medium | meshmoe gpu_matmul=cublas_bf16 gpu_attention=tensor_cores | 0.300 | 27307 | 50.00 GiB | 9.9% | 1.00 | 10.5000 -> 3.5000 |"
has "the model FLOPs of mixtral-medium" \
    "|  | (mixtral-medium: 46.11 TFLOP per step, 8192 tokens, 8 steps a system, the first 3 not counted) | | | | | | |"
rows=$(printf '%s\n' "$out" | grep -c '^| mixtral-medium |')
check "every system has its mixtral-medium row: $rows of 14" test "$rows" -eq 14
# The JAX peer is given a directory for XLA's dumps, and its lowering of ragged_dot is reported.
check "how XLA lowered the JAX peer's ragged_dot, under the table" \
    sh -c 'printf "%s\n" "$1" | grep -q "^mixtral-medium, JAX jit: 2 of 9 stand-in ops in .*/meshmoe-xla\."' _ "$out"
# bench_peers.py's reading of XLA's dumps, on dumps written here: the step's module before
# and after XLA's optimizations (9 ragged-dot before, 3 after), other modules not counted.
mkdir -p "$T/xla"
for i in 1 2 3 4 5 6 7 8 9; do echo "  %r$i = bf16[8,4] ragged-dot(%a, %b, %g)"; done > "$T/xla/module_0007.jit_step.before_optimizations.txt"
for i in 1 2 3; do echo "  %r$i = bf16[8,4] ragged-dot(%a, %b, %g)"; done > "$T/xla/module_0007.jit_step.sm_9.0_gpu_after_optimizations.txt"
echo "  %x = bf16[8,4] ragged-dot(%a, %b, %g)" > "$T/xla/module_0003.jit_other.before_optimizations.txt"
mkdir -p "$T/xla0"; echo "  %d = f32[8,4] dot(%a, %b)" > "$T/xla0/module_0001.jit_step.before_optimizations.txt"
cp "$T/xla0/module_0001.jit_step.before_optimizations.txt" "$T/xla0/module_0001.jit_step.cpu_after_optimizations.txt"
got0=$(cd tests && python3 -c 'import sys, bench_peers; print(bench_peers.ragged_dots(sys.argv[1]))' "$T/xla0" 2>&1)
check "  ... and says when the step's HLO has none: $got0" \
    test "$got0" = "xla ragged_dot: the step's HLO holds no ragged-dot op: JAX lowered jax.lax.ragged_dot itself"
got=$(cd tests && python3 -c 'import sys, bench_peers; print(bench_peers.ragged_dots(sys.argv[1]))' "$T/xla" 2>&1)
check "bench_peers.py counts the step's ragged_dot ops in XLA's dumps: $got" \
    test "$got" = "xla ragged_dot: 3 of the step's 9 ragged_dot ops kept as grouped products after XLA's optimizations, 6 expanded to zero-padded dense products"
# Twice the tokens a step in the same 0.300 s: twice the FLOPs and tokens/s, half the time a token.
has "the batch of twice the tokens: its own FLOPs, its time per token" \
    "| mixtral-medium | meshmoe, per_device_batch_size=8 (2 x the tokens; step time / meshmoe's per token) | 0.300 | 54613 | 50.00 GiB | 31.1% | 0.50 | 10.5000 -> 3.5000 |"
# The attention family's floor: 1920 GFLOP at 778.1 TFLOP/s is 2.47 ms, 5% of its 49.20.
has "the attention family against its floor" \
    "| attention | 16 | 49.20 | 16.4% | 39024.4 | 203.3 | 2.47 (FLOPs) | 5% |"
# SDPA: the fastest backend (cuDNN's 2.5 ms a layer) times 8 layers is 20.0 ms; 49.2 / 20.0.
has "PyTorch's SDPA beside the attention family" \
    "8 layers' forward and backward by \`cudnn\`: 20.0 ms a step; meshmoe's attention family in its profile: 49.2 ms (16 calls), 2.46 times as long"
# The planner's line, ./train's own plan of meshmoe's run (58.15 GiB: the peak the sixth GPU run
# measured for mixtral-medium with these keys, docs/performance-gpu.md), beside the stand-in's peak.
has "the planner beside the measured peak" \
    "mixtral-medium: the planner (dry_run=true hbm_capacity=80GB, before the runs): FITS: largest device peak 62440641632 B (58.15 GiB) <= hbm_capacity 80000000000 B (74.51 GiB); meshmoe's run measured: 50.00 GiB"
has "a backend that refused says so" "sdpa efficient refused: RuntimeError: no kernel for these shapes"
# Which way each row's products and attention calls went, as the trainer said it.
has "the default's products by cuBLASLt, under the table" \
    "mixtral-medium, meshmoe gpu_matmul=cublas_bf16 gpu_attention=tensor_cores: cuBLASLt ran 1216 of its 16-bit products, cublasGemmEx 0; its heuristic asked 40 times, 0 calls refused a kept algorithm"
has "the cuDNN row's attention calls by cuDNN" \
    "deepseek-medium, meshmoe, gpu_attention=cudnn, profile=true: gpu_attention=cudnn: cuDNN ran 112 attention calls, the tensor-core kernels 0"
has "the cublasGemmEx row's products by cublasGemmEx" \
    "mixtral-medium, meshmoe, MESHMOE_CUBLAS_LT=off: cuBLASLt ran 0 of its 16-bit products, cublasGemmEx 1216; its heuristic asked 40 times, 0 calls refused a kept algorithm"

# The wrapper the GPU session calls (tests/gpu_bench.sh OUTDIR), on the same stand-ins: its
# table last on stdout and in OUTDIR/table.md, the log beside it.
out=$(PATH="$T:$PATH" REAL_TRAIN=./train TRAIN="$T/train" PEERS="$T/python" NCU=/nonexistent BUDGET=300 \
      bash tests/gpu_bench.sh "$T/out" 2>&1); rc=$?
check "tests/gpu_bench.sh exits 0 (exit $rc)" test $rc -eq 0
has "its table's meshmoe row on stdout" \
    "$M | meshmoe gpu_matmul=cublas_bf16 gpu_attention=tensor_cores | 0.300 | 27307 | 50.00 GiB | 15.5% | 1.00 | 10.5000 -> 3.5000 |"
check "the same table in OUTDIR/table.md, the log in OUTDIR/bench.log" \
    sh -c 'grep -q "^| deepseek-medium | JAX jit | 0.400 |" "$1/table.md" && grep -q "^==== probe" "$1/bench.log"' _ "$T/out"
summary
