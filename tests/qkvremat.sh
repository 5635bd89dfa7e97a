#!/usr/bin/env bash
# tests/qkvremat.sh: remat_policy=save_qkv_proj and qkv_proj_offloaded (model/remat.c), and
# remat_policy=custom with query_proj=key_proj=value_proj kept and context=remat. The
# backward recomputes the attention core and out projection from the kept q, k, v (and the
# FFN), so the losses are remat_policy=none's bit for bit, in float32 and bfloat16, on one
# device, fsdp=2 and context=2 (all_gather and ring). Memory, against byte counts computed
# here from the shapes: the forward's saved activations exceed full's by exactly the q, k, v
# of every layer but the last (whose own are live under both while it runs, the forward's
# peak); offloading moves exactly every layer's q, k, v to host memory and back, and leaves
# the device at full's forward peak and below save_qkv_proj's peak.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-qkvremat.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=2 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=64"

last() { tail -1 "$T/$1.jsonl"; }
num() { grep -o "\"$1\": [0-9]*" | head -1 | grep -o '[0-9]*$'; }
dev_act() { last "$1" | grep -o '"devices": \[{"device": 0, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' | num activations; }
fwd_act() { last "$1" | grep -o '"forward_peak_bytes_by_tag": {[^}]*}' | num activations; }
host_act() { last "$1" | grep -o '"host_peak_bytes_by_tag": {[^}]*}' | num activations; }
moved() { last "$1" | num "$2"; }

# The kept q, k, v of one layer on one device, in bytes (B=8 sequences of S=64 tokens,
# 4 layers; 16-bit saved tensors in bf16 mode, the norms' 1/rms stay float32).
B=8; S=64; L=4; TOK=$((B * S))
# mixtral-tiny: q (T,N=4,Dh=32), k and v (T,Nkv=2,Dh=32)
qkv_mixtral() { echo $(($1 * TOK * (4 * 32 + 2 * 2 * 32))); }   # ARG: bytes per number (4 or 2)
# deepseek-tiny (MLA): qa, qn (T,Q=64), latent, latn (T,R=32), q, k (T,N=4,48), v (T,4,32),
# and qa_rstd, kv_rstd (T) in float32
qkv_deepseek() { echo $(($1 * TOK * (2 * 64 + 2 * 32 + 2 * 4 * 48 + 4 * 32) + 4 * TOK * 2)); }

for preset in mixtral-tiny deepseek-tiny; do
    name=${preset%-tiny}
    for dt in float32 bfloat16; do
        w=4; [ $dt = bfloat16 ] && w=2
        per_layer=$(qkv_$name $w)
        echo "== $preset $dt: the losses of remat_policy=none and full, bit for bit (q, k, v of a layer: $per_layer bytes)"
        run none_$dt $preset dtype=$dt remat_policy=none
        run full_$dt $preset dtype=$dt remat_policy=full
        check "full: $(bits full_$dt)" same full_$dt none_$dt
        for p in save_qkv_proj qkv_proj_offloaded; do
            run ${p}_$dt $preset dtype=$dt remat_policy=$p
            check "remat_policy=$p: $(bits ${p}_$dt)" same ${p}_$dt none_$dt
        done
        if [ $dt = float32 ]; then
            run custom_$dt $preset dtype=$dt remat_policy=custom query_proj=offload key_proj=offload value_proj=offload \
                context=remat out_proj=device mlpwi=remat mlpwo=remat
            check "custom: q, k, v offloaded, context remat, h kept: $(bits custom_$dt)" same custom_$dt none_$dt
        fi

        f_full=$(fwd_act full_$dt); f_qkv=$(fwd_act save_qkv_proj_$dt); f_off=$(fwd_act qkv_proj_offloaded_$dt)
        check "forward activations: save_qkv_proj $f_qkv = full $f_full + (L-1) x $per_layer" \
            test "$f_qkv" -eq $((f_full + (L - 1) * per_layer))
        check "forward activations: qkv_proj_offloaded $f_off = full's $f_full" test "$f_off" -eq "$f_full"
        h=$(host_act qkv_proj_offloaded_$dt); up=$(moved qkv_proj_offloaded_$dt to_host); down=$(moved qkv_proj_offloaded_$dt to_device)
        check "qkv_proj_offloaded: host activations $h = copied to host $up = back $down = L x $per_layer" \
            test "$h" -eq $((L * per_layer)) -a "$up" -eq "$h" -a "$down" -eq "$h"
        d_full=$(dev_act full_$dt); d_qkv=$(dev_act save_qkv_proj_$dt); d_off=$(dev_act qkv_proj_offloaded_$dt)
        check "device activation peaks: qkv_proj_offloaded $d_off < save_qkv_proj $d_qkv, full $d_full < save_qkv_proj" \
            test "$d_off" -lt "$d_qkv" -a "$d_full" -lt "$d_qkv"
        check "save_qkv_proj keeps nothing on the host" test "$(host_act save_qkv_proj_$dt)" -eq 0
    done

    echo "== $preset on meshes: fsdp=2, context=2 (all_gather; ring in bf16), remat_policy=none's losses"
    run fsdp_qkv $preset ici_fsdp_parallelism=2 per_device_batch_size=4 remat_policy=save_qkv_proj
    check "fsdp=2 save_qkv_proj: $(bits fsdp_qkv) (none on one device)" same fsdp_qkv none_float32
    run cp_none $preset ici_context_parallelism=2 remat_policy=none
    run cp_off $preset ici_context_parallelism=2 remat_policy=qkv_proj_offloaded
    check "context=2 all_gather qkv_proj_offloaded: $(bits cp_off)" same cp_off cp_none
    run ring_none $preset ici_context_parallelism=2 context_parallel_strategy=ring dtype=bfloat16 remat_policy=none
    run ring_qkv $preset ici_context_parallelism=2 context_parallel_strategy=ring dtype=bfloat16 remat_policy=save_qkv_proj
    check "context=2 ring bf16 save_qkv_proj: $(bits ring_qkv)" same ring_qkv ring_none
done

echo "== bad values: one clear message"
expect_error "context kept, q/k/v remat" "context must equal them" $TRAIN configs/mixtral-tiny.yml remat_policy=custom context=device
expect_error "q/k/v on device, context offloaded" "context must equal them" $TRAIN configs/mixtral-tiny.yml \
    remat_policy=custom query_proj=device key_proj=device value_proj=device context=offload
expect_error "q/k/v disagree" "same value" $TRAIN configs/mixtral-tiny.yml remat_policy=custom query_proj=device key_proj=device
expect_error "nested blocks keep only layer inputs" "needs remat_policy=full" $TRAIN configs/mixtral-tiny.yml \
    remat_policy=save_qkv_proj remat_nested_block=2
expect_error "a policy in a pipeline keeps every layer input" "under remat_policy=full only" \
    $TRAIN configs/mixtral-tiny.yml remat_policy=qkv_proj_offloaded ici_pipeline_parallelism=2 \
    pipeline_save_decoder_layer_input=false
summary
