"""tests/hf/grads.py: meshmoe's gradients against PyTorch autograd through transformers' own model.

    grads.py CKPT OUT SEED      (the direction; check.py --grads compares)

meshmoe's backward pass is written by hand; transformers' classes (MixtralForCausalLM,
DeepseekV3ForCausalLM, DeepseekV2ForCausalLM) are code nobody here wrote, and torch
differentiates them. Both sides compute the gradient of the same loss at the same weights,
each in its own layout (export-hf transposes, stacks the experts' gate and up projections,
scales GQA's query by sqrt(head_dim), reorders rotated pairs for some classes). Rather than
undo those layouts here, which would repeat export-hf in Python, the check uses export-hf
itself: the layout change f is linear (mixtral's q_proj, times sqrt(32), up to one
rounding, 6e-8 relative: far below the bound), and the model is the same on both sides
(L_hf(f(W)) = L(W)), so for any direction D in meshmoe's layout

    <grad L(W), D> = <grad L_hf(f(W)), f(D)>.

This program writes CKPT again with every parameter replaced by Gaussian noise (SEED; the
config, the step and the routing biases kept), which `./train export-hf` turns into f(D).
tests/hf/check.py HF_DIR DUMP --grads F_D_DIR D_CKPT then runs the export of CKPT's weights in
transformers in float32 on DUMP's step-0 batch (`./train ... load_checkpoint=CKPT
dump_parity=DIR parity_steps=1`), takes torch's gradient of the mean cross entropy over the
batch's targets, and `gradients` below compares, for every HF tensor, its inner product with
f(D) against meshmoe's gradients (`c/grad/`, before clipping) with D. For Gaussian D the
difference of the two inner products, over the norm of meshmoe's gradient, is about the
gradients' relative L2 difference. A check for the loss, one for every trained HF tensor
having a meshmoe tensor and the other way round, and one a tensor (failures said one by
one, the passing ones in one line).
"""
import json
import re
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

# The relative difference of each tensor's inner products, and of the loss. Measured on the
# runs of tests/hf/check.sh (both tiny presets after 3 steps, float32 on both sides, 64 tokens
# a sequence): up to 4e-6 a tensor and 4e-7 for the loss (2026-12-08, Intel Xeon); the rest of
# the bound is headroom for BLAS and libm differences between machines, and a gradient wrong in
# one of its rows or experts moves it by far more.
TOL = 1e-4
LOSS_TOL = 1e-5

# meshmoe's parameter (after its layer's prefix) -> HF's (after "model.layers.<l>."). The
# experts' two input kernels are the two halves of HF's gate_up_proj, so both map to it.
LAYER = {
    "pre_self_attention_layer_norm/scale": "input_layernorm.weight",
    "post_self_attention_layer_norm/scale": "post_attention_layernorm.weight",
    "self_attention/query/kernel": "self_attn.q_proj.weight",
    "self_attention/key/kernel": "self_attn.k_proj.weight",
    "self_attention/value/kernel": "self_attn.v_proj.weight",
    "self_attention/out/kernel": "self_attn.o_proj.weight",
    "self_attention/wq_a/kernel": "self_attn.q_a_proj.weight",
    "self_attention/q_norm/scale": "self_attn.q_a_layernorm.weight",
    "self_attention/wq_b/kernel": "self_attn.q_b_proj.weight",
    "self_attention/wkv_a/kernel": "self_attn.kv_a_proj_with_mqa.weight",
    "self_attention/kv_norm/scale": "self_attn.kv_a_layernorm.weight",
    "self_attention/wkv_b/kernel": "self_attn.kv_b_proj.weight",
    "mlp/wi_0/kernel": "mlp.gate_proj.weight",
    "mlp/wi_1/kernel": "mlp.up_proj.weight",
    "mlp/wo/kernel": "mlp.down_proj.weight",
    "MoeBlock_0/gate/kernel": "mlp.gate.weight",
    "MoeBlock_0/wi_0": "mlp.experts.gate_up_proj",
    "MoeBlock_0/wi_1": "mlp.experts.gate_up_proj",
    "MoeBlock_0/wo": "mlp.experts.down_proj",
    "shared_experts/wi_0/kernel": "mlp.shared_experts.gate_proj.weight",
    "shared_experts/wi_1/kernel": "mlp.shared_experts.up_proj.weight",
    "shared_experts/wo/kernel": "mlp.shared_experts.down_proj.weight",
}
TOP = {
    "token_embedder/embedding": "model.embed_tokens.weight",
    "decoder/decoder_norm/scale": "model.norm.weight",
    "decoder/logits_dense/kernel": "lm_head.weight",
}


def hf_name(name, first_dense):
    """HF's name for meshmoe's parameter `name` (MaxText's unscanned path)."""
    if name in TOP:
        return TOP[name]
    m = re.match(r"decoder/(layers|dense_layers|moe_layers)_(\d+)/(?:DeepSeekMoeBlock_0/)?(.*)$", name)
    if not m or m.group(3) not in LAYER:
        raise KeyError(f"no Hugging Face name for meshmoe's '{name}'")
    layer = int(m.group(2)) + (first_dense if m.group(1) == "moe_layers" else 0)
    return f"model.layers.{layer}.{LAYER[m.group(3)]}"


def directions(ckpt, out, seed):
    """CKPT with its parameters replaced by N(0, 1) noise; everything else as it was."""
    with safe_open(ckpt, framework="numpy") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    rng = np.random.default_rng(seed)
    for k in sorted(tensors):
        if k.startswith("params/"):
            tensors[k] = rng.standard_normal(tensors[k].shape).astype(np.float32)
    save_file(tensors, out, metadata=meta)


def gradients(model, logits, dump, dirs_hf, dirs_ckpt, check):
    """torch's gradients of the mean cross entropy of `logits` (model's output on the dump's
    step-0 batch, with autograd on) against the dump's, by their inner products with the
    direction: D_CKPT's `params/` and its export F_D_DIR. check(ok, what) reports; returns the
    number of tensors that passed without a line of their own."""
    targets = torch.from_numpy(dump["batch/targets"][0].astype(np.int64)).reshape(-1)
    keep = targets >= 0   # (a target < 0 is not trained on)
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1])[keep], targets[keep])
    loss.backward()
    name = type(model).__name__
    c_loss, c_aux = float(dump["c/loss"]), float(dump["c/aux_loss"])
    rel = abs(loss.item() - c_loss) / abs(c_loss)
    check(c_aux == 0 and rel <= LOSS_TOL, f"{name}: the loss {loss.item():.7f}, meshmoe's {c_loss:.7f} (relative "
          f"{rel:.1e}, tolerance {LOSS_TOL:g}; meshmoe's load-balance term {c_aux:g}, which must be 0 here)")
    d_mt = {k[len("params/"):]: v.astype(np.float64) for k, v in load_file(dirs_ckpt).items() if k.startswith("params/")}
    with safe_open(f"{dirs_hf}/model.safetensors", framework="numpy") as f:
        d_hf = {k: f.get_tensor(k).astype(np.float64) for k in f.keys()}
    with safe_open(dirs_ckpt, framework="numpy") as f:
        cfg = json.loads(f.metadata()["config"])
    # meshmoe's side of each HF tensor: the sum of <grad, D> over the meshmoe tensors that land
    # in it, and the squared norm of those gradients.
    first_dense = int(cfg["first_num_dense_layers"]) if cfg["decoder_block"] == "deepseek" else 0
    mine = {}
    for k, g in dump.items():
        if k.startswith("c/grad/"):
            n, g = k[len("c/grad/"):], g.astype(np.float64)
            h = hf_name(n, first_dense)
            dot, sq = mine.get(h, (0.0, 0.0))
            mine[h] = (dot + float(np.sum(g * d_mt[n])), sq + float(np.sum(g * g)))
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    check(sorted(trained) == sorted(mine), f"{name}: {len(trained)} trained tensors in transformers, "
          f"{len(mine)} from meshmoe's {sum(k.startswith('c/grad/') for k in dump)} gradients"
          + "".join(f"; only in transformers: {n}" for n in sorted(set(trained) - set(mine)))
          + "".join(f"; only in meshmoe: {n}" for n in sorted(set(mine) - set(trained))))
    good, worst = 0, (0.0, "")
    for h in sorted(set(trained) & set(mine)):
        g = trained[h].grad
        theirs = float(np.sum(g.double().numpy() * d_hf[h])) if g is not None else float("nan")
        dot, sq = mine[h]
        r = abs(dot - theirs) / np.sqrt(sq) if sq > 0 else (0.0 if theirs == 0 else float("inf"))
        if np.isfinite(r) and r <= TOL:
            good, worst = good + 1, max(worst, (r, h))
        else:
            check(False, f"{name}: {h}: <grad, D> {dot:.6e}, transformers' {theirs:.6e} "
                  f"(difference / |grad| {r:.1e}, tolerance {TOL:g})")
    print(f"  ok   {name}: {good} tensors' gradients within {TOL:g} of torch's (difference of <grad, D> over "
          f"|grad|; the largest {worst[0]:.1e}, {worst[1]})")
    return good


def main():
    if len(sys.argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    directions(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
