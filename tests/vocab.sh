#!/usr/bin/env bash
# tests/vocab.sh: the vocabulary-sized tensors (docs/optimizations.md#num_vocab_tiling, #use_iota_embed).
#   num_vocab_tiling: the output head + loss in token tiles gives the losses of
#     num_vocab_tiling=1 bit for bit (one device, tiles that are not contiguous rows, bf16,
#     tensor (vocabulary) parallelism, fsdp, the pipeline, eval), and the logits tensor
#     (T*V*4 bytes per device, T = this device's tokens) leaves the peak: the activations
#     peak drops by exactly T*V*4, the device peak by at least T*V*4 - (one tile's logits).
#   use_iota_embed: the one-hot embedding gives the gather's losses bit for bit (forward
#     and backward), holds the one-hot tensor (T*V*4 bytes) at the forward's temp peak,
#     and the guard iota_embed_max_bytes falls back to the gather just below that size.
# Bad values give one clear message; sampling runs with tiling; the parity dump refuses it.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-vocab.XXXXXX)
trap 'rm -rf "$T"' EXIT
# Small runs: 1 layer, B=4 sequences of S=64 tokens, a vocabulary of V=2048 so that the
# (T,V) tensors stand out. T = 256 tokens per device on one device.
B=4; S=64; V=2048
FAST="steps=2 sample_length=0 eval_steps=1 eval_interval=0 log_period=100 base_num_decoder_layers=1"
FAST="$FAST max_target_length=$S per_device_batch_size=$B vocab_size=$V"

run() {   # run NAME PRESET ARGS...: train into $T/NAME.jsonl
    local name=$1 preset=$2; shift 2
    # shellcheck disable=SC2086
    if ! $TRAIN configs/$preset.yml $FAST "$@" metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        fail "$name: run failed: $(tail -n 1 $T/$name.out)"; : > $T/$name.jsonl
    fi
}
last() { tail -n 1 "$T/$1.jsonl"; }
# Device 0's step peak, a tag of its step peak, a tag of the step's forward peak.
dev_peak() { last "$1" | grep -o '"devices": \[{"device": 0, "peak_bytes": [0-9]*' | grep -o '[0-9]*$'; }
dev_tag() { last "$1" | grep -o '"devices": \[{"device": 0, "peak_bytes": [0-9]*, "peak_bytes_by_tag": {[^}]*}' |
    grep -o "\"$2\": [0-9]*" | grep -o '[0-9]*$'; }
fwd_tag() { last "$1" | grep -o '"forward_peak_bytes_by_tag": {[^}]*}' | grep -o "\"$2\": [0-9]*" | grep -o '[0-9]*$'; }
eq() { [ -n "$1" ] && [ "$1" = "$2" ]; }                         # non-empty and equal
ge() { [ -n "$1" ] && [ -n "$2" ] && [ "$1" -ge "$2" ]; }       # numbers, $1 >= $2
eval_line() { grep -o 'step *[0-9]* | eval loss [0-9.]*' "$T/$1.out" | tr '\n' ' '; }

TOK=$((B * S)); LOGITS=$((TOK * V * 4))   # the (T,V) float32 logits / one-hot tensor per device
echo "== num_vocab_tiling: T=$TOK tokens, V=$V: the logits tensor is $LOGITS bytes per device"
run base mixtral-tiny
n=4
run tile$n mixtral-tiny num_vocab_tiling=$n
check "num_vocab_tiling=$n losses bit-identical to 1: $(bits tile$n)" same tile$n base
a0=$(dev_tag base activations); a1=$(dev_tag tile$n activations)
check "num_vocab_tiling=$n: activations peak $a0 -> $a1, down by exactly T*V*4 = $LOGITS" \
    eq "$a0" "$((a1 + LOGITS))"
p0=$(dev_peak base); p1=$(dev_peak tile$n); bound=$((LOGITS - LOGITS / n))
check "num_vocab_tiling=$n: device peak $p0 -> $p1, saves $((p0 - p1)) >= T*V*4 - one tile's logits = $bound" \
    ge "$p0" "$((p1 + bound))"
check "eval loss with tiling equals without: $(eval_line tile4)" eq "$(eval_line base)" "$(eval_line tile4)"

# Tiles of leaves that are not consecutive rows: with 2 chunks per sequence the tree order
# is chunk by chunk, so a tile of 4 leaves holds the first halves of all 4 sequences.
run chunks mixtral-tiny context_reduce_chunks=2
run chunks_tile mixtral-tiny context_reduce_chunks=2 num_vocab_tiling=4
check "non-contiguous tiles (context_reduce_chunks=2, tiling=4): $(bits chunks_tile)" same chunks_tile chunks
run bf16 mixtral-tiny dtype=bfloat16
run bf16_tile mixtral-tiny dtype=bfloat16 num_vocab_tiling=2
check "bf16: tiling=2 equals tiling=1: $(bits bf16_tile)" same bf16_tile bf16
run ds deepseek-tiny
run ds_tile deepseek-tiny num_vocab_tiling=4
check "deepseek-tiny: tiling=4 equals tiling=1: $(bits ds_tile)" same ds_tile ds
# Meshes: vocabulary-parallel (tensor=2) with fsdp=2 (the head gathered twice), context=2,
# and the pipeline (the last stage's head, microbatches of 2 sequences).
run tp mixtral-tiny ici_tensor_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2
run tp_tile mixtral-tiny ici_tensor_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 num_vocab_tiling=2
check "tensor=2 fsdp=2: tiling=2 equals tiling=1 on that mesh: $(bits tp_tile)" same tp_tile tp
run cp mixtral-tiny ici_context_parallelism=2
run cp_tile mixtral-tiny ici_context_parallelism=2 num_vocab_tiling=4
check "context=2: tiling=4 equals tiling=1 on that mesh: $(bits cp_tile)" same cp_tile cp
run pp mixtral-tiny ici_pipeline_parallelism=2 base_num_decoder_layers=2
run pp_tile mixtral-tiny ici_pipeline_parallelism=2 base_num_decoder_layers=2 num_vocab_tiling=2
check "pipeline=2: tiling=2 equals tiling=1: $(bits pp_tile)" same pp_tile pp

# Sampling reads the whole logits of its last position: it runs untiled and works.
out=$($TRAIN configs/mixtral-tiny.yml $FAST num_vocab_tiling=4 steps=1 sample_length=8 2>&1)
check "sampling with num_vocab_tiling=4 runs" grep -q -- '---- sample' <<< "$out"
expect_error "tiling that does not divide the leaves" "num_vocab_tiling (3) must divide this device's 4 leaves" \
    $TRAIN configs/mixtral-tiny.yml $FAST num_vocab_tiling=3
# A pipeline's microbatches of one sequence (one leaf each): said at start-up, before the
# model's lines, a checkpoint's load or the schedule, not at the head's first use.
expect_error "tiling against a pipeline's microbatches" "num_vocab_tiling (2) must divide this device's 1 leaves" \
    $TRAIN configs/mixtral-tiny.yml $FAST num_vocab_tiling=2 ici_pipeline_parallelism=2 base_num_decoder_layers=2 \
    per_device_batch_size=1
out=$($TRAIN configs/mixtral-tiny.yml $FAST num_vocab_tiling=2 ici_pipeline_parallelism=2 base_num_decoder_layers=2 \
    per_device_batch_size=1 2> /dev/null)
check "... with nothing printed before it (stdout: ${out:-empty})" [ -z "$out" ]
expect_error "num_vocab_tiling=0" "num_vocab_tiling must be >= 1" $TRAIN configs/mixtral-tiny.yml $FAST num_vocab_tiling=0
expect_error "parity dump with tiling" "run the dump with num_vocab_tiling=1" \
    $TRAIN configs/mixtral-tiny.yml $FAST num_vocab_tiling=2 dump_parity=$T/dump

echo "== use_iota_embed: the one-hot tensor is T*V*4 = $LOGITS bytes per device"
run iota mixtral-tiny use_iota_embed=true
check "use_iota_embed: every step's loss bit-identical to the gather (forward and backward): $(bits iota)" same iota base
t0=$(fwd_tag base temp); t1=$(fwd_tag iota temp)
check "use_iota_embed: forward temp peak $t0 -> $t1: holds the one-hot tensor (>= $LOGITS; the gather's is below it)" \
    eval 'ge "$t1" $LOGITS && ge $((LOGITS - 1)) "$t0"'
run guard mixtral-tiny use_iota_embed=true iota_embed_max_bytes=$((LOGITS - 1))
check "iota_embed_max_bytes=T*V*4-1 falls back to the gather: forward temp $(fwd_tag guard temp) = $t0" \
    eval 'eq "$(fwd_tag guard temp)" "$t0" && eq "$(dev_peak guard)" "$(dev_peak base)"'
run iota_tp mixtral-tiny ici_tensor_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 use_iota_embed=true
check "vocabulary-parallel (tensor=2): one-hot equals the gather: $(bits iota_tp)" same iota_tp tp
run iota_bf16 mixtral-tiny dtype=bfloat16 use_iota_embed=true
check "bf16: one-hot equals the gather: $(bits iota_bf16)" same iota_bf16 bf16
run both mixtral-tiny use_iota_embed=true num_vocab_tiling=4
check "use_iota_embed and num_vocab_tiling=4 together: $(bits both)" same both base
summary
