#!/usr/bin/env python3
"""tests/hf_forms.py: an export of `./train export-hf` (transformers 5's layout, one
model.safetensors) rewritten in the other forms that published checkpoints have, so that
load_hf (trainer/hf_weights.c) and transformers can both be given them. Standard library only.

  hf_forms.py per-expert DIR        a tensor per expert and projection, as Mixtral-8x7B
                                    (block_sparse_moe.experts.<e>.w1 / w3 / w2, the router
                                    block_sparse_moe.gate) and DeepSeek-V3 (mlp.experts.<e>.
                                    gate_proj / up_proj / down_proj) are published
  hf_forms.py mtp DIR               DeepSeek: a multi-token prediction layer after the last
                                    (layer L = num_hidden_layers: a copy of layer L-1's tensors
                                    with enorm, hnorm, eh_proj, shared_head and embed_tokens),
                                    num_nextn_predict_layers 1 in config.json
  hf_forms.py fp8 DIR OUT BR BC     OUT: DIR with every projection's weight as F8_E4M3 and a
                                    float32 scale per block of BR x BC (the last block of a
                                    dimension ragged where BR or BC does not divide it) in
                                    NAME_scale_inv, and config.json's quantization_config, as
                                    DeepSeek-V3 is published; DIR's weights then rewritten as
                                    the F32 values the FP8 ones stand for: each FP8 number
                                    (decoded here) times its block's scale, rounded to float32
  hf_forms.py f16 DIR OUT           OUT: DIR with every tensor as F16 (rounded to nearest);
                                    DIR's then rewritten as the F32 values of those halves
  hf_forms.py interleave DIR        DeepSeek without yarn: rope_interleave true in config.json, and
                                    the rows of q_b_proj (q_proj) and kv_a_proj_with_mqa that
                                    make the rotated parts reordered from half-split pairs (x[i],
                                    x[i + Dr/2]) to interleaved ones (x[2i], x[2i+1]): the same
                                    model, as transformers' DeepseekV3 runs it
  hf_forms.py drop DIR NAME         DIR's model.safetensors without tensor NAME
"""
import json
import math
import struct
import sys

from st_tool import read, write

SIZE = {"F32": 4, "BF16": 2, "F8_E4M3": 1}


def config(folder):
    with open(f"{folder}/config.json") as f:
        return json.load(f)


def save(path, tensors):
    """tensors: name -> (dtype, shape, bytes), written in that order."""
    header, data = {}, bytearray()
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return write(path, header, bytes(data))


def load(path):
    header, data = read(path)
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def per_expert(folder):
    mixtral = config(folder)["model_type"] == "mixtral"
    names = (("block_sparse_moe.experts.{}.w1.weight", "block_sparse_moe.experts.{}.w3.weight",
              "block_sparse_moe.experts.{}.w2.weight") if mixtral else
             ("mlp.experts.{}.gate_proj.weight", "mlp.experts.{}.up_proj.weight", "mlp.experts.{}.down_proj.weight"))
    out = {}
    for name, (dt, shape, raw) in load(f"{folder}/model.safetensors").items():
        head, _, tail = name.partition(".mlp.")
        if tail == "gate.weight" and mixtral:
            out[f"{head}.block_sparse_moe.gate.weight"] = (dt, shape, raw)
        elif tail in ("experts.gate_up_proj", "experts.down_proj"):
            experts, rows, cols = shape
            each = rows * cols * SIZE[dt]
            for e in range(experts):
                part = raw[e * each:(e + 1) * each]
                if tail == "experts.down_proj":
                    out[f"{head}.{names[2].format(e)}"] = (dt, [rows, cols], part)
                else:   # the gate's rows, then the up projection's
                    out[f"{head}.{names[0].format(e)}"] = (dt, [rows // 2, cols], part[:each // 2])
                    out[f"{head}.{names[1].format(e)}"] = (dt, [rows // 2, cols], part[each // 2:])
        else:
            out[name] = (dt, shape, raw)
    return save(f"{folder}/model.safetensors", out)


def mtp(folder):
    c = config(folder)
    last, layer = c["num_hidden_layers"] - 1, c["num_hidden_layers"]
    t = load(f"{folder}/model.safetensors")
    d = c["hidden_size"]
    for name, v in list(t.items()):
        if name.startswith(f"model.layers.{last}."):
            t[f"model.layers.{layer}." + name[len(f"model.layers.{last}."):]] = v
    f32 = lambda *shape: ("F32", list(shape), struct.pack(f"<{math.prod(shape)}f", *[0.5] * math.prod(shape)))
    for name, v in (("enorm.weight", f32(d)), ("hnorm.weight", f32(d)), ("eh_proj.weight", f32(d, 2 * d)),
                    ("shared_head.norm.weight", f32(d)), ("shared_head.head.weight", t["lm_head.weight"]),
                    ("embed_tokens.weight", t["model.embed_tokens.weight"])):
        t[f"model.layers.{layer}.{name}"] = v
    c["num_nextn_predict_layers"] = 1
    with open(f"{folder}/config.json", "w") as f:
        json.dump(c, f, indent=2)
    return save(f"{folder}/model.safetensors", t)


def e4m3(code):
    """The value of an FP8 E4M3 byte (bias 7, 3 mantissa bits, subnormals, no infinity)."""
    e, m = (code >> 3) & 15, code & 7
    v = (1 + m / 8) * 2.0 ** (e - 7) if e else m / 8 * 2.0 ** -6
    return -v if code & 0x80 else v


POSITIVE = [e4m3(c) for c in range(127)]   # 0 .. 448; code 127 is the NaN


def nearest(x):
    """The FP8 code nearest x (ties to the even code), x within +-448."""
    a = abs(x)
    lo, hi = 0, 126
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if POSITIVE[mid] <= a else (lo, mid)
    da, db = a - POSITIVE[lo], POSITIVE[hi] - a
    code = lo if da < db or (da == db and lo % 2 == 0) else hi
    return code | (0x80 if x < 0 and code else 0)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def fp8(folder, out, br, bc):
    t = load(f"{folder}/model.safetensors")
    q = {}
    for name, (dt, shape, raw) in t.items():
        proj = name.endswith("_proj.weight") or name.endswith((".w1.weight", ".w2.weight", ".w3.weight")) or \
            name.endswith(("experts.gate_up_proj", "experts.down_proj"))
        if not proj or dt != "F32":
            q[name] = t[name]
            continue
        rows, cols = shape[-2:]
        lead = math.prod(shape[:-2])
        w = struct.unpack(f"<{len(raw) // 4}f", raw)
        sr, sc = -(-rows // br), -(-cols // bc)
        codes, scales, deq = bytearray(len(w)), [], [0.0] * len(w)
        for b in range(lead):
            for i in range(sr):
                for j in range(sc):
                    at = [(b * rows + r) * cols + c for r in range(i * br, min(rows, (i + 1) * br))
                          for c in range(j * bc, min(cols, (j + 1) * bc))]
                    amax = max(abs(w[k]) for k in at)
                    s = f32(amax / 448) if amax else 1.0
                    scales.append(s)
                    for k in at:
                        codes[k] = nearest(max(-448.0, min(448.0, w[k] / s)))
                        deq[k] = f32(e4m3(codes[k]) * s)   # exact in double, then rounded once
        q[name] = ("F8_E4M3", shape, bytes(codes))
        q[name + "_scale_inv"] = ("F32", list(shape[:-2]) + [sr, sc], struct.pack(f"<{len(scales)}f", *scales))
        t[name] = ("F32", shape, struct.pack(f"<{len(deq)}f", *deq))
    save(f"{folder}/model.safetensors", t)
    c = config(folder)
    c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [br, bc]}
    with open(f"{out}/config.json", "w") as f:
        json.dump(c, f, indent=2)
    return save(f"{out}/model.safetensors", q)


def f16(folder, out):
    t = load(f"{folder}/model.safetensors")
    halves = {}
    for name, (dt, shape, raw) in t.items():
        w = struct.unpack(f"<{len(raw) // 4}f", raw)
        h = struct.pack(f"<{len(w)}e", *w)   # Python rounds to the nearest half, ties to even
        halves[name] = ("F16", shape, h)
        t[name] = ("F32", shape, struct.pack(f"<{len(w)}f", *struct.unpack(f"<{len(w)}e", h)))
    save(f"{folder}/model.safetensors", t)
    with open(f"{out}/config.json", "w") as f:
        json.dump(config(folder), f, indent=2)
    return save(f"{out}/model.safetensors", halves)


def interleave(folder):
    c = config(folder)
    dn, dr, rank, heads = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["kv_lora_rank"], c["num_attention_heads"]
    t = load(f"{folder}/model.safetensors")

    def reorder(name, starts):   # rows [s, s + dr) of each start: row s + 2i <- s + i, s + 2i + 1 <- s + i + dr/2
        dt, shape, raw = t[name]
        cols = shape[1]
        rows = [raw[r * cols * 4:(r + 1) * cols * 4] for r in range(shape[0])]
        for s0 in starts:
            half = rows[s0:s0 + dr]
            for i in range(dr // 2):
                rows[s0 + 2 * i], rows[s0 + 2 * i + 1] = half[i], half[i + dr // 2]
        t[name] = (dt, shape, b"".join(rows))

    for name in list(t):
        if name.endswith(("self_attn.q_b_proj.weight", "self_attn.q_proj.weight")):
            reorder(name, [h * (dn + dr) + dn for h in range(heads)])
        elif name.endswith("self_attn.kv_a_proj_with_mqa.weight"):
            reorder(name, [rank])
    c["rope_interleave"] = True
    with open(f"{folder}/config.json", "w") as f:
        json.dump(c, f, indent=2)
    return save(f"{folder}/model.safetensors", t)


def drop(folder, name):
    t = load(f"{folder}/model.safetensors")
    del t[name]
    return save(f"{folder}/model.safetensors", t)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "per-expert":
        sys.exit(per_expert(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "mtp":
        sys.exit(mtp(sys.argv[2]))
    if len(sys.argv) == 6 and sys.argv[1] == "fp8":
        sys.exit(fp8(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
    if len(sys.argv) == 4 and sys.argv[1] == "f16":
        sys.exit(f16(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 3 and sys.argv[1] == "interleave":
        sys.exit(interleave(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "drop":
        sys.exit(drop(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
