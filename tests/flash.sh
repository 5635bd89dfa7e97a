#!/usr/bin/env bash
# tests/flash.sh: attention=flash (docs/optimizations.md#attention, #attn_block_q, model/attn_flash.c) in
# the trainer, GQA (mixtral-tiny) and MLA (deepseek-tiny):
#   - with one key block covering every key (the default 64/64 at S=64) the losses are the
#     dot-product's bit for bit; with smaller blocks, dividing S or not (16x24, 24x40),
#     within a relative 2e-6 at step 0 and 2e-5 over the steps (float32), 2e-2 in bf16;
#     the gradient norms within a relative 2e-5;
#   - context parallelism: flash with ici_context_parallelism=2 context_reduce_chunks=2 gives
#     the bits of flash on one device with context_reduce_chunks=2;
#   - memory (from memory_trace): the flash score scratch is B*N*bkv*4 bytes and no
#     attention buffer comes near the [B,N,S,S]*4 bytes of materialised scores (both
#     computed here from the shapes); the dot-product path holds one row of W keys per
#     (sequence, head), B*N*S*4 bytes (it never held [B,N,S,S] either);
#   - attention=autoselected is dot_product below 128 tokens and flash from 128, bit for bit;
#   - attn_block_autotune prints its table and picks one of its candidates;
#   - bad values give one clear message.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-flash.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$T"' EXIT
B=2; S=64; L=2
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=$S per_device_batch_size=$B base_num_decoder_layers=$L"

run() {   # run NAME PRESET ARGS...: train into $T/NAME.jsonl, trace of the first step in $T/NAME.csv
    local name=$1 preset=$2; shift 2
    if ! $TRAIN configs/$preset.yml $FAST "$@" metrics_file=$T/$name.jsonl memory_trace=$T/$name.csv > $T/$name.out 2>&1; then
        fail "$name: run failed: $(tail -1 $T/$name.out)"; : > $T/$name.jsonl
    fi
}
# close A B TOL0 TOL: relative loss difference <= TOL0 at step 0 and <= TOL at every step.
close() {
    paste <(losses "$T/$1.jsonl") <(losses "$T/$2.jsonl") | awk -v t0="$3" -v t="$4" '
        { d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > m) m = d; if (NR == 1 && d > t0) bad = 1; if (d > t) bad = 1; n++ }
        END { printf "max rel diff %.2e over %d steps", m, n; exit (bad || n == 0) }'
}
closeq() { close "$@" > /dev/null; }
# gclose A B TOL: the gradient norms' relative difference <= TOL at every step.
gnorms() { sed -n 's/.*"grad_norm": \([^,]*\),.*/\1/p' "$1"; }
gclose() {
    paste <(gnorms "$T/$1.jsonl") <(gnorms "$T/$2.jsonl") | awk -v t="$3" '
        { d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > m) m = d; if (d > t) bad = 1; n++ }
        END { printf "grad_norm max rel diff %.2e over %d steps", m, n; exit (bad || n == 0) }'
}
gcloseq() { gclose "$@" > /dev/null; }
# The (name, bytes) of every allocation of the first step but the score buffers and the
# flash backward's rowsum(dO*O) block: the same set?
allocs() { grep ',alloc,' "$T/$1.csv" | grep -vE 'score|flash attention' | awk -F, '{ print $NF, $5 }' | sort -u; }
same_allocs() { [ -n "$(allocs "$1")" ] && [ "$(allocs "$1")" = "$(allocs "$2")" ]; }
# largest BYTES of an allocation whose name matches the pattern, in a trace
largest() { grep ',alloc,' "$T/$1.csv" | grep -E "$2" | awk -F, '$5 > m { m = $5 } END { print m + 0 }'; }

for preset in mixtral-tiny deepseek-tiny; do
    N=4   # base_num_query_heads of both presets; kv heads: 2 (GQA), N (MLA)
    if [ $preset = mixtral-tiny ]; then NKV=2; else NKV=$N; fi
    echo "== $preset: flash against dot_product (B=$B S=$S N=$N)"
    run dot_$preset $preset attention=dot_product
    run f64_$preset $preset attention=flash
    check "$preset flash 64x64 (one key block) = dot_product bit for bit: $(bits f64_$preset)" same f64_$preset dot_$preset
    run f16_$preset $preset attention=flash attn_block_q=16 attn_block_kv=24
    check "$preset flash 16x24 (24 does not divide $S): $(close f16_$preset dot_$preset 2e-6 2e-5)" \
        closeq f16_$preset dot_$preset 2e-6 2e-5
    check "$preset flash 16x24 gradients: $(gclose f16_$preset dot_$preset 2e-5)" gcloseq f16_$preset dot_$preset 2e-5
    ss=$((B * N * S * S * 4)); blk=$((B * N * 24 * 4)); row=$((B * N * S * 4))
    fb=$(largest f16_$preset 'flash attention score block'); dr=$(largest dot_$preset 'attention score rows')
    check "$preset flash score scratch $fb bytes = B*N*bkv*4 = $blk ($(awk -v a=$blk -v b=$ss 'BEGIN { printf "%.2f%%", 100 * a / b }') of [B,N,S,S]*4 = $ss); dot-product's rows $dr = B*N*S*4 = $row" \
        test "$fb" -eq "$blk" -a "$dr" -eq "$row" -a "$fb" -lt $((ss / 16))
    dsum=$(largest f16_$preset 'rowsum'); want=$((B * NKV * 16 * 4))
    check "$preset flash backward's rowsum(dO*O) block $dsum bytes = B*Nkv*bq*4 = $want" test "$dsum" -eq "$want"
    check "$preset flash allocates what dot_product does, those two aside (nothing [B,N,S,S]-sized added)" \
        same_allocs f16_$preset dot_$preset
done

echo "== context parallelism with flash (mixtral-tiny)"
# (the one-device run holds both devices' sequences: per_device_batch_size 2B)
run cp1 mixtral-tiny attention=flash attn_block_q=24 attn_block_kv=40 context_reduce_chunks=2 per_device_batch_size=$((2 * B))
run cp2 mixtral-tiny attention=flash attn_block_q=24 attn_block_kv=40 ici_context_parallelism=2
run cpdot mixtral-tiny attention=dot_product ici_context_parallelism=2
check "flash context=2 = flash one device (context_reduce_chunks=2): $(bits cp2)" same cp2 cp1
check "flash context=2 vs dot_product context=2: $(close cp2 cpdot 2e-6 2e-5)" closeq cp2 cpdot 2e-6 2e-5

echo "== bf16 (mixtral-tiny)"
run bdot mixtral-tiny dtype=bfloat16
run bfl mixtral-tiny dtype=bfloat16 attention=flash attn_block_q=16 attn_block_kv=16
check "bf16 flash 16x16 vs dot_product: $(close bfl bdot 2e-2 2e-2)" closeq bfl bdot 2e-2 2e-2

echo "== attention=autoselected (MaxText's rule: dot_product below 128 tokens, flash from 128)"
# A run's identity: every step's loss bits and printed gradient norm (the losses of flash
# 16x24 and dot_product can agree to the bit over three steps where the norms do not).
ident() { printf '%s %s' "$(bits "$1")" "$(gnorms "$T/$1.jsonl" | tr '\n' ' ')"; }
same_ident() { [ -n "$(bits "$1")" ] && [ "$(ident "$1")" = "$(ident "$2")" ]; }
run auto64 mixtral-tiny attention=autoselected attn_block_q=16 attn_block_kv=24
check "autoselected at S=$S = dot_product (losses and gradient norms), not flash 16x24: $(gnorms $T/auto64.jsonl | tr '\n' ' ')" \
    same_ident auto64 dot_mixtral-tiny
run auto128 mixtral-tiny attention=autoselected attn_block_q=16 attn_block_kv=24 max_target_length=128
run f128 mixtral-tiny attention=flash attn_block_q=16 attn_block_kv=24 max_target_length=128
run dot128 mixtral-tiny attention=dot_product max_target_length=128
check "autoselected at S=128 = flash 16x24 (losses and gradient norms): $(gnorms $T/auto128.jsonl | tr '\n' ' ')" \
    same_ident auto128 f128
check "... and flash 16x24 at S=128 is not dot_product there (dot_product's norms: $(gnorms $T/dot128.jsonl | tr '\n' ' '))" \
    test "$(ident f128)" != "$(ident dot128)"
check "... nor is flash 16x24 at S=$S dot_product there" test "$(ident f16_mixtral-tiny)" != "$(ident dot_mixtral-tiny)"

echo "== attn_block_autotune"
run tune mixtral-tiny attention=flash attn_block_autotune=true steps=1
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+$' $T/tune.out)
pick=$(sed -n 's/.*picked attn_block_q=\([0-9]*\) attn_block_kv=\([0-9]*\).*/\1 \2/p' $T/tune.out)
check "autotune printed $rows candidate rows and picked '$pick', one of them" \
    bash -c "[ $rows -ge 3 ] && grep -qE '^ +${pick% *} +${pick#* } +[0-9.]+$' $T/tune.out"

echo "== bad values"
expect_error "attention=foo" "attention must be 'dot_product', 'flash' or 'autoselected'" \
    $TRAIN configs/mixtral-tiny.yml attention=foo
expect_error "attn_block_q=0" "attn_block_q and attn_block_kv must be >= 1" \
    $TRAIN configs/mixtral-tiny.yml attention=flash attn_block_q=0
summary
