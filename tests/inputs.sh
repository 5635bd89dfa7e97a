#!/usr/bin/env bash
# tests/inputs.sh: every bad input is refused with one message that names the key or the
# path, exit status 1, before training starts (nothing trained, nothing written); a full disk
# and a signal are reported at the moment they happen, and leave nothing half-written. The
# table of docs/reliability.md is written from the messages this script actually got.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-inputs.XXXXXX)
trap 'umount "$T/ro" 2>/dev/null; rm -rf "$T"' EXIT
C=configs/mixtral-tiny.yml
FAST="steps=1 eval_steps=1 sample_length=0 per_device_batch_size=1 max_target_length=16 log_period=1"
OUT=$T/out          # every output path of the cases points in here: it must stay empty
mkdir -p "$OUT"
ROWS=$T/rows.md

# row INPUT WHEN MESSAGE: one line of the table. What differs from run to run is named, so
# that the table changes only when a message does: this run's scratch directory is DIR, the
# step a signal stopped at N, this host's memory HOST, the device that reported first D.
row() {
    local msg input=${1//$T/DIR}
    msg=$(printf '%s' "${3//$T/DIR}" | sed -e 's/after [0-9]* of/after N of/' -e 's/goes on at step [0-9]*/goes on at step N/' \
          -e "s/this host's [0-9.]* [A-Za-z]*B of memory/this host's HOST of memory/" -e 's/^meshmoe: device [0-9]* out/meshmoe: device D out/')
    printf '| `%s` | %s | `%s` |\n' "${input//|/\\|}" "$2" "${msg//|/\\|}" >> "$ROWS"
}

# hashes ARGS...: the sha256 of every existing file an argument names (PATH or KEY=PATH: the
# files the command could write over), and the name, size and modification time of every
# file and link under $T (the scratch files: one added, removed or written shows), so that a
# refused command is seen to have changed none of them. (A sha256 of all of $T, several
# checkpoints, for each case would take most of this script's time.)
hashes() {
    find "$T" -path "$T/stdout" -prune -o ! -type d -printf '%p %s %T@\n' | sort
    local a
    for a in "$@"; do [ -f "${a#*=}" ] && sha256sum "${a#*=}"; done
}

# refused INPUT PHRASE COMMAND...: exit 1, exactly one "meshmoe:" line containing PHRASE, no
# step trained, nothing left in $OUT, and every file under $T as it was. INPUT is how the
# table shows the case. With EARLY=1 also before the model is built: no 'init peak' line
# (device 0 prints it once its model is initialised, before any weights are loaded).
refused() {
    local input=$1 phrase=$2; shift 2
    local err rc before after when="before training" built=0
    before=$(hashes "$@")
    err=$("$@" 2>&1 >"$T/stdout"); rc=$?
    after=$(hashes "$@")
    local msg; msg=$(printf '%s\n' "$err" | grep '^meshmoe:' | head -1)
    local lines; lines=$(printf '%s\n' "$err" | grep -c '^meshmoe:')
    local left; left=$(ls -A "$OUT")
    if [ "${EARLY:-0}" -eq 1 ]; then when="before the model is built"; built=$(grep -c '^init peak' "$T/stdout"); fi
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && [[ "$msg" == *"$phrase"* ]] && ! grep -q '| loss' "$T/stdout" &&
       [ "$built" -eq 0 ] && [ -z "$left" ] && [ "$before" = "$after" ]; then
        pass "$input: ${msg:0:160}"
        row "$input" "$when" "$msg"
    else
        fail "$input: exit $rc, wanted 1; $lines messages, wanted one containing '$phrase'; trained: \
$(grep -c '| loss' "$T/stdout") steps; model built: $built (wanted 0 with EARLY=1); left behind: '$left'; files changed: \
'$(diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") | grep '^[<>]' | tr '\n' ' ')'; stderr: $err"
        rm -rf "${OUT:?}"/* "$OUT"/.[!.]* 2>/dev/null
    fi
}

echo "-- output paths, checked before the first step"
refused "save_checkpoint=/nonexistent/ck.safetensors" "directory '/nonexistent' does not exist" \
    $TRAIN $C $FAST steps=300 save_checkpoint=/nonexistent/ck.safetensors
refused "save_checkpoint=DIRECTORY" "is a directory" $TRAIN $C $FAST save_checkpoint=$OUT
refused "save_checkpoint=/dev/null" "exists and is not a regular file" $TRAIN $C $FAST save_checkpoint=/dev/null
check "/dev/null is still a character device" test -c /dev/null
refused "prepare README.md /dev/full" "exists and is not a regular file" $TRAIN prepare README.md /dev/full
check "/dev/full is still a character device" test -c /dev/full
refused "metrics_file=$OUT/" "names a directory" $TRAIN $C $FAST metrics_file=$OUT/
refused "memory_trace=/nonexistent/trace.csv" "directory '/nonexistent' does not exist" \
    $TRAIN $C $FAST memory_trace=/nonexistent/trace.csv
refused "dump_parity=/dev/null" "exists and is not a directory" $TRAIN $C $FAST dump_parity=/dev/null
# What dump_parity cannot do, known from the config: said before the mesh and the model, and
# its directory not made.
EARLY=1 refused "dump_parity=DIR parity_steps=65536" "out of host memory for the parity dump: parity_steps=65536 snapshots" \
    $TRAIN $C $FAST dump_parity=$OUT/dump parity_steps=65536
EARLY=1 refused "dump_parity=DIR num_vocab_tiling=2" "run the dump with num_vocab_tiling=1" \
    $TRAIN $C $FAST dump_parity=$OUT/dump num_vocab_tiling=2 per_device_batch_size=2
EARLY=1 refused "dump_parity=DIR ici_data_parallelism=2" "dump_parity runs on one device" \
    $TRAIN $C $FAST dump_parity=$OUT/dump ici_data_parallelism=2
EARLY=1 refused "dump_parity=DIR dry_run=true" "a dry run computes none: drop dry_run=true" \
    $TRAIN $C $FAST dump_parity=$OUT/dump dry_run=true
for key in save_checkpoint=$OUT/ck.safetensors metrics_file=$OUT/m.jsonl memory_trace=$OUT/trace.csv; do
    EARLY=1 refused "dump_parity=DIR ${key%%=*}=FILE" "$key is never written with dump_parity" \
        $TRAIN $C $FAST dump_parity=$OUT/dump parity_steps=1 $key
done
EARLY=1 refused "dump_parity=DIR profile=true" "profile=true prints nothing with dump_parity" \
    $TRAIN $C $FAST dump_parity=$OUT/dump parity_steps=1 profile=true
# A read-only directory: root writes through permission bits, so as root a read-only mount.
mkdir -p "$T/ro"
if [ "$(id -u)" -ne 0 ]; then chmod 555 "$T/ro"; ro=1
elif mount -t tmpfs -o ro,size=64k tmpfs "$T/ro" 2>/dev/null; then ro=1
else ro=0; echo "  SKIPPED read-only directory: running as root and no read-only tmpfs can be mounted here"; fi
[ "$ro" -eq 1 ] && refused "save_checkpoint=READ-ONLY-DIR/ck.safetensors" "cannot create a file in directory" \
    $TRAIN $C $FAST save_checkpoint=$T/ro/ck.safetensors

echo "-- input paths"
refused "./train configs (a directory as the config)" "config file 'configs' is a directory" $TRAIN configs
refused "dataset_path=configs" "dataset_path 'configs' is a directory" $TRAIN $C $FAST dataset_path=configs
refused "load_checkpoint=configs" "load_checkpoint 'configs' is a directory" $TRAIN $C $FAST load_checkpoint=configs
refused "load_checkpoint=MISSING" "No such file or directory" $TRAIN $C $FAST load_checkpoint=$T/missing.safetensors
head -c 3000 README.md > "$T/text.txt"
$TRAIN prepare "$T/text.txt" "$T/tok.bin" > /dev/null
cp "$T/tok.bin" "$T/stray.bin"; printf 'x' >> "$T/stray.bin"
refused "dataset_path=TOKENS+1 byte" "not a multiple of 2" $TRAIN $C $FAST dataset_path=$T/stray.bin
# A FIFO: opening one waits for a writer; the trainer opens without waiting and refuses it.
mkfifo "$T/fifo"
refused "./train FIFO (a named pipe as the config)" "config file '$T/fifo' is not a regular file" timeout 20 $TRAIN "$T/fifo"
refused "dataset_path=FIFO" "data file '$T/fifo' is not a regular file" timeout 20 $TRAIN $C $FAST dataset_path=$T/fifo
refused "load_checkpoint=FIFO" "'$T/fifo' is not a regular file, not a safetensors file" \
    timeout 20 $TRAIN $C $FAST load_checkpoint=$T/fifo
refused "plot FIFO DIR" "plot: '$T/fifo' is not a regular file" timeout 20 $TRAIN plot "$T/fifo" "$OUT/plots"

echo "-- preset files"
printf '\xef\xbb\xbfsteps: 0\n' > "$T/bom.yml"
refused "a preset starting with a UTF-8 BOM, then 'steps: 0'" "steps must be positive, got 0" $TRAIN "$T/bom.yml"
printf 'steps: 5\nseed: 1\nsteps: 6\n' > "$T/dup.yml"
refused "a preset setting 'steps' on lines 1 and 3" "set twice in this file, on lines 1 and 3" $TRAIN "$T/dup.yml"
printf 'learning_rate_final_fraction: 0.1\nsteps: 5\ncosine_learning_rate_final_fraction: 0.2\n' > "$T/dupname.yml"
refused "a preset setting learning_rate_final_fraction and its earlier name" \
    "key 'learning_rate_final_fraction' is set twice in this file, on lines 1 and 3 (line 3 as 'cosine_learning_rate_final_fraction', its earlier name)" \
    $TRAIN "$T/dupname.yml"
refused "lr_schedule_type=wsd with warm-up 0.6 and decay 0.5" "their sum must be at most 1" \
    $TRAIN $C $FAST steps=10 lr_schedule_type=wsd warmup_steps_fraction=0.6 wsd_decay_steps_fraction=0.5
# Found by the preset fuzzer: the decay's share made a step count (int of the share x steps)
# before its range was checked, a float-to-int overflow.
refused "wsd_decay_steps_fraction=2147483647748" "wsd_decay_steps_fraction must be in [0,1], got 2.14748e+12" \
    $TRAIN $C $FAST wsd_decay_steps_fraction=2147483647748
printf 'steps: 5\n' > "$T/five.yml"
check "the command line may override a preset's key (steps: 5 in the file, steps=3 given)" \
    bash -c "$TRAIN describe $T/five.yml steps=3 | grep -q '\"steps\": 3,'"
cp "$T/text.txt" "$T/a#b.txt"
printf 'dataset_path: %s # the text\nsteps: 1\n' "$T/a#b.txt" > "$T/hash.yml"
out=$($TRAIN "$T/hash.yml" eval_steps=1 sample_length=0 per_device_batch_size=1 max_target_length=16 2>&1)
check "'#' inside a value is kept, after a blank it starts a comment: $(printf '%s' "$out" | grep '^data:' | cut -c1-90)" \
    grep -qF "data: $T/a#b.txt, " <<< "$out"

echo "-- numbers"
refused "adam_eps=0" "adam_eps must be > 0" $TRAIN $C $FAST adam_eps=0
refused "adam_b2=1" "adam_b2 must be in [0, 1)" $TRAIN $C $FAST adam_b2=1
refused "rope_max_timescale=0" "rope_max_timescale must be > 0" $TRAIN $C $FAST rope_max_timescale=0
refused "normalization_layer_epsilon=-1" "normalization_layer_epsilon must be > 0" $TRAIN $C $FAST normalization_layer_epsilon=-1
refused "learning_rate=1e39" "too large for a 32-bit float" $TRAIN $C $FAST learning_rate=1e39
refused "adam_eps=1e-50" "too small for a 32-bit float" $TRAIN $C $FAST adam_eps=1e-50
refused "num_threads=100000" "num_threads must be in [0, 1024]" $TRAIN $C $FAST num_threads=100000
refused "num_threads=1024 ici_data_parallelism=8" "more than the 4096" $TRAIN $C $FAST num_threads=1024 ici_data_parallelism=8
refused "dry_run_all_devices=true without dry_run=true" "it needs dry_run=true" $TRAIN $C $FAST dry_run_all_devices=true
refused "dry_run=true per_device_batch_size=4096 max_target_length=65536" "int indices reach" \
    $TRAIN $C dry_run=true per_device_batch_size=4096 max_target_length=65536
# 256 devices each holding an 8 GB tensor (the routed rows, 2^31 - 1 elements at most): 2 TB in all.
refused "ici_data_parallelism=256 per_device_batch_size=15 max_target_length=262144" "more than this host's" \
    $TRAIN $C ici_data_parallelism=256 per_device_batch_size=15 max_target_length=262144
refused "eval_per_device_batch_size=600000" "lower eval_per_device_batch_size or max_target_length" \
    $TRAIN $C $FAST eval_per_device_batch_size=600000
# The devices' buffers against the host's memory (here said to be 2 GB): the eval batch's
# forward needs about 18 GB, stopped with a message at the buffer that would pass it, where
# the kernel's out-of-memory killer would end the run without one; with a batch whose largest
# tensor alone (3.3 GB) passes it, before the mesh starts.
refused "eval_per_device_batch_size=30000, a host of 2 GB" "host out of memory: " \
    env MESHMOE_HOST_MEMORY=2000000000 $TRAIN $C $FAST eval_per_device_batch_size=30000
refused "eval_per_device_batch_size=100000, a host of 2 GB" "more than this host's 1.86 GiB of memory" \
    env MESHMOE_HOST_MEMORY=2000000000 $TRAIN $C $FAST eval_per_device_batch_size=100000
refused "MESHMOE_HOST_MEMORY=2GB (the tests' stand-in for the host's memory: a byte count)" \
    "MESHMOE_HOST_MEMORY='2GB' is not a byte count" env MESHMOE_HOST_MEMORY=2GB $TRAIN $C $FAST
refused "hbm_capacity=0.5" "is not a whole number of bytes" $TRAIN $C $FAST hbm_capacity=0.5
refused "'steps= 3' (a blank before the number)" "key 'steps' wants an integer, got ' 3'" $TRAIN $C $FAST "steps= 3"
refused "checkpoint_period=1 without save_checkpoint" "save_checkpoint, which is not set" $TRAIN $C $FAST checkpoint_period=1
refused "sweep sweep_only=," "sweep_only: ',' names no row" $TRAIN sweep $C sweep_only=,

echo "-- the sample's prompt and decode keys (trainer/sampling.h)"
refused "prompt=[300]" "prompt: token 300, at position 1, is outside the vocabulary (vocab_size=256)" \
    $TRAIN $C $FAST sample_length=8 "prompt=[300]"
refused "prompt=[65][99999999999999999999]" "prompt: token 99999999999999999999, at position 2, is outside the vocabulary" \
    $TRAIN $C $FAST sample_length=8 "prompt=[65][99999999999999999999]"
printf 'ROMEO:\nWhat light through yonder window breaks?\n%.0s' $(seq 1 200) > "$T/play.txt"
$TRAIN prepare "$T/play.txt" "$T/play.bin" > /dev/null
refused "prompt=ROMEO with a token file and vocab_size=300" "is a text, and this data's tokens are not bytes" \
    $TRAIN $C $FAST sample_length=8 dataset_path="$T/play.bin" vocab_size=300 prompt=ROMEO
refused "vocab_size=128 prompt=é" "prompt: byte 0xc3, its token 1, is outside the vocabulary (vocab_size=128)" \
    $TRAIN $C $FAST sample_length=8 dataset_path="$T/play.txt" vocab_size=128 prompt=é
refused "prompt=ROMEO sample_length=0" "sample_length=0 prints none" $TRAIN $C $FAST prompt=ROMEO
refused "decode_sampling_strategy=topk" "it must be in [1, vocab_size = 256], got 0" \
    $TRAIN $C $FAST decode_sampling_strategy=topk
refused "decode_sampling_top_k=5" "decode_sampling_top_k=5 is read only by decode_sampling_strategy=topk" \
    $TRAIN $C $FAST decode_sampling_top_k=5
refused "decode_sampling_strategy=nucleus" "it must be in (0, 1], got -1" $TRAIN $C $FAST decode_sampling_strategy=nucleus
refused "decode_sampling_strategy=composite (MaxText's top-k then nucleus)" \
    "decode_sampling_strategy=composite is MaxText's, which meshmoe does not have" \
    $TRAIN $C $FAST decode_sampling_strategy=composite
refused "decode_sampling_strategy=nucleus decode_sampling_nucleus_p=1.5" \
    "decode_sampling_nucleus_p must be in [-1, 1] (-1 = not set; nucleus needs it in (0, 1]), got 1.5" \
    $TRAIN $C $FAST decode_sampling_strategy=nucleus decode_sampling_nucleus_p=1.5
help=$($TRAIN --help-config 2>&1)
check "--help-config gives every numeric key a range ($(grep -c 'range: ' <<<"$help") keys with one)" \
    bash -c '[ "$(grep -c "range: " <<<"$1")" -gt 50 ] && ! grep -q "range: none declared" <<<"$1"' _ "$help"

echo "-- names (the enum-valued keys: base/config_keys.def)"
printf 'steps: 5\ndecoder_block: mistral\n' > "$T/name.yml"
refused "a preset with 'decoder_block: mistral' on line 2" \
    "name.yml:2: decoder_block must be 'mixtral' or 'deepseek', got 'mistral'" $TRAIN "$T/name.yml"
refused "routed_score_func=topk" "routed_score_func must be \"\", 'softmax' or 'sigmoid', got 'topk'" \
    $TRAIN $C $FAST routed_score_func=topk
refused "remat_policy=ful" "remat_policy must be 'none', 'minimal', 'minimal_with_context', 'save_dot_except_mlp', 'save_dot_with_context_except_mlp', 'save_qkv_proj', 'save_out_proj', 'full', 'minimal_offloaded', 'qkv_proj_offloaded', 'custom', 'save_dot_except_mlpwi' or 'minimal_flash', got 'ful' (did you mean 'full'?)" \
    $TRAIN $C $FAST remat_policy=ful
refused "rope_type=llama3.1" "rope_type=llama3.1 is MaxText's, which meshmoe does not have" $TRAIN $C $FAST rope_type=llama3.1
refused "MESHMOE_GEMM_KERNEL=avx1024 (environment)" "MESHMOE_GEMM_KERNEL='avx1024' is not one of: avx512, avx2, scalar" \
    env MESHMOE_GEMM_KERNEL=avx1024 $TRAIN $C $FAST
check "--help-config lists every name-valued key's names" bash -c "$TRAIN --help-config | grep -q '^opt_type .*\[values: adamw, sgd, adafactor, muon, adam_pax\]$'"
refused "hardware=gpu (a MaxText key that is device here)" \
    "'hardware' is a MaxText key that meshmoe does not have: use device=cpu, cpu_strict or gpu" $TRAIN $C $FAST hardware=gpu
printf 'steps: 5\nload_full_state_path: gs://bucket/ckpt\n' > "$T/maxtext.yml"
refused "a preset with MaxText's load_full_state_path on line 2" \
    "maxtext.yml:2: 'load_full_state_path' is a MaxText key that meshmoe does not have: use load_checkpoint" $TRAIN "$T/maxtext.yml"
echo "-- MaxText's model files (their YAML: lists, quoted names, True/False, digits grouped by '_')"
# Mixtral 8x7B's and DeepSeek-V3's dimensions written as MaxText's model files write them,
# beside the same dimensions in meshmoe's plain form: `describe` (every key's value and every
# tensor's shape) is the same for both.
cat > "$T/mixtral-mt.yml" << 'EOF'
# Mixtral 8x7B, MaxText's way
base_emb_dim: 4096
base_num_query_heads: 32
base_num_kv_heads: 8
base_mlp_dim: 14336
base_moe_mlp_dim: 14336
base_num_decoder_layers: 32
head_dim: 128
mlp_activations: ["silu","linear"]
vocab_size: 32000
enable_dropout: False
logits_via_embedding: False
normalization_layer_epsilon: 1.0e-5
num_experts: 8
num_experts_per_tok: 2
rope_max_timescale: 1_000_000
decoder_block: "mixtral"
EOF
printf '%s\n' base_emb_dim:4096 base_num_query_heads:32 base_num_kv_heads:8 base_mlp_dim:14336 \
    base_moe_mlp_dim:14336 base_num_decoder_layers:32 head_dim:128 vocab_size:32000 \
    normalization_layer_epsilon:0.00001 num_experts:8 num_experts_per_tok:2 rope_max_timescale:1000000 \
    decoder_block:mixtral > "$T/mixtral-plain.yml"
cat > "$T/deepseek-mt.yml" << 'EOF'
base_emb_dim: 7168
base_num_query_heads: 128
base_num_kv_heads: 128
base_mlp_dim: 18432
base_moe_mlp_dim: 2048
base_num_decoder_layers: 61
first_num_dense_layers: 3
mlp_activations: [ 'silu', 'linear' ]
vocab_size: 129280
enable_dropout: True
dropout_rate: 0.0
quantization: ""
packing: True
logits_via_embedding: False
normalization_layer_epsilon: 1.0e-6
num_experts: 256
num_experts_per_tok: 8
shared_experts: 1
routed_scaling_factor: 2.5
routed_score_func: "sigmoid"
routed_bias: True
decoder_block: "deepseek"
attention_type: "mla"
q_lora_rank: 1536
kv_lora_rank: 512
qk_nope_head_dim: 128
qk_rope_head_dim: 64
v_head_dim: 128
mscale: 1.0
rope_type: "yarn"
rope_max_timescale: 10_000 # the rope theta
max_position_embeddings: 163_840
original_max_position_embeddings: 4096
rope_factor: 40
beta_fast: 32
rope_interleave: True
rope_truncate: True
rope_attention_scaling: False
EOF
grep -v -e mlp_activations -e dropout -e logits_via_embedding -e quantization -e packing "$T/deepseek-mt.yml" |
    sed -e 's/10_000 # the rope theta/10000/' -e 's/163_840/163840/' -e 's/"//g' -e 's/True/true/; s/False/false/' \
    > "$T/deepseek-plain.yml"
for m in mixtral deepseek; do
    $TRAIN describe "$T/$m-mt.yml" > "$T/$m-mt.json" 2> "$T/$m-mt.err"; r1=$?
    $TRAIN describe "$T/$m-plain.yml" > "$T/$m-plain.json" 2>&1; r2=$?
    check "$m: MaxText's model file loads as a preset and describes the plain file's model (exit $r1 and $r2, $(wc -c < "$T/$m-mt.json") bytes) $(head -c 160 "$T/$m-mt.err")" \
        bash -c "[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ -s $T/$m-mt.json ] && cmp -s $T/$m-mt.json $T/$m-plain.json"
done
check "... and the values reached the model (DeepSeek-V3: 256 experts, rope theta 10000, 61 layers)" \
    bash -c "grep -q '\"num_experts\": 256' $T/deepseek-mt.json && grep -q '\"rope_max_timescale\": 10000' $T/deepseek-mt.json && grep -q '\"base_num_decoder_layers\": 61' $T/deepseek-mt.json"
# ... and trains: DeepSeek-V3's file at small widths (its vocabulary of 129280 kept) on a token
# file in llm.c's uint32 format, tokens up to 129279.
python3 -c "
import struct, sys
n = 4000
toks = [(i * 7919) % 129280 if i % 5 == 0 else i % 256 for i in range(n)]
open(sys.argv[1], 'wb').write(struct.pack('<256i', 20240801, 7, n, *[0] * 253) + struct.pack('<%dI' % n, *toks))
" "$T/wide.bin"
$TRAIN "$T/deepseek-mt.yml" dataset_path="$T/wide.bin" base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=4 \
    base_mlp_dim=64 base_moe_mlp_dim=64 base_num_decoder_layers=4 num_experts=16 q_lora_rank=32 kv_lora_rank=16 \
    qk_nope_head_dim=16 qk_rope_head_dim=8 v_head_dim=16 steps=2 max_target_length=32 per_device_batch_size=2 \
    eval_steps=1 sample_length=0 log_period=1 metrics_file="$T/wide.jsonl" > "$T/wide.out" 2>&1
finite=$(losses "$T/wide.jsonl" | grep -cE '^[0-9]+\.[0-9]+$')
check "a vocabulary of 129280 trains on uint32 tokens: 2 steps, finite losses ($(losses $T/wide.jsonl | tr '\n' ' ')$(tail -1 $T/wide.out | grep meshmoe))" \
    test "$finite" -eq 2
refused "mlp_activations: [\"gelu\",\"linear\"] (GeGLU)" \
    "mlp_activations=[\"gelu\",\"linear\"] is MaxText's, which meshmoe does not have: the dense MLPs and the experts are SwiGLU" \
    $TRAIN $C $FAST 'mlp_activations=["gelu","linear"]'
refused "logits_via_embedding: True (tied embeddings)" \
    "logits_via_embedding=True is MaxText's, which meshmoe does not have: the output head is a weight of its own" \
    $TRAIN $C $FAST logits_via_embedding=True
refused "quantization=int8" "quantization=int8 is MaxText's, which meshmoe does not have: the products run in float32 or bf16" \
    $TRAIN $C $FAST quantization=int8
refused "attention=cudnn_flash_te (MaxText's GPU attention)" \
    "attention=cudnn_flash_te is MaxText's, which meshmoe does not have: MaxText's attention by cuDNN's fused flash kernels is attention=flash with device=gpu gpu_attention=cudnn here" \
    $TRAIN $C $FAST attention=cudnn_flash_te
refused "dropout_rate=0.1" "dropout_rate=0.1 is MaxText's, which meshmoe does not have: there is no dropout" \
    $TRAIN $C $FAST dropout_rate=0.1
refused "steps=1__0 (a '_' not between two digits)" "key 'steps' wants an integer, got '1__0'" $TRAIN $C $FAST steps=1__0
refused "steps=99999999999999 (past a 32-bit integer)" "key 'steps' = 99999999999999 is too large: an integer key holds at most 2147483647" \
    $TRAIN $C $FAST steps=99999999999999
refused "rope_max_timescale=_10000" "key 'rope_max_timescale' wants a number, got '_10000'" \
    $TRAIN $C $FAST rope_max_timescale=_10000
printf 'base_config: "base.yml"\nsteps: 5\n' > "$T/mt-train.yml"
refused "a MaxText training file's base_config" \
    "mt-train.yml:1: 'base_config' is a MaxText key that meshmoe does not have: a preset is one flat file" \
    $TRAIN "$T/mt-train.yml"
refused "logical_axis_rules (MaxText's sharding rules)" \
    "'logical_axis_rules' is a MaxText key that meshmoe does not have: each tensor's sharding over the mesh axes is fixed here" \
    $TRAIN $C $FAST "logical_axis_rules=[['embed', ['fsdp']]]"
# (one path for the three: the checkpoint's config names it)
$TRAIN $C $FAST seed=7 save_checkpoint=$T/seed.safetensors > /dev/null 2>&1 && mv $T/seed.safetensors $T/seed7.safetensors
$TRAIN $C $FAST init_weights_seed=7 save_checkpoint=$T/seed.safetensors > /dev/null 2>&1 && mv $T/seed.safetensors $T/iws7.safetensors
check "seed=7, the earlier name, is init_weights_seed=7: the same checkpoint, bit for bit" cmp -s $T/seed7.safetensors $T/iws7.safetensors
$TRAIN $C $FAST save_checkpoint=$T/seed.safetensors > /dev/null 2>&1
check "... and not init_weights_seed=0's (the seed reaches the weights)" \
    bash -c "[ -s $T/seed.safetensors ] && [ -s $T/iws7.safetensors ] && ! cmp -s $T/seed.safetensors $T/iws7.safetensors"

echo "-- checkpoint metadata"
$TRAIN $C $FAST save_checkpoint=$T/ck.safetensors > /dev/null 2>&1
set_meta() {   # set_meta IN OUT KEY VALUE: a copy of checkpoint IN whose metadata KEY is VALUE
               # (KEY config/NAME: the config metadata's NAME is the JSON VALUE; "-" drops NAME)
    python3 - "$@" <<'EOF'
import json, struct, sys
src, dst, key, value = sys.argv[1:]
b = open(src, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
if key.startswith('config/'):
    config = json.loads(h['__metadata__']['config'])
    if value == '-':
        config.pop(key[7:])
    else:
        config[key[7:]] = json.loads(value)
    h['__metadata__']['config'] = json.dumps(config)
else:
    h['__metadata__'][key] = value
j = json.dumps(h, separators=(',', ':')).encode()
j += b' ' * (-len(j) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
EOF
}
set_step() { set_meta "$1" "$2" step "$3"; }
set_step "$T/ck.safetensors" "$T/neg.safetensors" -5
set_step "$T/ck.safetensors" "$T/abc.safetensors" abc
refused "checkpoint step '-5'" "metadata key 'step' must be a non-negative integer" $TRAIN $C $FAST load_checkpoint=$T/neg.safetensors
refused "checkpoint step 'abc'" "metadata key 'step' must be a non-negative integer" $TRAIN $C $FAST load_checkpoint=$T/abc.safetensors
set_step "$T/ck.safetensors" "$T/late.safetensors" 50
refused "checkpoint at step 50, steps=1" "step 50 is past this run's steps (1)" $TRAIN $C $FAST load_checkpoint=$T/late.safetensors
set_meta "$T/ck.safetensors" "$T/format.safetensors" format "other 9"
refused "checkpoint format 'other 9'" "metadata 'format' is 'other 9', not 'meshmoe checkpoint 1'" \
    $TRAIN $C $FAST load_checkpoint=$T/format.safetensors
set_meta "$T/ck.safetensors" "$T/nokey.safetensors" config/rope_max_timescale -
refused "checkpoint config without rope_max_timescale" "config metadata has no key 'rope_max_timescale'" \
    $TRAIN $C $FAST load_checkpoint=$T/nokey.safetensors
refused "export-hf of that checkpoint" "config metadata has no key 'rope_max_timescale'" \
    $TRAIN export-hf "$T/nokey.safetensors" "$OUT/hf"
cp "$T/ck.safetensors" "$T/nan.safetensors"   # a NaN written into its data (meshmoe saves none)
printf '\xff\xff\xff\xff' | dd of="$T/nan.safetensors" bs=1 seek=3000000 conv=notrunc 2>/dev/null
refused "checkpoint with a NaN in a tensor" "holds -nan at element" $TRAIN $C $FAST steps=3 learning_rate_schedule_steps=1 \
    load_checkpoint=$T/nan.safetensors
refused "export-hf of the checkpoint with a NaN" "holds -nan at element" $TRAIN export-hf "$T/nan.safetensors" "$OUT/hf"
# A checkpoint without one of its tensors: export-hf makes OUT_DIR, then finds the tensor
# missing; the directory it made goes again (refused checks that nothing is left in $OUT).
python3 - "$T/ck.safetensors" "$T/notensor.safetensors" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
h.pop('params/decoder/decoder_norm/scale')
j = json.dumps(h, separators=(',', ':')).encode()
j += b' ' * (-len(j) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
EOF
refused "export-hf of a checkpoint without decoder_norm/scale into a new directory" "decoder/decoder_norm/scale" \
    $TRAIN export-hf "$T/notensor.safetensors" "$OUT/hf"
# Metadata as versions before the wsd schedule wrote it: the final fraction under its earlier
# name (MaxText's cosine_learning_rate_final_fraction), no lr_schedule_type nor wsd keys, and
# none of the sample's decode keys (prompt, decode_sampling_*).
set_meta "$T/ck.safetensors" "$T/old1.safetensors" config/learning_rate_final_fraction -
set_meta "$T/old1.safetensors" "$T/old2.safetensors" config/cosine_learning_rate_final_fraction 0.1
set_meta "$T/old2.safetensors" "$T/old3.safetensors" config/lr_schedule_type -
set_meta "$T/old3.safetensors" "$T/old4.safetensors" config/wsd_decay_steps_fraction -
set_meta "$T/old4.safetensors" "$T/old5.safetensors" config/wsd_decay_style -
set_meta "$T/old5.safetensors" "$T/old6.safetensors" config/prompt -
set_meta "$T/old6.safetensors" "$T/old7.safetensors" config/decode_sampling_strategy -
set_meta "$T/old7.safetensors" "$T/old8.safetensors" config/decode_sampling_top_k -
set_meta "$T/old8.safetensors" "$T/old.safetensors" config/decode_sampling_nucleus_p -
out=$($TRAIN $C $FAST steps=2 learning_rate_schedule_steps=1 load_checkpoint=$T/old.safetensors 2>&1)
check "a checkpoint of the earlier keys (cosine_learning_rate_final_fraction, no wsd or decode keys) resumes: \
$(printf '%s\n' "$out" | grep -m1 '| loss' | cut -c1-60)" [ "$(printf '%s\n' "$out" | grep -c '| loss')" -eq 1 ]

echo "-- one command's paths against each other: no output is an input or another output"
# By file identity: the same path spelled ./x, x or d/../x, a symbolic link, a hard link.
ID=$T/id
mkdir -p "$ID/sub" "$ID/dump"
cp "$T/text.txt" "$ID/text.txt"; cp "$T/tok.bin" "$ID/tok.bin"; cp "$C" "$ID/preset.yml"
cp "$T/ck.safetensors" "$ID/ck.safetensors"
ln -s text.txt "$ID/text-symlink.txt"; ln -s tok.bin "$ID/tok-symlink.bin"; ln -s trace.csv "$ID/trace-symlink.csv"; ln -s sub "$ID/sub-symlink"
ln "$ID/tok.bin" "$ID/tok-hardlink.bin"
$TRAIN export-hf "$ID/ck.safetensors" "$ID/hf" > /dev/null
$TRAIN $C $FAST memory_trace="$ID/trace.csv" > /dev/null
mkdir -p "$ID/plot"; cp "$ID/trace.csv" "$ID/plot/memory_device_0.svg"
TRAIN_ABS=$(cd "$(dirname "$TRAIN")" && pwd)/$(basename "$TRAIN")
refused "prepare X X" "is the same file as prepare input" $TRAIN prepare "$ID/text.txt" "$ID/text.txt"
refused "prepare ./text.txt text.txt (run in its directory)" "is the same file as prepare input" \
    env -C "$ID" "$TRAIN_ABS" prepare ./text.txt text.txt
refused "prepare X sub/../X" "is the same file as prepare input" $TRAIN prepare "$ID/text.txt" "$ID/sub/../text.txt"
refused "prepare SYMLINK-TO-X X" "is the same file as prepare input" $TRAIN prepare "$ID/text-symlink.txt" "$ID/text.txt"
refused "save_checkpoint=DATA, dataset_path=SYMLINK-TO-DATA" "save_checkpoint '$ID/tok.bin' is the same file as dataset_path" \
    $TRAIN $C $FAST dataset_path="$ID/tok-symlink.bin" save_checkpoint="$ID/tok.bin"
refused "metrics_file=HARD-LINK-TO-DATA" "metrics_file '$ID/tok-hardlink.bin' is the same file as dataset_path" \
    $TRAIN $C $FAST dataset_path="$ID/tok.bin" metrics_file="$ID/tok-hardlink.bin"
refused "metrics_file=THE-CONFIG-FILE" "is the same file as config file" $TRAIN "$ID/preset.yml" $FAST metrics_file="$ID/preset.yml"
refused "metrics_file=LOAD_CHECKPOINT" "metrics_file '$ID/ck.safetensors' is the same file as load_checkpoint" \
    $TRAIN $C $FAST load_checkpoint="$ID/ck.safetensors" metrics_file="$ID/ck.safetensors"
refused "metrics_file=M memory_trace=sub/../M" "one output would overwrite the other" \
    $TRAIN $C $FAST metrics_file="$ID/m.jsonl" memory_trace="$ID/sub/../m.jsonl"
refused "metrics_file=SUB/M memory_trace=SYMLINK-TO-SUB/M, neither there yet" "one output would overwrite the other" \
    $TRAIN $C $FAST metrics_file="$ID/sub/m.jsonl" memory_trace="$ID/sub-symlink/m.jsonl"
refused "memory_trace=config.json of load_hf=DIR" "is the same file as config.json of load_hf" \
    $TRAIN $C $FAST load_hf="$ID/hf" memory_trace="$ID/hf/config.json"
refused "save_checkpoint inside dump_parity's directory" "lies inside dump_parity" \
    $TRAIN $C $FAST dump_parity="$ID/dump" save_checkpoint="$ID/dump/ck.safetensors"
refused "sweep memory_trace=T (every run would write it in turn)" \
    "sweep: memory_trace=$OUT/trace.csv: every run of the sweep would write this file in turn" \
    $TRAIN sweep $C memory_trace="$OUT/trace.csv"
refused "plot DIR/memory_device_0.svg DIR (the trace is a file the plot writes)" \
    "memory_device_0.svg of plot output directory" $TRAIN plot "$ID/plot/memory_device_0.svg" "$ID/plot"
refused "figure timelines X TITLE a SYMLINK-TO-X" "figure OUT.svg '$ID/trace.csv' is the same file as figure TRACE.csv" \
    $TRAIN figure timelines "$ID/trace.csv" T a "$ID/trace-symlink.csv"
refused "figure schedule CONFIG.yml CONFIG.yml" "is the same file as figure CONFIG.yml" \
    $TRAIN figure schedule "$ID/preset.yml" "$ID/preset.yml" ici_pipeline_parallelism=2
refused "export-hf DIR/model.safetensors DIR" "model.safetensors of export-hf OUT_DIR" \
    $TRAIN export-hf "$ID/hf/model.safetensors" "$ID/hf"
refused "resume with steps=2 from a checkpoint of steps=1" "set learning_rate_schedule_steps=1 to keep the checkpoint's schedule, whose rate is 0 from step 1 on" \
    $TRAIN $C $FAST steps=2 load_checkpoint="$ID/ck.safetensors"

echo "-- inputs and outputs of the other commands"
# An export writes its files as a set: with config.json blocked by a directory, the weights
# already there are not replaced either (their time and size unchanged: refused's listing).
cp -r "$ID/hf" "$T/hfx"; rm "$T/hfx/config.json"; mkdir "$T/hfx/config.json"
refused "export-hf into a DIR whose config.json is a directory" "cannot write '$T/hfx/config.json': it exists and is not a regular file" \
    $TRAIN export-hf "$ID/ck.safetensors" "$T/hfx"
cp -r "$ID/hf" "$T/hfdup"
sed -i 's/"rms_norm_eps": \([^,]*\),/"rms_norm_eps": \1, "rms_norm_eps": 5,/' "$T/hfdup/config.json"
EARLY=1 refused "load_hf=DIR whose config.json gives rms_norm_eps twice" "config.json gives \"rms_norm_eps\" twice" \
    $TRAIN $C $FAST load_hf="$T/hfdup"
# load_hf is checked with the other inputs, before the model is built: the directory, its
# config.json against the run's config, and its files' tensors by name, shape and dtype.
mkdir -p "$T/hfempty"
EARLY=1 refused "load_hf=MISSING" "load_hf: cannot open '$T/hfmissing/config.json'" \
    $TRAIN $C $FAST load_hf="$T/hfmissing"
EARLY=1 refused "load_hf=A-FILE" "load_hf: cannot open '$T/text.txt/config.json': Not a directory" \
    $TRAIN $C $FAST load_hf="$T/text.txt"
EARLY=1 refused "load_hf=AN-EMPTY-DIRECTORY" "load_hf: cannot open '$T/hfempty/config.json'" \
    $TRAIN $C $FAST load_hf="$T/hfempty"
EARLY=1 refused "load_hf=DIR of another model (base_mlp_dim)" \
    "config.json says \"intermediate_size\": 256, this run's config gives 512 (base_mlp_dim)" \
    $TRAIN $C $FAST base_mlp_dim=512 load_hf="$ID/hf"
cp -r "$ID/hf" "$T/hfextra"
python3 tests/st_tool.py add-tensor "$ID/hf/model.safetensors" "$T/hfextra/model.safetensors" model.layers.0.mlp.extra.weight
EARLY=1 refused "load_hf=DIR whose weights hold a tensor the model does not read" \
    "'model.layers.0.mlp.extra.weight', which this config does not read" $TRAIN $C $FAST load_hf="$T/hfextra"
sed '3s/,[0-9]*,"/,zz,"/' "$ID/trace.csv" > "$T/badtrace.csv"
refused "plot TRACE whose line 3 has 'zz' for its total" "badtrace.csv line 3 is not a trace row" \
    $TRAIN plot "$T/badtrace.csv" "$OUT/plots"
# A fresh run writes its metrics file beside the path and renames it there after its first
# step: one that fails before leaves an earlier file as it was.
printf '{"step": 0, "an": "earlier run"}\n' > "$T/m.jsonl"
h0=$(sha256sum < "$T/m.jsonl")
$TRAIN $C $FAST metrics_file="$T/m.jsonl" load_balance_loss_weight=1e38 > /dev/null 2>&1; rc=$?
check "a run failing at step 0 (exit $rc, non-finite loss) leaves the earlier metrics file as it was, no temporary beside it" \
    test "$rc" -eq 1 -a "$(sha256sum < "$T/m.jsonl")" = "$h0" -a "$(ls "$T" | grep -c '^m\.jsonl\.tmp')" -eq 0
$TRAIN $C $FAST steps=2 metrics_file="$T/m.jsonl" > /dev/null 2>&1
check "  ...and one that trains replaces it: $(grep -c . "$T/m.jsonl") lines" \
    test "$(grep -c '"loss_bits"' "$T/m.jsonl")" -eq 2

echo "-- save_checkpoint = load_checkpoint: resumed and saved in place, the one pair allowed"
# SIGKILL in the middle of that save (raised in its fsync, every byte of the temporary written):
# the checkpoint it resumed from is still there, byte for byte; only the temporary is left.
cc -shared -fPIC -o "$T/shim.so" tests/inputs_shim.c -ldl
h0=$(sha256sum < "$ID/ck.safetensors")
INPLACE="$C $FAST steps=2 learning_rate_schedule_steps=1 load_checkpoint=$ID/ck.safetensors save_checkpoint=$ID/ck.safetensors"
rc=$(MESHMOE_SHIM=kill LD_PRELOAD=$T/shim.so $TRAIN $INPLACE > /dev/null 2>&1; echo $?)
tmps=$(ls "$ID" | grep -c '^ck\.safetensors\.tmp\.')
check "SIGKILL while saving in place: exit $rc (137), the checkpoint's sha256 unchanged, $tmps temporary left beside it" \
    test "$rc" -eq 137 -a "$(sha256sum < "$ID/ck.safetensors")" = "$h0" -a "$tmps" -eq 1
rm -f "$ID"/ck.safetensors.tmp.*
out=$($TRAIN $INPLACE 2>&1); rc=$?
check "  ...and the same run without the kill resumes from it and saves in place: exit $rc, \
$(grep -o 'saved checkpoint .*' <<< "$out" | sed "s|$T|DIR|")" grep -q "resumed from .* at step 1\$" <<< "$out"
check "  ...the file now holds step 2" grep -q "saved checkpoint $ID/ck.safetensors (step 2)" <<< "$out"

echo "-- a mesh that runs out of memory"
err=$($TRAIN $C $FAST ici_data_parallelism=4 hbm_capacity=20MiB 2>&1 >/dev/null); rc=$?
n_reports=$(printf '%s\n' "$err" | grep -c 'live by tag on device')
n_msgs=$(printf '%s\n' "$err" | grep -c '^meshmoe:')
msg=$(printf '%s\n' "$err" | grep '^meshmoe:')
check "4 devices out of memory at once: one device's report ($n_reports), one message ($n_msgs), exit $rc" \
    test "$rc" -eq 1 -a "$n_reports" -eq 1 -a "$n_msgs" -eq 1
row "ici_data_parallelism=4 hbm_capacity=20MiB" "at the allocation" "$msg"

echo "-- full disks (ulimit -f: a write past it fails with EFBIG, as on a full disk)"
# when_it_happens INPUT PHRASE COMMAND...: exit 1 with one message containing PHRASE.
when_it_happens() {
    local input=$1 phrase=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null); rc=$?
    local msg; msg=$(printf '%s\n' "$err" | grep '^meshmoe:' | head -1)
    if [ "$rc" -eq 1 ] && [ "$(printf '%s\n' "$err" | grep -c '^meshmoe:')" -eq 1 ] && [[ "$msg" == *"$phrase"* ]]; then
        pass "$input: ${msg:0:160}"; row "$input" "when it happens" "$msg"
    else
        fail "$input: exit $rc, wanted 1 and one message containing '$phrase'; got: $err"
    fi
}
when_it_happens "metrics_file on a full disk" "cannot write metrics_file" \
    bash -c "ulimit -f 4; exec $TRAIN $C $FAST steps=20 metrics_file=$OUT/m.jsonl"
check "the metrics file keeps whole lines only ($(grep -c . "$OUT/m.jsonl") of them)" \
    python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]; assert open(sys.argv[1]).read().endswith('}\n')" "$OUT/m.jsonl"
rm -f "$OUT/m.jsonl"
# A resume that fails before its first step, with a metrics_file not there yet: none is left
# (the head's weights all 3e38: finite, so loaded, and the logits overflow).
python3 tests/st_tool.py fill "$T/ck.safetensors" "$OUT/big.safetensors" params/decoder/logits_dense/kernel 3e38
$TRAIN $C $FAST steps=3 learning_rate_schedule_steps=1 load_checkpoint="$OUT/big.safetensors" \
    metrics_file="$OUT/m-resume.jsonl" > "$T/nan.out" 2>&1; rc=$?
check "a resume stopped by a non-finite loss (exit $rc): no metrics_file made, nothing left: '$(ls -A "$OUT")'" \
    bash -c 'test "$1" -ne 0 && grep -q "non-finite loss" "$2" && test "$(ls -A "$3")" = big.safetensors' _ "$rc" "$T/nan.out" "$OUT"
rm -f "$OUT/big.safetensors"
when_it_happens "memory_trace on a full disk" "File too large" \
    bash -c "ulimit -f 8; exec $TRAIN $C $FAST memory_trace=$OUT/trace.csv"
when_it_happens "save_checkpoint on a full disk" "File too large" \
    bash -c "ulimit -f 1024; exec $TRAIN $C $FAST save_checkpoint=$OUT/ck.safetensors"
# The parity dump makes its directory only to write its file into, and removes it again when
# that write fails; a directory that was there before stays.
when_it_happens "dump_parity=NEW-DIR on a full disk" "File too large" \
    bash -c "ulimit -f 64; exec $TRAIN $C $FAST dump_parity=$OUT/dump parity_steps=1"
mkdir "$OUT/was"
when_it_happens "dump_parity=A-DIRECTORY-THERE-BEFORE on a full disk" "File too large" \
    bash -c "ulimit -f 64; exec $TRAIN $C $FAST dump_parity=$OUT/was parity_steps=1"
check "nothing left behind by the failed saves but the directory there before: '$(ls -A "$OUT")'" \
    test "$(ls -A "$OUT")" = was -a -z "$(ls -A "$OUT/was")"
rmdir "$OUT/was"

echo "-- signals and a second writer"
# SIGTERM in the middle of a save (raised in its fsync, once every byte is written).
cp "$T/ck.safetensors" "$OUT/ck.safetensors"
err=$(MESHMOE_SHIM=term LD_PRELOAD=$T/shim.so $TRAIN $C $FAST save_checkpoint=$OUT/ck.safetensors 2>&1 >/dev/null); rc=$?
msg=$(printf '%s\n' "$err" | grep '^meshmoe:')
check "SIGTERM during a save: exit $rc (143), no temporary: '$(ls -A "$OUT")'" \
    test "$rc" -eq 143 -a "$(ls -A "$OUT")" = ck.safetensors
check "  ...the older checkpoint unchanged, byte for byte" cmp -s "$T/ck.safetensors" "$OUT/ck.safetensors"
check "  ...and one message: ${msg:0:150}" test "$(printf '%s\n' "$err" | grep -c '^meshmoe:')" -eq 1
[ "$rc" -eq 143 ] && row "SIGTERM while save_checkpoint is written" "when it happens" "$msg"
rm -f "$OUT/ck.safetensors"
err=$(MESHMOE_SHIM=term LD_PRELOAD=$T/shim.so $TRAIN prepare "$T/text.txt" "$OUT/tok.bin" 2>&1 >/dev/null); rc=$?
check "SIGTERM during './train prepare': exit $rc (143), nothing left: '$(ls -A "$OUT")'" \
    test "$rc" -eq 143 -a -z "$(ls -A "$OUT")"
err=$(MESHMOE_SHIM=term LD_PRELOAD=$T/shim.so $TRAIN export-hf "$T/ck.safetensors" "$OUT/hf-new" 2>&1 >/dev/null); rc=$?
check "SIGTERM during export-hf into a new directory: exit $rc (143), the directory removed too: '$(ls -A "$OUT")'" \
    test "$rc" -eq 143 -a -z "$(ls -A "$OUT")"
# SIGTERM between the renames of files saved together (export-hf's three): the renames finish,
# so the directory holds the new export whole, not part of each.
$TRAIN export-hf "$T/ck.safetensors" "$OUT/hfa" > /dev/null && $TRAIN export-hf "$T/iws7.safetensors" "$OUT/hfb" > /dev/null
mkdir -p "$OUT/hfa-old" && cp "$OUT"/hfa/* "$OUT/hfa-old"
err=$(MESHMOE_SHIM=term_rename LD_PRELOAD=$T/shim.so $TRAIN export-hf "$T/iws7.safetensors" "$OUT/hfa" 2>&1 >/dev/null); rc=$?
check "SIGTERM between export-hf's renames: exit $rc (143), the new export whole: ${err:0:120}" \
    bash -c 'test "$1" -eq 143 && diff -r "$2/hfa" "$2/hfb" > /dev/null && ! diff -r "$2/hfa" "$2/hfa-old" > /dev/null' _ "$rc" "$OUT"
rm -rf "$OUT/hfa" "$OUT/hfb" "$OUT/hfa-old"
# SIGINT between steps: the step finishes, the checkpoint is saved, and a resume goes on from it.
$TRAIN $C $FAST steps=100000 save_checkpoint=$OUT/stop.safetensors > "$T/sig.out" 2> "$T/sig.err" &
pid=$!
for _ in $(seq 1 600); do grep -q '| loss' "$T/sig.out" && break; sleep 0.1; done
kill -INT $pid; wait $pid; rc=$?
msg=$(grep '^meshmoe:' "$T/sig.err")
at=$(sed -n 's/.*stopped by SIGINT after \([0-9]*\) of .*goes on at step \1)$/\1/p' "$T/sig.err")
check "SIGINT during training: exit $rc (130): ${msg:0:150}" test "$rc" -eq 130 -a -n "$at"
row "SIGINT during training, save_checkpoint set" "between steps" "$msg"
check "  ...and the saved checkpoint resumes at step $at" \
    grep -q "resumed from .* at step $at\$" <<< "$($TRAIN $C $FAST steps=100000 run_steps=1 load_checkpoint=$OUT/stop.safetensors 2>&1)"
rm -f "$OUT/stop.safetensors"
# SIGHUP (a closed terminal or ssh session) as SIGTERM: the step finishes and the checkpoint is saved.
$TRAIN $C $FAST steps=100000 save_checkpoint=$OUT/hup.safetensors > "$T/hup.out" 2> "$T/hup.err" &
pid=$!
for _ in $(seq 1 600); do grep -q '| loss' "$T/hup.out" && break; sleep 0.1; done
kill -HUP $pid; wait $pid; rc=$?
msg=$(grep '^meshmoe:' "$T/hup.err")
check "SIGHUP during training: exit $rc (129), saved, nothing else left: ${msg:0:120}" \
    bash -c 'test "$1" -eq 129 && grep -q "stopped by SIGHUP after [0-9]* of .*checkpoint saved" "$2" && test "$(ls -A "$3")" = hup.safetensors' \
    _ "$rc" "$T/hup.err" "$OUT"
rm -f "$OUT/hup.safetensors"
# Two runs saving to one path at once: each writes its own temporary file, and the path ends up
# holding one of the two whole files.
printf 'the first text, saved by one run.\n%.0s' $(seq 1 50) > "$T/one.txt"
printf 'a second, longer text from another run.\n%.0s' $(seq 1 80) > "$T/two.txt"
$TRAIN prepare "$T/one.txt" "$T/one.bin" > /dev/null; $TRAIN prepare "$T/two.txt" "$T/two.bin" > /dev/null
MESHMOE_SHIM=sleep LD_PRELOAD=$T/shim.so $TRAIN prepare "$T/one.txt" "$OUT/same.bin" > /dev/null 2>&1 & p1=$!
MESHMOE_SHIM=sleep LD_PRELOAD=$T/shim.so $TRAIN prepare "$T/two.txt" "$OUT/same.bin" > /dev/null 2>&1 & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
check "two overlapping saves to one path: both succeed ($r1, $r2), one whole file and no temporary remain" \
    bash -c "[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ \"\$(ls -A $OUT)\" = same.bin ] && (cmp -s $OUT/same.bin $T/one.bin || cmp -s $OUT/same.bin $T/two.bin)"

# docs/reliability.md: the table between its markers is these rows.
if [ "$FAILED" -eq 0 ]; then
    awk -v rows="$ROWS" '
        /^<!-- refusals: begin/ { print; print "| input | when | message |"; print "|---|---|---|";
                                  while ((getline l < rows) > 0) print l; skip = 1; next }
        /^<!-- refusals: end/ { skip = 0 }
        !skip' docs/reliability.md > "$T/reliability.md" && cp "$T/reliability.md" docs/reliability.md
    echo "docs/reliability.md: $(wc -l < "$ROWS") rows written from these messages"
fi
summary
