#!/usr/bin/env bash
# tests/ring.sh: ring attention over the context axis (context_parallel_strategy=ring,
# model/attn_ring.c) against the all-gather path, on mixtral-tiny (GQA) and deepseek-tiny
# (MLA) with ici_context_parallelism=2 and 4:
#   - losses within a relative tolerance (the log-sum-exp merge and the ring order change
#     the order of the softmax and gradient sums): 1e-5 at step 0, 1e-4 after;
#   - no full-sequence K/V gathered: the forward's comm peak is P K/V blocks with all_gather
#     and min(2, P-1) with ring (one block in flight, one being received), a block being
#     one device's keys (or values): B_dev * S/P * heads * dim floats;
#   - the bytes each device sends per step: 4 * L * (P-1) blocks of K+V as ppermutes
#     (forward, its recompute under remat_policy=full, and in the backward K/V again and
#     dK/dV home), the same total as the all-gathers and reduce-scatters they replace;
#   - bf16 runs (looser tolerance), the materialised mask gives the ring's bits, a
#     data x context mesh, and a bad value gives one clear message;
#   - attention=flash in the ring: a key block as wide as the ring's block gives the ring's
#     bits, narrower ones agree with flash over the gathered keys within the tolerance.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-ring.XXXXXX)
trap 'rm -rf "$T"' EXIT
PDB=2; SEQ=32; L=2
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 max_target_length=$SEQ per_device_batch_size=$PDB base_num_decoder_layers=$L"

run() {   # run NAME PRESET ARGS...: train into $T/NAME.jsonl
    local name=$1 preset=$2; shift 2
    if ! $TRAIN configs/$preset.yml $FAST "$@" metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        fail "$name: run failed: $(tail -1 $T/$name.out)"; : > $T/$name.jsonl
    fi
}
bits() { grep -o '"loss_bits": "[^"]*"' "$T/$1.jsonl" | cut -d'"' -f4 | tr '\n' ' '; }
# within A B TOL0 TOL: every step's loss of A and B agree to TOL0 (step 0) and TOL (relative).
within() {
    paste <(losses "$T/$1.jsonl") <(losses "$T/$2.jsonl") | awk -v t0="$3" -v t="$4" '
        { d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); tol = NR == 1 ? t0 : t
          if (r > worst) worst = r; if (r > tol) bad = 1 }
        END { printf "    max relative difference %.2e over %d steps\n", worst, NR; exit (NR < 3 || bad) }'
}
# Device 0's figures: a tag of forward_peak_bytes_by_tag, and the bytes sent by one kind of
# collective during the last step (the counters are cumulative: last line minus the one before).
fwd_tag() { tail -1 "$T/$1.jsonl" | grep -o '"forward_peak_bytes_by_tag": {[^}]*}' | grep -o "\"$2\": [0-9]*" | grep -o '[0-9]*$'; }
sent_line() { sed -n "$2p" "$T/$1.jsonl" | grep -o '"comm_bytes_sent": {[^}]*}' | head -1 | grep -o "\"$3\": [0-9]*" | grep -o '[0-9]*$'; }
sent() { echo $(( $(sent_line $1 3 $2) - $(sent_line $1 2 $2) )); }
comm_total() { echo $(( $(sent $1 all-gather) + $(sent $1 reduce-scatter) + $(sent $1 ppermute) )); }

for preset in mixtral-tiny deepseek-tiny; do
    # One K block and one V block, bytes: B_dev * S/P tokens = PDB * SEQ tokens per device
    # (the context axis cuts each sequence, the batch per device is PDB sequences' worth).
    if [ $preset = mixtral-tiny ]; then KB=$((PDB * SEQ * 2 * 32 * 4)); VB=$KB          # Nkv=2, head_dim=32
    else KB=$((PDB * SEQ * 4 * (32 + 16) * 4)); VB=$((PDB * SEQ * 4 * 32 * 4)); fi      # N=4, Qk=32+16, Dv=32
    BLK=$((KB + VB))
    for P in 2 4; do
        echo "== $preset ici_context_parallelism=$P: ring against all_gather (K+V block $BLK bytes)"
        run ag_${preset}_$P $preset ici_context_parallelism=$P
        run ring_${preset}_$P $preset ici_context_parallelism=$P context_parallel_strategy=ring
        a=ag_${preset}_$P; r=ring_${preset}_$P
        check "losses within 1e-5 (step 0) / 1e-4: all_gather $(bits $a) ring $(bits $r)" within $r $a 1e-5 1e-4
        ca=$(fwd_tag $a comm); cr=$(fwd_tag $r comm); nb=$((P > 2 ? 2 : 1))
        check "forward comm peak: all_gather $ca = $P blocks, ring $cr = $nb block(s) in flight" \
            test "$ca" = $((P * BLK)) -a "$cr" = $((nb * BLK))
        pp=$(sent $r ppermute); want=$((4 * L * (P - 1) * BLK))
        check "ring sends $pp bytes of ppermute per step = 4*L*(P-1)*(K+V block) = $want, no K/V all-gather left" \
            test "$pp" = "$want" -a "$(sent $r reduce-scatter)" = 0 -a "$(sent $r all-gather)" -lt "$BLK"
        check "bytes sent per step, all-gather+reduce-scatter+ppermute: ring $(comm_total $r) = all_gather $(comm_total $a)" \
            test "$(comm_total $r)" = "$(comm_total $a)"
    done
done

echo "== bf16, the materialised mask, a data x context mesh, ring off without context"
run ag_bf16 mixtral-tiny ici_context_parallelism=2 dtype=bfloat16
run ring_bf16 mixtral-tiny ici_context_parallelism=2 dtype=bfloat16 context_parallel_strategy=ring
check "bf16: ring within 1e-3 of all_gather: $(bits ring_bf16)/$(bits ag_bf16)" within ring_bf16 ag_bf16 1e-3 1e-3
run ring_mask deepseek-tiny ici_context_parallelism=4 context_parallel_strategy=ring implicit_causal_mask=false
check "implicit_causal_mask=false: the ring's bits $(bits ring_mask)" same ring_mask ring_deepseek-tiny_4
run ag_dp mixtral-tiny ici_context_parallelism=2 ici_data_parallelism=2 per_device_batch_size=1
run ring_dp mixtral-tiny ici_context_parallelism=2 ici_data_parallelism=2 per_device_batch_size=1 context_parallel_strategy=ring
check "data=2 x context=2: ring within 1e-5 / 1e-4 of all_gather" within ring_dp ag_dp 1e-5 1e-4
run ag_1 mixtral-tiny
run ring_1 mixtral-tiny context_parallel_strategy=ring
check "one device: ring is off, the same bits $(bits ring_1)" same ring_1 ag_1

expect_error "bad strategy" "context_parallel_strategy must be 'all_gather' or 'ring'" \
    $TRAIN configs/mixtral-tiny.yml context_parallel_strategy=ulysses steps=1

echo "== attention=flash inside the ring: each block's keys merged attn_block_kv at a time"
# attn_block_kv = 64 >= a block's 16 keys: one merge per block, the ring's bits.
run ringfl_64 mixtral-tiny ici_context_parallelism=2 context_parallel_strategy=ring attention=flash attn_block_kv=64
check "attn_block_kv=64 over blocks of 16 keys: ring's bits $(bits ring_mixtral-tiny_2)" \
    same ringfl_64 ring_mixtral-tiny_2
# attn_block_kv = 4: four merges per block, against flash over the all-gathered keys.
for preset in mixtral-tiny deepseek-tiny; do
    run agfl_$preset $preset ici_context_parallelism=4 attention=flash attn_block_kv=4 attn_block_q=4
    run ringfl_$preset $preset ici_context_parallelism=4 context_parallel_strategy=ring attention=flash \
        attn_block_kv=4 attn_block_q=4
    check "$preset context=4, attn_block_kv=4: ring within 1e-5 / 1e-4 of all_gather (both flash)" \
        within ringfl_$preset agfl_$preset 1e-5 1e-4
done
summary
