#!/usr/bin/env python3
"""tests/gpu_compare.py: the GPU runs of tests/gpu.sh against the CPU's references (made by
tests/gpu_ref.sh on a machine without a GPU and carried along). Standard library only: the
GPU machine's Python may have no numpy or safetensors.

  gpu_compare.py reduce IN OUT DTYPE  keep of a parity dump (trainer/dump.c) what `dumps`
                                      compares (the losses; in float32 also step 0's
                                      gradients and the logits), so that the references are
                                      small enough to carry
  gpu_compare.py dumps REF GOT DTYPE  parity dumps, CPU (REF) against GPU (GOT); DTYPE
                                      float32 or bfloat16 (tolerances below)
  gpu_compare.py peaks REF GOT        metrics files (metrics_file=): every step's and
                                      device's peak bytes by tag equal, in device memory and
                                      in host memory (offload), and the bytes copied each way
  gpu_compare.py losses REF GOT TOL   metrics files: every step's loss within TOL relative
  gpu_compare.py workspace GOT SIZES  a metrics file: every step's and device's peak bytes
                                      under the tag workspace one of SIZES (comma-separated)

Prints each check as `  ok   ...` / `  FAIL ...` (a failure names the tensor or step, the
first bad index, the expected and the obtained value) and ends with `N passed, N failed`;
exit status 1 if any failed.

Tolerances (issue 22, acceptance 2). float32: the step-0 loss and each of the parity
steps' losses within 1e-5 relative of the CPU's; each gradient of step 0 within 1e-4 of its
tensor's largest |value| (max |got - ref| / max |ref|); the logits within 1e-4 absolute,
the gradient norms 1e-4 relative (compare.py's bounds against JAX). The GPU differs from
the CPU only by its transcendental functions (a few ulp, docs/gpu.md), far inside these.
bfloat16: tests/parity/compare.py's bounds for the bf16 cases: the step-0 loss 1e-2
relative, the free-running step losses FREE_STEP_TOL_BF16 (5e-2); gradients are shown, not
checked (one bf16 rounding that goes the other way moves a gradient by a bf16 step).
"""
import json
import struct
import sys
from array import array

F32_LOSS, F32_GRAD, F32_LOGITS, F32_NORM = 1e-5, 1e-4, 1e-4, 1e-4
BF16_LOSS, BF16_STEP = 1e-2, 5e-2   # tests/parity/compare.py: loss, FREE_STEP_TOL_BF16

passed = failed = 0


def check(ok, text):
    global passed, failed
    print(("  ok   " if ok else "  FAIL ") + text)
    if ok:
        passed += 1
    else:
        failed += 1


def read(path):
    """name -> (dtype, shape, bytes) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            b, e = t["data_offsets"]
            out[name] = (t["dtype"], tuple(t["shape"]), raw[8 + n + b:8 + n + e])
    return out


def write(path, tensors):
    header, data, off = {}, bytearray(), 0
    for name, (dtype, shape, b) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        data += b
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(data))


def floats(t):
    a = array("f")
    a.frombytes(t[2])
    return a


KEEP = ("c/loss", "c/ce_loss", "c/aux_loss", "c/grad_norm", "c/step_losses", "c/steps/grad_norm", "c/logits")


def reduce(src, dst, dtype):
    t = read(src)
    fp32 = dtype == "float32"
    write(dst, {k: v for k, v in t.items() if (k in KEEP and (fp32 or k != "c/logits")) or
                (fp32 and k.startswith("c/grad/"))})


def rel(got, want):
    return abs(got - want) / max(abs(want), 1e-30)


def scalars(ref, got, name, tol):
    """Each element of a small float32 tensor within tol relative; the first failure named."""
    r, g = floats(ref[name]), floats(got[name])
    worst = max(range(len(r)), key=lambda i: rel(g[i], r[i]))
    ok = len(r) == len(g) and all(rel(g[i], r[i]) <= tol for i in range(len(r)))
    bad = next((i for i in range(len(r)) if rel(g[i], r[i]) > tol), worst)
    check(ok, "%s (%d values) within %g relative: %s index %d expected %.9g got %.9g (rel %.2e)" % (
        name, len(r), tol, "first bad" if not ok else "worst", bad, r[bad], g[bad], rel(g[bad], r[bad])))


def tensor(ref, got, name, tol, absolute):
    """max |got - ref| (over max |ref| unless absolute) within tol; the worst index named."""
    r, g = floats(ref[name]), floats(got[name])
    if len(r) != len(g):
        check(False, "%s: %d values expected, %d got" % (name, len(r), len(g)))
        return
    diff = [abs(a - b) for a, b in zip(r, g)]
    i = max(range(len(diff)), key=diff.__getitem__)
    scale = 1.0 if absolute else max(max(map(abs, r)), 1e-30)
    err = diff[i] / scale
    bad = [k for k in range(len(diff)) if not diff[k] / scale <= tol]   # (a NaN is bad: NaN > tol is false)
    first = bad[0] if bad else i
    check(not bad, "%s %s: max diff %s %.2e <= %g (%s index %d: expected %.9g got %.9g; %d over)" % (
        name, "x".join(map(str, ref[name][1])), "abs" if absolute else "/ max|ref|", err, tol,
        "first bad" if bad else "worst", first, r[first], g[first], len(bad)))


def dumps(ref_path, got_path, dtype):
    ref, got = read(ref_path), read(got_path)
    missing = [k for k in ref if k not in got]   # (a dump has more: the reference is reduced)
    check(not missing, "the GPU dump has every tensor of the reference (%d)%s" % (
        len(ref), ": missing " + ", ".join(missing[:5]) if missing else ""))
    if dtype == "float32":
        for k in ("c/loss", "c/step_losses"):
            scalars(ref, got, k, F32_LOSS)
        for k in ("c/grad_norm", "c/steps/grad_norm"):
            scalars(ref, got, k, F32_NORM)
        tensor(ref, got, "c/logits", F32_LOGITS, True)
        for k in sorted(k for k in ref if k.startswith("c/grad/") and k in got):
            tensor(ref, got, k, F32_GRAD, False)
    else:
        scalars(ref, got, "c/loss", BF16_LOSS)
        scalars(ref, got, "c/step_losses", BF16_STEP)
        r, g = floats(ref["c/grad_norm"]), floats(got["c/grad_norm"])
        print("  (bf16, shown only) grad norm of step 0: expected %.7g got %.7g" % (r[0], g[0]))


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def peaks(ref_path, got_path):
    ref, got = metrics(ref_path), metrics(got_path)
    check(len(ref) == len(got), "%d metrics lines expected, %d got" % (len(ref), len(got)))
    for r, g in zip(ref, got):
        check(len(r["devices"]) == len(g["devices"]), "step %d: %d devices expected, %d got" % (
            r["step"], len(r["devices"]), len(g["devices"])))
        for dr, dg in zip(r["devices"], g["devices"]):
            for key in ("peak_bytes_by_tag", "host_peak_bytes_by_tag", "host_transfer_bytes"):
                want, have = dr[key], dg[key]
                diff = {t: (want.get(t), have.get(t)) for t in set(want) | set(have) if want.get(t) != have.get(t)}
                check(not diff, "step %d device %d: %s equal to the CPU's (%d entries)%s" % (
                    r["step"], dr["device"], key, len(want), "; expected/got " + str(diff) if diff else ""))


def workspace(got_path, sizes):
    got = metrics(got_path)
    check(len(got) > 0, "%s has metrics lines" % got_path)
    for g in got:
        for d in g["devices"]:
            have = d["peak_bytes_by_tag"].get("workspace")
            check(have in sizes, "step %d device %d: peak bytes under the tag workspace %s, one of %s" % (
                g["step"], d["device"], have, sizes))


def losses(ref_path, got_path, tol):
    ref, got = metrics(ref_path), metrics(got_path)
    check(len(ref) == len(got), "%d steps expected, %d got" % (len(ref), len(got)))
    for r, g in zip(ref, got):
        e = rel(g["loss"], r["loss"])
        check(e <= tol, "step %d: loss expected %.9g got %.9g (rel %.2e <= %g)" % (r["step"], r["loss"], g["loss"],
                                                                                   e, tol))


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "reduce" and len(argv) == 5:
        reduce(argv[2], argv[3], argv[4])
        return 0
    if cmd == "dumps" and len(argv) == 5:
        dumps(argv[2], argv[3], argv[4])
    elif cmd == "peaks" and len(argv) == 4:
        peaks(argv[2], argv[3])
    elif cmd == "workspace" and len(argv) == 4:
        workspace(argv[2], [int(x) for x in argv[3].split(",")])
    elif cmd == "losses" and len(argv) == 5:
        losses(argv[2], argv[3], float(argv[4]))
    else:
        sys.exit(__doc__)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
