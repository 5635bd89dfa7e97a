#!/usr/bin/env bash
# tests/remat.sh: rematerialisation, host offload, EMA and opt_type (model/remat.c,
# optim/offload.c). Every remat policy, offload and nested block gives the losses of
# remat_policy=none bit for bit (offload under expert parallelism too); the saved activations
# shrink in the expected order, save_dot_except_mlpwi's grow by the expert outputs it keeps
# and its FLOPs drop by the products it skips; offload
# really moves bytes to host memory (device peak down, host peak up, copies counted); the
# EMA copy is model-sized on the device or the host; sgd keeps no optimizer state and its
# losses do not depend on the mesh, nor do adam_pax's (AdamW's state, its bias correction in
# the decays); bad values give one clear message.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-remat.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=64"

# run NAME PRESET ARGS...: train into $T/NAME.jsonl.
run() {
    local name=$1 preset=$2; shift 2
    if ! $TRAIN configs/$preset.yml $FAST "$@" metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        fail "$name: run failed: $(tail -1 $T/$name.out)"; : > $T/$name.jsonl
    fi
}
# The last step's figures of device 0: peak_bytes (the device), a tag of peak_bytes_by_tag,
# host_peak_bytes_by_tag, or host_transfer_bytes.
last() { tail -1 "$T/$1.jsonl"; }
dev_peak() { last "$1" | grep -o '"devices": \[{"device": 0, "peak_bytes": [0-9]*' | grep -o '[0-9]*$'; }
dev_tag() { last "$1" | grep -o '"devices": \[{"device": 0, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' |
    grep -o "\"$2\": [0-9]*" | grep -o '[0-9]*$'; }
host_tag() { last "$1" | grep -o '"host_peak_bytes_by_tag": {[^}]*}' | head -1 | grep -o "\"$2\": [0-9]*" | grep -o '[0-9]*$'; }
moved() { last "$1" | grep -o "\"$2\": [0-9]*" | head -1 | grep -o '[0-9]*$'; }

for preset in mixtral-tiny deepseek-tiny; do
    echo "== $preset: every policy gives the losses of remat_policy=none, bit for bit"
    run none_$preset $preset remat_policy=none
    for p in minimal minimal_with_context minimal_flash save_dot_except_mlp save_dot_except_mlpwi \
             save_dot_with_context_except_mlp save_out_proj full minimal_offloaded; do
        run ${p}_$preset $preset remat_policy=$p
        check "$preset remat_policy=$p: $(bits ${p}_$preset)" same ${p}_$preset none_$preset
    done
    run custom_$preset $preset remat_policy=custom decoder_layer_input=offload query_proj=device key_proj=device \
        value_proj=device context=device out_proj=offload mlpwi=remat mlpwo=remat
    check "$preset custom (x, h offloaded, attention on device, FFN remat)" same custom_$preset none_$preset
    run customwo_$preset $preset remat_policy=custom mlpwi=remat mlpwo=offload
    check "$preset custom mlpwi=remat mlpwo=offload: host activations $(host_tag customwo_$preset activations) > 0" \
        test "$(host_tag customwo_$preset activations)" -gt 0
    check "$preset custom mlpwo=offload" same customwo_$preset none_$preset
    run nested_$preset $preset remat_nested_block=2
    check "$preset remat_nested_block=2" same nested_$preset none_$preset

    echo "== $preset: saved-activation peaks (bytes): none > minimal > save_dot_except_mlp > full"
    a_none=$(dev_tag none_$preset activations); a_min=$(dev_tag minimal_$preset activations)
    a_sdem=$(dev_tag save_dot_except_mlp_$preset activations); a_full=$(dev_tag full_$preset activations)
    a_nest=$(dev_tag nested_$preset activations); a_sop=$(dev_tag save_out_proj_$preset activations)
    check "activations $a_none > $a_min > $a_sdem > $a_full" \
        test "$a_none" -gt "$a_min" -a "$a_min" -gt "$a_sdem" -a "$a_sdem" -gt "$a_full"
    # MaxText's minimal and save_dot_except_mlp recompute the attention core's output
    # (context); their _with_context twins keep it, o and its statistics per layer.
    a_minc=$(dev_tag minimal_with_context_$preset activations)
    a_sdemc=$(dev_tag save_dot_with_context_except_mlp_$preset activations)
    check "context kept: minimal_with_context $a_minc > minimal $a_min" test "$a_minc" -gt "$a_min"
    check "context kept: save_dot_with_context_except_mlp $a_sdemc > save_dot_except_mlp $a_sdem" \
        test "$a_sdemc" -gt "$a_sdem"
    # minimal_flash is MaxText's older name of minimal_with_context.
    a_minf=$(dev_tag minimal_flash_$preset activations)
    check "minimal_flash keeps minimal_with_context's bytes: $a_minf = $a_minc" test "$a_minf" -eq "$a_minc"
    # save_dot_except_mlpwi keeps each MoE layer's expert outputs y (mlpwo: T*K rows of D
    # floats, T = 8*64 tokens, K = 2) and so skips the wo products of the FFN's recomputation.
    # The peak is the last MoE layer's recomputation, whose y is one of those kept: (nmoe-1)
    # more rows (mixtral-tiny's 4 MoE layers, deepseek-tiny's 3 after its dense one).
    nmoe=4; H=256; [ $preset = deepseek-tiny ] && { nmoe=3; H=96; }
    a_sdemwi=$(dev_tag save_dot_except_mlpwi_$preset activations); y=$((512 * 2 * 128 * 4))
    check "save_dot_except_mlpwi keeps mlpwo: $a_sdemwi = $a_sdem + ($nmoe-1) x $y" \
        test "$a_sdemwi" -eq $((a_sdem + (nmoe - 1) * y))
    # Each step's FLOPs are GFLOP/s x ms, both printed with 3 decimals: the bound on their
    # product's rounding is worked out from the printed values (about 1e-4 GFLOP here).
    check "save_dot_except_mlpwi saves the wo products: 2*T*K*H*D*nmoe = $((2 * 512 * 2 * H * 128 * nmoe)) FLOPs a step" \
        python3 - $T/save_dot_except_mlp_$preset.jsonl $T/save_dot_except_mlpwi_$preset.jsonl $((2 * 512 * 2 * H * 128 * nmoe)) <<'PY'
import json, sys
def step(path):
    m = json.loads(open(path).readlines()[-1])
    return m["gflops"] * m["ms"] / 1e3, m["ms"] * 5e-7 + m["gflops"] * 5e-7
(a, ea), (b, eb) = step(sys.argv[1]), step(sys.argv[2])
want = int(sys.argv[3]) / 1e9
print(f"       saved {a - b:.6f} GFLOP, expected {want:.6f}, bound {ea + eb:.6f}")
sys.exit(abs((a - b) - want) > ea + eb)
PY
    # Nested blocks drop the layer inputs inside a block, but the backward of a block's
    # second layer first runs the block's first layer again, whole, for that input: with 4
    # layers in blocks of 2 the two peaks come out equal, with 8 the inputs saved show.
    check "4 layers: nested $a_nest <= full $a_full" test "$a_nest" -le "$a_full"
    run full8_$preset $preset remat_policy=full base_num_decoder_layers=8
    run nested8_$preset $preset remat_nested_block=2 base_num_decoder_layers=8
    a_full8=$(dev_tag full8_$preset activations); a_nest8=$(dev_tag nested8_$preset activations)
    check "8 layers: nested $a_nest8 < full $a_full8" test "$a_nest8" -lt "$a_full8"

    check "save_out_proj: $a_sop < none's $a_none" test "$a_sop" -lt "$a_none"

    echo "== $preset: minimal_offloaded keeps minimal's tensors in host memory"
    a_off=$(dev_tag minimal_offloaded_$preset activations); h_off=$(host_tag minimal_offloaded_$preset activations)
    up=$(moved minimal_offloaded_$preset to_host); down=$(moved minimal_offloaded_$preset to_device)
    check "device activations $a_off < minimal's $a_min" test "$a_off" -lt "$a_min"
    check "host activations $h_off > 0, copied to host $up = back $down > 0" test "$h_off" -gt 0 -a "$up" -gt 0 -a "$up" -eq "$down"
    check "no host memory without offload" test "$(host_tag minimal_$preset activations)" -eq 0 -a "$(moved minimal_$preset to_host)" -eq 0
done

echo "== expert parallelism: minimal_offloaded moves the experts' received rows and their plan to the host too"
for preset in mixtral-tiny deepseek-tiny; do
    for p in none full minimal_offloaded save_dot_except_mlpwi; do run ep_${p}_$preset $preset remat_policy=$p ici_expert_parallelism=2; done
    check "$preset expert=2 minimal_offloaded: $(bits ep_minimal_offloaded_$preset)" \
        same ep_minimal_offloaded_$preset ep_none_$preset
    check "$preset expert=2 full" same ep_full_$preset ep_none_$preset
    check "$preset expert=2 save_dot_except_mlpwi (y kept on the device that combines)" \
        same ep_save_dot_except_mlpwi_$preset ep_none_$preset
    # Left on the device, the rows each device's experts ran on (x, h0, h1 of every MoE layer)
    # would keep minimal_offloaded's device activations far above full's (mixtral-tiny: 24.5
    # MB against 9.5 when measured that way; 8.7 with them moved).
    a_off=$(dev_tag ep_minimal_offloaded_$preset activations); a_full=$(dev_tag ep_full_$preset activations)
    up=$(moved ep_minimal_offloaded_$preset to_host); down=$(moved ep_minimal_offloaded_$preset to_device)
    check "$preset expert=2: device activations $a_off < full's $a_full; copied to host $up = back $down > 0" \
        test "$a_off" -lt "$a_full" -a "$up" -gt 0 -a "$up" -eq "$down"
done

echo "== bfloat16 (16-bit saved activations, unpacked for the recomputation)"
run bf_none mixtral-tiny dtype=bfloat16 remat_policy=none
for p in full save_out_proj minimal_offloaded save_dot_except_mlpwi; do
    run bf_$p mixtral-tiny dtype=bfloat16 remat_policy=$p
    check "bf16 remat_policy=$p: $(bits bf_$p)" same bf_$p bf_none
done

echo "== model state in host memory, the EMA copy (mixtral-tiny, default remat_policy=full)"
base=full_mixtral-tiny
run popt mixtral-tiny optimizer_memory_host_offload=true
run ppar mixtral-tiny parameter_memory_host_offload=true
run ema mixtral-tiny ema_decay=0.99
run emah mixtral-tiny ema_decay=0.99 ema_host_offload=true
for r in popt ppar ema emah; do check "$r: losses bit-identical" same $r $base; done
opt=$(dev_tag $base optimizer); par=$(dev_tag $base params)
check "optimizer offload: device peak $(dev_peak popt) < $(dev_peak $base), host optimizer $(host_tag popt optimizer) = $opt, copied $(moved popt to_host) each way" \
    test "$(dev_peak popt)" -lt "$(dev_peak $base)" -a "$(host_tag popt optimizer)" -eq "$opt" -a "$(moved popt to_host)" -eq "$opt" -a "$(moved popt to_device)" -eq "$opt"
check "parameter offload: host params $(host_tag ppar params) = $par, copied $(moved ppar to_host) each way per step" \
    test "$(host_tag ppar params)" -eq "$par" -a "$(moved ppar to_host)" -eq "$par" -a "$(moved ppar to_device)" -eq "$par"
check "EMA on device: params peak $(dev_tag ema params) = 2 x $par" test "$(dev_tag ema params)" -eq $((2 * par))
check "EMA on host: device params $(dev_tag emah params) = $par, host params $(host_tag emah params) >= $par, copied $(moved emah to_host)" \
    test "$(dev_tag emah params)" -eq "$par" -a "$(host_tag emah params)" -ge "$par" -a "$(moved emah to_host)" -eq "$par"

echo "== opt_type=sgd: no optimizer state; the same losses on one device, fsdp=2 and data=2 + ZeRO-1"
run sgd mixtral-tiny opt_type=sgd
run sgd_fsdp mixtral-tiny opt_type=sgd per_device_batch_size=4 ici_fsdp_parallelism=2
run sgd_zero mixtral-tiny opt_type=sgd per_device_batch_size=4 ici_data_parallelism=2 shard_optimizer_over_data=true
check "sgd: optimizer bytes $(dev_tag sgd optimizer) = 0" test "$(dev_tag sgd optimizer)" -eq 0
check "sgd fsdp=2: $(bits sgd_fsdp)" same sgd_fsdp sgd
check "sgd data=2 ZeRO-1: $(bits sgd_zero)" same sgd_zero sgd
check "sgd and adamw differ after the first update" test "$(bits sgd)" != "$(bits $base)"

echo "== opt_type=adam_pax: AdamW's state; the same losses on fsdp=2 and data=2 + ZeRO-1; AdamW's math, rounded its own way"
run pax mixtral-tiny opt_type=adam_pax
run pax_fsdp mixtral-tiny opt_type=adam_pax per_device_batch_size=4 ici_fsdp_parallelism=2
run pax_zero mixtral-tiny opt_type=adam_pax per_device_batch_size=4 ici_data_parallelism=2 shard_optimizer_over_data=true
check "adam_pax: optimizer bytes $(dev_tag pax optimizer) = adamw's $opt" test "$(dev_tag pax optimizer)" -eq "$opt"
check "adam_pax fsdp=2: $(bits pax_fsdp)" same pax_fsdp pax
check "adam_pax data=2 ZeRO-1" same pax_zero pax
# Pax folds Adam's bias correction into the decays: the same update in exact arithmetic, so
# the losses agree with adamw's to a few float32 ulps (they may even share every bit; on
# mixtral-tiny with 32 tokens they part at the fifth step by 1 ulp). Its own arithmetic is
# checked by the kernel's conformance case (uncorrected moments) and the parity case
# mixtral-adam-pax against its formula in JAX.
lp=$(grep -o '"loss": [0-9.]*' $T/pax.jsonl | tail -1 | grep -o '[0-9.]*$'); la=$(grep -o '"loss": [0-9.]*' $T/$base.jsonl | tail -1 | grep -o '[0-9.]*$')
check "adam_pax's last loss $lp within 1e-5 relative of adamw's $la" awk -v a="$lp" -v b="$la" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b > 0 && d <= 1e-5 * b) }'
expect_error "adam_pax with a bf16 moment" "adam_pax keeps both moments" $TRAIN configs/mixtral-tiny.yml opt_type=adam_pax mu_dtype=bfloat16

echo "== bad values: one clear message"
expect_error "unknown policy" "remat_policy must be" $TRAIN configs/mixtral-tiny.yml remat_policy=most
expect_error "mlpwo remat with mlpwi kept" "mlpwo must equal mlpwi" $TRAIN configs/mixtral-tiny.yml remat_policy=custom mlpwi=device mlpwo=remat
expect_error "custom value" "must be 'device', 'offload' or 'remat'" $TRAIN configs/mixtral-tiny.yml remat_policy=custom mlpwi=host
expect_error "custom block mismatch" "same value" $TRAIN configs/mixtral-tiny.yml remat_policy=custom query_proj=device
expect_error "nested block without full" "needs remat_policy=full" $TRAIN configs/mixtral-tiny.yml remat_nested_block=2 remat_policy=none
expect_error "pipeline with nested blocks" "remat_nested_block=2 with ici_pipeline_parallelism=2" $TRAIN configs/mixtral-tiny.yml \
    remat_nested_block=2 ici_pipeline_parallelism=2
expect_error "ema host without ema" "needs an EMA" $TRAIN configs/mixtral-tiny.yml ema_host_offload=true
expect_error "optimizer offload with sgd" "no optimizer state to offload" $TRAIN configs/mixtral-tiny.yml opt_type=sgd optimizer_memory_host_offload=true
summary
