#!/usr/bin/env bash
# tests/gpu_checks.sh CHECK WORKDIR: one of the checks that tests/gpu.sh runs on a GPU
# machine, each as one step of its table (docs/gpu.md). Every check prints `  ok   ...` /
# `  FAIL ...` lines and ends with `N passed, N failed`; a failure names the run (config
# and keys), and the step, tensor or index with the expected and the obtained value, or a
# failed run's last lines. The CPU's references are build/gpu_ref/ (tests/gpu_ref.sh, made
# where ./train was built, carried along); the runs are tests/gpu_cases.sh's.
#   probe       what the machine has (nvidia-smi, ldd, compute-sanitizer, Python packages)
#   parity      acceptance 2: parity dumps of ./train_gpu device=gpu against the CPU's;
#               the bf16 cases again with gpu_matmul=cublas_bf16 (tensor cores)
#   peaks       acceptance 3: peak bytes by tag of mesh runs (host offload among them)
#               equal to the CPU's, losses within 1e-5; with gpu_matmul=cublas, cuBLAS's
#               workspace under its own tag
#   mesh        acceptance 3: tests/mesh.sh with ./train_gpu device=gpu (bit-identical meshes)
#   resume      acceptance 5: a CPU checkpoint resumed on the GPU, a GPU one on the CPU
#   memcheck    acceptance 4: compute-sanitizer memcheck, 2 steps of each family
#   racecheck   acceptance 4: compute-sanitizer racecheck, 1 step of deepseek-tiny
#   mpi         ./train_gpu_mpi (docs/mpi.md#gpus-over-processes) over 2 processes on this
#               machine's GPUs: ./train_gpu's losses and grad norms on the same global mesh
#   jax         acceptance 6: tests/parity/run_parity.sh (make parity) with the GPU trainer
# GPU_CHECKS_DEVICE=cpu runs the same command lines with device=cpu in place of device=gpu:
# how the checks themselves are tried out on a machine without a GPU (every comparison
# then passes with equal bits; docs/gpu.md).
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
source tests/gpu_cases.sh
CHECK=${1:?usage: tests/gpu_checks.sh CHECK WORKDIR}
W=${2:?usage: tests/gpu_checks.sh CHECK WORKDIR}
REF=${GPU_REF:-build/gpu_ref}
DEV=${GPU_CHECKS_DEVICE:-gpu}
mkdir -p "$W"
# The bulky files (parity dumps of 100 MB, checkpoints) stay out of WORKDIR, which comes
# back from the GPU machine: a scratch directory, removed at the end.
BULK=$(mktemp -d "${TMPDIR:-/tmp}/meshmoe-gpuchecks.XXXXXX")
trap 'rm -rf "$BULK"' EXIT
# ./train_gpu with device=gpu last (it overrides any earlier device key): what tests/mesh.sh
# and run_parity.sh call as $TRAIN.
GPU_TRAIN=$W/train_gpu_device
printf '#!/bin/sh\nexec "%s/train_gpu" "$@" device=%s\n' "$PWD" "$DEV" > "$GPU_TRAIN"
chmod +x "$GPU_TRAIN"

# gpu_run NAME LOG ARGS...: ./train_gpu ARGS; on failure a FAIL naming the run, the exit
# status and its error, then the command and the log's last lines (a crash in a kernel
# shows GPU_CHECK's file:line there).
gpu_run() {
    local name=$1 log=$2; shift 2
    ./train_gpu "$@" > "$log" 2>&1 && return 0
    local rc=$?
    fail "$name: ./train_gpu exited $rc: $(grep -m1 '^meshmoe:' "$log" || tail -1 "$log")"
    echo "         | ./train_gpu $*"
    tail -6 "$log" | sed 's/^/         | /'
    return 1
}
# compare KIND ARGS...: tests/gpu_compare.py's checks, added to this script's counts.
compare() {
    local out; out=$(python3 tests/gpu_compare.py "$@" 2>&1)
    printf '%s\n' "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    local line; line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
    if [ -z "$line" ]; then fail "gpu_compare.py $* printed no summary"; return; fi
    PASSED=$((PASSED + $(echo "$line" | cut -d' ' -f1)))
    FAILED=$((FAILED + $(echo "$line" | cut -d' ' -f3)))
}
need_ref() { [ -d "$REF" ] || { fail "no $REF: run make gpu-carry where ./train is built, and carry it"; summary; exit 1; }; }

sanitizer() { command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1; }

probe() {
    echo "-- date: $(date -u)"; echo "-- host: $(uname -a)"; echo "-- cores: $(nproc)"
    echo "-- CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2)"
    echo "-- CPU vector flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_bf16' | tr '\n' ' ')"
    echo "-- glibc: $(ldd --version 2>&1 | head -1)"
    echo "-- nvidia-smi"; nvidia-smi || echo "nvidia-smi: not found or failed"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>/dev/null
    for b in ./train_gpu build/conformance_gpu; do echo "-- ldd $b"; ldd "$b" 2>&1; done
    echo "-- ./train_gpu --help"; ./train_gpu --help > /dev/null 2>&1 && echo "starts" || echo "does not start"
    echo "-- cuBLAS on the library path"; ldconfig -p 2>/dev/null | grep -E 'libcublas(Lt)?\.so' || echo "no libcublas"
    echo "-- compute-sanitizer"; local cs; cs=$(sanitizer); [ -n "$cs" ] && "$cs" --version || echo "not found"
    echo "-- CUDA toolkits: $(ls -d /usr/local/cuda* 2>/dev/null | tr '\n' ' ') nvcc: $(command -v nvcc || echo none)"
    # ./train_gpu_mpi (docs/mpi.md) needs an MPI library there: whether a later session can carry and run it
    echo "-- MPI: mpirun $(command -v mpirun || echo none); $(ldconfig -p 2>/dev/null | grep -m1 -o 'libmpi\.so[^ ]*' || echo 'no libmpi')"
    echo "-- python: $(python3 --version 2>&1)"
    python3 -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|optax|torch|transformers|numpy|safetensors|nvidia-|triton)' ||
        echo "pip: none of jax, torch, transformers, numpy, safetensors"
    timeout 40 python3 -c 'import jax; print("jax", jax.__version__, jax.devices())' 2>&1 | tail -1
    echo "-- reference: $(cat "$REF/made.txt" 2>/dev/null | tr '\n' ' ' || echo "no $REF")"
    true
}

# Acceptance 2: each case's 10 parity steps on the GPU, against the CPU's dump.
parity() {
    need_ref
    mkdir -p "$W/parity" "$BULK/parity"
    while read -r name preset dtype args; do
        echo "-- $name: ./train_gpu configs/$preset.yml $PARITY_COMMON $args device=$DEV dump_parity=..."
        local dump=$BULK/parity/$name failed_before=$FAILED
        gpu_run "$name" "$W/parity-$name.log" configs/$preset.yml dump_parity="$dump" $PARITY_COMMON $args \
            device=$DEV || continue
        compare dumps "$REF/parity/$name.st" "$dump/dump.safetensors" "$dtype"
        if [ "$FAILED" -gt "$failed_before" ]; then   # what was compared comes back, to look at offline
            python3 tests/gpu_compare.py reduce "$dump/dump.safetensors" "$W/parity/$name.gpu.st" "$dtype"
            echo "     (the GPU's values: $W/parity/$name.gpu.st, the CPU's: $REF/parity/$name.st)"
        fi
        rm -rf "$dump"
    done < <(cases "$PARITY_CASES")
    # gpu_matmul=cublas_bf16: tensor cores (the CPU has none: there the same run without it).
    # -tc with MESHMOE_CHECK_BF16=1: the operands converted by gpu/matmul.cu's kernel, which
    # counts on the GPU the values it converted to bf16 and those that were not bf16-valued
    # (the products are exact only if none), and says so. -tca: make bench-gpu's path, the
    # default (cuBLAS converting inside its kernels) with the attention core on tensor cores
    # too (gpu_attention=tensor_cores, gpu/attn_mma.cu). -w16: the same with
    # bf16_storage=kept, the products on bf16 storage (kernels/matmul16.h; the experts'
    # grouped ones by gpu/grouped16.cu where cuBLAS refuses them), the presets' way. -cdn: that
    # with the attention core by cuDNN (gpu_attention=cudnn, gpu/attn_cudnn.cu).
    local suffix tc w16
    for suffix in tc tca w16 cdn; do
        tc=gpu_matmul=cublas_bf16
        [ "$suffix" != tc ] && tc="$tc gpu_attention=tensor_cores"
        [ "$suffix" = cdn ] && tc="gpu_matmul=cublas_bf16 gpu_attention=cudnn"
        [ "$DEV" = gpu ] || tc=
        if [ "$suffix" = tc ]; then export MESHMOE_CHECK_BF16=1; else unset MESHMOE_CHECK_BF16; fi
        w16=; if [ "$suffix" = w16 ] || [ "$suffix" = cdn ]; then w16=bf16_storage=kept; fi
        while read -r name preset dtype args; do
            local run=$name-$suffix
            echo "-- $run: ./train_gpu configs/$preset.yml $PARITY_COMMON $args $tc $w16 device=$DEV" \
                "(MESHMOE_CHECK_BF16=${MESHMOE_CHECK_BF16:-unset})"
            local dump=$BULK/parity/$run failed_before=$FAILED
            gpu_run "$run" "$W/parity-$run.log" configs/$preset.yml dump_parity="$dump" $PARITY_COMMON $args \
                $tc $w16 device=$DEV || continue
            if [ -n "$tc" ] && [ "$suffix" = tc ]; then
                local said; said=$(grep -m1 '^cublas_bf16 check:' "$W/parity-$run.log")
                check "$run: every operand converted for the tensor cores was bf16-valued: ${said:-no check line}" \
                    bash -c '[[ "$1" =~ check:\ ([1-9][0-9]*)\ operand.*\ 0\ of\ them ]]' _ "$said"
            fi
            compare dumps "$REF/parity/${name%%+*}.st" "$dump/dump.safetensors" "$dtype"
            if [ "$FAILED" -gt "$failed_before" ]; then
                python3 tests/gpu_compare.py reduce "$dump/dump.safetensors" "$W/parity/$run.gpu.st" "$dtype"
            fi
            rm -rf "$dump"
        done < <(cases "$TENSOR_CORE_CASES")
    done
    unset MESHMOE_CHECK_BF16
    summary
}

# Acceptance 3: the allocator's peaks by tag on the GPU equal the CPU's, device by device
# (the pool under it changes nothing the allocator counts); the GPU figures are shown.
peaks() {
    need_ref
    mkdir -p "$W/mesh"
    while read -r name preset args; do
        echo "-- $name: ./train_gpu configs/$preset.yml $MESH_COMMON $args device=$DEV"
        rm -f "$W/mesh/$name.jsonl"   # (a metrics file is appended to)
        gpu_run "$name" "$W/mesh-$name.log" configs/$preset.yml $MESH_COMMON $args device=$DEV \
            metrics_file="$W/mesh/$name.jsonl" || continue
        grep -E '^device [0-9]+ (GPU memory|peak)' "$W/mesh-$name.log" | sed 's/^/     /'
        compare peaks "$REF/mesh/$name.jsonl" "$W/mesh/$name.jsonl"
        compare losses "$REF/mesh/$name.jsonl" "$W/mesh/$name.jsonl" 1e-5
    done < <(cases "$MESH_CASES")
    # cuBLAS's workspace, under its tag (the CPU has no cuBLAS: there the same run's is 0)
    local cublas=gpu_matmul=cublas sizes=4194304,33554432
    [ "$DEV" = gpu ] || { cublas=; sizes=0; }
    while read -r name preset args; do
        echo "-- $name-cublas: ./train_gpu configs/$preset.yml $MESH_COMMON $args $cublas device=$DEV"
        rm -f "$W/mesh/$name-cublas.jsonl"
        gpu_run "$name-cublas" "$W/mesh-$name-cublas.log" configs/$preset.yml $MESH_COMMON $args $cublas \
            device=$DEV metrics_file="$W/mesh/$name-cublas.jsonl" || continue
        grep -E '^device [0-9]+ (GPU memory|peak)' "$W/mesh-$name-cublas.log" | sed 's/^/     /'
        compare workspace "$W/mesh/$name-cublas.jsonl" "$sizes"
    done < <(cases "$WORKSPACE_CASES")
    summary
}

# Acceptance 3: tests/mesh.sh's meshes on one GPU (every device a thread with its stream and
# pool), losses and grad norms bit-identical across meshes.
mesh() {
    TRAIN=$GPU_TRAIN TRAIN_ARGS=device=$DEV bash tests/mesh.sh
}

# Acceptance 5: saved on one side after 2 of 4 steps, resumed on the other; steps 2 and 3
# within the case's bound (acceptance 2's 1e-5, or what tests/gpu_cases.sh says) of ./train's
# own resumed run (made here, carried).
resume() {
    need_ref
    mkdir -p "$W/resume"
    while read -r name preset tol; do
        local a=$W/resume/$name ck=$BULK/$name
        rm -f $a.*   # (a metrics file is appended to)
        echo "-- $name: saved by device=cpu, resumed by device=$DEV"
        gpu_run "$name cpu-save" "$a.cpu-save.log" configs/$preset.yml $RESUME_COMMON device=cpu run_steps=2 save_checkpoint=$ck.cpu.st &&
            gpu_run "$name gpu-load" "$a.gpu-load.log" configs/$preset.yml $RESUME_COMMON device=$DEV load_checkpoint=$ck.cpu.st \
                metrics_file=$a.cpu2gpu.jsonl &&
            compare losses "$REF/resume/$name.jsonl" $a.cpu2gpu.jsonl "$tol"
        echo "-- $name: saved by device=$DEV, resumed by device=cpu"
        gpu_run "$name gpu-save" "$a.gpu-save.log" configs/$preset.yml $RESUME_COMMON device=$DEV run_steps=2 save_checkpoint=$ck.gpu.st &&
            gpu_run "$name cpu-load" "$a.cpu-load.log" configs/$preset.yml $RESUME_COMMON device=cpu load_checkpoint=$ck.gpu.st \
                metrics_file=$a.gpu2cpu.jsonl &&
            compare losses "$REF/resume/$name.jsonl" $a.gpu2cpu.jsonl "$tol"
        rm -f $ck.*
    done < <(cases "$RESUME_CASES")
    summary
}

# Acceptance 4. The pool off (gpu/pool.cu): one cudaMalloc per buffer, so that memcheck
# knows every buffer's bounds. No leak check: the run's buffers outlive its last step.
SAN_RUN="steps=2 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=32 per_device_batch_size=2 log_period=1"
memcheck() {
    local cs; cs=$(sanitizer)
    for preset in mixtral-tiny deepseek-tiny; do
        echo "-- memcheck: ./train_gpu configs/$preset.yml $SAN_RUN device=$DEV (MESHMOE_GPU_POOL=off)"
        MESHMOE_GPU_POOL=off "$cs" --tool memcheck --error-exitcode 9 ./train_gpu configs/$preset.yml $SAN_RUN \
            device=$DEV > "$W/memcheck-$preset.log" 2>&1
        local rc=$? line; line=$(grep -m1 'ERROR SUMMARY' "$W/memcheck-$preset.log")
        if [ $rc -eq 0 ] && [ "$line" = "========= ERROR SUMMARY: 0 errors" ]; then pass "$preset memcheck: $line"
        else
            fail "$preset memcheck: exit $rc, ${line:-no ERROR SUMMARY}; first reports:"
            grep -m12 -E '^=========  |Invalid|meshmoe:' "$W/memcheck-$preset.log" | sed 's/^/         | /'
        fi
    done
    summary
}
racecheck() {
    local cs run="${SAN_RUN/steps=2/steps=1}"
    cs=$(sanitizer)
    echo "-- racecheck: ./train_gpu configs/deepseek-tiny.yml $run device=$DEV"
    "$cs" --tool racecheck --error-exitcode 9 ./train_gpu configs/deepseek-tiny.yml $run device=$DEV \
        > "$W/racecheck.log" 2>&1
    local rc=$? line; line=$(grep -m1 'RACECHECK SUMMARY' "$W/racecheck.log")
    if [ $rc -eq 0 ] && printf '%s' "$line" | grep -q ' 0 hazards'; then pass "deepseek racecheck: $line"
    else
        fail "deepseek racecheck: exit $rc, ${line:-no RACECHECK SUMMARY}; first reports:"
        grep -m12 -E '^=========  |Race|hazard|meshmoe:' "$W/racecheck.log" | sed 's/^/         | /'
    fi
    summary
}

# The GPU trainer over processes (make gpu-mpi, carried when mpicc was there): 2 processes,
# each with its devices on this machine's GPUs (both on one GPU where there is one), against
# ./train_gpu on the same global mesh in one process: the same losses and grad norms, bit
# for bit (the GPU's meshes are bit-identical: the mesh check). tests/gpu.sh runs it only
# where ./train_gpu_mpi starts (OpenMPI's library there) and mpirun is found.
MPI_RUN="steps=3 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=64 per_device_batch_size=2 log_period=100 num_threads=1"
losses_in() { grep -o '"loss_bits": "[^"]*"' "$1" 2>/dev/null | tr '\n' ' '; }
norms_in() { grep -o '"grad_norm": [^,]*' "$1" 2>/dev/null | tr '\n' ' '; }
mpi() {
    while read -r name preset dcn ici; do
        dcn=${dcn//,/ }; ici=${ici//,/ }
        rm -f "$W/mpi-$name-"*.jsonl
        echo "-- $name: mpirun -np 2 ./train_gpu_mpi configs/$preset.yml $MPI_RUN $dcn device=$DEV"
        gpu_run "$name one process" "$W/mpi-$name-one.log" configs/$preset.yml $MPI_RUN $ici device=$DEV \
            metrics_file="$W/mpi-$name-one.jsonl" || continue
        timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 ./train_gpu_mpi configs/$preset.yml $MPI_RUN $dcn \
            device=$DEV metrics_file="$W/mpi-$name-two.jsonl" < /dev/null > "$W/mpi-$name-two.log" 2>&1
        local rc=$?
        grep -E '^device [0-9]+ GPU memory' "$W/mpi-$name-two.log" | sed 's/^/     /'
        local a b na nb
        a=$(losses_in "$W/mpi-$name-one.jsonl"); b=$(losses_in "$W/mpi-$name-two.jsonl")
        na=$(norms_in "$W/mpi-$name-one.jsonl"); nb=$(norms_in "$W/mpi-$name-two.jsonl")
        check "$name over 2 processes (exit $rc): ./train_gpu's losses and grad norms on $ici: $b" \
            sh -c '[ "$1" -eq 0 ] && [ -n "$2" ] && [ "$2" = "$3" ] && [ -n "$4" ] && [ "$4" = "$5" ]' _ $rc "$b" "$a" "$nb" "$na"
        [ $rc -eq 0 ] || tail -6 "$W/mpi-$name-two.log" | sed 's/^/         | /'
    done <<'RUNS'
mixtral-dcn-data      mixtral-tiny  dcn_data_parallelism=2,ici_fsdp_parallelism=2 ici_data_parallelism=2,ici_fsdp_parallelism=2
deepseek-dcn-fsdp-ep  deepseek-tiny dcn_fsdp_parallelism=2,ici_expert_parallelism=2 ici_fsdp_parallelism=2,ici_expert_parallelism=2
RUNS
    summary
}

# Acceptance 6: the JAX parity cases with the GPU trainer, JAX on the same GPU, with the
# machine's own Python (no network there; PYTHON chooses another); PARITY_ONLY (default:
# every case) picks cases.
jax() {
    local py=${PYTHON:-python3}
    if ! "$py" -c 'import jax, optax, numpy, safetensors'; then
        fail "$py lacks one of jax, optax, numpy, safetensors (tests/gpu.sh skips this check then)"
        summary; return
    fi
    # Every case, without the reference's self-tests (PARITY_ONLY=. skips them): they test
    # JAX's side alone, which make parity runs on the CPU, and took 138 s of the first GPU call.
    # On a GPU the bf16 cases also run on tensor cores (PARITY_TENSOR_CORES). Six cases at a
    # time on the GPU machine's 16 cores, six workers (one at a time, a case took 25-30 s
    # there: JAX compiling on one or two cores; the GPU work of these tiny models is small).
    local tc=0 jobs=${PARITY_JOBS:-}
    [ "$DEV" = gpu ] && tc=1 && jobs=${jobs:-6}
    # XLA's own optimization level on the GPU (PARITY_XLA_OPT empty): level 0 is measured on
    # the CPU only (tests/parity/README.md "bfloat16").
    local xla_opt=${PARITY_XLA_OPT-0}
    [ "$DEV" = gpu ] && xla_opt=${PARITY_XLA_OPT-}
    TRAIN=$GPU_TRAIN PYTHON=$py PARITY_ONLY=${PARITY_ONLY:-.} PARITY_TENSOR_CORES=$tc PARITY_JOBS=$jobs \
        PARITY_XLA_OPT=$xla_opt bash tests/parity/run_parity.sh
}

case $CHECK in
    probe|parity|peaks|mesh|resume|memcheck|racecheck|mpi|jax) "$CHECK" ;;
    *) echo "tests/gpu_checks.sh: no check '$CHECK'"; exit 2 ;;
esac
