#!/usr/bin/env python3
"""tests/st_tool.py: safetensors files read with the standard library only (tests/checkpoint.sh).

  st_tool.py same A B               exit 0 if A and B hold the same tensors (names, dtypes,
                                    shapes, and bytes compared bit for bit), whatever their
                                    metadata; prints the count, or the first difference
  st_tool.py set-meta IN OUT K V    write IN with metadata key K set to V as OUT
"""
import json
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


def set_meta(src, dst, key, value):
    header, data = read(src)
    header.setdefault("__metadata__", {})[key] = value
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "same":
        sys.exit(same(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 6 and sys.argv[1] == "set-meta":
        sys.exit(set_meta(*sys.argv[2:]))
    sys.exit(__doc__)
