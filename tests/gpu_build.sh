#!/usr/bin/env bash
# tests/gpu_build.sh gpu|hip: the GPU backend's build (make gpu with nvcc, make hip with
# hipcc; docs/gpu.md): every gpu/*.cu object, the conformance binary and the trainer
# (./train_gpu, ./train_hip), without one compiler warning (each object keeps its compiler's messages in %.o.log, so the objects
# that this run did not recompile are counted too). Running the binary needs a GPU:
# tests/gpu.sh does that on a GPU machine; here, without one, it must stop with a clear
# message and a non-zero exit.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
target=${1:?usage: tests/gpu_build.sh gpu|hip}
bin=build/conformance_$target
t0=$SECONDS
out=$(make -j2 "$target" 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s\n' "$out" | tail -20
check "make $target: exit $rc in $((SECONDS - t0)) s" test $rc -eq 0
check "$bin built" test -x "$bin"

n_src=$(ls gpu/*.cu | wc -l)
n_obj=$(ls build/$target/*.o.log 2>/dev/null | wc -l)
check "one object per gpu/*.cu: $n_obj of $n_src" test "$n_obj" -eq "$n_src"
logs=$(ls build/$target/*.o.log build/$target/tests/*.o.log build/oracle/*/*.o.log build/oracle/*/*/*.o.log \
    build/port/*.o.log build/port/*/*.o.log build/port/*/*/*.o.log 2>/dev/null)
warnings=$(cat $logs /dev/null | grep -ci 'warning')
[ "$warnings" -ne 0 ] && grep -i -m5 'warning' $logs
check "no compiler warning in the $(echo "$logs" | wc -l) objects' logs ($warnings lines mention one)" test "$warnings" -eq 0

if [ "$target" = gpu ]; then
    # the binary travels to a GPU machine: no CUDA library may be needed at run time
    cuda_libs=$(ldd "$bin" 2>/dev/null | grep -ciE 'cuda|cublas')
    check "$bin needs no CUDA shared library (static runtime, cuBLAS loaded on demand): $cuda_libs" \
        test "$cuda_libs" -eq 0
    # cuDNN's attention (gpu/attn_cudnn.cu) built in, with the frontend's headers the Makefile
    # fetched: the binary names the cuDNN functions it looks up when gpu_attention=cudnn asks
    check "./train_gpu has cuDNN's attention built in (it names cudnnBackendExecute, looked up at run time)" \
        grep -q cudnnBackendExecute train_gpu
    # the bench's product timer (tests/products_gpu.c) travels too
    check "build/products_gpu built, needing no CUDA shared library" \
        sh -c '[ -x build/products_gpu ] && ! ldd build/products_gpu 2>/dev/null | grep -qiE "cuda|cublas"'
    if ! ls /dev/nvidia0 > /dev/null 2>&1; then
        msg=$(build/products_gpu 2>&1); rc=$?
        check "without a GPU build/products_gpu stops (exit $rc) saying so: $(printf '%s' "$msg" | grep -m1 'no GPU')" \
            sh -c "[ $rc -ne 0 ] && printf '%s' \"\$1\" | grep -q 'no GPU'" _ "$msg"
    fi
    # every kernel's registers in registers: no stack frame or spill on sm_90 beyond the list
    # (ptxas -v in the objects' logs; tests/ptxas_report.py prints them all without --check)
    spills=$(python3 tests/ptxas_report.py --check tests/gpu_spills.txt build/gpu/*.o.log 2>&1); rc=$?
    check "no GPU function spills or keeps a stack frame beyond tests/gpu_spills.txt: $(printf '%s' "$spills" | head -1)" \
        test $rc -eq 0
    [ $rc -ne 0 ] && printf '%s\n' "$spills" | tail -n +2 | head -10
    # the device code by the fat binary's entry headers (tests/fatbin.py): machine code for
    # sm_80 and sm_90 and sm_90's PTX, compressed where nvcc can (the Makefile's NVCOMPRESS)
    code=$(python3 tests/fatbin.py train_gpu 2>&1)
    for entry in "elf sm_80" "elf sm_90" "ptx sm_90"; do
        check "./train_gpu holds $entry code: $(printf '%s\n' "$code" | grep -c "^$entry") objects" \
            sh -c "printf '%s\n' \"\$1\" | grep -q '^$entry'" _ "$code"
    done
    if [ -n "$(make -s -f Makefile --eval 'print-nvcompress: ; @echo $(NVCOMPRESS)' print-nvcompress)" ]; then
        plain=$(for o in build/gpu/*.o; do python3 tests/fatbin.py "$o"; done 2>&1 | grep -vc ' compressed$')
        check "build/gpu/*.o's device code compressed (--compress-mode=size): $plain entries not" test "$plain" -eq 0
    fi
else
    for arch in gfx90a gfx940; do
        check "$bin holds $arch code" grep -q "amdgcn-amd-amdhsa--$arch" "$bin"
    done
fi

if ! ls /dev/nvidia0 /dev/kfd > /dev/null 2>&1; then
    msg=$("$bin" 2>&1); rc=$?
    check "without a GPU $bin stops (exit $rc) saying so: $(printf '%s' "$msg" | grep -m1 'no GPU')" \
        sh -c "[ $rc -ne 0 ] && printf '%s' \"\$1\" | grep -q 'no GPU'" _ "$msg"
fi

# ./train_gpu (./train_hip): the whole trainer with the GPU backend (make gpu / make hip).
# Without a GPU, device=gpu stops before training (nothing on stdout) with one message and
# exit 1; with the CPU backend (the default) it trains with ./train's bits: the same loss
# bits and grad norms, 3 steps of each family (its C objects are compiled for x86-64-v3
# without OpenBLAS, ./train's with -march=native: docs/gpu.md says why the bits agree).
trainer=./train_$target
check "$trainer built" test -x "$trainer"
[ -x ./train ] || make -s -j2 train > /dev/null
C=configs/mixtral-tiny.yml
if ! ls /dev/nvidia0 /dev/kfd > /dev/null 2>&1; then
    expect_error "without a GPU, $trainer device=gpu stops" "device=gpu: no GPU can run the" $trainer $C device=gpu
    check "... before training (nothing on stdout)" test -z "$($trainer $C device=gpu 2> /dev/null)"
fi
expect_error "./train device=gpu names the binaries with the GPU backend" "build ./train_gpu" ./train $C device=gpu
# gpu_matmul=cublas_bf16 multiplies bf16 operands: refused where they would not be bf16-valued
expect_error "gpu_matmul=cublas_bf16 in float32" "needs dtype=bfloat16" $trainer $C device=gpu gpu_matmul=cublas_bf16
expect_error "gpu_matmul=cublas_bf16 on the CPU" "chooses device=gpu's products" $trainer $C gpu_matmul=cublas_bf16 \
    dtype=bfloat16
# gpu_attention=tensor_cores likewise; rows and tensor_cores name the GPU's kernels
expect_error "gpu_attention=tensor_cores in float32" "needs dtype=bfloat16" $trainer $C device=gpu \
    gpu_attention=tensor_cores
expect_error "gpu_attention=rows on the CPU" "chooses device=gpu's attention kernels" $trainer $C gpu_attention=rows
T=$(mktemp -d /tmp/meshmoe-gpubuild.XXXXXX)
trap 'rm -rf "$T"' EXIT
norms() { grep -o '"grad_norm": [^,]*' "$T/$1.jsonl" | tr '\n' ' '; }   # every step's grad norm
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=64 per_device_batch_size=4 log_period=100"
for preset in mixtral-tiny deepseek-tiny; do
    TRAIN=./train run cpu-$preset $preset ici_fsdp_parallelism=2
    TRAIN=$trainer run $target-$preset $preset ici_fsdp_parallelism=2
    check "$preset fsdp=2: $trainer's loss bits and grad norms are ./train's: $(bits $target-$preset)" \
        sh -c '[ -n "$1" ] && [ "$1" = "$2" ] && [ "$3" = "$4" ]' _ "$(bits $target-$preset)" "$(bits cpu-$preset)" \
        "$(norms $target-$preset)" "$(norms cpu-$preset)"
done

# ./train_gpu_mpi (./train_hip_mpi): the same trainer as processes of an mpirun job (make
# gpu-mpi, hip-mpi; docs/mpi.md). Where OpenMPI is: built without a warning, linked with the
# MPI library; over 2 processes with the CPU backend, ./train's bits on the same global mesh;
# without a GPU, device=gpu stops the job with one message, before training.
if command -v mpicc > /dev/null && command -v mpirun > /dev/null; then
    t0=$SECONDS
    out=$(make -j2 "$target-mpi" 2>&1); rc=$?
    [ $rc -ne 0 ] && printf '%s\n' "$out" | tail -20
    check "make $target-mpi: exit $rc in $((SECONDS - t0)) s, ${trainer}_mpi linked with $(ldd ${trainer}_mpi 2>/dev/null | grep -o 'libmpi[^ ]*' | head -1)" \
        sh -c '[ "$1" -eq 0 ] && ldd "$2" | grep -q libmpi' _ $rc ${trainer}_mpi
    warnings=$(cat build/port/mpi/*.o.log /dev/null 2>/dev/null | grep -ci 'warning')
    check "no compiler warning in the MPI objects' logs ($warnings lines mention one)" test "$warnings" -eq 0
    MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self"
    M="configs/mixtral-tiny.yml $FAST num_threads=1 ici_fsdp_parallelism=2"
    TRAIN=./train run cpu-mpi mixtral-tiny ici_data_parallelism=2 ici_fsdp_parallelism=2
    timeout 120 $MPIRUN -np 2 ${trainer}_mpi $M dcn_data_parallelism=2 metrics_file=$T/mpi.jsonl < /dev/null \
        > $T/mpi.out 2>&1
    check "${trainer}_mpi over 2 processes (dcn data=2, ici fsdp=2): ./train's loss bits and grad norms on data=2 fsdp=2: $(bits mpi)" \
        sh -c '[ -n "$1" ] && [ "$1" = "$2" ] && [ "$3" = "$4" ]' _ "$(bits mpi)" "$(bits cpu-mpi)" \
        "$(norms mpi)" "$(norms cpu-mpi)"
    if ! ls /dev/nvidia0 /dev/kfd > /dev/null 2>&1; then
        timeout 60 $MPIRUN -np 2 ${trainer}_mpi $M dcn_data_parallelism=2 device=gpu < /dev/null > $T/mpi-gpu.out 2>&1
        rc=$?
        msgs=$(grep -c '^meshmoe:' $T/mpi-gpu.out)
        check "without a GPU, ${trainer}_mpi device=gpu over 2 processes stops (exit $rc) with $msgs message: $(grep -m1 '^meshmoe:' $T/mpi-gpu.out | cut -c1-120)" \
            sh -c '[ "$1" -ne 0 ] && [ "$1" -ne 124 ] && [ "$2" -eq 1 ] && grep -q "no GPU can run" "$3" && ! grep -q "^step" "$3"' \
            _ $rc "$msgs" $T/mpi-gpu.out
    fi
else
    echo "SKIPPED: ${trainer}_mpi (mpicc or mpirun not found)"
fi
summary
