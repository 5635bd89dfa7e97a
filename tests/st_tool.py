#!/usr/bin/env python3
"""tests/st_tool.py: safetensors files read with the standard library only (tests/checkpoint.sh,
tests/hf.sh).

  st_tool.py same A B               exit 0 if A and B hold the same tensors (names, dtypes,
                                    shapes, and bytes compared bit for bit), whatever their
                                    metadata; prints the count, or the first difference
  st_tool.py match A PA B PB [U]    every tensor of A named PA* is in B as
                                    PB* with the same dtype, shape and bytes (or, with U,
                                    float32 values at most U units in the last place apart);
                                    prints the count
  st_tool.py set-meta IN OUT K V    write IN with metadata key K set to V as OUT
  st_tool.py del-meta IN OUT K      write IN without metadata key K as OUT
  st_tool.py add-tensor IN OUT N    write IN with one more tensor N (F32, shape [1]) as OUT
  st_tool.py fill IN OUT N V        write IN with every value of F32 tensor N set to V as OUT
  st_tool.py shard DIR N            split DIR/model.safetensors into N files named as
                                    transformers names its shards (model-00001-of-0000N...),
                                    the tensors dealt out in turn, with the index
                                    model.safetensors.index.json; the file removed
  st_tool.py older-config FILE      rewrite an export's config.json as older files give it:
                                    Mixtral-8x7B's (rope_theta for rope_parameters, no head_dim,
                                    router_jitter_noise or sliding_window), or DeepSeek-V3's
                                    (yarn's rope_scaling with `type`, no truncate or
                                    attention_factor, rope_theta beside it)
  st_tool.py factored FILE          check that every opt_state/v_row and v_col pair is laid
                                    out as optax's FactoredState (below); prints the largest
                                    relative difference found
"""
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def tensors(path):
    header, data = read(path)
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), data[b:e])
    return out


def same(a, b):
    ta, tb = tensors(a), tensors(b)
    if sorted(ta) != sorted(tb):
        only = sorted(set(ta) ^ set(tb))
        print(f"tensor names differ: {only[:3]}")
        return 1
    for name in sorted(ta):
        if ta[name] != tb[name]:
            da, sa, xa = ta[name]
            db, sb, xb = tb[name]
            at = next((i for i in range(min(len(xa), len(xb))) if xa[i] != xb[i]), None)
            print(f"{name}: {da} {sa} vs {db} {sb}, first differing byte {at}")
            return 1
    print(f"{len(ta)} tensors, the same bytes")
    return 0


def match(a, pa, b, pb, ulps=0):
    ta, tb = tensors(a), tensors(b)
    n = worst = 0
    for k, (dt, sh, data) in ta.items():
        if not k.startswith(pa):
            continue
        other = tb.get(pb + k[len(pa):])
        if other is None or other[:2] != (dt, sh):
            print(f"{k}: missing or another dtype/shape in {b}")
            return 1
        if other[2] != data:
            if not ulps:
                print(f"{k}: the bytes differ")
                return 1
            x = struct.unpack(f"<{len(data) // 4}i", data)
            y = struct.unpack(f"<{len(data) // 4}i", other[2])
            worst = max(worst, max(abs(u - v) for u, v in zip(x, y)))   # same-sign floats: ulps apart
            if worst > ulps:
                print(f"{k}: {worst} ulps apart")
                return 1
        n += 1
    if n == 0:
        print("no tensor compared")
        return 1
    print(n, "tensors" + (f", at most {worst} ulp apart" if ulps else " bit-identical"))
    return 0


def write(dst, header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return 0


def set_meta(src, dst, key, value):
    header, data = read(src)
    header.setdefault("__metadata__", {})[key] = value
    return write(dst, header, data)


def del_meta(src, dst, key):
    header, data = read(src)
    del header["__metadata__"][key]
    return write(dst, header, data)


def add_tensor(src, dst, name):
    header, data = read(src)
    header[name] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
    return write(dst, header, data + struct.pack("<f", 1.0))


def fill(src, dst, name, value):
    header, data = read(src)
    b, e = header[name]["data_offsets"]
    return write(dst, header, data[:b] + struct.pack("<f", float(value)) * ((e - b) // 4) + data[e:])


def shard(folder, n):
    header, data = read(f"{folder}/model.safetensors")
    header.pop("__metadata__", None)
    names = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    parts = [({}, bytearray()) for _ in range(n)]
    weight_map = {}
    for k, name in enumerate(sorted(header)):
        h, d = parts[k % n]
        b, e = header[name]["data_offsets"]
        h[name] = {"dtype": header[name]["dtype"], "shape": header[name]["shape"],
                   "data_offsets": [len(d), len(d) + e - b]}
        d += data[b:e]
        weight_map[name] = names[k % n]
    for (h, d), name in zip(parts, names):
        write(f"{folder}/{name}", h, bytes(d))
    with open(f"{folder}/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": len(data)}, "weight_map": weight_map}, f, indent=2)
    os.remove(f"{folder}/model.safetensors")
    return 0


def older_config(path):
    with open(path) as f:
        c = json.load(f)
    rope = c.pop("rope_parameters")
    c["rope_theta"] = rope.pop("rope_theta")
    if c["model_type"] == "mixtral":
        for k in ("head_dim", "router_jitter_noise", "sliding_window"):
            c.pop(k)
    elif rope.pop("rope_type") == "yarn":
        rope.pop("truncate")
        rope.pop("attention_factor")
        c["rope_scaling"] = {"type": "yarn", **rope}
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
    return 0


def factored(path):
    """optax.scale_by_factored_rms keeps, for a tensor whose two largest dims (argsort of
    the shape: d_row the second largest, d_col the largest) are >= 128, v_row of shape
    np.delete(shape, d_col) and v_col of shape np.delete(shape, d_row), both running means
    of g^2 with the same decay: so for every index l of the other dims,
    C * sum over rows of v_row[l] = R * sum over columns of v_col[l] (both the decayed sum of
    g^2 over the tensor's slice l). Read in another order, the per-l sums do not match."""
    t = tensors(path)
    worst, pairs = 0.0, 0
    for name in sorted(t):
        if not name.startswith("opt_state/v_row/"):
            continue
        base = name[len("opt_state/v_row/"):]
        shape = t["params/" + base][1]
        order = sorted(range(len(shape)), key=lambda d: shape[d])   # a stable argsort
        d_row, d_col = order[-2], order[-1]
        R, C = shape[d_row], shape[d_col]
        rows = struct.unpack(f"<{len(t[name][2]) // 4}f", t[name][2])
        cols = struct.unpack(f"<{len(t['opt_state/v_col/' + base][2]) // 4}f", t["opt_state/v_col/" + base][2])

        def per_lead(values, drop, keep):   # sums over dim `keep` of an array of shape minus `drop`
            dims = [d for d in range(len(shape)) if d != drop]
            out = {}
            for j, v in enumerate(values):
                coord, rest = {}, j
                for d in reversed(dims):
                    coord[d] = rest % shape[d]
                    rest //= shape[d]
                lead = tuple(coord[d] for d in dims if d != keep)
                out[lead] = out.get(lead, 0.0) + v
            return out
        a, b = per_lead(rows, d_col, d_row), per_lead(cols, d_row, d_col)
        for lead in a:
            x, y = C * a[lead], R * b[lead]
            worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
        pairs += 1
    print(f"{pairs} factored tensors, largest relative difference {worst:.2e}")
    return pairs, worst


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "factored":
        pairs, worst = factored(sys.argv[2])
        # Measured on the tiny presets after 2 steps: at most 2.4e-8 relative with optax's
        # layout (float32 means, summed in double here); 2.4e-1 with the query kernels' row
        # means stored in the device's (heads, rows) order instead. 1e-4 lies between.
        sys.exit(0 if pairs and worst < 1e-4 else 1)
    if len(sys.argv) == 4 and sys.argv[1] == "same":
        sys.exit(same(sys.argv[2], sys.argv[3]))
    if len(sys.argv) in (6, 7) and sys.argv[1] == "match":
        sys.exit(match(*sys.argv[2:6], *(int(u) for u in sys.argv[6:])))
    if len(sys.argv) == 5 and sys.argv[1] == "add-tensor":
        sys.exit(add_tensor(*sys.argv[2:]))
    if len(sys.argv) == 6 and sys.argv[1] == "fill":
        sys.exit(fill(*sys.argv[2:]))
    if len(sys.argv) == 3 and sys.argv[1] == "older-config":
        sys.exit(older_config(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "shard":
        sys.exit(shard(sys.argv[2], int(sys.argv[3])))
    if len(sys.argv) == 6 and sys.argv[1] == "set-meta":
        sys.exit(set_meta(*sys.argv[2:]))
    if len(sys.argv) == 5 and sys.argv[1] == "del-meta":
        sys.exit(del_meta(*sys.argv[2:]))
    sys.exit(__doc__)
