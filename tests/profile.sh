#!/usr/bin/env bash
# tests/profile.sh: profile=true (kernels/profile.h, report/profile.h) and the bench's
# measured limits (tests/peak.c). The profile backend must not change one bit; its FLOP
# counts, kept by the kernel wrappers, must equal the ones the layers count for the step's
# GFLOP/s (model/matmul.c, model/attn_core.c: two independent tallies); its rows must add up
# to the step, and its products' rows to the matmul family; a dry run with it is refused.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train build/peak >/dev/null || { echo "build failed"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
TRAIN=./train
FAST="steps=2 per_device_batch_size=2 max_target_length=32 base_num_decoder_layers=2 sample_length=0 eval_steps=1"

for p in mixtral-tiny deepseek-tiny; do
    run $p $p
    run $p-prof $p profile=true
    check "$p: profile=true, loss bits as without it: $(bits $p)" same $p $p-prof
    # The counted step is the last (step 1): the layers' FLOPs are its GFLOP/s x ms; the
    # profile's are the matmul and attention rows' GFLOP/step. Printed to 5 significant
    # digits (gflops %.3f of ~30, ms %.3f, GFLOP/step %.4f): equal within 0.1%.
    check "$p: the profile's matmul + attention FLOPs = the layers' count for the step" python3 - "$T/$p-prof" <<'PY'
import json, re, sys
out = open(sys.argv[1] + ".out").read()
m = json.loads(open(sys.argv[1] + ".jsonl").readlines()[-1])
layers = m["gflops"] * m["ms"] / 1e3
rows = dict(re.findall(r"^\| (\w+) \| [\d.]+ \| [\d.]+ \| [\d.]+% \| ([\d.]+) \|", out, re.M))
prof = float(rows["matmul"]) + float(rows.get("attention", 0))
print(f"       layers {layers:.4f} GFLOP, profile {prof:.4f} GFLOP")
sys.exit(abs(prof - layers) > 1e-3 * layers)
PY
    check "$p: the families and the time between kernels add up to the step" python3 - "$T/$p-prof.out" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
step = float(re.search(r"^profile: .*, ([\d.]+) ms per step", out, re.M)[1])
fams = [float(x) for x in re.findall(r"^\| \w+ \| [\d.]+ \| ([\d.]+) \|", out, re.M)]
total = float(re.search(r"^\| all kernels \| +\| ([\d.]+) \|", out, re.M)[1])
between = float(re.search(r"^\| between kernels \| +\| (-?[\d.]+) \|", out, re.M)[1])
print(f"       {len(fams)} families {sum(fams):.2f} ms, all kernels {total:.2f}, between {between:.2f}, step {step:.2f}")
sys.exit(not (len(fams) >= 8 and abs(sum(fams) - total) < 0.01 * len(fams) and abs(total + between - step) < 0.02
              and 0 <= between < step))
PY
    check "$p: the products' table adds up to the matmul family (calls and ms)" python3 - "$T/$p-prof.out" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
fam = re.search(r"^\| matmul \| ([\d.]+) \| ([\d.]+) \|", out, re.M)
rows = re.findall(r"^\| ([^|]*@[^|]*|the other products) \| [^|]* \| [^|]* \| [^|]* \| ([\d.]+) \| ([\d.]+) \|", out, re.M)
calls, ms = sum(float(c) for _, c, _ in rows), sum(float(m) for *_, m in rows)
print(f"       {len(rows)} product rows: {calls:.0f} calls, {ms:.2f} ms; matmul {fam[1]} calls, {fam[2]} ms")
# calls/step print rounded to whole calls, ms to 0.01: a row's rounding at most 0.5 and 0.005
sys.exit(not (rows and abs(calls - float(fam[1])) <= 0.5 * len(rows) + 0.5
              and abs(ms - float(fam[2])) <= 0.005 * len(rows) + 0.005))
PY
    check "$p: the kernels' table adds up to all kernels (calls and ms)" python3 - "$T/$p-prof.out" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
fams = re.findall(r"^\| \w+ \| ([\d.]+) \| ([\d.]+) \|", out, re.M)
total = float(re.search(r"^\| all kernels \| +\| ([\d.]+) \|", out, re.M)[1])
rows = re.findall(r"^\| (\w+|the other kernels) \| (\w*) \| ([\d.]+) \| ([\d.]+) \| [\d.]+% \| [\d.]+ \| [\d.]+ \|$", out, re.M)
calls, ms = sum(float(r[2]) for r in rows), sum(float(r[3]) for r in rows)
fam_calls = sum(float(c) for c, _ in fams)
print(f"       {len(rows)} kernel rows: {calls:.0f} calls, {ms:.2f} ms; the families {fam_calls:.0f} calls, {total:.2f} ms")
# whole calls and 0.01 ms printed: each row's rounding at most 0.5 and 0.005, the families' too
sys.exit(not (len(rows) > 8 and abs(calls - fam_calls) <= 0.5 * (len(rows) + len(fams))
              and abs(ms - total) <= 0.005 * (len(rows) + len(fams))))
PY
done
expect_error "profile=true with dry_run=true" "a dry run computes none" \
    ./train configs/mixtral-tiny.yml profile=true dry_run=true
# The limits make bench divides by: every line present and positive (the figures
# themselves depend on the machine and its load; docs/performance.md keeps them).
build/peak 0.05 > "$T/peak.out"
check "build/peak: FMA loop at a vector width, 1 and 2 threads, multiply-then-add at the widest, and the bandwidth: $(tr '\n' ';' < "$T/peak.out")" \
    python3 -c "
import re, sys
out = open(sys.argv[1]).read()
f = re.findall(r'^fma_peak width=(256|512) threads=([12]) GFLOP/s ([\d.]+)$', out, re.M)
m = re.findall(r'^mul_add_peak width=(256|512) threads=([12]) GFLOP/s ([\d.]+)$', out, re.M)
b = re.findall(r'^bandwidth threads=([12]) GB/s ([\d.]+)$', out, re.M)
widest = max((w for w, *_ in f), key=int, default=None)
ok = len(f) >= 2 and len(m) == 2 and all(w == widest for w, *_ in m) and len(b) == 2
sys.exit(not (ok and all(float(g) > 0 for *_, g in f + m + b)))" "$T/peak.out"
summary
