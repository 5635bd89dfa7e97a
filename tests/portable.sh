#!/usr/bin/env bash
# tests/portable.sh: the trainer built for any AVX2 machine (-march=x86-64-v3, without OpenBLAS:
# build/port/train, the objects of ./train_gpu and ./train_hip) trains to the same bits as the
# native build. The vector code (attention tiles, the 16-lane exp of
# SwiGLU, bf16 rounding, the optimizer's loops) is written over fixed-width vector types, so
# the instructions the compiler picks (AVX-512 here, AVX2 there) must not change a result;
# this compares the two builds' loss and grad-norm bits on both presets, fp32 and bf16,
# dot-product and flash attention, one device and a mesh, and once more with the GEMM held to
# its AVX2 micro-kernel (MESHMOE_GEMM_KERNEL=avx2); and it runs the vector kernels' unit tests
# (expf16 on all 2^32 inputs, the attention tiles, the core tests) built the same way. The GEMM picks its
# micro-kernel at run time: tests/test_gemm.c checks each one (scalar, AVX2, AVX-512).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train >/dev/null || { echo "build failed"; exit 1; }
V3=build/port
make -s -j2 $V3/train >/dev/null 2>&1 || { echo "build for x86-64-v3 failed"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
FAST="steps=4 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=64 log_period=100"
bits() { grep -o '"loss_bits": "[^"]*"\|"grad_norm": [^,]*' "$1" | tr '\n' ' '; }

make -s -j2 $V3/test_expf16 $V3/test_attn_tiles $V3/test_core >/dev/null 2>&1 || { echo "x86-64-v3 unit tests: build failed"; exit 1; }
check "the x86-64-v3 build's expf16 (its AVX2 lanes) is expf on all 2^32 inputs, SwiGLU the formulas'" \
    $V3/test_expf16
check "the x86-64-v3 build's attention tiles (8-float vectors) are the per-row loops, bit for bit" \
    $V3/test_attn_tiles
check "the x86-64-v3 build's core tests (the gradient norm's squares on AVX2 lanes among them)" $V3/test_core
# (the disassembly must have worked and hold instructions: a missing objdump prints no zmm either)
dis=$(objdump -d $V3/kernels/cpu/mlp.o $V3/kernels/cpu/attn_tiles.o $V3/kernels/cpu/expf16.o 2>&1)
ymm=$(grep -c ymm <<<"$dis"); zmm=$(grep -c zmm <<<"$dis")
check "the x86-64-v3 build has no AVX-512 instruction outside the GEMM's run-time choice ($zmm lines use zmm, $ymm ymm)" \
    test "$ymm" -gt 0 -a "$zmm" -eq 0
# same_bits PRESET ARGS [GEMM]: the native build and the x86-64-v3 build (its GEMM held to the
# micro-kernel GEMM when given) train PRESET with ARGS; prints their 4 losses and grad norms,
# or nothing if they differ or a run failed.
same_bits() {
    rm -f $T/native.jsonl $T/v3.jsonl
    ./train configs/$1.yml $2 $FAST metrics_file=$T/native.jsonl > $T/native.out 2>&1
    # shellcheck disable=SC2086
    env ${3:+MESHMOE_GEMM_KERNEL=$3} $V3/train configs/$1.yml $2 $FAST metrics_file=$T/v3.jsonl > $T/v3.out 2>&1
    local n v
    n=$(bits $T/native.jsonl) v=$(bits $T/v3.jsonl)
    [ -n "$n" ] && [ "$n" = "$v" ] && echo "$n"
}
for preset in mixtral-tiny deepseek-tiny; do
    while IFS='|' read -r name args; do
        n=$(same_bits $preset "$args")
        check "$preset $name: the x86-64-v3 build's 4 losses and grad norms are the native build's: ${n:0:60}..." \
            test -n "$n"
    done <<'RUNS'
1 device|per_device_batch_size=8
bf16, flash attention|per_device_batch_size=8 dtype=bfloat16 attention=flash
fsdp=2,tensor=2|ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2
RUNS
done
# The GEMM's AVX2 micro-kernel too (this build otherwise picks AVX-512 where the CPU has it):
# every kernel on its AVX2 path, the native build's bits.
n=$(same_bits deepseek-tiny per_device_batch_size=8 avx2)
check "deepseek-tiny, the x86-64-v3 build on the GEMM's $(grep -o 'avx2 6x16' $T/v3.out | head -1) kernel: the native build's bits" \
    test -n "$n" -a -n "$(grep -o 'avx2 6x16' $T/v3.out)"
summary
