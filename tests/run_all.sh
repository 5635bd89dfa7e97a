#!/usr/bin/env bash
# tests/run_all.sh: what `make test` runs: the builds, then the parts. Each part prints its
# own checks and a line "N passed, N failed"; this script adds them up and prints the total
# the same way.
#
# The parts run in two lanes at once. A part (a trainer on a tiny
# preset, a build, a sanitizer run) keeps about 1.5 of 2 cores busy: two at a time finish
# sooner (tests/e2e.sh and tests/mesh.sh: 59 s together, 74 s one after the other), and
# every part's result is the same (bits and counts, not times). Each lane runs its own parts
# in order, then takes the next of the shared parts (the parity and Hugging Face checks, the
# strict mode, the fuzzers) that no lane has taken yet, so that neither lane waits while the
# other works; the longest, the parity check, is taken between a lane's own parts as soon as
# its Python environment is ready. A part's output is printed whole when it ends, under a
# lock, so that the two lanes' lines never mix. The parts that build share no build
# directory with the other lane (lane A builds build/gpu, build/hip, build/port, build/asan,
# build/tsan, and make tsan-mpi after make tsan, whose objects it links; lane B build/plant,
# build/peak; the fuzzers build/fuzz; the MPI part build/mpi).
set -u
cd "$(dirname "$0")/.."
# OpenMP threads that wait by sleeping, not spinning: on a machine with other work (or more
# device threads than cores) spinning waiters steal the cores the working threads need and a
# step can take 10x longer. It changes no result, only how idle threads wait.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
RUN=$(mktemp -d /tmp/meshmoe-test.XXXXXX)
trap 'rm -rf "$RUN"' EXIT
: > "$RUN/counts"   # a line per part: passed, failed, and why it is broken (if it is)
# The Python environments of the parity and Hugging Face checks, made on first use (pip: a
# few minutes, mostly waiting for downloads), are made in the background while the builds
# and the C tests run. Their interpreters' paths and pip's messages go to $RUN.
# Each writes its exit status to $RUN/NAME.rc when it ends (the lanes wait for that file).
(bash tests/parity/ensure_venv.sh > "$RUN/parity" 2> "$RUN/parity.log"; echo $? > "$RUN/parity.rc") &
(bash tests/hf/ensure_venv.sh > "$RUN/hf" 2> "$RUN/hf.log"; echo $? > "$RUN/hf.rc") &
# What the tests run, built on every core (Makefile: test-builds). A failed build ends the
# run (after the environments are made: nothing of make test runs on after it).
if ! make test-builds; then
    wait
    echo "broken: make test-builds failed (above)"
    echo "0 passed, 1 failed"
    exit 1
fi

# say TEXT: one line or block printed whole, under the lock the lanes share.
say() { { flock 9; printf '%s\n' "$1"; } 9> "$RUN/lock"; }
# broken WHY: a part that could not run counts as one failure.
broken() { echo "0 1 $1" >> "$RUN/counts"; }
run_part() {   # run_part NAME COMMAND...
    local name=$1; shift
    local out rc t0=$SECONDS cpu TIMEFORMAT='%U %S'
    # (bash's time: the part's user and system seconds, its child processes' included)
    out=$( { time "$@" 2>&1; } 2> "$RUN/cpu.${LANE:-x}" ); rc=$?
    cpu=$(awk '{printf "%.0f", $1 + $2}' "$RUN/cpu.${LANE:-x}" 2> /dev/null)
    local line pass=0 fail=0 why=""
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
    if [ -z "$line" ]; then
        fail=1; why="$name (exit $rc, no summary line)"
    else
        pass=$(echo "$line" | cut -d' ' -f1); fail=$(echo "$line" | cut -d' ' -f3)
        if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; why="$name (exit $rc)"; fi
        # (a part that checked nothing is broken, unless it says why it skipped)
        if [ "$pass" -eq 0 ] && [ "$fail" -eq 0 ] && ! printf '%s\n' "$out" | grep -q 'SKIPPED'; then
            fail=1; why="$name (no check ran)"
        fi
    fi
    # (when it ended, counted from the start of make test: how busy each lane kept to the end)
    say "$(printf '==== %s\n%s\n(took %d s, %s s of CPU; ended %d s into make test, lane %s)' "$name" "$out" \
        $((SECONDS - t0)) "${cpu:-?}" $SECONDS "${LANE:-}")"
    echo "$pass $fail $why" >> "$RUN/counts"
}

# The mesh over processes needs OpenMPI (Debian: libopenmpi-dev openmpi-bin, .ci/run installs them).
MPI_HERE=$(command -v mpicc > /dev/null && command -v mpirun > /dev/null && echo 1 || echo 0)
NVCC_HERE=$([ -x "${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}" ] && echo 1 || echo 0)

# The shared parts, longest first (on 2 cores, 2026-12-07, wall seconds beside the other lane:
# parity about 190, the strict mode 270, the fuzzers 130, the MPI part 125, the Hugging Face
# check 110). A lane takes one by making its
# directory (mkdir is atomic: one lane gets it); a check whose Python environment is still
# being made is passed over for the next, and waited for when it is the last one left.
venv_ready() { [ -f "$RUN/$1.rc" ]; }
shared_part() {   # shared_part NAME: runs it, or says why it is skipped
    case $1 in
    parity | hf)
        if [ "$(cat "$RUN/$1.rc")" -ne 0 ]; then say "SKIPPED: $1 ($(tail -1 "$RUN/$1.log"))"
        elif [ "$1" = parity ]; then
            run_part "parity against JAX (make parity)" env PYTHON="$(cat "$RUN/parity")" bash tests/parity/run_parity.sh
        else
            run_part "Hugging Face transformers runs the exports (make hf-check)" env PYTHON="$(cat "$RUN/hf")" bash tests/hf/check.sh
        fi ;;
    strict)
        run_part "device=cpu_strict: host code kept off device memory (e2e, mesh, pipeline, checkpoint under it;\
 planted accesses caught)" bash tests/strict.sh ;;
    mpi)
        if [ "$MPI_HERE" = 0 ]; then
            say "SKIPPED: mpi (mpicc or mpirun not found: install libopenmpi-dev and openmpi-bin)"
        elif ! make -s -j2 mpi > "$RUN/mpi-build.log" 2>&1; then   # OpenMPI is there: a failed build fails
            say "$(cat "$RUN/mpi-build.log")"
            broken "mpi (make mpi failed: $(tail -1 "$RUN/mpi-build.log"))"
        else
            run_part "mesh over MPI processes, bit-identical to one process (./train_mpi)" bash tests/mpi.sh
        fi ;;
    fuzz)
        run_part "fuzzing: preset, config JSON, token files, safetensors, a Hugging Face model's tensors (30 s each, two at a time)" \
            make -s fuzz FUZZ_SECONDS=30 ;;
    esac
}
# part NAME COMMAND...: a lane's own part, after the parity check if no lane has taken it and
# its Python environment is ready: the longest part starts as early as it can, and the lanes'
# short parts fill the end.
part() {
    venv_ready parity && mkdir "$RUN/taken-parity" 2> /dev/null && shared_part parity
    run_part "$@"
}
shared_parts() {
    local p waiting
    while :; do
        waiting=0
        for p in parity strict fuzz mpi hf; do
            [ -d "$RUN/taken-$p" ] && continue
            if { [ $p = parity ] || [ $p = hf ]; } && ! venv_ready $p; then waiting=1; continue; fi
            mkdir "$RUN/taken-$p" 2> /dev/null && shared_part $p
            continue 2   # then look again, from the longest
        done
        [ $waiting = 1 ] || return 0
        sleep 1
    done
}

# Lane A: the GPU backend's emulation and builds, the portable build (it reuses build/port,
# which make gpu and make hip fill), the sanitizers.
lane_a() {
    # The GPU backend's kernels emulated on the CPU (gpu/emu.h): the conformance test, with
    # each block's threads run in ascending and in descending order between barriers (a
    # thread that reads what another writes between the same two barriers gets other
    # numbers), and under AddressSanitizer and UBSan (its fibers' frames kept as they are
    # across a switch: gpu/emu.h's emu_jump).
    part "the GPU backend emulated: conformance" ./build/conformance_emu
    part "the GPU backend emulated: conformance, threads in descending order" \
        env GPU_EMU_ORDER=descending ./build/conformance_emu
    part "the GPU backend emulated: conformance under ASan and UBSan" \
        env ASAN_OPTIONS=detect_stack_use_after_return=0 ./build/emu-asan/conformance_emu
    # The whole trainer on the emulated GPU backend (build/train_emu device=gpu): ./train's
    # loss bits and peaks on one device and on meshes, the tensor-core attention within its bound.
    part "the GPU backend emulated: training, ./train's bits and peaks" bash tests/gpu_emu.sh
    # make bench-gpu's report from stand-ins of the programs it runs on a GPU machine.
    part "make bench-gpu's report tried without a GPU (stand-in programs, figures by hand)" \
        bash tests/bench_gpu_selftest.sh
    # The GPU backend (gpu/, docs/gpu.md): built here with nvcc and with hipcc, without
    # warnings; run on a GPU by tests/gpu.sh. The conformance test's CPU build is
    # build/test_conformance (lane B).
    if [ "$NVCC_HERE" = 1 ]; then
        part "make gpu: the CUDA backend, its conformance binary and ./train_gpu build" bash tests/gpu_build.sh gpu
        part "tests/gpu.sh's checks tried without a GPU (device=cpu), planted differences caught" \
            bash tests/gpu_selftest.sh
    else
        say "SKIPPED: gpu build (no nvcc)"
    fi
    if command -v "${HIPCC:-hipcc}" > /dev/null; then
        part "make hip: the same sources built with hipcc, and ./train_hip" bash tests/gpu_build.sh hip
    else
        say "SKIPPED: hip build (no hipcc)"
    fi
    part "portable build (x86-64-v3, AVX2): the native bits" bash tests/portable.sh
    part "sanitizers (make asan)" make -s asan
    part "thread sanitizer, 8 devices (make tsan)" make -s tsan
    [ "$MPI_HERE" = 1 ] && part "thread sanitizer over MPI processes (make tsan-mpi)" make -s tsan-mpi
    shared_parts
}
# Lane B: the unit tests, the trainer's features.
lane_b() {
    for t in build/test_*; do part "$t" "./$t"; done
    part "end-to-end" bash tests/e2e.sh
    part "mesh: bit-identical losses across meshes" bash tests/mesh.sh
    part "model state per device: fp32 AdamW closed form" bash tests/state.sh
    part "pipeline: bit-identical losses over stages" bash tests/pipeline.sh
    part "checkpoints: saved on one mesh, resumed on another, metadata checked" bash tests/checkpoint.sh
    part "sweep: the optimization table" bash tests/sweep.sh
    part "figures: ./train figure from real runs" bash tests/figures.sh
    part "planner: dry-run plan equals measurement; memory trace and SVG" bash tests/planner.sh
    part "planner: one device per class equals every device planned" bash tests/plan_classes.sh
    part "temporaries and fused-op switches: same bits, measured buffers" bash tests/switches.sh
    part "remat, host offload, EMA, opt_type" bash tests/remat.sh
    part "adafactor (opt_type=adafactor: bits across meshes, state bytes from shapes)" bash tests/adafactor.sh
    part "muon (opt_type=muon: bits across meshes, state bytes from shapes, refusals)" bash tests/muon.sh
    part "mu_dtype=bfloat16 (AdamW's bf16 first moment: bits across meshes, state bytes, resume)" bash tests/mu_dtype.sh
    part "remat_policy=save_qkv_proj, qkv_proj_offloaded" bash tests/qkvremat.sh
    part "rope_type=yarn (bits across meshes, MLA's mscale, export and load_hf, refusals)" bash tests/yarn.sh
    part "scan_layers (scanned vs unrolled layers)" bash tests/scan.sh
    part "overlap_collectives (FSDP prefetch)" bash tests/overlap.sh
    part "sharding constraints and shard_mode" bash tests/specs.sh
    part "describe" bash tests/describe.sh
    part "vocabulary tiling and the one-hot embedding" bash tests/vocab.sh
    part "flash attention: tolerance, block sizes, context parallelism, memory" bash tests/flash.sh
    part "ring attention (context_parallel_strategy)" bash tests/ring.sh
    part "profile=true: same bits, FLOP tallies agree, rows add up; the bench's limits" bash tests/profile.sh
    part "OpenBLAS runs kernels as wide as the CPU's vectors" bash tests/blas_kernels.sh
    part "function lengths: none over 80 lines" bash tests/funclen.sh
    part "layers: no include points up (README.md#layers-and-a-reading-order)" bash tests/layers.sh
    part "docs: links, sections and file:function citations resolve; the course's exercises run" bash tests/docs.sh
    part "Hugging Face export and load_hf: bit-for-bit round trip" bash tests/hf.sh
    part "bad inputs, saves, signals, full disks (docs/reliability.md)" bash tests/inputs.sh
    part "random combinations of options, meshes and switches: bits, resumes, plans (make combos: more)" \
        python3 tests/combos.py --n 10 --seed 1
    shared_parts
}
LANE=A lane_a & lane_a_pid=$!
LANE=B lane_b & lane_b_pid=$!
wait $lane_a_pid
wait $lane_b_pid

echo "===="
total_pass=0; total_fail=0
while read -r pass fail why; do
    total_pass=$((total_pass + pass)); total_fail=$((total_fail + fail))
    [ -n "$why" ] && echo "broken: $why"
done < "$RUN/counts"
echo "make test: $SECONDS s"
# (every process it started, the builds included: user and system seconds, and the mean
# number of cores kept busy)
times > "$RUN/times"   # (in this shell: a pipeline's subshell would count its own children)
tail -1 "$RUN/times" | awk -v wall=$SECONDS '{u = $1; s = $2; gsub(/s/, "", u); gsub(/s/, "", s); split(u, a, "m"); split(s, b, "m");
    c = a[1] * 60 + a[2] + b[1] * 60 + b[2]; printf "CPU: %.0f s user, %.0f s system, %.2f cores busy\n", a[1] * 60 + a[2], b[1] * 60 + b[2], wall ? c / wall : 0}'
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
