#!/usr/bin/env bash
# tests/blas_kernels.sh: OpenBLAS runs kernels as wide as the CPU's vectors. Debian's OpenBLAS
# picks narrower ones on CPUs it does not know (Haswell's AVX2 kernels on AMD Zen 4, Prescott's
# SSE3 ones on Intel's Emerald Rapids); ./train and build/gemm_bench then restart themselves
# with OPENBLAS_CORETYPE set (kernels/cpu/matmul.c:blas_prefer_fast_kernels). The start-up
# line names the kernels that run, and a coretype the user set is kept.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train >/dev/null || { echo "build failed"; exit 1; }
if ! ldd ./train | grep -q openblas; then
    echo "SKIPPED: this build has no OpenBLAS"
    summary; exit
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
RUN="configs/mixtral-tiny.yml steps=1 sample_length=0 eval_steps=1"
flags=$(grep -m1 '^flags' /proc/cpuinfo)" "
has() { for f in "$@"; do case "$flags" in *" $f "*) ;; *) return 1 ;; esac; done; }
# The OpenBLAS cores whose sgemm uses 512-bit vectors, and those with at least AVX2's.
AVX512_CORES="SkylakeX Cooperlake SapphireRapids"
AVX2_CORES="Haswell Zen $AVX512_CORES"

env -u OPENBLAS_CORETYPE ./train $RUN > $T/auto.out 2>&1
core=$(sed -n 's/^BLAS: .*(kernels: \([A-Za-z0-9]*\).*/\1/p' $T/auto.out)
echo "       this CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); $(grep -m1 '^BLAS:' $T/auto.out)"
check "the start-up line names OpenBLAS's kernels ($core)" [ -n "$core" ]
if has avx512f avx512bw avx512vl avx512dq; then
    check "AVX-512 CPU: OpenBLAS runs AVX-512 kernels ($core in: $AVX512_CORES)" \
        grep -qw -- "$core" <<< "$AVX512_CORES"
elif has avx2 fma; then
    check "AVX2 CPU: OpenBLAS runs AVX2 kernels or wider ($core in: $AVX2_CORES)" grep -qw -- "$core" <<< "$AVX2_CORES"
fi
env OPENBLAS_CORETYPE=Prescott ./train $RUN > $T/user.out 2>&1
check "OPENBLAS_CORETYPE=Prescott set by the user is kept ($(grep -m1 '^BLAS:' $T/user.out | grep -o 'kernels: [^)]*'))" \
    grep -q "^BLAS: .*(kernels: Prescott)" $T/user.out
summary
