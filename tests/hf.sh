#!/usr/bin/env bash
# tests/hf.sh: ./train export-hf and load_hf=DIR (trainer/hf.c). For both tiny presets: train
# 3 steps (DeepSeek with a fast routing-bias update, so the biases are far from 0), export,
# load the export into a fresh run and compare every weight and routing bias it starts from
# (the parity dump's `param/` and `state/` tensors: the state before any step) with the
# checkpoint's, bit for bit. mixtral-tiny's head_dim 32 makes HF's query kernel inexact
# (times sqrt(32)), so this also covers the exact kernels written beside it; without them
# load_hf divides, and the kernels come back within 1 ulp. DeepSeek's export is also cut to
# bfloat16 (as published models often are) and loaded; both rewritten in the other forms
# published checkpoints have (tests/hf_forms.py: a tensor per expert, FP8 with block scales,
# DeepSeek's multi-token prediction layer) load the same weights. Then the refusals.
# Needs python3 (standard library only). Does not need transformers: make hf-check does.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-hf.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=3 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=32 per_device_batch_size=2 log_period=100"

# compare A PREFIX_A B PREFIX_B [ulps]: tests/st_tool.py's `match` (see there).
compare() { python3 tests/st_tool.py match "$@"; }
# same_tensors A B: "the same tensors" when ./train describe's JSON files A and B list the same
# parameters and state, "other tensors" otherwise.
same_tensors() {
    python3 -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:3]); print("the same tensors" if (a["params"], a["state"]) == (b["params"], b["state"]) else "other tensors")' "$1" "$2"
}
# older WHAT HF CKPT: HF's config.json rewritten as older files give it (tests/st_tool.py
# older-config) gives hf-preset the same config as the original (./train describe prints every
# key's value), and loads CKPT's weights bit for bit.
older() {
    local what=$1 hf=$2 ck=$3 r
    rm -rf $T/old $T/dg && cp -r $hf $T/old && python3 tests/st_tool.py older-config $T/old/config.json
    if $TRAIN hf-preset $hf > $T/new.yml 2> $T/gen.err && $TRAIN hf-preset $T/old > $T/old.yml 2>> $T/gen.err &&
       $TRAIN $T/old.yml $FAST load_hf=$T/old dump_parity=$T/dg parity_steps=1 > $T/load.out 2>&1; then
        r=$(compare $ck params/ $T/dg/dump.safetensors param/ 2>&1)
        check "$what gives the same config and loads: $r" \
            bash -c 'printf "%s" "$1" | grep -q bit-identical && cmp -s <(./train describe $2) <(./train describe $3)' \
            _ "$r" $T/new.yml $T/old.yml
    else
        fail "$what: $(tail -1 $T/gen.err; grep meshmoe: $T/load.out | tail -1)"
    fi
    rm -rf $T/old $T/dg
}

# published PRESET HF CK: the forms published checkpoints have (tests/hf_forms.py) load the
# same weights: a tensor per expert and projection (Mixtral-8x7B's names, DeepSeek-V3's), with
# DeepSeek's multi-token prediction layer after the last (left out, as transformers does); and
# FP8 weights with a float32 scale per block of 16 x 24, ragged at the edges of every
# projection here, and (Mixtral) every tensor F16, which must load as the F32 values Python
# decodes them to (hf_forms.py's own decoding, written beside those files), bit for bit.
published() {
    local preset=$1 hf=$2 ck=$3 r form
    rm -rf $T/pe $T/pe2 && cp -r $hf $T/pe && python3 tests/hf_forms.py per-expert $T/pe
    # export-hf's own per-expert form: the tensors hf_forms.py makes from the fused export.
    $TRAIN export-hf $ck $T/pe2 per-expert > $T/exp.out 2>&1 || fail "$preset: export-hf per-expert: $(tail -1 $T/exp.out)"
    r=$(python3 tests/st_tool.py same $T/pe/model.safetensors $T/pe2/model.safetensors 2>&1)
    said=$(grep -o '[0-9]* tensors, a tensor per expert' $T/exp.out)
    check "$preset: export-hf CKPT DIR per-expert writes them: $r (it says: $said)" \
        sh -c 'printf "%s" "$1" | grep -q "the same bytes" && [ "${1%% *}" = "${4%% *}" ] && cmp -s $2/config.json $3/config.json' \
        _ "$r" $T/pe $T/pe2 "$said"
    rm -rf $T/pe2
    [ $preset = deepseek-tiny ] && python3 tests/hf_forms.py mtp $T/pe
    if $TRAIN configs/$preset.yml $FAST load_hf=$T/pe dump_parity=$T/dp parity_steps=1 > $T/load.out 2>&1; then
        r="$(compare $ck params/ $T/dp/dump.safetensors param/ 2>&1); $(grep -o 'loaded the Hugging Face.*' $T/load.out)"
        check "$preset: a tensor per expert$([ $preset = deepseek-tiny ] && echo ' and the MTP layer'): $r" \
            sh -c 'printf "%s" "$1" | grep -q "bit-identical.*experts'"'"' tensors stacked" &&
                   { [ $2 = mixtral-tiny ] || printf "%s" "$1" | grep -q "multi-token prediction layer from 4 left out"; }' \
            _ "$r" $preset
    else
        fail "$preset: load_hf of a tensor per expert: $(grep meshmoe: $T/load.out | tail -1)"
    fi
    r=$($TRAIN configs/$preset.yml $FAST load_hf=$T/pe dry_run=true 2>&1 | grep -o 'checked the Hugging Face model [^:]*: .*')
    check "$preset: a dry run checks them and reads no value: ${r#*: }" grep -q "to stack.*a dry run: the tensors' names" <<<"$r"
    # FP8: the fused experts (3-D, a scale grid per expert) for Mixtral, the per-expert ones for DeepSeek.
    form=$hf; [ $preset = deepseek-tiny ] && form=$T/pe
    rm -rf $T/q $T/deq $T/dq $T/dd && mkdir $T/q && cp -r $form $T/deq && python3 tests/hf_forms.py fp8 $T/deq $T/q 16 24
    if $TRAIN configs/$preset.yml $FAST load_hf=$T/q dump_parity=$T/dq parity_steps=1 > $T/load.out 2>&1 &&
       $TRAIN configs/$preset.yml $FAST load_hf=$T/deq dump_parity=$T/dd parity_steps=1 > $T/deq.out 2>&1; then
        r="$(compare $T/dd/dump.safetensors param/ $T/dq/dump.safetensors param/ 2>&1); $(grep -o 'loaded the Hugging Face.*' $T/load.out)"
        check "$preset: FP8 with 16x24 blocks' scales, the values Python decodes: $r" \
            sh -c 'printf "%s" "$1" | grep -q "bit-identical.*FP8 tensors dequantized by their 16x24"' _ "$r"
    else
        fail "$preset: load_hf of FP8: $(grep meshmoe: $T/load.out $T/deq.out | tail -1)"
    fi
    if [ $preset = mixtral-tiny ]; then   # F16 (half precision), the values Python widens
        # (the FP8 dumps removed first: a failed F16 load must not leave them to be compared)
        rm -rf $T/q $T/deq $T/dq $T/dd && mkdir $T/q && cp -r $hf $T/deq && python3 tests/hf_forms.py f16 $T/deq $T/q
        if $TRAIN configs/$preset.yml $FAST load_hf=$T/q dump_parity=$T/dq parity_steps=1 > $T/load.out 2>&1 &&
           $TRAIN configs/$preset.yml $FAST load_hf=$T/deq dump_parity=$T/dd parity_steps=1 > $T/deq.out 2>&1; then
            r=$(compare $T/dd/dump.safetensors param/ $T/dq/dump.safetensors param/ 2>&1)
            check "$preset: F16 tensors, the values Python widens them to: $r" grep -q "bit-identical" <<<"$r"
        else
            fail "$preset: load_hf of F16: $(grep -h meshmoe: $T/load.out $T/deq.out | grep -v model, | tail -1)"
        fi
    fi
    rm -rf $T/dp $T/dq $T/dd $T/deq $T/q
}

for preset in mixtral-tiny deepseek-tiny; do
    echo "== $preset"
    C=configs/$preset.yml
    extra=""; [ $preset = deepseek-tiny ] && extra="routed_bias_update_rate=0.05"
    $TRAIN $C $FAST $extra save_checkpoint=$T/ck.safetensors > $T/train.out 2>&1 || fail "$preset: training: $(tail -1 $T/train.out)"
    out=$($TRAIN export-hf $T/ck.safetensors $T/hf 2>&1); echo "  $out"
    check "$preset: export-hf wrote config.json and model.safetensors" [ -s $T/hf/config.json -a -s $T/hf/model.safetensors ]
    $TRAIN $C $FAST $extra load_hf=$T/hf dump_parity=$T/d parity_steps=1 > $T/load.out 2>&1 || fail "$preset: load_hf: $(tail -1 $T/load.out)"
    r=$(compare $T/ck.safetensors params/ $T/d/dump.safetensors param/ 2>&1)
    check "$preset: load_hf gives back every weight: $r" grep -q "bit-identical" <<<"$r"
    # ./train hf-preset: the model keys from config.json alone; that preset loads the export
    # and describes the same tensors as the preset it was trained with.
    if $TRAIN hf-preset $T/hf > $T/gen.yml 2> $T/gen.err &&
       $TRAIN $T/gen.yml $FAST load_hf=$T/hf dump_parity=$T/dg parity_steps=1 > $T/load.out 2>&1; then
        r=$(compare $T/ck.safetensors params/ $T/dg/dump.safetensors param/ 2>&1)
        same=$(same_tensors <(./train describe $C) <(./train describe $T/gen.yml))
        check "$preset: ./train hf-preset's $(grep -vc '^#' $T/gen.yml) keys load the export ($r) and describe $same" \
            sh -c 'printf "%s" "$1" | grep -q bit-identical && [ "$2" = "the same tensors" ]' _ "$r" "$same"
    else
        fail "$preset: hf-preset: $(cat $T/gen.err | tail -1; grep meshmoe: $T/load.out | tail -1)"
    fi
    rm -rf $T/dg
    published $preset $T/hf $T/ck.safetensors
    if [ $preset = mixtral-tiny ]; then
        # config.json as older files give it (Mixtral-8x7B's): no head_dim (hidden / heads), no
        # router_jitter_noise or sliding_window (the class's 0.0 and null), rope_theta in place of
        # rope_parameters. Read as transformers reads it: the same preset, the same weights.
        older "$preset: an older config.json (no head_dim, rope_parameters, router_jitter_noise, sliding_window)" \
            $T/hf $T/ck.safetensors
    fi
    # On a sharded mesh each device takes its own part of each tensor (its shard, tensor and
    # expert pieces, stage): saved again after a step that moves nothing (learning rate 0,
    # no routing-bias update), the checkpoint's weights and biases bit for bit.
    meshes="ici_fsdp_parallelism=2 ici_tensor_parallelism=2 ici_expert_parallelism=2"
    [ $preset = mixtral-tiny ] && meshes="$meshes|ici_pipeline_parallelism=2 ici_fsdp_parallelism=2"
    IFS='|' read -ra each <<< "$meshes"
    for mesh in "${each[@]}"; do
        rm -f $T/mesh.safetensors
        $TRAIN $C $FAST $mesh load_hf=$T/hf steps=1 learning_rate=0 routed_bias_update_rate=0 \
            save_checkpoint=$T/mesh.safetensors > $T/mesh.out 2>&1 || fail "$preset: load_hf on $mesh: $(tail -1 $T/mesh.out)"
        r=$(compare $T/ck.safetensors params/ $T/mesh.safetensors params/ 2>&1)
        [ $preset = deepseek-tiny ] && r="$r; $(compare $T/ck.safetensors state/ $T/mesh.safetensors state/ 2>&1)"
        check "$preset: load_hf on $mesh, every device its part: $r" \
            sh -c '[ "$(printf "%s" "$1" | grep -o "bit-identical" | wc -l)" -eq "$2" ] && ! printf "%s" "$1" | grep -q differ' \
            _ "$r" "$([ $preset = deepseek-tiny ] && echo 2 || echo 1)"
    done
    if [ $preset = deepseek-tiny ]; then
        # HF's interleaved rotary pairs (rope_interleave true, the rows making them reordered:
        # tests/hf_forms.py interleave; make hf-check runs it in transformers) reordered back.
        rm -rf $T/il && cp -r $T/hf $T/il && python3 tests/hf_forms.py interleave $T/il
        $TRAIN $C $FAST $extra load_hf=$T/il dump_parity=$T/dil parity_steps=1 > $T/load.out 2>&1 ||
            fail "$preset: load_hf of interleaved pairs: $(grep meshmoe: $T/load.out | tail -1)"
        r="$(compare $T/ck.safetensors params/ $T/dil/dump.safetensors param/ 2>&1); $(grep -o 'the rotary pairs.*' $T/load.out)"
        check "$preset: rope_interleave true, the rotated rows interleaved: $r" grep -q "bit-identical.*to half-split" <<<"$r"
        rm -rf $T/il $T/dil
        r=$(compare $T/ck.safetensors state/ $T/d/dump.safetensors state/ 2>&1)
        check "$preset: and every routing bias: $r" grep -q "bit-identical" <<<"$r"
        # A sharded model (as transformers writes one over its max_shard_size): the tensors in
        # 3 files and model.safetensors.index.json's weight_map naming each one's file.
        cp -r $T/hf $T/hfs && python3 tests/st_tool.py shard $T/hfs 3
        $TRAIN $C $FAST $extra load_hf=$T/hfs dump_parity=$T/ds parity_steps=1 > $T/load.out 2>&1 ||
            fail "$preset: load_hf sharded: $(tail -1 $T/load.out)"
        r="$(compare $T/ck.safetensors params/ $T/ds/dump.safetensors param/ 2>&1); $(compare $T/ck.safetensors state/ $T/ds/dump.safetensors state/ 2>&1)"
        check "$preset: a model in 3 shards with an index loads every weight and routing bias: $r" \
            sh -c '[ "$(printf "%s" "$1" | grep -o "bit-identical" | wc -l)" -eq 2 ]' _ "$r"
        rm -rf $T/hfs $T/ds
        # A bfloat16 model (as many published ones are): every tensor cut to its top 16 bits.
        python3 - $T/hf/model.safetensors <<'EOF2'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); meta = h.pop("__metadata__", None)
out, data = {}, b""
for k, v in h.items():
    raw = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
    half = b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))   # little-endian: the high half
    out[k] = {"dtype": "BF16", "shape": v["shape"], "data_offsets": [len(data), len(data) + len(half)]}
    data += half
if meta: out["__metadata__"] = meta
head = json.dumps(out).encode(); head += b" " * (-len(head) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(head)) + head + data)
EOF2
        $TRAIN $C $FAST $extra load_hf=$T/hf dump_parity=$T/d parity_steps=1 > $T/load.out 2>&1 || fail "$preset: load_hf bf16: $(tail -1 $T/load.out)"
        r=$(python3 - $T/d/dump.safetensors <<'EOF2'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
words = [w for k, v in h.items() if k.startswith("param/")
         for w in struct.unpack(f"<{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}I", b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])]
print(f"{len(words)} weights, {sum(w & 0xFFFF != 0 for w in words)} of them with low bits set")
EOF2
)
        check "$preset: a bfloat16 export loads, each weight a bf16 value widened: $r" grep -q " 0 of them" <<<"$r"
        r=$(compare $T/ck.safetensors params/ $T/d/dump.safetensors param/ 65535 2>&1)
        check "$preset: ... the checkpoint's weights cut to bf16 (under 2^16 float32 ulps): $r" grep -q "tensors, at most" <<<"$r"
    else
        check "$preset: head_dim 32: the exact query kernels written beside" [ -s $T/hf/meshmoe_query_kernels.safetensors ]
        rm $T/hf/meshmoe_query_kernels.safetensors
        # (a dump of its own: the one above loaded the exact kernels. "at most 1": 0 would say
        # that the division's path was not taken.)
        rm -rf $T/d
        if $TRAIN $C $FAST load_hf=$T/hf dump_parity=$T/d parity_steps=1 > $T/load.out 2>&1; then
            r=$(compare $T/ck.safetensors params/ $T/d/dump.safetensors param/ 1 2>&1)
            check "$preset: without them, q_proj / sqrt(32) comes back within 1 ulp: $r" grep -q "at most 1 ulp" <<<"$r"
        else
            fail "$preset: load_hf without the exact query kernels: $(grep meshmoe: $T/load.out | tail -1)"
        fi
    fi
    rm -rf $T/hf $T/d
done

echo "== DeepSeek-V3's older config.json: yarn as rope_scaling, without truncate or attention_factor"
YARN="rope_type=yarn original_max_position_embeddings=1024 rope_factor=8 max_position_embeddings=163840"
if $TRAIN configs/deepseek-tiny.yml $FAST steps=1 $YARN save_checkpoint=$T/dy.st > $T/train.out 2>&1 &&
   $TRAIN export-hf $T/dy.st $T/dy > /dev/null 2>&1; then
    older "deepseek-tiny, yarn: an older config.json" $T/dy $T/dy.st
    # transformers' yarn takes `beta_fast or 32`, `beta_slow or 1` and makes a null
    # attention_factor from the others (modeling_rope_utils.py): such a file is the same model.
    rm -rf $T/dz && cp -r $T/dy $T/dz && python3 - $T/dz/config.json <<'EOF2'
import json, sys
c = json.load(open(sys.argv[1])); r = c["rope_parameters"]
assert (r["beta_fast"], r["beta_slow"]) == (32, 1), r
r.update(beta_fast=0, beta_slow=None, attention_factor=None)
json.dump(c, open(sys.argv[1], "w"))
EOF2
    if $TRAIN hf-preset $T/dy > $T/y1.yml 2> $T/gen.err && $TRAIN hf-preset $T/dz > $T/y2.yml 2>> $T/gen.err &&
       $TRAIN $T/y2.yml $FAST load_hf=$T/dz steps=1 > $T/load.out 2>&1; then
        check "deepseek-tiny, yarn: beta_fast 0, beta_slow and attention_factor null read as transformers reads them (the same config, and it loads)" \
            cmp -s <(./train describe $T/y1.yml) <(./train describe $T/y2.yml)
    else
        fail "deepseek-tiny, yarn, beta_fast 0: $(tail -1 $T/gen.err; grep meshmoe: $T/load.out | tail -1)"
    fi
else
    fail "deepseek-tiny, yarn: $(grep meshmoe: $T/train.out | tail -1)"
fi
rm -rf $T/dy

echo "== DeepSeek-V2 (routed_score_func=softmax): DeepseekV2ForCausalLM, its pairs interleaved"
# HF's DeepseekV2 routes by a softmax over all experts (topk_method greedy, the k
# probabilities times routed_scaling_factor, no selection bias) and rotates interleaved pairs
# always: export-hf reorders the rotated rows (meshmoe's default RoPE rotates halves) and
# load_hf reorders them back. make hf-check runs these exports in transformers.
V2="routed_score_func=softmax routed_bias=false n_routing_groups=-1 topk_routing_group=-1"
if $TRAIN configs/deepseek-tiny.yml $FAST $V2 save_checkpoint=$T/v2.st > $T/train.out 2>&1 &&
   $TRAIN export-hf $T/v2.st $T/v2 > $T/exp.out 2>&1; then
    r=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["architectures"][0], c["model_type"], c["topk_method"], c["norm_topk_prob"], "rope_interleave" in c)' $T/v2/config.json)
    check "deepseek-tiny, softmax routing: exported as $r (no rope_interleave key)" [ "$r" = "DeepseekV2ForCausalLM deepseek_v2 greedy False False" ]
    $TRAIN configs/deepseek-tiny.yml $FAST $V2 load_hf=$T/v2 dump_parity=$T/dv2 parity_steps=1 > $T/load.out 2>&1 ||
        fail "deepseek-tiny, V2: load_hf: $(grep meshmoe: $T/load.out | tail -1)"
    r="$(compare $T/v2.st params/ $T/dv2/dump.safetensors param/ 2>&1); $(grep -o 'the rotary pairs.*' $T/load.out)"
    check "deepseek-tiny, V2: load_hf gives back every weight, its rotated rows reordered: $r" grep -q "bit-identical.*to half-split" <<<"$r"
    if $TRAIN hf-preset $T/v2 > $T/v2.yml 2> $T/gen.err &&
       $TRAIN $T/v2.yml $FAST load_hf=$T/v2 dump_parity=$T/dv3 parity_steps=1 > $T/load.out 2>&1; then
        r=$(compare $T/v2.st params/ $T/dv3/dump.safetensors param/ 2>&1)
        same=$(same_tensors <(./train describe configs/deepseek-tiny.yml $V2) <(./train describe $T/v2.yml))
        check "deepseek-tiny, V2: hf-preset (routed_score_func: $(grep -o 'routed_score_func: .*' $T/v2.yml | cut -d' ' -f2)) loads the export ($r) and describes $same" \
            sh -c 'printf "%s" "$1" | grep -q bit-identical && [ "$2" = "the same tensors" ]' _ "$r" "$same"
    else
        fail "deepseek-tiny, V2: hf-preset: $(tail -1 $T/gen.err; grep meshmoe: $T/load.out | tail -1)"
    fi
    rm -rf $T/v2p && cp -r $T/v2 $T/v2p && python3 tests/hf_forms.py per-expert $T/v2p
    $TRAIN configs/deepseek-tiny.yml $FAST $V2 load_hf=$T/v2p dump_parity=$T/dv4 parity_steps=1 > $T/load.out 2>&1
    r=$(compare $T/v2.st params/ $T/dv4/dump.safetensors param/ 2>&1)
    check "deepseek-tiny, V2: a tensor per expert (DeepSeek-V2's published form): $r" grep -q "bit-identical" <<<"$r"
    # A config.json as DeepSeek-V2-Lite publishes it (yarn as rope_scaling, q_lora_rank null,
    # n_group 1 with topk_method greedy, keys transformers does not read): its preset plans the
    # model of 15,706,484,224 parameters that its model card gives as 15.7B.
    mkdir -p $T/lite && python3 - $T/v2/config.json $T/lite/config.json <<'EOF2'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=2048, intermediate_size=10944, kv_lora_rank=512, max_position_embeddings=163840,
         moe_intermediate_size=1408, moe_layer_freq=1, n_group=1, topk_group=1, n_routed_experts=64, n_shared_experts=2,
         num_attention_heads=16, num_experts_per_tok=6, num_hidden_layers=27, num_key_value_heads=16, q_lora_rank=None,
         qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, routed_scaling_factor=1.0, scoring_func="softmax",
         seq_aux=True, aux_loss_alpha=0.001, vocab_size=102400, rope_theta=10000, torch_dtype="bfloat16",
         rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                       "original_max_position_embeddings": 4096, "type": "yarn"})
for k in ("rope_parameters", "dtype"):
    c.pop(k)
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF2
    if $TRAIN hf-preset $T/lite > $T/lite.yml 2> $T/gen.err; then
        r=$($TRAIN $T/lite.yml dry_run=true max_target_length=64 per_device_batch_size=1 2>&1 | grep -o '^parameters: [0-9]*')
        check "DeepSeek-V2-Lite's config.json: hf-preset's model has $r" [ "$r" = "parameters: 15706484224" ]
    else
        fail "DeepSeek-V2-Lite's config.json: hf-preset: $(tail -1 $T/gen.err)"
    fi
    # DeepSeek-V2 (236B) as published: 160 experts in 8 groups, 3 kept, 6 per token
    # (group_limited_greedy), one dense layer first. 235,741,434,880 parameters: the sizes of
    # its tensors added up from these keys by hand (embedding and head 2 x 102400 x 5120, the
    # final norm 5120; per layer MLA 149,227,520 and 2 norms of 5120; 59 MoE FFNs of
    # 3,822,878,720 and one dense of 188,743,680), which its model card rounds to 236B.
    mkdir -p $T/v2full && python3 - $T/lite/config.json $T/v2full/config.json <<'EOF2'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=5120, intermediate_size=12288, moe_intermediate_size=1536, n_routed_experts=160, n_group=8,
         topk_group=3, topk_method="group_limited_greedy", num_attention_heads=128, num_key_value_heads=128,
         num_hidden_layers=60, first_k_dense_replace=1, q_lora_rank=1536, routed_scaling_factor=16.0)
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF2
    if $TRAIN hf-preset $T/v2full > $T/v2full.yml 2> $T/gen.err; then
        r=$($TRAIN $T/v2full.yml dry_run=true max_target_length=64 per_device_batch_size=1 2>&1 | grep -o '^parameters: [0-9]*')
        g=$(grep -E '^(n_routing_groups|topk_routing_group):' $T/v2full.yml | tr '\n' ' ')
        check "DeepSeek-V2's config.json (group_limited_greedy): hf-preset's model has $r, ${g% }" \
            [ "$r ${g% }" = "parameters: 235741434880 n_routing_groups: 8 topk_routing_group: 3" ]
        same=$(same_tensors <(./train describe configs/deepseek-v2-236b.yml) <(./train describe $T/v2full.yml))
        check "configs/deepseek-v2-236b.yml and the preset of DeepSeek-V2's config.json describe $same" \
            [ "$same" = "the same tensors" ]
    else
        fail "DeepSeek-V2's config.json: hf-preset: $(tail -1 $T/gen.err)"
    fi
    sed 's/"topk_method": "greedy"/"topk_method": "noaux_tc"/' $T/lite/config.json > $T/lite/c2 && mv $T/lite/c2 $T/lite/config.json
    expect_error "hf-preset of a DeepSeek-V2 model routed by V3's noaux_tc" 'topk_method "noaux_tc"' $TRAIN hf-preset $T/lite
    sed 's/"n_group": 8/"n_group": null/' $T/v2full/config.json > $T/v2full/c2 && mv $T/v2full/c2 $T/v2full/config.json
    expect_error "hf-preset of group_limited_greedy without its groups" 'needs n_group and topk_group' $TRAIN hf-preset $T/v2full
else
    fail "deepseek-tiny, V2: $(grep meshmoe: $T/train.out $T/exp.out | tail -1)"
fi
rm -rf $T/v2 $T/v2p $T/lite $T/v2full $T/dv2 $T/dv3 $T/dv4

echo "== refusals: one clear message, exit 1"
# early WHAT PHRASE COMMAND...: expect_error, said before the model is built (the run printed
# no 'init peak' line, device 0's once its model is initialised) and with nothing created.
early() {
    local before after; before=$(find $T ! -path $T/early.out | sort)
    EXPECT_STDOUT=$T/early.out expect_error "$@"
    after=$(find $T ! -path $T/early.out | sort)
    check "  ... before the model is built, nothing created" \
        bash -c '! grep -q "^init peak" "$1" && [ "$2" = "$3" ]' _ $T/early.out "$before" "$after"
}
$TRAIN configs/mixtral-tiny.yml $FAST steps=1 save_checkpoint=$T/mx.safetensors > /dev/null 2>&1
$TRAIN export-hf $T/mx.safetensors $T/hf > /dev/null 2>&1
early "config.json against the run's config" '"num_experts_per_tok": 2, this run' \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/hf num_experts_per_tok=1
early "a Mixtral export loaded as DeepSeek" '"architectures"' $TRAIN configs/deepseek-tiny.yml $FAST load_hf=$T/hf
early "no such directory" "$T/none/config.json" $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/none
expect_error "load_hf with load_checkpoint" "load_hf and load_checkpoint" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/hf load_checkpoint=$T/mx.safetensors
# Sharded models: the index's files are plain names beside it, each there, each tensor in one.
shards() {   # shards NAME: a copy of the export in 2 shards, at $T/NAME
    rm -rf $T/$1 && cp -r $T/hf $T/$1 && python3 tests/st_tool.py shard $T/$1 2
}
shards s1 && rm $T/s1/model-00002-of-00002.safetensors
early "a shard the index names is missing" "model-00002-of-00002.safetensors" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/s1
shards s2 && sed -i '0,/"model-00001-of-00002.safetensors"/s//"..\/model-00001-of-00002.safetensors"/' $T/s2/model.safetensors.index.json
expect_error "an index naming a file outside its folder" "a shard is a file name beside the index" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/s2
shards s3 && cp $T/s3/model-00001-of-00002.safetensors $T/s3/extra.safetensors &&
    sed -i 's/"weight_map": {/"weight_map": {"extra": "extra.safetensors",/' $T/s3/model.safetensors.index.json
early "a tensor in two shards" "is in both" $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/s3
shards s4
expect_error "a save over a shard of the model being loaded" "model-00002-of-00002.safetensors" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/s4 save_checkpoint=$T/s4/model-00002-of-00002.safetensors
check "  ... and the shard is as it was" python3 tests/st_tool.py same $T/s4/model-00002-of-00002.safetensors \
    $T/s2/model-00002-of-00002.safetensors
# The published forms: what is missing or left over, named.
rm -rf $T/m1 && cp -r $T/hf $T/m1 && python3 tests/hf_forms.py per-expert $T/m1 &&
    python3 tests/hf_forms.py drop $T/m1 model.layers.1.block_sparse_moe.experts.2.w3.weight
early "a tensor per expert, one missing" "'model.layers.1.block_sparse_moe.experts.2.w3.weight'" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/m1
early "  ... and in a dry run" "'model.layers.1.block_sparse_moe.experts.2.w3.weight'" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/m1 dry_run=true
rm -rf $T/m2 && cp -r $T/hf $T/m2 && python3 tests/st_tool.py add-tensor $T/hf/model.safetensors $T/m2/model.safetensors \
    model.layers.0.mlp.extra.weight
early "a tensor the model does not read" "'model.layers.0.mlp.extra.weight', which this config does not read" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/m2
# Weights of another shape under a config.json that agrees with the run: their headers say so.
$TRAIN configs/mixtral-tiny.yml $FAST steps=1 base_mlp_dim=128 save_checkpoint=$T/narrow.safetensors > /dev/null 2>&1
rm -rf $T/m7 && $TRAIN export-hf $T/narrow.safetensors $T/m7 > /dev/null 2>&1 && cp $T/hf/config.json $T/m7/config.json
early "a tensor of another shape" "'model.layers.0.mlp.experts.gate_up_proj' has shape [4,256,128], this config needs [4,512,128]" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/m7
rm -rf $T/m7 $T/narrow.safetensors
rm -rf $T/m3 $T/m4 $T/m5 $T/m6 $T/deq && mkdir $T/m3 && cp -r $T/hf $T/deq && python3 tests/hf_forms.py fp8 $T/deq $T/m3 16 16
cp -r $T/m3 $T/m4 && python3 tests/hf_forms.py drop $T/m4 model.layers.2.self_attn.o_proj.weight_scale_inv
early "FP8 without its scales" "'model.layers.2.self_attn.o_proj.weight_scale_inv'" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/m4
cp -r $T/m3 $T/m5 && python3 - $T/m5/config.json <<'EOF2'
import json, sys
c = json.load(open(sys.argv[1])); del c["quantization_config"]; json.dump(c, open(sys.argv[1], "w"))
EOF2
early "FP8 without quantization_config" "is F8_E4M3 and config.json has no quantization_config" \
    $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/m5
cp -r $T/m3 $T/m6 && sed -i 's/"quant_method": "fp8"/"quant_method": "bitsandbytes"/' $T/m6/config.json
early "another quantization" 'quant_method "bitsandbytes"' $TRAIN configs/mixtral-tiny.yml $FAST load_hf=$T/m6
rm -rf $T/m1 $T/m2 $T/m3 $T/m4 $T/m5 $T/m6 $T/deq
# hf-preset: what meshmoe cannot express, named.
mkdir -p $T/p1 $T/p2 $T/p3
sed 's/"mixtral"/"llama"/' $T/hf/config.json > $T/p1/config.json
expect_error "hf-preset of another kind of model" 'model_type "llama"' $TRAIN hf-preset $T/p1
sed 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' $T/hf/config.json > $T/p2/config.json
expect_error "hf-preset of tied embeddings" '"tie_word_embeddings": true' $TRAIN hf-preset $T/p2
sed 's/"rope_type": "default"/"rope_type": "llama3"/' $T/hf/config.json > $T/p3/config.json
expect_error "hf-preset of another RoPE" 'rope type "llama3"' $TRAIN hf-preset $T/p3
$TRAIN configs/mixtral-tiny.yml $FAST steps=1 rope_min_timescale=2 save_checkpoint=$T/r.safetensors > /dev/null 2>&1
expect_error "a model HF cannot express" "rope_min_timescale=2" $TRAIN export-hf $T/r.safetensors $T/r
check "  ... and nothing written for it" [ ! -e $T/r ]
expect_error "not a checkpoint" "$T/none.safetensors" $TRAIN export-hf $T/none.safetensors $T/x
summary
