"""tests/hf/check.py: a meshmoe model exported with `./train export-hf`, run by Hugging Face
transformers, against meshmoe's own results on the same batch.

    check.py HF_DIR DUMP.safetensors [SAVE_DIR] [--grads F_D_DIR D_CKPT]

HF_DIR is what export-hf wrote; DUMP is `./train CONFIG load_checkpoint=CKPT dump_parity=DIR
parity_steps=1` from the same checkpoint: the batch (`batch/inputs`), meshmoe's logits of
it (`c/logits`) and the experts each token chose in each MoE layer
(`c/router/layers_<l>/indices`). This script only runs HF's model on that batch and
compares; it computes nothing on meshmoe's side.

Passes when the logits agree within TOL and every token chose the same set of experts in
every MoE layer. With --grads, also torch's gradients of the loss through the same
forward pass against meshmoe's, by their inner products with a direction
(tests/hf/grads.py). Prints one line per check and `N passed, N failed`. With SAVE_DIR, the model
is then saved there by transformers itself (save_pretrained, in shards of at most 1 MB with
their index), for tests/hf/check.sh to load with meshmoe's load_hf.
"""
import sys

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM

import grads

# Measured on both tiny presets after 3 training steps, float32 on both sides: 2.4e-6 to
# 3.3e-6 (Mixtral), 2.3e-6 to 2.9e-6 (DeepSeek), 3.1e-6 and 3.8e-6 (DeepseekV2: the default
# RoPE, and yarn's with q_proj), 4.8e-6 from DeepSeek's FP8 form (both sides
# dequantizing the same files); the rest of the tolerance is headroom for BLAS and libm
# differences between machines.
TOL = 1e-4


def main():
    argv = sys.argv[1:]
    direction = None
    if "--grads" in argv:
        i = argv.index("--grads")
        direction, argv = argv[i + 1:i + 3], argv[:i] + argv[i + 3:]
    if len(argv) not in (2, 3) or (direction is not None and len(direction) != 2):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    hf_dir, dump_path = argv[0], argv[1]
    dump = load_file(dump_path)
    ids = torch.from_numpy(dump["batch/inputs"][0].astype(np.int64))   # step 0's batch (B, S)
    want = dump["c/logits"]                                             # (B, S, V)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.eval()
    # The experts HF chose: each layer's router returns (logits, weights, indices).
    chosen = {}
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "top_k"):
            gate.register_forward_hook(lambda mod, inp, out, i=i: chosen.__setitem__(i, out[2].detach().numpy()))
    with torch.set_grad_enabled(direction is not None):   # (the gradients take the same forward pass)
        logits = model(input_ids=ids).logits
    got = logits.detach().float().numpy()
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("  ok   " if ok else "  FAIL ") + what)
        passed, failed = passed + ok, failed + (not ok)

    name = type(model).__name__
    diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
    check(diff <= TOL, f"{name}: logits {tuple(got.shape)}, max abs diff {diff:.3e} (tolerance {TOL:g})")
    biases = [b.detach().abs().max().item() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
    if biases:   # DeepSeek: the selection bias must matter for this check to test it
        check(max(biases) >= 0.05, f"{name}: routing biases up to {max(biases):.3f} in magnitude (at least 0.05)")
    # The dump's step-0 routing: c/router/layers_<i>/indices (c/steps/... holds every step's).
    layers = sorted(int(k.split("/")[2].split("_")[1]) for k in dump
                    if k.startswith("c/router/") and k.endswith("/indices"))
    check(sorted(chosen) == layers, f"{name}: HF routed in layers {sorted(chosen)}, meshmoe in {layers}")
    for i in layers:
        if i not in chosen:
            continue
        a = np.sort(dump[f"c/router/layers_{i}/indices"].reshape(-1, dump[f"c/router/layers_{i}/indices"].shape[-1]), axis=1)
        b = np.sort(chosen[i].reshape(a.shape), axis=1)
        differ = int(np.sum(np.any(a != b, axis=1)))
        check(differ == 0, f"{name}: layer {i}: the same experts for {a.shape[0] - differ} of {a.shape[0]} tokens")
    if direction:
        good = grads.gradients(model, logits, dump, direction[0], direction[1], check)   # (after its own checks)
        passed += good
    if len(argv) > 2:
        model.save_pretrained(argv[2], max_shard_size="1MB")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
