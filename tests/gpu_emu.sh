#!/usr/bin/env bash
# tests/gpu_emu.sh: the whole trainer on the GPU backend, emulated (build/train_emu: the
# gpu/*.cu sources compiled against gpu/emu.h, device=gpu), against ./train on the same
# runs. The conformance test checks each kernel alone; this checks what only a training run
# puts together: the layers' calls into the GPU backend, its memory pool and scratch, the
# MoE rows read back to the host, the collectives of a mesh of device threads, host offload,
# the grouped products (megablox) and the tensor-core attention in a step, before any GPU
# session.
#
# With the ordered GEMM and the default attention the emulation's kernels give the CPU's
# bits (the device's expf is the CPU's here), so the loss bits of every step and every
# device's peak bytes by tag must equal ./train's. The tensor-core attention adds its sums
# in another order: its losses must stay within 1e-2 relative of ./train's bf16 run (measured
# here, 2 steps: at most 4.2e-4 on mixtral-tiny and 8.3e-5 on deepseek-tiny; 8.9e-4 at the
# third step), its two kernels (scores in registers, and through shared memory) must give
# the same bits, as must dq read from the dS in memory and dq made again, and the run must
# differ from the CPU's somewhere (else the tensor-core kernels did not run). The
# cuBLAS paths run on the emulation's cuBLAS (gpu/emu_cublas.h): gpu_matmul=cublas_bf16 within
# the same bound, every operand it multiplied bf16-valued (MESHMOE_CHECK_BF16's count), and
# megablox's grouped calls the per-expert calls' bits (each part the same product). The
# weights' copy as 16-bit numbers (bf16_storage=kept): ./train's bits and peaks on the
# ordered GEMM, cuBLAS's on bf16 storage; the experts' products by the backend's own
# tensor-core kernel (MESHMOE_GROUPED=kernel, both operand kinds) within the attention's bound. Last,
# tests/gpu_bench.sh's product timer (tests/products_gpu.c) on small shapes: its bf16-stored
# products give its float32 ones' results (the emulated cuBLAS sums both ways in double), and
# the own kernel cuBLAS's within a dot product's bound.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train build/train_emu build/products_emu > /dev/null || { echo "build failed"; exit 1; }
T=$(mktemp -d /tmp/meshmoe-gpu-emu.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=2 per_device_batch_size=2 max_target_length=32 base_num_decoder_layers=2 sample_length=0 eval_steps=1"

# both NAME PRESET ARGS...: ./train (without the gpu_* keys, which it refuses) and
# build/train_emu device=gpu on the same run, into $T/NAME-cpu.* and $T/NAME-emu.*; two
# emulated runs at a time (an emulated kernel runs on its device's thread alone).
both() {
    local name=$1 preset=$2; shift 2
    local a cpu_args=()
    for a in "$@"; do [[ $a == gpu_* ]] || cpu_args+=("$a"); done
    ./train configs/$preset.yml $FAST "${cpu_args[@]}" metrics_file=$T/$name-cpu.jsonl > $T/$name-cpu.out 2>&1 \
        || echo "./train failed: $(tail -1 $T/$name-cpu.out)" > $T/$name.failed
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
    (build/train_emu configs/$preset.yml $FAST "$@" device=gpu metrics_file=$T/$name-emu.jsonl > $T/$name-emu.out 2>&1 \
        || echo "build/train_emu failed: $(tail -1 $T/$name-emu.out)" >> $T/$name.failed) &
}
# The lines of the memory report ("device N peak ... by tag", the eval's and the init's), not
# the GPU pool's own line.
peaks_of() { grep -E '^(device [0-9]+ peak|init peak|eval peak)' "$T/$1.out" | grep -v 'GPU memory'; }
ok_run() { [ ! -f "$T/$1.failed" ] || { fail "$1: $(cat "$T/$1.failed")"; return 1; }; }

echo "== the CPU's bits and peaks, through the GPU backend's kernels (ordered GEMM, default attention)"
# (mu_dtype=bfloat16: AdamW's first moment as bf16 bits, moved to the host and back; its
# rounding shows from the third loss on.)
both mx-offl   mixtral-tiny remat_policy=minimal_offloaded optimizer_memory_host_offload=true mu_dtype=bfloat16 \
    steps=3
both ds-ft     deepseek-tiny dtype=bfloat16 megablox=true ici_fsdp_parallelism=2 ici_tensor_parallelism=2 num_devices=4
both mx-ep     mixtral-tiny dtype=bfloat16 megablox=true ici_expert_parallelism=2 num_devices=2
both ds-cp     deepseek-tiny attention=flash ici_context_parallelism=2 num_devices=2
both ds-w16 deepseek-tiny dtype=bfloat16 bf16_storage=kept megablox=true ici_tensor_parallelism=2 num_devices=2
# (every layer's tensors kept: the saved norm outputs n1 and nf read by the products as 16-bit numbers)
both mx-w16n mixtral-tiny dtype=bfloat16 bf16_storage=kept remat_policy=none
# (adafactor's moments over tensor and expert pieces: the rows and columns gathered on the device)
both mx-af mixtral-tiny opt_type=adafactor ici_tensor_parallelism=2 ici_data_parallelism=2 \
    shard_optimizer_over_data=true num_devices=4
# (the experts' received rows and their plan moved to the host and back: minimal_offloaded on expert=2)
both mx-offep mixtral-tiny remat_policy=minimal_offloaded ici_expert_parallelism=2 num_devices=2
# (muon: each matrix gathered over tensor/expert pieces and fsdp, orthogonalized by the backend's products)
both mx-muon mixtral-tiny opt_type=muon ici_tensor_parallelism=2 ici_expert_parallelism=2 num_devices=4
both ds-muon deepseek-tiny opt_type=muon ici_data_parallelism=2 shard_optimizer_over_data=true \
    optimizer_memory_host_offload=true mu_dtype=bfloat16 num_devices=2
# (rope_type=yarn: its frequencies uploaded and its table on the device; DeepSeek's interleaved
# pairs rotated between two arrays, under context parallelism; Mixtral's over a pipeline)
# (these two sample 16 tokens after their steps: the context parts and the pipeline's stages
# through the GPU's kernels, the text ./train's)
both ds-yarn deepseek-tiny rope_type=yarn original_max_position_embeddings=1024 max_position_embeddings=163840 \
    ici_context_parallelism=2 num_devices=2 sample_length=16
both mx-yarn mixtral-tiny rope_type=yarn original_max_position_embeddings=1024 rope_factor=8 dtype=bfloat16 \
    ici_pipeline_parallelism=2 remat_policy=minimal num_devices=2 sample_length=16
# (load_parameters_path: a checkpoint's weights and routing biases onto the devices, read in pieces)
./train configs/deepseek-tiny.yml $FAST steps=1 save_checkpoint=$T/ds.st > $T/ds-save.out 2>&1 \
    || fail "the checkpoint for ds-lp: $(tail -1 $T/ds-save.out)"
both ds-lp deepseek-tiny load_parameters_path=$T/ds.st ici_expert_parallelism=2 opt_type=sgd num_devices=2
echo "== the tensor-core attention (bf16), scores in registers (dq from dS in memory, or made again) and through" \
    "shared memory"
both mx-tc     mixtral-tiny dtype=bfloat16 gpu_attention=tensor_cores
both ds-tc     deepseek-tiny dtype=bfloat16 gpu_attention=tensor_cores megablox=true
MESHMOE_ATTN_SCORES=smem both ds-tcs deepseek-tiny dtype=bfloat16 gpu_attention=tensor_cores megablox=true
MESHMOE_ATTN_DQ=scores both ds-tcq deepseek-tiny dtype=bfloat16 gpu_attention=tensor_cores megablox=true
echo "== cuBLAS (gpu/emu_cublas.h): the weight products on bf16 operands, the experts' grouped call"
MESHMOE_CHECK_BF16=1 both mx-cb mixtral-tiny dtype=bfloat16 gpu_matmul=cublas_bf16 gpu_attention=tensor_cores
both ds-cbg    deepseek-tiny dtype=bfloat16 gpu_matmul=cublas_bf16 megablox=true ici_expert_parallelism=2 num_devices=2
both ds-cbl    deepseek-tiny dtype=bfloat16 gpu_matmul=cublas_bf16 megablox=false ici_expert_parallelism=2 num_devices=2
both ds-w16cb deepseek-tiny dtype=bfloat16 bf16_storage=kept gpu_matmul=cublas_bf16 megablox=true \
    ici_expert_parallelism=2 num_devices=2
# Where cuBLAS's grouped call refuses bf16 operands (as cuBLAS 13.0 does with float32 results),
# the default: a cuBLAS call per expert.
# Those calls through cuBLASLt (gpu/matmul_lt.cu) with each algorithm refused for any shape but
# its own (EMU_CUBLASLT=exact: each class asks again, then goes to cublasGemmEx); and with no
# algorithm given (none: every product by cublasGemmEx).
EMU_CUBLAS_REFUSE_GROUPED_BF16=1 EMU_CUBLASLT=exact both ds-w16r deepseek-tiny dtype=bfloat16 bf16_storage=kept \
    gpu_matmul=cublas_bf16 megablox=true ici_expert_parallelism=2 num_devices=2
both mx-w16l mixtral-tiny dtype=bfloat16 bf16_storage=kept gpu_matmul=cublas_bf16
EMU_CUBLASLT=none both mx-w16ln mixtral-tiny dtype=bfloat16 bf16_storage=kept gpu_matmul=cublas_bf16
# The experts' products by the backend's own tensor-core kernel (gpu/grouped16.cu), on float32
# operands and on bf16 storage (MESHMOE_GROUPED=kernel).
MESHMOE_GROUPED=kernel both ds-cbk deepseek-tiny dtype=bfloat16 gpu_matmul=cublas_bf16 megablox=true \
    ici_expert_parallelism=2 num_devices=2
MESHMOE_GROUPED=kernel both ds-w16k deepseek-tiny dtype=bfloat16 bf16_storage=kept gpu_matmul=cublas_bf16 \
    megablox=true ici_expert_parallelism=2 num_devices=2
# deepseek-medium as make bench-gpu trains it (64 experts in 8 groups, megablox, MLA's heads of
# 192 and 128, cuBLAS and the tensor cores), narrower, on 2 layers of 128 tokens.
dsm_args=(gpu_matmul=cublas_bf16 gpu_attention=tensor_cores base_num_decoder_layers=2 base_emb_dim=256
          base_mlp_dim=512 base_moe_mlp_dim=64 q_lora_rank=96 kv_lora_rank=64 vocab_size=512 max_target_length=128
          per_device_batch_size=1)
both dsm       deepseek-medium "${dsm_args[@]}"
wait

text_of() { sed -n '/^---- sample/{n;p;}' "$T/$1.out"; }
for name in mx-offl ds-ft mx-ep ds-cp ds-w16 mx-w16n mx-af mx-offep mx-muon ds-muon ds-yarn mx-yarn ds-lp; do
    ok_run $name || continue
    check "$name: loss bits as ./train's: $(bits $name-emu)" same $name-cpu $name-emu
    if [ "$name" = ds-yarn -o "$name" = mx-yarn ]; then
        check "$name: the sample's text as ./train's ($(text_of $name-emu))" \
            test -n "$(text_of $name-cpu)" -a "$(text_of $name-emu)" = "$(text_of $name-cpu)"
    fi
    if [ -n "$(peaks_of $name-cpu)" ] && diff <(peaks_of $name-cpu) <(peaks_of $name-emu) > $T/$name.peaks; then
        pass "$name: peak bytes by tag as ./train's ($(peaks_of $name-emu | wc -l) lines)"
    else
        fail "$name: peak bytes by tag differ: $(head -4 $T/$name.peaks | tr '\n' ' ')"
    fi
done
for name in mx-tc ds-tc mx-cb dsm; do
    ok_run $name || continue
    if [ $name = ds-tc ]; then
        ok_run ${name}s && ok_run ${name}q || continue
        check "$name: the two tensor-core kernels give the same loss bits: $(bits $name-emu)" \
            same $name-emu ${name}s-emu
        check "$name: dq from dS in memory and dq made again give the same loss bits" same $name-emu ${name}q-emu
    fi
    check "$name: the tensor-core kernels ran (loss bits not ./train's)" \
        test -n "$(bits $name-emu)" -a "$(bits $name-emu)" != "$(bits $name-cpu)"
    n_cpu=$(losses $T/$name-cpu.jsonl | wc -l) n_emu=$(losses $T/$name-emu.jsonl | wc -l)
    check "$name: both runs logged every step's loss ($n_cpu and $n_emu of 2)" test "$n_cpu" -eq 2 -a "$n_emu" -eq 2
    worst=$(paste <(losses $T/$name-cpu.jsonl) <(losses $T/$name-emu.jsonl) |
            awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { printf "%.2e", w + 0 }')
    check "$name: every step's loss within 1e-2 of ./train's bf16 run (worst relative difference $worst)" \
        awk -v w="$worst" 'BEGIN { exit !(w + 0 <= 1e-2) }'
done
# The planner of a device=gpu run with cuBLAS's products (./train dry_run=true, no GPU) counts
# cuBLAS's workspace as the GPU backend allocates it (Hopper's 32 MiB, which the emulation's
# device reports): every tag's peak the emulated run's, byte for byte.
./train configs/deepseek-medium.yml $FAST "${dsm_args[@]}" device=gpu dry_run=true metrics_file=$T/dsm-dry.jsonl \
    > $T/dsm-dry.out 2>&1 || fail "dsm's dry run failed: $(tail -1 $T/dsm-dry.out)"
tag_peaks() { grep -o '"device": [0-9]*, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' "$1" | tail -1; }
if ok_run dsm; then
    planned=$(tag_peaks $T/dsm-dry.jsonl) measured=$(tag_peaks $T/dsm-emu.jsonl)
    check "dsm: the planner's peaks by tag, cuBLAS's 32 MiB workspace among them, are the emulated GPU run's" \
        test -n "$measured" -a "$planned" = "$measured" -a -n "$(echo "$planned" | grep '"workspace": 33554432')"
fi
# MESHMOE_CHECK_BF16=1: cuBLAS's operands converted by the backend's own kernel, which counts
# those that were not bf16-valued: none may be (the cast points make every one bf16-valued).
line=$(grep -m1 '^cublas_bf16 check:' $T/mx-cb-emu.out)
read -r converted inexact <<< "$(echo "$line" | sed -n 's/.*check: \([0-9]*\) operand values.*, \([0-9]*\) of them.*/\1 \2/p')"
check "mx-cb: every operand cuBLAS multiplied was bf16-valued (${line:-no check line})" \
    test -n "${converted:-}" -a "${converted:-0}" -gt 0 -a "${inexact:-1}" -eq 0
if ok_run ds-cbg && ok_run ds-cbl; then
    check "ds-cbg: megablox's grouped cuBLAS calls give the per-expert calls' loss bits: $(bits ds-cbg-emu)" \
        same ds-cbg-emu ds-cbl-emu
    check "ds-cbg: cuBLAS ran (loss bits not ./train's)" test -n "$(bits ds-cbg-emu)" -a "$(bits ds-cbg-emu)" != "$(bits ds-cbg-cpu)"
fi
# bf16_storage=kept under cuBLAS: the weights' products on bf16 storage (CUDA_R_16BF) where
# ds-cbg's hand cuBLAS float32 arrays; the emulated cuBLAS sums each element in double either way, so
# the same loss bits.
if ok_run ds-cbg && ok_run ds-w16cb; then
    check "ds-w16cb: cuBLAS on bf16 storage gives ds-cbg's loss bits: $(bits ds-w16cb-emu)" same ds-cbg-emu ds-w16cb-emu
fi
# The grouped call refused, a call per expert: the same products, the same bits, said once.
if ok_run ds-w16cb && ok_run ds-w16r; then
    said=$(grep -c "refused compute type.*one call each" $T/ds-w16r-emu.out)
    check "ds-w16r: cuBLAS's grouped call refused ($said time(s) said), a call per expert gives ds-w16cb's loss bits" \
        test "$said" -ge 1 -a "$(bits ds-w16r-emu)" = "$(bits ds-w16cb-emu)" -a -n "$(bits ds-w16r-emu)"
fi
# cuBLASLt's kept algorithms, or none given and cublasGemmEx: the same products, the same bits
# (the emulation sums each element in double either way), not ./train's.
if ok_run mx-w16l && ok_run mx-w16ln; then
    check "mx-w16l: cuBLASLt ran on bf16 storage (loss bits not ./train's): $(bits mx-w16l-emu)" \
        test -n "$(bits mx-w16l-emu)" -a "$(bits mx-w16l-emu)" != "$(bits mx-w16l-cpu)"
    check "mx-w16ln: no cuBLASLt algorithm, cublasGemmEx gives mx-w16l's loss bits" same mx-w16l-emu mx-w16ln-emu
fi
# What each device's products went through, said when it leaves the GPU (gpu/matmul_lt.cu:
# gpu_lt_report): "device D: cuBLASLt ran R of its 16-bit products, cublasGemmEx G; its heuristic
# asked A times, F calls refused a kept algorithm", as "R G A F".
lt_counts() {
    sed -n 's/^device 0: cuBLASLt ran \([0-9]*\) of its 16-bit products, cublasGemmEx \([0-9]*\); its heuristic asked \([0-9]*\) times, \([0-9]*\) calls refused.*/\1 \2 \3 \4/p' "$1" | head -1
}
if ok_run mx-w16l && ok_run mx-w16ln; then
    read -r r g a f <<<"$(lt_counts $T/mx-w16l-emu.out)"
    check "mx-w16l: cuBLASLt ran every 16-bit product (${r:-?} of them, cublasGemmEx ${g:-?}, ${a:-?} classes asked, ${f:-?} refusals)" \
        test "${r:-0}" -gt 0 -a "${g:-1}" -eq 0 -a "${f:-1}" -eq 0 -a "${a:-0}" -gt 0 -a "${a:-0}" -lt "${r:-0}"
    read -r r g a f <<<"$(lt_counts $T/mx-w16ln-emu.out)"
    check "mx-w16ln: with no algorithm given, cublasGemmEx ran them all (${g:-?}; cuBLASLt ${r:-?})" \
        test "${r:-1}" -eq 0 -a "${g:-0}" -gt 0
fi
if ok_run ds-w16r; then
    read -r r g a f <<<"$(lt_counts $T/ds-w16r-emu.out)"
    check "ds-w16r: kept algorithms refused off their own shapes (${f:-?} calls), those calls run by the heuristic's answer for them or by cublasGemmEx (cuBLASLt ${r:-?}, cublasGemmEx ${g:-?})" \
        test "${f:-0}" -gt 0 -a "${r:-0}" -gt 0 -a "${g:-0}" -gt 0
fi
# The heuristic's first answer one it says will not run (EMU_CUBLASLT=second): the second is kept,
# so no call is refused and cuBLASLt runs them all (taking the first would refuse every call).
out=$(EMU_CUBLASLT=second build/conformance_emu 2>&1); rc=$?
printf '%s\n' "$out" > $T/conf-second.out
read -r r g a f <<<"$(lt_counts $T/conf-second.out)"
check "conformance_emu with the heuristic's first answer unusable: $(printf '%s\n' "$out" | tail -1); cuBLASLt ran ${r:-?}, cublasGemmEx ${g:-?}, ${f:-?} refusals" \
    test "$rc" -eq 0 -a "${r:-0}" -gt 0 -a "${g:-1}" -eq 0 -a "${f:-1}" -eq 0
# The own kernel sums in float32 in its tiles' order, where the emulated cuBLAS sums in double:
# other bits, and as the tensor-core attention's runs, every loss within 1e-2 relative of
# ./train's bf16 run (measured here, 2 steps: 1.7e-4 from ds-w16cb's at the second).
for k in ds-cbk:ds-cbg ds-w16k:ds-w16cb; do
    name=${k%:*} other=${k#*:}
    ok_run $other && ok_run $name || continue
    check "$name: the own kernel ran (loss bits not $other's): $(bits $name-emu)" \
        test -n "$(bits $name-emu)" -a "$(bits $name-emu)" != "$(bits $other-emu)"
    worst=$(paste <(losses $T/$name-cpu.jsonl) <(losses $T/$name-emu.jsonl) |
            awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d } END { printf "%.2e", w + 0 }')
    n_emu=$(losses $T/$name-emu.jsonl | wc -l)
    check "$name: $n_emu of 2 steps' losses within 1e-2 of ./train's bf16 run (worst relative difference $worst)" \
        awk -v w="$worst" -v n="$n_emu" 'BEGIN { exit !(n == 2 && w + 0 <= 1e-2) }'
done
n16=$(cat $T/ds-w16-cpu.out $T/ds-w16-emu.out $T/ds-w16cb-emu.out 2>/dev/null |
    grep -c "the weights' bf16 copy as 16-bit")
check "ds-w16, ds-w16cb: each run says its weights' copy was 16-bit ($n16 of 3)" test "$n16" -eq 3
# gpu_attention=cudnn where the build has no cuDNN (the emulation never has): one message naming
# the key and why, before any step; and in float32, one naming the dtype it needs.
out=$(build/train_emu configs/mixtral-tiny.yml device=gpu dtype=bfloat16 gpu_attention=cudnn $FAST 2>&1); rc=$?
check "gpu_attention=cudnn without cuDNN: exit $rc, no step, said: ${out##*meshmoe: }" \
    bash -c '[ "$1" -ne 0 ] && [[ "$2" == *"gpu_attention=cudnn: this build (emulated) has no cuDNN"* ]] &&
        [[ "$2" != *"step "* ]]' _ "$rc" "$out"
out=$(build/train_emu configs/mixtral-tiny.yml device=gpu gpu_attention=cudnn $FAST 2>&1); rc=$?
check "gpu_attention=cudnn in float32: exit $rc, said: ${out##*meshmoe: }" \
    bash -c '[ "$1" -ne 0 ] && [[ "$2" == *"gpu_attention=cudnn multiplies bf16 operands: it needs dtype=bfloat16"* ]]' \
    _ "$rc" "$out"
echo "== build/products_emu small: the product timer of tests/gpu_bench.sh, emulated"
# table N's rows of `| small: ` in file F, and their last column ("apart")
rows_of() { awk -v n="$1" '/^\| product /{ t++ } t == n && /^\| small: /' "$2"; }
aparts() { awk -F'|' '{ print $(NF-1) }' | tr -d ' ' | sort -u | tr '\n' ' '; }
# Its fresh run's table: the experts' products on shapes new and met, with cuBLASLt's kept
# algorithms and with cublasGemmEx: a row each (the emulation's times say nothing).
fresh=$( { build/products_emu fresh small && MESHMOE_CUBLAS_LT=off build/products_emu fresh small; } 2>&1); rc=$?
# Each row's last column: its last round's results against cublasGemmEx on float32 operands,
# which the emulation sums in double as it does cuBLASLt's: 0 (an alpha of 1.001 planted in
# gpu/matmul_lt.cu gave 1.0e-03). The kept row's run says it went through cuBLASLt.
n=$(printf '%s\n' "$fresh" | grep -c '^| cuBLASLt, algorithms kept | 64 x 40 x 32, 4 experts, 24 rounds | .* | 0.0e+00 |$')
m=$(printf '%s\n' "$fresh" | grep -c '^| cublasGemmEx (MESHMOE_CUBLAS_LT=off) | 64 x 40 x 32, 4 experts, 24 rounds | .* | 0.0e+00 |$')
printf '%s\n' "$fresh" > $T/fresh.out
read -r r g a f <<<"$(lt_counts $T/fresh.out)"
check "products_emu fresh: exit $rc, a row with cuBLASLt ($n) and one with cublasGemmEx ($m), each 0 apart from cublasGemmEx on float32 operands; cuBLASLt ran ${r:-?}, cublasGemmEx ${g:-?}" \
    test "$rc" -eq 0 -a "$n" -eq 1 -a "$m" -eq 1 -a "${r:-0}" -gt 0 -a "${g:-1}" -eq 0
build/products_emu small > $T/products.out 2>&1; rc=$?
rows=$(rows_of 2 $T/products.out | wc -l) apart=$(rows_of 2 $T/products.out | aparts)
check "products_emu: exit $rc, $rows of 6 shapes timed, each with the float32 products' results (apart: $apart)" \
    test "$rc" -eq 0 -a "$rows" -eq 6 -a "$apart" = "0.0e+00 "
# Its first table (a run's first, so that a time limit cuts the others), the own tensor-core
# kernel (gpu/grouped16.cu) beside the emulated cuBLAS:
# float32 sums in the tiles' order against sums in double, over at most 64 terms of bf16 values
# in [-0.5, 0.5): within 2 K u of the sum of |terms| (K = 64), which is at most about twice the
# largest result here, so 2e-5 of it (measured: at most 8.4e-8).
rows=$(rows_of 1 $T/products.out | wc -l) apart=$(rows_of 1 $T/products.out | aparts)
check "products_emu: the own kernel on $rows of 6 shapes, within 2e-5 of cuBLAS's results (apart: $apart)" \
    test "$rows" -eq 6 -a -z "$(rows_of 1 $T/products.out | awk -F'|' '!($(NF-1) + 0 <= 2e-5)')"
# Where cuBLAS's grouped call refuses bf16 operands (the emulation made to, as cuBLAS 13.0
# does): said once, and the second table's grouped rows (cuBLAS alone) a call per group, with
# the same results.
EMU_CUBLAS_REFUSE_GROUPED_BF16=1 build/products_emu small > $T/products-refused.out 2> $T/products-refused.err; rc=$?
said=$(grep -c "refused compute type.*one call each" $T/products-refused.err)
grouped=$(rows_of 2 $T/products-refused.out | grep -c '^| small: grouped')
apart=$(rows_of 2 $T/products-refused.out | grep '^| small: grouped' | aparts)
check "products_emu, grouped bf16 refused: exit $rc, said $said time(s), $grouped grouped rows a call each ($apart)" \
    test "$rc" -eq 0 -a "$said" -eq 1 -a "$grouped" -eq 3 -a "$apart" = "0.0e+00 "
# Its third table, the products with bf16 results (kernels/matmul16.h's *_round16) against the
# float32 results packed after: the emulated cuBLAS rounds its double sums to float32 either
# way, then to bf16, so the two agree exactly; with the grouped call refusing bf16 results too
# (said once), the grouped rows' float32 sums are rounded after, the same numbers.
rows=$(rows_of 3 $T/products.out | wc -l) apart=$(rows_of 3 $T/products.out | aparts)
check "products_emu: $rows of 4 shapes with bf16 results, as the float32 results packed ($apart)" \
    test "$rows" -eq 4 -a "$apart" = "0.0e+00 "
said=$(grep -c "refused bf16 results" $T/products-refused.err)
rows=$(rows_of 3 $T/products-refused.out | wc -l) apart=$(rows_of 3 $T/products-refused.out | aparts)
check "products_emu, grouped bf16 refused: said $said time(s), $rows of 4 shapes with bf16 results ($apart)" \
    test "$said" -eq 1 -a "$rows" -eq 4 -a "$apart" = "0.0e+00 "
echo "== under AddressSanitizer and UBSan (build/emu-asan/train_emu, make emu-asan): no report"
# The backend's host code as a training run drives it (the pool, the kernels' scratch, the
# experts' rows read back, offload, the collectives' staging) and its kernels on the shapes
# of a step: runs that between them take every path above, two at a time. Any report ends
# the run with exit 23 (UBSan's first too), and each must log both steps. Inside a chunk of
# the backend's pool AddressSanitizer sees only the chunk's bounds: all but two of the runs
# take one allocation a buffer (MESHMOE_GPU_POOL=off), so that a kernel's access past its
# buffer is seen.
if make -s emu-asan > $T/emu-asan.log 2>&1; then
    export ASAN_OPTIONS=detect_stack_use_after_return=0:detect_leaks=1:exitcode=23
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    asan_run() {   # asan_run NAME PRESET ARGS...
        local name=$1 preset=$2; shift 2
        while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
        (build/emu-asan/train_emu configs/$preset.yml $FAST "$@" device=gpu metrics_file=$T/$name.jsonl \
            > $T/$name.out 2>&1; echo $? > $T/$name.rc) &
    }
    asan_run as-offl mixtral-tiny remat_policy=minimal_offloaded optimizer_memory_host_offload=true mu_dtype=bfloat16
    export MESHMOE_GPU_POOL=off
    asan_run as-ft deepseek-tiny dtype=bfloat16 megablox=true ici_fsdp_parallelism=2 ici_tensor_parallelism=2 \
        num_devices=4
    asan_run as-tc deepseek-tiny dtype=bfloat16 gpu_attention=tensor_cores megablox=true
    MESHMOE_GROUPED=kernel asan_run as-w16k deepseek-tiny dtype=bfloat16 bf16_storage=kept gpu_matmul=cublas_bf16 \
        megablox=true ici_expert_parallelism=2 num_devices=2
    asan_run as-cb mixtral-tiny dtype=bfloat16 gpu_matmul=cublas_bf16 gpu_attention=tensor_cores bf16_storage=kept
    unset MESHMOE_GPU_POOL
    asan_run as-cp deepseek-tiny attention=flash ici_context_parallelism=2 num_devices=2
    wait
    for name in as-offl as-ft as-tc as-w16k as-cp as-cb; do
        rc=$(cat $T/$name.rc 2>/dev/null || echo none) n=$(losses $T/$name.jsonl 2>/dev/null | wc -l)
        report=$(grep -m1 -E 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error' $T/$name.out)
        check "$name: exit $rc, $n of 2 steps logged${report:+: $report}" test "$rc" = 0 -a "$n" -eq 2
    done
else
    fail "make emu-asan failed: $(tail -3 $T/emu-asan.log)"
fi
summary
