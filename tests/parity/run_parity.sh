#!/usr/bin/env bash
# tests/parity/run_parity.sh: the float32 and bfloat16 parity cases against the JAX
# reference (make parity).
#
# For each case: ./train CONFIG dump_parity=DIR (weights, batches and the C results of step
# 0 and of parity_steps AdamW steps, with the weights before each step), reference.py on
# the dump (the same computation in JAX, free-running and teacher-forced from C's weights
# of each step), compare.py (one row per tensor against the tolerances of
# tests/parity/README.md). A case passes when compare.py exits 0. The self-tests of the
# reference run first, as one more case. Ends with `N passed, M failed`; exit status 1 if
# any case failed.
#
# PYTHON: the interpreter with jax/optax/numpy/safetensors (default: the .venv that
# tests/parity/ensure_venv.sh creates from tests/parity/requirements.txt).
# XLA_FLAGS is passed on to the reference, with PARITY_XLA_OPT's flag (below):
# XLA_FLAGS=--xla_cpu_max_isa=AVX2 keeps XLA's CPU code generation to AVX2 on an AVX-512
# machine (README.md "bfloat16").
# PARITY_TENSOR_CORES=1 (a GPU trainer, tests/gpu_checks.sh): two more bf16 cases, on tensor
# cores; PARITY_ONLY and PARITY_SECONDS: at run_case below.
# PARITY_JOBS=N runs N cases at a time (default: the machine's cores, at most 4; 1 runs them
# one after the other): N workers (tests/parity/worker.py, each one Python process that runs
# case after case: the trainer as a child, the reference and the comparison in the worker),
# one of which first runs the self-tests (their own process: they compute in float64). A case
# is mostly JAX compiling, on one core or a little more: on 2 cores two at a time gain a
# tenth, on more cores the more. Each case writes into its own files; its output is printed
# whole, in the list's order, as soon as it and every case before it are done.
set -u
cd "$(dirname "$0")/../.."

if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(bash tests/parity/ensure_venv.sh) || { echo "run_parity: no Python environment (see above)"; exit 1; }
fi
TRAIN=${TRAIN:-./train}
[ -x "$TRAIN" ] || { echo "run_parity: $TRAIN is not built (run make)"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/meshmoe-parity.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# A signal (Ctrl-C, or the time limit of a GPU call's step) stops the running jobs and still
# prints the finished cases and the summary, the stopped ones named (stopped below).
trap 'stopped; exit 130' INT TERM

# One compilation cache for the run's JAX processes: the cases of a family share most of
# their jitted functions (the optimizer's update, the element-wise ones), which JAX then
# compiles once (a mixtral-tiny case after another: 10 s where it took 14 here); compiled
# code only, so the numbers are the same. Removed with $TMP.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$TMP/jax-cache}
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0}
export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=${JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES:-0}

JOBS=${PARITY_JOBS:-$(n=$(nproc 2> /dev/null || echo 1); echo $((n < 4 ? n : 4)))}
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "run_parity: PARITY_JOBS must be a positive integer, got '$JOBS'"; exit 2; }
if [ "$JOBS" -gt 1 ]; then
    # Idle OpenMP threads of one trainer wait by sleeping, so that they do not spin on the
    # cores the other jobs use (it changes no result); on a GPU each JAX process takes GPU
    # memory as it needs it rather than 75% of it at start-up.
    export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
    export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
fi

# Small and fast: the configs' model sizes, 2 sequences of 32 tokens per microbatch, and a
# 10-step schedule (1 warm-up step, then the cosine) so the 10 parity steps cover it all.
COMMON=(steps=10 parity_steps=10 per_device_batch_size=2 max_target_length=32)
MIXTRAL=configs/mixtral-tiny.yml
DEEPSEEK=configs/deepseek-tiny.yml

passed=0
failed=0
failed_names=()

# A case ends by writing its result, "PASS seconds", "FAIL reason" or "LATE" (not started:
# PARITY_SECONDS), into $TMP/NAME.result (tests/parity/worker.py; the self-tests here); the
# parent counts it when it prints the case's output (show_done below).
pass() { echo "PASS $2" > "$TMP/$1.result"; }
fail() { echo "FAIL $2" > "$TMP/$1.result"; }

# run_case NAME CONFIG [key=value ...]: a case into the list the workers take from
# ($TMP/cases: its name and the trainer's command, separated by tabs). With
# PARITY_ONLY=REGEX only the cases whose name matches run (and the self-tests are skipped),
# e.g. PARITY_ONLY=adafactor. With PARITY_SECONDS=N no case starts after N seconds (a GPU
# call's clock, tests/gpu.sh): the ones left are named at the end as not started, neither
# passed nor failed.
not_started=()
run_case() {
    local name=$1 cfg=$2
    shift 2
    if [ -n "${PARITY_ONLY:-}" ] && ! [[ "$name" =~ $PARITY_ONLY ]]; then return; fi
    local line=("$name" "$TRAIN" "$cfg" "${COMMON[@]}" "$@")
    (IFS=$'\t'; echo "${line[*]}") >> "$TMP/cases"
    order+=("$name")
}

# The cases (and the self-tests, first), in the list's order; shown: how many of them are
# printed and counted.
order=()
shown=0
# Prints and counts the finished cases at the head of the order. A case that left no result
# stops the printing there, but with "all" (every worker has ended: one was killed or
# crashed) it counts as failed, and with "stopped" (after a signal) it is named as stopped,
# or as not started if no worker had taken it.
stopped_names=()
show_done() {
    local name result why
    while [ "$shown" -lt ${#order[@]} ]; do
        name=${order[$shown]}
        shown=$((shown + 1))
        if [ ! -f "$TMP/$name.result" ]; then
            case ${1:-} in
                all) echo "FAIL its worker ended without a result" > "$TMP/$name.result" ;;
                stopped)
                    if [ -d "$TMP/$name.taken" ] || [ "$name" = selftest ]; then stopped_names+=("$name")
                    else not_started+=("$name"); fi
                    continue ;;
                *) shown=$((shown - 1)); break ;;
            esac
        fi
        read -r result why < "$TMP/$name.result"
        if [ "$result" = LATE ]; then
            echo "== $name: not started (PARITY_SECONDS=$PARITY_SECONDS reached)"
            not_started+=("$name")
            continue
        fi
        cat "$TMP/$name.out" 2> /dev/null
        if [ "$result" = PASS ]; then
            passed=$((passed + 1)); echo "== $name: PASS ($why s)"
        else
            failed=$((failed + 1)); failed_names+=("$name"); echo "== $name: FAIL ($why)"
        fi
        echo
    done
}

summary() {
    echo "parity: $((SECONDS - ${start:-0})) s${failed_names[*]:+; failed: ${failed_names[*]}}"
    [ ${#not_started[@]} -gt 0 ] && echo "${#not_started[@]} cases not started: ${not_started[*]}"
    echo "$passed passed, $failed failed"
}
# After a signal: the running jobs stopped, the finished ones printed and counted.
stopped() {
    trap - INT TERM
    kill $(jobs -p) 2> /dev/null
    wait
    show_done stopped
    echo "== stopped by a signal: ${#stopped_names[@]} case(s) running then, neither passed nor failed: ${stopped_names[*]}"
    summary
}

# XLA's LLVM back end at optimization level PARITY_XLA_OPT (default 0; empty: XLA's own
# level, as the GPU checks run it): the tiny models' run time is nothing next to compiling
# them, and level 0 compiles them in about three quarters of the time (make parity on 2
# cores: 211 s where it took 272 s). It is one more of XLA's code paths, with the same
# numbers as the others within the bounds (tests/parity/README.md "bfloat16").
xla_opt=${PARITY_XLA_OPT-0}
if [ -n "$xla_opt" ]; then
    [[ "$xla_opt" =~ ^[0-3]$ ]] || { echo "run_parity: PARITY_XLA_OPT must be 0 to 3 or empty, got '$xla_opt'"; exit 2; }
    export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_backend_optimization_level=$xla_opt"
fi

start=$SECONDS
isa=$(grep -q -w avx512f /proc/cpuinfo && echo AVX-512 || (grep -q -w avx2 /proc/cpuinfo && echo AVX2 || echo "no AVX2"))
echo "== cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs), $isa; XLA_FLAGS=${XLA_FLAGS:-(none)}"
echo "== $JOBS case(s) at a time (PARITY_JOBS)"
selftest() {
    echo "== selftest: $PYTHON tests/parity/selftest.py"
    local t0=$SECONDS
    if "$PYTHON" tests/parity/selftest.py; then pass selftest $((SECONDS - t0)); else fail selftest "self-tests of the reference"; fi
}
: > "$TMP/cases"
if [ -n "${PARITY_ONLY:-}" ]; then echo "== selftest: skipped (PARITY_ONLY=$PARITY_ONLY)"
else order+=(selftest); fi

# bfloat16: the MoE combine in float32 (float32_weight_sum=true, the default) or in bf16.
# Both presets, both settings; the flag must move C and JAX the same way.
BF16=(dtype=bfloat16 sparse_matmul=true)
# First one case of each family in each dtype: a GPU call's clock (PARITY_SECONDS) may stop
# the list, and these cover the most code. With a GPU trainer (PARITY_TENSOR_CORES=1,
# tests/gpu_checks.sh) the bf16 cases run first with the weight products and the attention
# core on tensor cores (make bench-gpu's path), against the same JAX reference and bounds,
# then as the CPU runs them (a GPU session's clock fits about four cases after the float32 two).
run_case mixtral-sparse   "$MIXTRAL"  sparse_matmul=true
run_case deepseek-sparse  "$DEEPSEEK" sparse_matmul=true
if [ "${PARITY_TENSOR_CORES:-}" = 1 ]; then
    TC=(gpu_matmul=cublas_bf16 gpu_attention=tensor_cores)
    run_case mixtral-bf16-tca   "$MIXTRAL"  "${BF16[@]}" float32_weight_sum=true "${TC[@]}"
    run_case deepseek-bf16-tca  "$DEEPSEEK" "${BF16[@]}" float32_weight_sum=true "${TC[@]}"
fi
run_case mixtral-bf16-wsum32   "$MIXTRAL"  "${BF16[@]}" float32_weight_sum=true
run_case deepseek-bf16-wsum32  "$DEEPSEEK" "${BF16[@]}" float32_weight_sum=true
run_case mixtral-dense    "$MIXTRAL"  sparse_matmul=false
run_case mixtral-capacity "$MIXTRAL"  sparse_matmul=false capacity_factor=1.0
run_case mixtral-lb       "$MIXTRAL"  sparse_matmul=true load_balance_loss_weight=0.01
run_case mixtral-zloss    "$MIXTRAL"  sparse_matmul=true z_loss_multiplier=1e-3
run_case mixtral-ga2      "$MIXTRAL"  sparse_matmul=true gradient_accumulation_steps=2
# MaxText's warm-up-stable-decay schedule: 3 warm-up steps (0, lr/2, lr), 3 at the peak and a
# linear decay over the last 4 (lr, 0.7 lr, 0.4 lr, 0.1 lr), against optax's pieces.
run_case mixtral-wsd      "$MIXTRAL"  sparse_matmul=true lr_schedule_type=wsd warmup_steps_fraction=0.3 \
    wsd_decay_steps_fraction=0.4 wsd_decay_style=linear
run_case deepseek-dense   "$DEEPSEEK" sparse_matmul=false
run_case deepseek-qlora0  "$DEEPSEEK" sparse_matmul=true q_lora_rank=0
run_case deepseek-ga2-lb  "$DEEPSEEK" sparse_matmul=true gradient_accumulation_steps=2 load_balance_loss_weight=0.01
# routed_score_func=softmax (MaxText's: a softmax over all experts before the top-k), in
# both blocks; DeepSeek's without the bias (sigmoid scores only) and with deepseek-tiny's 4
# groups ranked by their best probability (DeepSeek-V2's group_limited_greedy), one kept: with
# as many kept as experts per token the groups of the top k are always among them.
run_case mixtral-softmax  "$MIXTRAL"  sparse_matmul=true routed_score_func=softmax
run_case deepseek-softmax "$DEEPSEEK" sparse_matmul=true routed_score_func=softmax routed_bias=false topk_routing_group=1
# opt_type=adafactor (optax.adafactor): mixtral-tiny's embedding, logits and expert kernels
# (dims 128/256) take the factored path, the rest the full second moment.
run_case mixtral-adafactor  "$MIXTRAL"  sparse_matmul=true opt_type=adafactor
run_case deepseek-adafactor "$DEEPSEEK" sparse_matmul=true opt_type=adafactor
# opt_type=muon (optax.contrib.muon, MaxText's dimension numbers): the weight matrices'
# momentum orthogonalized (experts per expert, attention's q/k/v/out and MLA's as MaxText
# reshapes them), Nesterov AdamW for the embedding, the head and the norms; and with
# muon_consistent_rms and weight decay; and with mu_dtype=bfloat16 (both halves' first moment
# as bf16, as optax casts it).
run_case mixtral-muon  "$MIXTRAL"  sparse_matmul=true opt_type=muon
run_case deepseek-muon "$DEEPSEEK" sparse_matmul=true opt_type=muon muon_consistent_rms=0.2 muon_weight_decay=0.1
run_case mixtral-muon-mu16 "$MIXTRAL" sparse_matmul=true opt_type=muon mu_dtype=bfloat16
# opt_type=adam_pax (MaxText's Pax-style Adam, its formula in tests/parity/reference.py).
run_case mixtral-adam-pax "$MIXTRAL" sparse_matmul=true opt_type=adam_pax
# mu_dtype=bfloat16 (optax.adamw's mu_dtype): AdamW's first moment kept as bf16, the float32
# cases' bounds. Its decay is a bf16 product, as JAX computes b1 * mu on a bf16 array: with
# the product in float32 instead, C's free-running step losses left JAX's by 2.2e-3 (step 7,
# mixtral); as built, by at most 6.1e-7, what gradient noise of 2^-22 moves JAX's own by
# (spread.py --ulp-bits 22, 6 seeds: 6.1e-7).
run_case mixtral-mu16  "$MIXTRAL"  sparse_matmul=true mu_dtype=bfloat16
# adam_eps_root (optax's eps_root, inside the square root), as large as the second moments
# here, so that an update without it would leave JAX's losses by far more than the bounds.
run_case mixtral-epsroot "$MIXTRAL" sparse_matmul=true adam_eps_root=1e-5
run_case deepseek-mu16 "$DEEPSEEK" sparse_matmul=true mu_dtype=bfloat16
# rope_type=yarn (MaxText's YarnRotaryEmbedding, DeepSeek-V3's), its correction range inside
# the rotated dimensions (an original context of 1024 positions: mixtral's dimensions 2-5
# of 16 mixed, deepseek's 3-4 of 8): half-split and interleaved pairs, the rotated output
# scaled (rope_attention_scaling), and MLA's softmax scale times mscale^2 (the default
# 163840 positions past the original 1024), in float32 and bf16.
YARN=(rope_type=yarn original_max_position_embeddings=1024)
run_case mixtral-yarn    "$MIXTRAL"  sparse_matmul=true "${YARN[@]}" rope_factor=4 rope_interleave=false
run_case mixtral-yarn-il "$MIXTRAL"  sparse_matmul=true "${YARN[@]}" rope_factor=8 rope_attention_scaling=true
run_case deepseek-yarn   "$DEEPSEEK" sparse_matmul=true "${YARN[@]}" max_position_embeddings=163840
run_case deepseek-yarn-bf16 "$DEEPSEEK" "${BF16[@]}" "${YARN[@]}" max_position_embeddings=163840 mscale=0.707
run_case mixtral-bf16-wsum16   "$MIXTRAL"  "${BF16[@]}" float32_weight_sum=false
# A longer run, its free-running trajectory alone (parity_snapshots=false, no weights kept a
# step): the dump's 60 step losses are a training run's bit for bit, and JAX's own trajectory
# keeps every step within 1e-4 (worker.py:long_case; long_run.py for whole runs on real text).
run_case deepseek-long "$DEEPSEEK" steps=60 parity_steps=60 parity_snapshots=false
run_case deepseek-bf16-wsum16  "$DEEPSEEK" "${BF16[@]}" float32_weight_sum=false
# The workers: the first runs the self-tests before it takes a case (or without PARITY_ONLY's
# self-tests, a case first like the others). The cases' output is printed as they end.
export PARITY_START=$(($(date +%s) - SECONDS))   # (PARITY_SECONDS counts from this script's start)
workers=()
for w in $(seq "$JOBS"); do
    if [ "$w" = 1 ] && [ "${order[0]:-}" = selftest ]; then
        { selftest > "$TMP/selftest.out" 2>&1; "$PYTHON" tests/parity/worker.py "$TMP"; } &
    else
        "$PYTHON" tests/parity/worker.py "$TMP" &
    fi
    workers+=($!)
done
while [ -n "$(jobs -rp)" ]; do
    sleep 1
    show_done
done
wait
show_done all
echo "== float32_weight_sum: step-0 loss with the float32 combine minus with the bf16 combine"
for p in mixtral deepseek; do
    if [ -f "$TMP/$p-bf16-wsum32.losses" ] && [ -f "$TMP/$p-bf16-wsum16.losses" ]; then
        read -r c32 j32 < "$TMP/$p-bf16-wsum32.losses"
        read -r c16 j16 < "$TMP/$p-bf16-wsum16.losses"
        awk -v p="$p" -v c32="$c32" -v c16="$c16" -v j32="$j32" -v j16="$j16" 'BEGIN {
            dc = c32 - c16; dj = j32 - j16;
            printf "  %-8s C: %.7f - %.7f = %+.3e   JAX: %.7f - %.7f = %+.3e   %s\n", p, c32, c16, dc, j32, j16, dj,
                   (dc * dj > 0 || (dc == 0 && dj == 0)) ? "same direction" : "OPPOSITE"; }'
    fi
done

summary
[ "$failed" -eq 0 ]
