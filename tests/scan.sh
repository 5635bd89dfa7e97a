#!/usr/bin/env bash
# tests/scan.sh: scan_layers (docs/optimizations.md#scan_layers, model/model.c). Scanned layers (true,
# the default) reuse one set of temporaries; unrolled (false) keep a set per layer until the
# step's backward pass ends. Checks: the losses are the same bits either way (mixtral-tiny
# with 2 and 4 layers, deepseek-tiny, bf16, fsdp); scanned, the temp peak does not grow with
# the layers; unrolled, it grows by the same amount per layer (2, 3, 4 layers), and that
# amount equals the layer's forward set plus its backward set, read from the scanned run's
# memory trace (each phase's temp high-water above its start), and lies within a bound
# computed from the shapes; a pipeline and a bad value are refused with one message.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-scan.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=2 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=32 per_device_batch_size=4"

# run NAME PRESET ARGS...: train into $T/NAME.jsonl.
run() {
    local name=$1 preset=$2; shift 2
    if ! $TRAIN configs/$preset.yml $FAST "$@" metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        fail "$name: run failed: $(tail -1 $T/$name.out)"; : > $T/$name.jsonl
    fi
}
# temp NAME: device 0's peak temp bytes in the last step.
temp() { tail -1 "$T/$1.jsonl" | grep -o '"devices": \[{"device": 0, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' |
    grep -o '"temp": [0-9]*' | grep -o '[0-9]*$'; }

echo "== mixtral-tiny, 2, 3 and 4 layers: scanned and unrolled give the same bits"
for L in 2 3 4; do
    run s$L mixtral-tiny base_num_decoder_layers=$L
    run u$L mixtral-tiny base_num_decoder_layers=$L scan_layers=false
    check "L=$L: $(bits u$L)" same u$L s$L
done

echo "== the temp peak: scanned flat in L, unrolled linear in L"
s2=$(temp s2); s4=$(temp s4); u2=$(temp u2); u3=$(temp u3); u4=$(temp u4)
echo "    temp peak, device 0 (bytes): scanned L=2 $s2, L=4 $s4; unrolled L=2 $u2, L=3 $u3, L=4 $u4"
# Scanned, only a few small per-layer bookkeeping buffers may differ (< 1 KiB).
check "scanned: L=4's temp peak $s4 is L=2's $s2 (within 1 KiB)" test -n "$s2" -a -n "$s4" -a $((s4 - s2)) -lt 1024 -a $((s4 - s2)) -gt -1024
g=$(( (u4 - u2) / 2 ))
check "unrolled: L=2->3 adds $((u3 - u2)), L=3->4 adds $((u4 - u3)): the same per layer" test $((u3 - u2)) -eq $((u4 - u3)) -a $((u3 - u2)) -gt 0
check "unrolled L=2 $u2 > scanned $s2" test "$u2" -gt "$s2"

# The per-layer set from the scanned run's trace: for every "forward layer l" and
# "backward layer l" phase of device 0, the highest temp bytes in it minus those at its start.
$TRAIN configs/mixtral-tiny.yml $FAST base_num_decoder_layers=2 steps=1 memory_trace=$T/tr.csv > /dev/null 2>&1
sets=$(awk -F, '$1 == 0 && $3 == "phase" { if (ph ~ /^"(forward|backward) layer 1"$/) sum += hw - start; ph = $NF; start = $10; hw = $10; next }
                $1 == 0 { if ($10 + 0 > hw) hw = $10 + 0 } END { print sum }' "$T/tr.csv")
# (The scanned peak itself grows by a few bytes of per-layer bookkeeping, (s4 - s2) / 2.)
check "unrolled growth per layer $g = layer 1's forward set + backward set in the scanned trace ($sets) + $(( (s4 - s2) / 2 ))" \
    test "$g" -eq $(( sets + (s4 - s2) / 2 ))

# A bound from the shapes (B=4 sequences of S=32 tokens, T=128 tokens, D=128, F=256, top-2 of
# 4 experts, 4 query heads and 2 kv heads of 32; float32). Below: a layer's forward must hold
# at once an expert's gathered input rows [T, D] (worst case, all T tokens) and its
# activation [T, F]; its backward the gradients of the routed outputs and inputs [T*K, D]
# each, and of q [T, 4*32]. Above: every tensor a layer can make, at most once each, forward:
# q, k, v, attention out [T, D] each, the router logits [T, E], per expert [T, D] in, [T, 2F]
# and [T, F] activations, three [T, D] matmul partials; backward: twice the forward (the
# recomputation plus the gradients of each), plus the expert weight gradients 3 D*F per
# expert. The set is the high-water, never more than the sum.
Tk=128; D=128; F=256; K=2; E=4
lo=$(( 4 * (Tk*D + Tk*F) + 4 * (2*Tk*K*D + Tk*D) ))
fwd_hi=$(( 4 * (4*Tk*D + Tk*E + Tk*D + 2*Tk*F + Tk*F + 3*Tk*D) ))
hi=$(( fwd_hi + 2 * fwd_hi + 4 * 3*D*F*E ))
check "growth per layer $g within the shape bound [$lo, $hi]" test "$g" -ge "$lo" -a "$g" -le "$hi"

echo "== other presets and modes: same bits"
run ds_s deepseek-tiny
run ds_u deepseek-tiny scan_layers=false
check "deepseek-tiny (dense first layer, MLA, shared expert): $(bits ds_u)" same ds_u ds_s
check "deepseek-tiny: unrolled temp $(temp ds_u) > scanned $(temp ds_s)" test "$(temp ds_u)" -gt "$(temp ds_s)"
run bf_s mixtral-tiny dtype=bfloat16 remat_policy=minimal
run bf_u mixtral-tiny dtype=bfloat16 remat_policy=minimal scan_layers=false
check "bf16, remat_policy=minimal: $(bits bf_u)" same bf_u bf_s
run f_s mixtral-tiny ici_fsdp_parallelism=2 per_device_batch_size=2 gradient_accumulation_steps=2
run f_u mixtral-tiny ici_fsdp_parallelism=2 per_device_batch_size=2 gradient_accumulation_steps=2 scan_layers=false
check "fsdp=2, 2 microbatches: $(bits f_u)" same f_u f_s

echo "== refused"
expect_error "scan_layers=false with a pipeline" "scan_layers=false is not supported with a pipeline" \
    $TRAIN configs/mixtral-tiny.yml scan_layers=false ici_pipeline_parallelism=2 steps=1
expect_error "scan_layers=maybe" "scan_layers" $TRAIN configs/mixtral-tiny.yml scan_layers=maybe steps=1
summary
