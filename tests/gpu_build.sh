#!/usr/bin/env bash
# tests/gpu_build.sh gpu|hip: the GPU backend's build (make gpu with nvcc, make hip with
# hipcc; docs/gpu.md): every gpu/*.cu object and the conformance binary, without one
# compiler warning (each object keeps its compiler's messages in %.o.log, so the objects
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
logs=$(ls build/$target/*.o.log build/$target/tests/*.o.log build/oracle/*/*.o.log build/oracle/*/*/*.o.log 2>/dev/null)
warnings=$(cat $logs /dev/null | grep -ci 'warning')
[ "$warnings" -ne 0 ] && grep -i -m5 'warning' $logs
check "no compiler warning in the $(echo "$logs" | wc -l) objects' logs ($warnings lines mention one)" test "$warnings" -eq 0

if [ "$target" = gpu ]; then
    # the binary travels to a GPU machine: no CUDA library may be needed at run time
    cuda_libs=$(ldd "$bin" 2>/dev/null | grep -ciE 'cuda|cublas')
    check "$bin needs no CUDA shared library (static runtime, cuBLAS loaded on demand): $cuda_libs" \
        test "$cuda_libs" -eq 0
    for arch in sm_80 sm_90; do
        check "the objects hold $arch machine code" grep -q "$arch" build/gpu/gemm.o
    done
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
summary
