#!/usr/bin/env python3
"""tests/ptxas_report.py [--check ALLOWED] LOG...: each GPU kernel's registers, stack frame and
spills as ptxas gave them for sm_90 (the H100 and H200), from `make gpu`'s object logs
(build/gpu/*.o.log: the Makefile passes -Xptxas -v, so each log holds ptxas's lines).

Without --check: one line a function, registers first, widest first. With --check ALLOWED
(tests/gpu_spills.txt): exit 1, naming them, if a function keeps a stack frame or spills
registers beyond what ALLOWED lists for it (its mangled name, then stack, spill-store and
spill-load bytes). A stack frame or a spill is local memory: device memory behind the L1
cache, where a kernel expected registers (a spill), or an array it indexes at run time (a
stack frame). Both are visible here, without a GPU, before a change goes to one: registers
are what bound the tensor-core attention's occupancy (docs/performance-gpu.md)."""
import re
import subprocess
import sys

ARCH = "sm_90"
ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
PROPS = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")


def functions(logs):
    """{mangled name: [registers, stack, spill stores, spill loads]} for ARCH, from ptxas -v lines."""
    found, arch, name = {}, None, None
    for path in logs:
        for line in open(path, errors="replace"):
            m = ENTRY.search(line)
            if m:
                arch = m.group(2)
                continue
            m = PROPS.search(line)
            if m:
                name = m.group(1)
                continue
            if arch != ARCH or name is None:
                continue
            m = FRAME.search(line)
            if m:
                found.setdefault(name, [0, 0, 0, 0])[1:] = [int(x) for x in m.groups()]
                continue
            m = REGS.search(line)
            if m:
                found.setdefault(name, [0, 0, 0, 0])[0] = int(m.group(1))
                name = None
    return found


def demangled(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def allowed(path):
    """{mangled name: (stack, spill stores, spill loads)} from ALLOWED's lines (# starts a comment)."""
    got = {}
    for line in open(path):
        fields = line.split("#")[0].split()
        if fields:
            got[fields[0]] = tuple(int(x) for x in fields[1:4])
    return got


def main():
    args = sys.argv[1:]
    limit = None
    if args[:1] == ["--check"]:
        limit, args = allowed(args[1]), args[2:]
    found = functions(args)
    if not found:
        sys.exit(f"tests/ptxas_report.py: no ptxas lines for {ARCH} in {len(args)} logs (built without -Xptxas -v?)")
    names = demangled(sorted(found))
    if limit is None:
        for name, (regs, stack, st, ld) in sorted(found.items(), key=lambda kv: (-kv[1][0], kv[0])):
            print(f"{regs:4d} registers  stack {stack:5d}  spills {st:4d} / {ld:4d}  {names[name][:110]}")
        return
    over = []
    for name, (regs, *frame) in sorted(found.items()):
        top = limit.get(name, (0, 0, 0))
        if any(a > b for a, b in zip(frame, top)):
            over.append(f"{name} {' '.join(map(str, frame))}   # {names[name][:100]} (allowed {' '.join(map(str, top))})")
    print(f"{len(found)} functions for {ARCH}, {sum(1 for f in found.values() if any(f[1:]))} with a stack frame or "
          f"spills, {len(over)} beyond {sys.argv[2]}")
    for line in over:
        print("  " + line)
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
