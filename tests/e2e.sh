#!/usr/bin/env bash
# tests/e2e.sh: end-to-end tests of ./train: learning, checkpoint/resume, gradient
# accumulation, data formats, and every kind of bad input.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
T=$(mktemp -d /tmp/meshmoe-e2e.XXXXXX)
trap 'rm -rf "$T"' EXIT
TRAIN=train_with_args   # $TRAIN (./train) with $TRAIN_ARGS (tests/lib.sh)
# Short runs: small batches and few steps keep the whole script around a minute or two.
FAST="per_device_batch_size=4 max_target_length=64 eval_steps=2 sample_length=0 log_period=100"

echo "== loss decreases (first vs last eval loss), both presets, both MoE paths"
for preset in mixtral-tiny deepseek-tiny; do
    for sparse in true false; do
        out=$($TRAIN configs/$preset.yml $FAST steps=60 sparse_matmul=$sparse learning_rate=1e-2 2>&1)
        line=$(printf '%s\n' "$out" | grep 'eval loss .* (first')
        first=$(printf '%s' "$line" | sed 's/.*(first \([0-9.]*\)).*/\1/')
        last=$(printf '%s' "$line" | sed 's/.*eval loss \([0-9.]*\) .*/\1/')
        check "$preset sparse_matmul=$sparse: eval loss $first -> $last (must fall below 0.75x)" \
            awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.75 * a) }'
    done
done

echo "== sampling after training (what make run prints last), both presets"
for preset in mixtral-tiny deepseek-tiny; do
    out=$($TRAIN configs/$preset.yml per_device_batch_size=2 max_target_length=64 eval_steps=1 steps=2 \
        sample_length=24 2>&1); rc=$?
    check "$preset: sample printed (exit $rc)" \
        bash -c '[ "$1" -eq 0 ] && printf "%s" "$2" | awk "/^---- sample/ { s = 1 } s && /^----\$/ { e = 1 } END { exit !e }"' _ "$rc" "$out"
done

echo "== the sample's prompt and strategies (MaxText's decode keys), from a saved model without training"
C=configs/mixtral-tiny.yml
$TRAIN $C $FAST steps=30 learning_rate=1e-2 save_checkpoint=$T/sm.safetensors > /dev/null 2>&1
# text_of ARGS...: the sample's text (its lines between the header and "----"), sampled from
# the checkpoint (steps at its step: nothing trained), and its header in $T/header.
text_of() {
    $TRAIN $C $FAST steps=30 learning_rate=1e-2 load_checkpoint=$T/sm.safetensors sample_length=40 "$@" > $T/s.out 2>&1
    sed -n '/^---- sample/p' $T/s.out > $T/header
    sed -n '/^---- sample/,/^----$/{/^----/d;p;}' $T/s.out
}
romeo=$(text_of 'prompt=ROMEO:\n')
check "prompt=ROMEO:\\n: the sample starts with it: $(printf '%s' "$romeo" | head -2 | tr '\n' '/')" \
    bash -c '[ "$(printf "%s\n" "$1" | head -1)" = "ROMEO:" ] && grep -q "the prompt key.s 7 tokens, then 40 generated" $2' \
    _ "$romeo" $T/header
ids=$(text_of 'prompt=[82][79][77][69][79][58][10]')
check "the same prompt as token ids: the same text" [ -n "$ids" -a "$ids" = "$romeo" ]
greedy=$(text_of 'prompt=ROMEO:\n' decode_sampling_strategy=greedy)
check "greedy: $(printf '%s' "$greedy" | tail -1 | cut -c1-40)..., a text of its own" [ -n "$greedy" -a "$greedy" != "$romeo" ]
hot=$(text_of 'prompt=ROMEO:\n' decode_sampling_strategy=greedy sample_temperature=5)
check "greedy reads no temperature: the same text at 5" [ "$hot" = "$greedy" ]
k1=$(text_of 'prompt=ROMEO:\n' decode_sampling_strategy=topk decode_sampling_top_k=1 sample_temperature=5)
check "topk 1 at temperature 5: greedy's text" [ "$k1" = "$greedy" ]
p0=$(text_of 'prompt=ROMEO:\n' decode_sampling_strategy=nucleus decode_sampling_nucleus_p=1e-6 sample_temperature=5)
check "nucleus 1e-6 at temperature 5: greedy's text" [ "$p0" = "$greedy" ]
all=$(text_of 'prompt=ROMEO:\n' decode_sampling_strategy=nucleus decode_sampling_nucleus_p=1)
check "nucleus 1 (every token): weighted's text" [ "$all" = "$romeo" ]
k8=$(text_of 'prompt=ROMEO:\n' decode_sampling_strategy=topk decode_sampling_top_k=8 sample_temperature=5)
check "topk 8 at temperature 5: a text of its own, header '$(cut -c1-110 $T/header)'" \
    bash -c '[ -n "$1" ] && [ "$1" != "$2" ] && grep -q "topk among the 8 largest logits at temperature 5.00" $3' _ "$k8" "$greedy" $T/header
# On a mesh: every device draws the same token, one device's text.
for args in "ici_fsdp_parallelism=2 ici_tensor_parallelism=2" "ici_expert_parallelism=4"; do
    got=$(text_of 'prompt=ROMEO:\n' decode_sampling_strategy=topk decode_sampling_top_k=8 sample_temperature=5 $args \
          num_devices=4 per_device_batch_size=1)   # (the checkpoint's 4 sequences a step)
    check "topk 8 on $args: one device's text" [ -n "$got" -a "$got" = "$k8" ]
done
# On a terminal (script gives the trainer one) the prompt is printed in bold; NO_COLOR=1, plain.
if command -v script > /dev/null; then
    on_tty() {
        env "$@" script -qec "./train $C $FAST steps=30 learning_rate=1e-2 load_checkpoint=$T/sm.safetensors \
            sample_length=40 'prompt=ROMEO:\n' ${TRAIN_ARGS:-}" /dev/null | tr -d '\r'
    }
    out=$(on_tty)
    plain=$(printf '%s\n' "$out" | sed -n '/^---- sample/,/^----$/{/^----/d;p;}' | sed "s/$(printf '\033')\[[01]m//g")
    check "on a terminal: the prompt in bold (ESC[1m ROMEO:\\n ESC[0m), the same text within, and the header says so" \
        bash -c 'e=$(printf "\033"); printf "%s\n" "$1" | grep -q "^$e\[1mROMEO:\$" && printf "%s\n" "$1" | grep -q "^$e\[0m" &&
                 printf "%s\n" "$1" | grep -q "the prompt key.s 7 tokens in bold, then 40" && [ "$2" = "$3" ]' _ "$out" "$plain" "$romeo"
    out=$(on_tty NO_COLOR=1)
    check "on a terminal with NO_COLOR=1: no escape codes" \
        bash -c 'printf "%s" "$1" | grep -q "^---- sample (prompt: the prompt key.s 7 tokens, then" && ! printf "%s" "$1" | grep -q $'"'"'\x1b'"'"'' _ "$out"
else
    echo "  (no script command: the terminal's bold prompt not tried)"
fi

echo "== checkpoint: resume gives a bit-identical loss trajectory"
for preset in mixtral-tiny deepseek-tiny; do
    $TRAIN configs/$preset.yml $FAST steps=8 metrics_file=$T/full.jsonl >/dev/null 2>&1
    $TRAIN configs/$preset.yml $FAST steps=8 run_steps=4 save_checkpoint=$T/ck.safetensors \
        metrics_file=$T/part.jsonl >/dev/null 2>&1
    # (saved over the checkpoint it resumed from, as the README's example does)
    $TRAIN configs/$preset.yml $FAST steps=8 load_checkpoint=$T/ck.safetensors save_checkpoint=$T/ck.safetensors \
        metrics_file=$T/part.jsonl > $T/resumed.out 2>&1
    check "$preset: 8 losses of the resumed run equal the uninterrupted run's (to the last digit of %.9g)" \
        cmp -s <(losses $T/full.jsonl) <(losses $T/part.jsonl)
    check "$preset: resumed run has all 8 steps" [ "$(losses $T/part.jsonl | wc -l)" -eq 8 ]
    check "$preset: saved over the checkpoint it resumed from: $(grep '^saved checkpoint' $T/resumed.out)" \
        grep -q "^saved checkpoint $T/ck.safetensors (step 8)$" $T/resumed.out
    check "$preset: no temporary file left" [ ! -e $T/ck.safetensors.tmp ]
done
# A resumed run without save_checkpoint trains, and says that what it trained is not kept.
$TRAIN configs/deepseek-tiny.yml $FAST steps=8 run_steps=6 save_checkpoint=$T/ck6.safetensors > /dev/null 2>&1
$TRAIN configs/deepseek-tiny.yml $FAST steps=8 load_checkpoint=$T/ck6.safetensors > $T/nosave.out 2>&1
check "resumed without save_checkpoint: $(grep '^no checkpoint saved' $T/nosave.out)" \
    grep -q "^no checkpoint saved (save_checkpoint is not set): $T/ck6.safetensors still holds its own step$" $T/nosave.out
if [ -n "${PYTHON:-}" ] && "$PYTHON" -c 'import safetensors' 2>/dev/null; then
    check "checkpoint readable by Python safetensors" "$PYTHON" -c "
from safetensors.numpy import load_file; from safetensors import safe_open
import json, sys
t = load_file('$T/ck.safetensors'); m = safe_open('$T/ck.safetensors', 'np').metadata()
cfg = json.loads(m['config']); e = t['params/token_embedder/embedding']
assert e.shape == (cfg['vocab_size'], cfg['base_emb_dim']) and m['step'] == '8', (e.shape, m)
print('   python read', len(t), 'tensors, step', m['step'])"
fi

echo "== gradient accumulation: 2 microbatches of 2 == 1 batch of 4, bit for bit"
for preset in mixtral-tiny deepseek-tiny; do
    rm -f $T/a1.jsonl $T/a2.jsonl
    $TRAIN configs/$preset.yml $FAST steps=4 per_device_batch_size=4 metrics_file=$T/a1.jsonl >/dev/null 2>&1
    $TRAIN configs/$preset.yml $FAST steps=4 per_device_batch_size=2 gradient_accumulation_steps=2 \
        metrics_file=$T/a2.jsonl >/dev/null 2>&1
    l1=$(losses $T/a1.jsonl | tr '\n' ' '); l2=$(losses $T/a2.jsonl | tr '\n' ' ')
    check "$preset: losses ${l1}identical with accumulation (4 steps each)" \
        bash -c '[ "$(wc -w <<<"$1")" -eq 4 ] && [ "$1" = "$2" ]' _ "$l1" "$l2"
done

echo "== OpenMP's waiting threads: the environment's choice, or a spin count measured at start-up"
if [ "$(nproc)" -gt 1 ]; then   # (one core: one OpenMP thread, which never waits, and no line)
out=$($TRAIN configs/mixtral-tiny.yml steps=1 $FAST 2>&1)
check "with OMP_WAIT_POLICY=$OMP_WAIT_POLICY set, the trainer says it follows it" \
    bash -c 'printf "%s" "$1" | grep -qF "waiting OpenMP threads: as the environment says (OMP_WAIT_POLICY=$2)"' _ "$out" "$OMP_WAIT_POLICY"
# Unset, the trainer answers libgomp's GOMP_SPINCOUNT (core/omp_wait.c); libgomp's own
# listing of its settings (OMP_DISPLAY_ENV) must show the count the trainer printed, between
# the bounds of core/omp_wait.c.
out=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose "$TRAIN_BIN" configs/mixtral-tiny.yml steps=1 $FAST $TRAIN_ARGS 2>&1)
said=$(printf '%s\n' "$out" | sed -n 's/^waiting OpenMP threads: spin \([0-9]*\) times, then sleep (.*/\1/p')
used=$(printf '%s\n' "$out" | sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tail -1)
check "unset: the trainer chose ${said:-nothing} spins ($(printf '%s\n' "$out" | grep -o 'then sleep (.*')), libgomp uses ${used:-nothing}" \
    bash -c '[ -n "$1" ] && [ "$1" = "$2" ] && [ "$1" -ge 1000 ] && [ "$1" -le 20000 ]' _ "$said" "$used"
fi

echo "== data formats"
head -c 20000 README.md > $T/text.txt 2>/dev/null || true
printf 'hello meshmoe %.0s' $(seq 1 2000) >> $T/text.txt
check "prepare writes a token file" $TRAIN prepare $T/text.txt $T/tok.bin
out=$($TRAIN configs/mixtral-tiny.yml $FAST steps=2 dataset_path=$T/tok.bin 2>&1)
check "trains on the token file" grep -q "eval loss" <<<"$out"
out2=$($TRAIN configs/mixtral-tiny.yml $FAST steps=2 dataset_path=$T/text.txt 2>&1)
check "token file and raw text give the same losses" \
    cmp -s <(grep '^step' <<<"$out" | sed 's/|[^|]*ms.*//') <(grep '^step' <<<"$out2" | sed 's/|[^|]*ms.*//')

echo "== bad input: one clear message, exit 1, nothing half-written"
C=configs/mixtral-tiny.yml
expect_error "unknown key" "did you mean 'num_experts_per_tok'" $TRAIN $C num_expert_per_tok=2
expect_error "unknown key far from every key: no suggestion" "unknown config key 'bogus' (./train --help-config lists them all)" \
    $TRAIN $C bogus=1
expect_error "unknown key in a preset" "did you mean 'base_emb_dim'" bash -c "printf 'base_emb_dims: 64\n' > $T/bad.yml; $TRAIN $T/bad.yml"
expect_error "wrong value type" "wants an integer" $TRAIN $C base_emb_dim=big
expect_error "wrong bool" "wants true or false" $TRAIN $C sparse_matmul=maybe
expect_error "heads not dividing" "must divide base_num_query_heads" $TRAIN $C base_num_kv_heads=3
expect_error "K > E" "cannot exceed num_experts" $TRAIN $C num_experts_per_tok=5
expect_error "groups not dividing E" "must divide num_experts" $TRAIN configs/deepseek-tiny.yml n_routing_groups=3
expect_error "missing config file" "cannot open config file" $TRAIN $T/nope.yml
expect_error "missing data file" "nope.bin" $TRAIN $C dataset_path=$T/nope.bin
python3 - "$T" <<'PY'
import struct, sys
d = sys.argv[1]
hdr = [0] * 256; hdr[0] = 20240520; hdr[1] = 1; hdr[2] = 5000
open(f"{d}/trunc.bin", "wb").write(struct.pack("256i", *hdr) + b"\x01\x00" * 100)
hdr[0] = 12345; hdr[2] = 100
open(f"{d}/magic.bin", "wb").write(struct.pack("256i", *hdr) + b"\x01\x00" * 100)
PY
expect_error "truncated token file" "trunc.bin" $TRAIN $C dataset_path=$T/trunc.bin
expect_error "wrong magic" "magic" $TRAIN $C dataset_path=$T/magic.bin
$TRAIN configs/mixtral-tiny.yml $FAST steps=1 save_checkpoint=$T/small.safetensors >/dev/null 2>&1
expect_error "checkpoint from another config" "base_emb_dim is 128 in the checkpoint, 64 in this run" \
    $TRAIN $C $FAST steps=1 base_emb_dim=64 load_checkpoint=$T/small.safetensors
expect_error "checkpoint that is not one" "checkpoint" $TRAIN $C $FAST load_checkpoint=$T/text.txt
rm -f $T/good.safetensors
expect_error "non-finite loss or gradient names the step" "at step 1 (loss" \
    $TRAIN $C $FAST steps=20 learning_rate=1e30 warmup_steps_fraction=0 save_checkpoint=$T/good.safetensors checkpoint_period=1
# It loads with the run's own config (checkpoint_check), and the resumed run meets the same step.
out=$($TRAIN $C $FAST steps=20 learning_rate=1e30 warmup_steps_fraction=0 load_checkpoint=$T/good.safetensors 2>&1); rc=$?
check "the last good checkpoint is kept and loads: resumed at step 1, stopped again at step 1 (exit $rc)" \
    bash -c '[ "$1" -eq 1 ] && grep -q "resumed from .* at step 1$" <<<"$2" && grep -q "at step 1 (loss" <<<"$2"' _ "$rc" "$out"
check "no temporary checkpoint left after the failure" [ ! -e $T/good.safetensors.tmp ]

summary
