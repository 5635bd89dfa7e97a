#!/usr/bin/env bash
# tests/gpu_bench.sh OUTDIR (make bench-gpu): the GPU speed table of docs/performance.md, in one
# call of at most 8 minutes on a GPU machine (docs/gpu.md says how a session makes that call).
# Nothing is built here: ./train_gpu comes from `make gpu` on a machine with nvcc, carried.
#   1. probe (20 s): the GPU, its driver and clocks, the peers' python packages
#   2. build/products_gpu (at most 100 s, its time taken from BUDGET; skipped if not carried):
#      the experts' 16-bit products on new shapes and met ones, with cuBLASLt's kept algorithms
#      and with cublasGemmEx (fresh); the -medium presets' largest products with float32
#      operands and with bf16 storage (tests/products_gpu.c), what bf16 storage would save in them
#   3. tests/bench_gpu.py (BUDGET, default 300 s): meshmoe, PyTorch eager, JAX jit and
#      torch.compile on the -medium presets, side by side, then meshmoe's profile beside the
#      attention core by PyTorch's SDPA on the same shapes (tests/attention_peer.py)
# The full log goes to OUTDIR/bench.log, the table to OUTDIR/table.md and, last, to stdout.
set -u
cd "$(dirname "$0")/.."
OUT=${1:?usage: tests/gpu_bench.sh OUTDIR}
mkdir -p "$OUT"
LOG=$OUT/bench.log
TRAIN=${TRAIN:-./train_gpu}
{
    echo "==== probe $(date -u +%FT%TZ)"
    timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    timeout 15 ${PEERS:-python3} -c 'import importlib
for m in ("torch", "jax", "transformers", "optax", "safetensors"):
    try: print(m, importlib.import_module(m).__version__)
    except Exception as e: print(m, "missing:", e)'
    ldd "$TRAIN" 2>&1 | grep -E "not found|cuda|blas|gomp" || true
    source tests/gpu_libs.sh   # (cuDNN for the gpu_attention=cudnn variant)
} > "$LOG" 2>&1
if [ ! -x "$TRAIN" ]; then
    echo "bench-gpu: $TRAIN is not built (make gpu, on a machine with nvcc)" | tee -a "$LOG" "$OUT/table.md"
    exit 1
fi
BUDGET=${BUDGET:-300}
: > "$OUT/table.md"
if [ -x build/products_gpu ]; then
    t0=$(date +%s)
    echo "==== build/products_gpu $(date -u +%FT%TZ)" >> "$LOG"
    {
        echo "The experts' 16-bit products on shapes new and met (build/products_gpu fresh: a call per"
        echo "expert, rows drawn anew each round; ms a call by the host clock; apart: the last round's"
        echo "results against cublasGemmEx converting float32 operands, over their largest value):"
        echo
        echo "| products by | shape | ms a call, shapes new | ms a call, shapes met | new less met | apart |"
        echo "|---|---|---|---|---|---|"
        kept=$(timeout 20 build/products_gpu fresh 2>&1 || echo "(build/products_gpu fresh exited $?)")
        ex=$(MESHMOE_CUBLAS_LT=off timeout 20 build/products_gpu fresh 2>&1 || echo "(build/products_gpu fresh exited $?)")
        printf '%s\n%s\n' "$kept" "$ex" | grep '^|'
        echo
        printf '%s\n%s\n' "$kept" "$ex" | grep -v '^|'   # each run's products by way, and anything it said
        echo
        timeout 60 build/products_gpu || echo "(build/products_gpu exited $?: $(tail -1 "$LOG"))"
    } > "$OUT/products.md" 2>> "$LOG"
    { cat "$OUT/products.md"; echo; } >> "$OUT/table.md"
    BUDGET=$((BUDGET - ($(date +%s) - t0)))
fi
BENCH_LOG=$LOG TRAIN=$TRAIN BUDGET=$BUDGET python3 tests/bench_gpu.py >> "$OUT/table.md" 2>> "$LOG"
rc=$?
cat "$OUT/table.md"
exit $rc
