#!/usr/bin/env python3
"""Write a parity dump with random weights and a random batch, in the C trainer's format.

Usage:  make_fake_dump.py OUT.safetensors --preset mixtral|deepseek [key=value ...]

The file has exactly the layout `./train CONFIG dump_parity=DIR` writes (see README.md):
metadata `config` (JSON), `param/...`, `state/...` (routing biases), `batch/inputs` and
`batch/targets` [P, A*B, S] int32, the per-step starting points `steps/param/...` [P, ...]
and `steps/state/...` [P, E] (step 0 = `param/`, `state/`; later steps: those plus
small noise, standing in for C's trained weights), and no `c/` results. It lets reference.py and
compare.py be tested before the C trainer exists.

key=value overrides any config key (values parsed as JSON when possible, so
`sparse_matmul=false`, `capacity_factor=1.0`, `dtype=bfloat16` all work). Three extra
keys are not config keys and are not written to the config:
  seed=N             random seed (default 0)
  bias_std=X         initialise the routing biases with normal(0, X) instead of zeros,
                     to exercise the bias path (default 0)
  ignore_fraction=X  fraction of targets set to -1 (ignored), default 0.1
Initialisation follows docs/model.md#initialisation (normal, std 1/sqrt(fan_in), Wq also
divided by sqrt(head_dim), embedding normal(0,1), norm scales ones, bias zeros).
"""

import argparse
import json
import sys

import numpy as np
from safetensors.numpy import save_file

COMMON = {
    "dtype": "float32",
    "weight_dtype": "float32",
    "grad_dtype": "float32",
    "float32_weight_sum": True,
    "float32_gate_logits": False,
    "float32_logits": False,
    "float32_qk_product": False,
    "cast_logits_to_fp32": True,
    "vocab_size": 128,
    "max_target_length": 16,
    "per_device_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "capacity_factor": -1.0,
    "sparse_matmul": True,
    "load_balance_loss_weight": 0.0,
    "z_loss_multiplier": 0.0,
    "rope_min_timescale": 1,
    "learning_rate": 1e-3,
    "warmup_steps_fraction": 0.25,
    "learning_rate_final_fraction": 0.1,
    "steps": 8,
    "adam_b1": 0.9,
    "adam_b2": 0.95,
    "adam_eps": 1e-8,
    "adam_weight_decay": 0.1,
    "gradient_clipping_threshold": 1.0,
    "parity_steps": 3,
}

PRESETS = {
    "mixtral": {
        "decoder_block": "mixtral",
        "attention_type": "global",
        "base_emb_dim": 64,
        "base_num_query_heads": 4,
        "base_num_kv_heads": 2,
        "head_dim": 16,
        "base_mlp_dim": 96,
        "base_moe_mlp_dim": 96,
        "base_num_decoder_layers": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "routed_score_func": "",
        "routed_bias": False,
        "routed_bias_update_rate": 0.0,
        "routed_scaling_factor": 1.0,
        "n_routing_groups": -1,
        "topk_routing_group": -1,
        "shared_experts": 0,
        "first_num_dense_layers": 0,
        "q_lora_rank": 0,
        "kv_lora_rank": 0,
        "qk_nope_head_dim": 0,
        "qk_rope_head_dim": 0,
        "v_head_dim": 0,
        "normalization_layer_epsilon": 1e-5,
        "rope_max_timescale": 1000000,
    },
    "deepseek": {
        "decoder_block": "deepseek",
        "attention_type": "mla",
        "base_emb_dim": 64,
        "base_num_query_heads": 4,
        "base_num_kv_heads": 4,
        "head_dim": 24,
        "base_mlp_dim": 96,
        "base_moe_mlp_dim": 32,
        "base_num_decoder_layers": 3,
        "num_experts": 8,
        "num_experts_per_tok": 3,
        "routed_score_func": "sigmoid",
        "routed_bias": True,
        "routed_bias_update_rate": 1e-3,
        "routed_scaling_factor": 2.5,
        "n_routing_groups": 4,
        "topk_routing_group": 2,
        "shared_experts": 1,
        "first_num_dense_layers": 1,
        "q_lora_rank": 32,
        "kv_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "normalization_layer_epsilon": 1e-6,
        "rope_max_timescale": 10000,
    },
}

EXTRA_KEYS = {"seed": 0, "bias_std": 0.0, "ignore_fraction": 0.1}


def parse_value(text):
    """Parse a key=value value: JSON if possible (numbers, true/false), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def param_shapes(cfg):
    """{name (without 'param/'): (shape, fan_in, extra_std_divisor)} for a config."""
    D, V, L = cfg["base_emb_dim"], cfg["vocab_size"], cfg["base_num_decoder_layers"]
    N, Nkv, Dh = cfg["base_num_query_heads"], cfg["base_num_kv_heads"], cfg["head_dim"]
    E = cfg["num_experts"]
    H = cfg["base_moe_mlp_dim"] if cfg["decoder_block"] == "deepseek" else cfg["base_mlp_dim"]
    F = cfg["base_mlp_dim"]
    shapes = {"token_embedder/embedding": ((V, D), None, 1.0)}
    first = cfg["first_num_dense_layers"]
    for i in range(L):
        # MaxText's unscanned paths: DeepSeek counts dense and MoE layers apart
        if cfg["decoder_block"] != "deepseek":
            pre = moe = f"decoder/layers_{i}/"
        elif i < first:
            pre = moe = f"decoder/dense_layers_{i}/"
        else:
            pre = f"decoder/moe_layers_{i - first}/"
            moe = pre + "DeepSeekMoeBlock_0/"
        shapes[pre + "pre_self_attention_layer_norm/scale"] = ((D,), None, 1.0)
        shapes[pre + "post_self_attention_layer_norm/scale"] = ((D,), None, 1.0)
        sa = pre + "self_attention/"
        if cfg["attention_type"] == "mla":
            nope, rope, vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
            qr, kvr = cfg["q_lora_rank"], cfg["kv_lora_rank"]
            if qr > 0:
                shapes[sa + "wq_a/kernel"] = ((D, qr), D, 1.0)
                shapes[sa + "q_norm/scale"] = ((qr,), None, 1.0)
                shapes[sa + "wq_b/kernel"] = ((qr, N, nope + rope), qr, 1.0)
            else:
                shapes[sa + "query/kernel"] = ((D, N, nope + rope), D, 1.0)
            shapes[sa + "wkv_a/kernel"] = ((D, kvr + rope), D, 1.0)
            shapes[sa + "kv_norm/scale"] = ((kvr,), None, 1.0)
            shapes[sa + "wkv_b/kernel"] = ((kvr, N, nope + vd), kvr, 1.0)
            shapes[sa + "out/kernel"] = ((N, vd, D), N * vd, 1.0)
        else:
            shapes[sa + "query/kernel"] = ((D, N, Dh), D, float(np.sqrt(Dh)))
            shapes[sa + "key/kernel"] = ((D, Nkv, Dh), D, 1.0)
            shapes[sa + "value/kernel"] = ((D, Nkv, Dh), D, 1.0)
            shapes[sa + "out/kernel"] = ((N, Dh, D), N * Dh, 1.0)
        if i < cfg["first_num_dense_layers"]:
            shapes[pre + "mlp/wi_0/kernel"] = ((D, F), D, 1.0)
            shapes[pre + "mlp/wi_1/kernel"] = ((D, F), D, 1.0)
            shapes[pre + "mlp/wo/kernel"] = ((F, D), F, 1.0)
        else:
            mb = moe + "MoeBlock_0/"
            shapes[mb + "gate/kernel"] = ((D, E), D, 1.0)
            shapes[mb + "wi_0"] = ((E, D, H), D, 1.0)
            shapes[mb + "wi_1"] = ((E, D, H), D, 1.0)
            shapes[mb + "wo"] = ((E, H, D), H, 1.0)
            if cfg["decoder_block"] == "deepseek" and cfg["shared_experts"] > 0:
                SH = cfg["shared_experts"] * cfg["base_moe_mlp_dim"]
                sh = moe + "shared_experts/"
                shapes[sh + "wi_0/kernel"] = ((D, SH), D, 1.0)
                shapes[sh + "wi_1/kernel"] = ((D, SH), D, 1.0)
                shapes[sh + "wo/kernel"] = ((SH, D), SH, 1.0)
    shapes["decoder/decoder_norm/scale"] = ((D,), None, 1.0)
    shapes["decoder/logits_dense/kernel"] = ((D, V), D, 1.0)
    return shapes


def make_dump(cfg, seed=0, bias_std=0.0, ignore_fraction=0.1):
    """Return the {name: array} dict of a random dump for `cfg` (no c/ results)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, (shape, fan_in, div) in param_shapes(cfg).items():
        if name.endswith("/scale"):
            arr = np.ones(shape, np.float32)
        elif name == "token_embedder/embedding":
            arr = rng.standard_normal(shape).astype(np.float32)
        else:
            arr = (rng.standard_normal(shape) / np.sqrt(fan_in) / div).astype(np.float32)
        tensors["param/" + name] = arr
    if cfg["routed_bias"]:
        for i in range(cfg["first_num_dense_layers"], cfg["base_num_decoder_layers"]):
            b = (rng.standard_normal(cfg["num_experts"]) * bias_std).astype(np.float32)
            moe = f"decoder/layers_{i}/"
            if cfg["decoder_block"] == "deepseek":
                moe = f"decoder/moe_layers_{i - cfg['first_num_dense_layers']}/DeepSeekMoeBlock_0/"
            tensors[f"state/{moe}MoeBlock_0/gate/bias"] = b
    P = cfg["parity_steps"]
    R = cfg["gradient_accumulation_steps"] * cfg["per_device_batch_size"]
    S, V = cfg["max_target_length"], cfg["vocab_size"]
    seq = rng.integers(0, V, size=(P, R, S + 1), dtype=np.int64)
    inputs = seq[:, :, :S].astype(np.int32)
    targets = seq[:, :, 1:].astype(np.int32)
    targets[rng.random(targets.shape) < ignore_fraction] = -1
    tensors["batch/inputs"] = np.asarray(inputs, order="C")
    tensors["batch/targets"] = np.asarray(targets, order="C")
    for k in [k for k in tensors if k.startswith("param/") or k.startswith("state/")]:
        v = tensors[k]
        noise = 1e-2 * rng.standard_normal((P,) + v.shape) * (np.abs(v).max() + 1e-3)
        noise[0] = 0.0
        tensors["steps/" + k] = np.asarray(v[None] + noise, np.float32, order="C")
    return tensors


def build_config(preset, overrides):
    """Preset + common defaults + key=value overrides -> (config, extra options)."""
    cfg = dict(COMMON)
    cfg.update(PRESETS[preset])
    extra = dict(EXTRA_KEYS)
    for kv in overrides:
        key, _, value = kv.partition("=")
        if key in extra:
            extra[key] = parse_value(value)
        else:
            cfg[key] = parse_value(value)
    return cfg, extra


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("overrides", nargs="*", help="key=value")
    args = ap.parse_args(argv)
    cfg, extra = build_config(args.preset, args.overrides)
    tensors = make_dump(cfg, **extra)
    save_file(tensors, args.out, metadata={"config": json.dumps(cfg)})
    n = sum(v.size for k, v in tensors.items() if k.startswith("param/"))
    print(f"fake dump: preset={args.preset} params={n} -> {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
