#!/usr/bin/env bash
# tests/hf/check.sh: what `make hf-check` runs. For both tiny presets, with the default RoPE
# and with yarn's: train 3 steps
# (DeepSeek with routed_bias_update_rate=0.05, so the routing biases are far from 0), export
# with ./train export-hf, dump meshmoe's own logits and expert choices on one batch from the
# same checkpoint (dump_parity, parity_steps=1), and let tests/hf/check.py run the export in
# transformers' MixtralForCausalLM / DeepseekV3ForCausalLM on that batch and compare (and
# DeepseekV2ForCausalLM: deepseek-tiny with softmax routing, default RoPE and yarn's with
# expert groups), and compare meshmoe's step-0 gradients with torch's autograd through the
# same model, tensor by tensor (tests/hf/grads.py). Then
# transformers saves the model (save_pretrained: its own config.json and shards of at most 1 MB
# with their index), and meshmoe reads that back with a preset made from that config.json
# (./train hf-preset) and load_hf: every weight and routing bias the
# checkpoint's (mixtral-tiny's query kernels within 1 ulp: HF's q_proj is the kernel times
# sqrt(32), and transformers does not keep meshmoe's exact kernels beside it). For the two
# presets without yarn, also the forms published checkpoints have: a tensor per expert, FP8
# weights with their blocks' scales, DeepSeek's multi-token prediction layer (tests/hf_forms.py),
# run by transformers and by meshmoe's load_hf. Then the defaults load_hf takes for keys a
# config.json leaves out, against transformers' classes (tests/hf/defaults.py); meshmoe's greedy
# sample (decode_sampling_strategy=greedy, prompt=ROMEO:\n) against transformers' greedy
# decoding of the export, 57 tokens of each family (tests/hf/generate.py); and
# tests/hf/tokens.sh: data/hf_tokens.py's
# token files from a Hugging Face tokenizer, read by the trainer.
# PYTHON: an interpreter with torch, transformers, safetensors (default: the .venv-hf that
# tests/hf/ensure_venv.sh creates). Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."
source tests/lib.sh
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(bash tests/hf/ensure_venv.sh) || { echo "hf-check: no Python environment (see above)"; exit 1; }
fi
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-hfcheck.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=64 per_device_batch_size=2 log_period=100"
# rope_type=yarn as DeepSeek-V3 has it (config.json's rope_parameters; MLA's softmax scale
# times mscale^2, the pairs interleaved) and half-split on Mixtral.
YARN="rope_type=yarn original_max_position_embeddings=1024 rope_factor=8"
# tally WHAT COMMAND...: the command's ok and FAIL lines shown, its `N passed, N failed` added
# to this script's; 1 (and a failure) when it did not get that far.
tally() {
    local what=$1 out line f; shift
    out=$("$@" 2>&1)
    printf '%s\n' "$out" | grep -E '^  (ok|FAIL) ' || printf '%s\n' "$out" | tail -5
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$')
    [ -n "$line" ] || { fail "$what: did not finish: $(printf '%s\n' "$out" | tail -1)"; return 1; }
    PASSED=$((PASSED + ${line%% *})); f=${line#* passed, }; FAILED=$((FAILED + ${f%% *}))
}
V2="routed_score_func=softmax routed_bias=false n_routing_groups=-1 topk_routing_group=-1"
for run in mixtral-tiny deepseek-tiny mixtral-tiny:yarn deepseek-tiny:yarn deepseek-tiny:interleave deepseek-tiny:eps \
           deepseek-tiny:v2 deepseek-tiny:v2yarn-groups; do
    preset=${run%%:*}
    echo "== $run"
    C=configs/$preset.yml
    extra=""; [ $preset = deepseek-tiny ] && extra="routed_bias_update_rate=0.05"
    biases=0; [ $preset = deepseek-tiny ] && biases=1
    # DeepseekV2ForCausalLM: softmax routing, no selection bias, interleaved pairs (rotated
    # halves reordered by export-hf with the default RoPE; as they are under yarn's
    # rope_interleave), and under yarn a full-rank query (q_proj), as DeepSeek-V2-Lite has, and
    # deepseek-tiny's 4 expert groups ranked by their best probability (DeepSeek-V2 236B's
    # topk_method group_limited_greedy), one kept: as many kept as experts per token would
    # always keep the groups of the top k, the same experts as without groups.
    case $run in *:v2*) extra=$V2; biases=0;; esac
    [ $run = deepseek-tiny:v2yarn-groups ] && extra="routed_score_func=softmax routed_bias=false topk_routing_group=1"
    [ $run = deepseek-tiny:v2yarn-groups ] && extra="$extra $YARN max_position_embeddings=163840 q_lora_rank=0"
    [ $run = mixtral-tiny:yarn ] && extra="$YARN rope_interleave=false"
    [ $run = deepseek-tiny:yarn ] && extra="$extra $YARN max_position_embeddings=163840"
    # rms_norm_eps far from the MLA latent norms' 1e-6, which transformers takes whatever it is
    # (a latent epsilon of 0.01 there moves the logits by 0.88; of 1e-5, by only 2e-5).
    [ $run = deepseek-tiny:eps ] && extra="$extra normalization_layer_epsilon=0.01 mla_norm_epsilon=1e-6"
    if ! { $TRAIN $C $FAST $extra save_checkpoint=$T/ck.safetensors && $TRAIN export-hf $T/ck.safetensors $T/hf &&
           $TRAIN $C $FAST $extra load_checkpoint=$T/ck.safetensors dump_parity=$T/d parity_steps=1; } > $T/run.out 2>&1; then
        fail "$run: $(tail -1 $T/run.out)"; continue
    fi
    # A random direction in meshmoe's layout, exported as the weights are: check.py compares
    # meshmoe's gradients with torch's autograd through transformers' model by their inner
    # products with it (tests/hf/grads.py).
    rm -rf $T/dir.safetensors $T/hfd
    if ! { "$PYTHON" tests/hf/grads.py $T/ck.safetensors $T/dir.safetensors 1 &&
           $TRAIN export-hf $T/dir.safetensors $T/hfd; } > $T/run.out 2>&1; then
        fail "$run: the direction's export: $(tail -1 $T/run.out)"; continue
    fi
    if [ $run = mixtral-tiny -o $run = deepseek-tiny:yarn ]; then
        # config.json as older files give it (Mixtral-8x7B's: no head_dim, router_jitter_noise,
        # sliding_window or rope_parameters, but rope_theta; DeepSeek-V3's: yarn as rope_scaling
        # without truncate or attention_factor): transformers reads the same model from it, as
        # trainer/hf_defaults.c says (tests/hf.sh: meshmoe does).
        python3 tests/st_tool.py older-config $T/hf/config.json
        echo "  (config.json in the older form)"
    fi
    if [ $run = deepseek-tiny:interleave ]; then
        # HF's DeepseekV3 rotates interleaved pairs where config.json says rope_interleave (its
        # class's default): the same model with the rotated rows of q_b_proj and
        # kv_a_proj_with_mqa reordered (tests/hf_forms.py interleave), which load_hf reorders back.
        python3 tests/hf_forms.py interleave $T/hf
        python3 tests/hf_forms.py interleave $T/hfd
        echo "  (rope_interleave true, the rotated rows reordered)"
    fi
    tally "$run" "$PYTHON" tests/hf/check.py $T/hf $T/d/dump.safetensors $T/saved --grads $T/hfd $T/dir.safetensors ||
        continue
    if [ $run = mixtral-tiny -o $run = deepseek-tiny ]; then
        # The forms published checkpoints have (tests/hf_forms.py): a tensor per expert and
        # projection as Mixtral-8x7B and DeepSeek-V3 are published, DeepSeek's multi-token
        # prediction layer after the last, every projection FP8 with a float32 scale per 16 x 16
        # block (transformers needs blocks that divide the weights). transformers stacks and
        # dequantizes them itself; meshmoe's load_hf of the same files must give its logits.
        rm -rf $T/pub $T/deq && cp -r $T/hf $T/deq && mkdir $T/pub && python3 tests/hf_forms.py per-expert $T/deq
        [ $preset = deepseek-tiny ] && python3 tests/hf_forms.py mtp $T/deq
        python3 tests/hf_forms.py fp8 $T/deq $T/pub 16 16
        if $TRAIN $C $FAST $extra load_hf=$T/pub dump_parity=$T/dpub parity_steps=1 > $T/load.out 2>&1; then
            echo "  (published forms: $(grep -o 'loaded the Hugging Face model [^:]*: .*' $T/load.out | sed 's/^[^:]*: //'))"
            tally "$run, published forms" "$PYTHON" tests/hf/check.py $T/pub $T/dpub/dump.safetensors
        else
            fail "$run: load_hf of the published forms: $(grep meshmoe: $T/load.out | tail -1)"
        fi
        rm -rf $T/pub $T/deq $T/dpub
    fi
    shards=$(ls $T/saved 2>/dev/null | grep -c '^model-.*\.safetensors$')
    # (its preset from transformers' own config.json: ./train hf-preset)
    if $TRAIN hf-preset $T/saved > $T/gen.yml 2> $T/load.out &&
       $TRAIN $T/gen.yml $FAST load_hf=$T/saved dump_parity=$T/l parity_steps=1 > $T/load.out 2>&1; then
        ulps=0; [ $preset = mixtral-tiny ] && ulps=1
        r=$(python3 tests/st_tool.py match $T/ck.safetensors params/ $T/l/dump.safetensors param/ $ulps 2>&1)
        [ $biases = 1 ] && r="$r; biases: $(python3 tests/st_tool.py match $T/ck.safetensors state/ $T/l/dump.safetensors state/ 2>&1)"
        check "$run: transformers' save_pretrained ($shards shards and their index) read back by ./train hf-preset's preset and load_hf: $r" \
            sh -c '[ "$2" -gt 1 ] && ! printf "%s" "$1" | grep -qi "differ\|missing\|no tensor" &&
                   [ "$(printf "%s" "$1" | grep -o "bit-identical\|at most [01] ulp" | wc -l)" -eq "$3" ]' \
            _ "$r" "$shards" "$((1 + biases))"
    else
        fail "$run: load_hf of transformers' save_pretrained: $(grep meshmoe: $T/load.out | tail -1)"
    fi
    rm -rf $T/hf $T/d $T/saved $T/l
done
echo "== greedy generation: meshmoe's sample against transformers' greedy decoding (tests/hf/generate.py)"
# 30 steps at a high rate (logits far from flat, few near ties), then the sample from the saved
# model with the prompt ROMEO:\n and greedy choices, 57 tokens: with the prompt's 7, the
# whole sequence is meshmoe's context (max_target_length 64) as it is transformers'.
for preset in mixtral-tiny deepseek-tiny; do
    C=configs/$preset.yml
    G="steps=30 learning_rate=1e-2"
    if $TRAIN $C $FAST $G save_checkpoint=$T/g.safetensors > $T/run.out 2>&1 &&
       $TRAIN export-hf $T/g.safetensors $T/ghf >> $T/run.out 2>&1 &&
       $TRAIN $C $FAST $G load_checkpoint=$T/g.safetensors sample_length=57 'prompt=ROMEO:\n' \
           decode_sampling_strategy=greedy > $T/run.out 2>&1; then
        sed -n '/^---- sample/,/^----$/{/^----/d;p;}' $T/run.out > $T/greedy.txt
        tally "$preset greedy" "$PYTHON" tests/hf/generate.py $T/ghf 82,79,77,69,79,58,10 $T/greedy.txt
    else
        fail "$preset greedy: $(grep meshmoe: $T/run.out | tail -1)"
    fi
    rm -rf $T/g.safetensors $T/ghf
done
echo "== trainer/hf_defaults.c: the config classes' defaults, as transformers has them (tests/hf/defaults.py)"
tally "tests/hf/defaults.py" "$PYTHON" tests/hf/defaults.py trainer/hf_defaults.c
echo "== data/hf_tokens.py: a text as a model's tokens (tests/hf/tokens.sh)"
PYTHON="$PYTHON" TRAIN="$TRAIN" tally "tests/hf/tokens.sh" bash tests/hf/tokens.sh
summary
