#!/usr/bin/env python3
"""`make bench` (tests/bench.sh runs this with the system python; standard library only).

Prints, in one run on this machine:
  1. the peak: the cores' FMA units measured by a register-only loop at each vector width
     the CPU runs (build/peak), OpenBLAS sgemm n=2048 at the kernels it picks for this
     CPU (build/gemm_bench with OPENBLAS_CORETYPE unset for that command alone, else numpy's
     bundled OpenBLAS from a venv) and the ordered GEMM on the same product, on 1 and 2
     threads; "the peak" is the highest 2-thread figure of these, named in the table;
  2. for mixtral-small and deepseek-small (fp32, sparse experts, 1 device): meshmoe (as the
     preset says, and with remat_policy=none: no recomputation, as the peers run), PyTorch
     eager (as is, and with each decoder layer recomputed in the backward, as the presets'
     remat_policy=full does) and JAX jit training the same model on the same batch (tests/bench_peers.py),
     run in turn ROUNDS times; per system the median step time over every step but the
     first of each run, tokens/s, model GFLOP/s, % of the peak, the step time over
     meshmoe's, and each run's own median (on a shared machine, how far the runs moved).
  3. where a step of each preset goes by kernel family (`./train ... profile=true`), against
     each family's floor: its FLOPs at the peak or its bytes at the measured bandwidth; then
     the matmul family by product form and shape, as ./train prints it; last, the 2-thread
     figures of 1. measured again, each beside its first value (did the machine change?).
Environment: STEPS (steps per run, default 4), ROUNDS (default 2), PROFILE_STEPS (default 3),
PRESETS, PEERS (the
peers' python, default .venv-peers/bin/python), TRAIN (default ./train).
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.environ.get("TRAIN", "./train")
STEPS = int(os.environ.get("STEPS", "4"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
PROFILE_STEPS = int(os.environ.get("PROFILE_STEPS", "3"))
PRESETS = os.environ.get("PRESETS", "mixtral-small deepseek-small").split()
PEERS = os.environ.get("PEERS", os.path.join(ROOT, ".venv-peers", "bin", "python"))
ENV = dict(os.environ)   # every system with its own OpenMP defaults unless the caller sets them

FLOPS_FORMULA = ("model FLOPs per step = 3 x forward, forward = 2 x tokens x (matmul weights a token "
                 "meets: attention projections, router, the K routed experts' and the shared "
                 "experts' or dense MLP's three matrices, output head) + 2 x B x N x S^2 x (Dqk + Dv) "
                 "per layer (attention scores and values over all S keys)")


def sh(cmd, env=None, **kw):
    return subprocess.run(cmd, cwd=ROOT, env=env or ENV, capture_output=True, text=True, **kw)


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_ticks():
    """(all, steal) clock ticks of every CPU so far (/proc/stat's first line); steal is the
    time a hypervisor ran something else while this machine's CPUs wanted to run."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return sum(t[:8]), (t[7] if len(t) > 7 else 0)


def stolen_since(start):
    total, steal = cpu_ticks()
    return 100.0 * (steal - start[1]) / max(1, total - start[0])


def read_config(preset):
    """The flat YAML preset as a dict of numbers and strings (the keys the formula needs)."""
    cfg = {}
    with open(os.path.join(ROOT, "configs", preset + ".yml")) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                try:
                    cfg[k] = float(v) if any(c in v for c in ".e") and not v.isalpha() else int(v)
                except ValueError:
                    cfg[k] = v
    return cfg


def attention_dims(c):
    """(query heads, key and value heads, Dqk, Dv) of a config's attention core: MLA's heads
    each have their own keys, queries and keys nope + rope wide."""
    N = c["base_num_query_heads"]
    if c.get("attention_type") == "mla":
        return N, N, c["qk_nope_head_dim"] + c["qk_rope_head_dim"], c["v_head_dim"]
    return N, c.get("base_num_kv_heads", N), c["head_dim"], c["head_dim"]


def model_flops(c):
    """FLOPS_FORMULA for a preset's config (defaults where the preset leaves a key out)."""
    D, L = c["base_emb_dim"], c["base_num_decoder_layers"]
    B, S, V = c["per_device_batch_size"], c["max_target_length"], c["vocab_size"]
    E, K = c["num_experts"], c["num_experts_per_tok"]
    N, Nkv, dqk, dv = attention_dims(c)
    if c.get("attention_type") == "mla":
        dn, dr = c["qk_nope_head_dim"], c["qk_rope_head_dim"]
        qr, kr = c.get("q_lora_rank", 0), c["kv_lora_rank"]
        q = D * qr + qr * N * (dn + dr) if qr else D * N * (dn + dr)
        attn_w = q + D * (kr + dr) + kr * N * (dn + dv) + N * dv * D
    else:
        attn_w = D * N * dqk * 2 + D * Nkv * dqk * 2
    # the experts' width: base_moe_mlp_dim for DeepSeek, base_mlp_dim for Mixtral (model/dims.c)
    moe_h = c["base_moe_mlp_dim"] if c.get("decoder_block") == "deepseek" else c["base_mlp_dim"]
    dense = c.get("first_num_dense_layers", 0)
    ffn_moe = D * E + K * 3 * D * moe_h + c.get("shared_experts", 0) * 3 * D * moe_h
    weights = L * attn_w + dense * 3 * D * c["base_mlp_dim"] + (L - dense) * ffn_moe + D * V
    fwd = 2.0 * B * S * weights + L * 2.0 * B * N * S * S * (dqk + dv)
    return 3 * fwd, B * S


def sgemm_peak():
    """{threads: GFLOP/s} of OpenBLAS sgemm n=2048, the library that measured it, and the
    ordered GEMM's {threads: GFLOP/s} on the same product."""
    # Passive waiting here unless the caller chose: a thread that spins through a whole
    # product is never descheduled, and Linux then under-counts its CPU time in the process's
    # CPU clock, which the per-CPU-second figures divide by.
    env = dict(ENV)
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["OMP_WAIT_POLICY"] = "passive"
    # OpenBLAS at the kernels it (or meshmoe's start-up, kernels/cpu/matmul.c) picks for this
    # CPU: a coretype set by the environment (e.g. Haswell on an AVX-512 machine) would
    # measure slower kernels than the CPU runs.
    env.pop("OPENBLAS_CORETYPE", None)
    out = sh(["build/gemm_bench", "2048"], env=env).stdout
    peak = {int(t): float(g) for t, g in re.findall(r"sgemm_peak threads=(\d) n=2048 GFLOP/s ([\d.]+)", out)}
    ordered = {int(t): (g, c) for t, g, c in
               re.findall(r"^ordered threads=(\d) n=2048 GFLOP/s ([\d.]+) per-CPU-second ([\d.]+)", out, re.M)}
    peak_cpu = {int(t): c for t, c in re.findall(r"sgemm_peak threads=(\d) n=2048 GFLOP/s [\d.]+ per-CPU-second ([\d.]+)", out)}
    lib = (re.search(r"BLAS: (.*)", out) or [None, "?"])[1]
    shapes = re.findall(r"^ordered threads=2 (\S.*\S) +GFLOP/s ([\d.]+) per-CPU-second ([\d.]+)", out, re.M)
    shapes = [(w, g, c) for w, g, c in shapes if not w.startswith("n=")]
    if not peak:   # no OpenBLAS in this build: numpy's bundled OpenBLAS
        code = ("import numpy as np, time\nn=2048\na=np.random.rand(n,n).astype(np.float32)\n"
                "b=np.random.rand(n,n).astype(np.float32)\na@b\nbest=1e9\n"
                "for i in range(4):\n t=time.perf_counter(); a@b; best=min(best,time.perf_counter()-t)\n"
                "print(2*n**3/best/1e9, np.__version__)\n")
        for py in (PEERS, os.path.join(ROOT, ".venv", "bin", "python")):
            if not os.path.exists(py):
                continue
            for t in (1, 2):
                r = subprocess.run([py, "-c", code], env=dict(ENV, OPENBLAS_NUM_THREADS=str(t)),
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    g, ver = r.stdout.split()
                    peak[t] = float(g)
                    lib = f"OpenBLAS bundled with numpy {ver} ({py}); this build has no OpenBLAS"
            if peak:
                break
    return peak, peak_cpu, lib, ordered, shapes


def machine_limits():
    """build/peak: {(width, threads): GFLOP/s} of the FMA units (registers only),
    {threads: GB/s} of the memory bandwidth (a triad over 3 x 128 MiB), and {(width,
    threads): GFLOP/s} of the same flops as separate multiplies and adds (the attention
    core's arithmetic), at the widest width."""
    out = sh(["build/peak"], env=dict(ENV, OMP_WAIT_POLICY="passive")).stdout
    fma = {(int(w), int(t)): float(g) for w, t, g in
           re.findall(r"^fma_peak width=(\d+) threads=(\d) GFLOP/s ([\d.]+)", out, re.M)}
    bw = {int(t): float(g) for t, g in re.findall(r"^bandwidth threads=(\d) GB/s ([\d.]+)", out, re.M)}
    mul_add = {(int(w), int(t)): float(g) for w, t, g in
               re.findall(r"^mul_add_peak width=(\d+) threads=(\d) GFLOP/s ([\d.]+)", out, re.M)}
    return fma, bw, mul_add


def the_peak(fma, sgemm, lib, ordered):
    """(GFLOP/s, what measured it): the highest 2-thread figure of the FMA loop, OpenBLAS's
    sgemm and the ordered GEMM (a product above the loop means the loop was disturbed)."""
    cands = [(g, f"FMA loop, {w}-bit vectors, 2 threads") for (w, t), g in fma.items() if t == 2]
    if 2 in sgemm:
        cands.append((sgemm[2], f"OpenBLAS sgemm n=2048, 2 threads ({lib})"))
    if 2 in ordered:
        cands.append((float(ordered[2][0]), "ordered GEMM n=2048, 2 threads"))
    return max(cands) if cands else (None, "not measured")


def floor_table(out, peak, bw):
    """The lines of `profile=true`'s family table in out with each family's floor (its FLOPs
    at `peak` GFLOP/s or its bytes at `bw` GB/s, whichever takes longer) and the share of
    the floor it reaches, then the products' and kernels' tables as ./train prints them; None if out has no
    profile."""
    rows = re.findall(r"^\| (\w[\w ]*?) \|\s*([\d.]*)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)%\s*\|\s*([\d.]*)\s*\|"
                      r"\s*([\d.]*)\s*\|\s*([\d.]*)\s*\|\s*([\d.]*)\s*\|$", out, re.M)
    if not rows:
        return None
    lines = ["| kernel family | calls/step | ms/step | % of step | GFLOP/s | GB/s | floor ms (by) | floor / ms |",
             "|---|---|---|---|---|---|---|---|"]
    for fam, calls, ms, pct, gflop, gb, gfs, gbs in rows:
        floor = " | "
        if gflop and gb and float(ms) > 0:
            by_flops = float(gflop) / peak * 1e3 if peak else 0
            by_bytes = float(gb) / bw * 1e3 if bw else 0
            f = max(by_flops, by_bytes)
            floor = f"{f:.2f} ({'FLOPs' if by_flops >= by_bytes else 'bytes'}) | {100 * f / float(ms):.0f}%"
        lines.append(f"| {fam} | {calls} | {ms} | {pct}% | {gfs} | {gbs} | {floor} |")
    for table in ("products", "kernels"):   # the matmul family by product form and shape; every family by kernel
        found = re.search(rf"^{table}: .*\n(?:\|.*\|\n?)+", out, re.M)
        if found:
            lines += ["", found[0].rstrip()]
    return lines


def profile_table(preset, peak, bw, *extra):
    """meshmoe's `profile=true` run of a preset: where a step goes by kernel family, each
    family's floor (its FLOPs at the peak or its bytes at the 2-thread bandwidth, whichever
    takes longer) and the share of the floor it reaches."""
    r = sh([TRAIN, f"configs/{preset}.yml", f"steps={PROFILE_STEPS}", "profile=true", "eval_steps=1",
            "sample_length=0", *extra])
    head = re.search(r"^profile: .*$", r.stdout, re.M)
    lines = floor_table(r.stdout, peak, bw)
    if r.returncode or not head or not lines:
        print(f"profile of {preset} {' '.join(extra)}: failed: {(r.stdout + r.stderr).strip().splitlines()[-1:]}")
        return
    print(f"{preset} {' '.join(extra) or '(the preset)'}, {head[0]}")
    print("\n".join(lines))
    print()


SPINS = []   # the spin count each meshmoe run chose (core/omp_wait.c), in run order


def run_meshmoe(preset, *extra):
    r = sh([TRAIN, f"configs/{preset}.yml", f"steps={STEPS}", "log_period=1", "eval_steps=1", *extra])
    SPINS.extend(re.findall(r"^waiting OpenMP threads: spin (\d+) times", r.stdout, re.M))
    ms = [float(x) for x in re.findall(r"^step +\d+ \| loss .*?\| +([\d.]+) ms \|", r.stdout, re.M)]
    if r.returncode or len(ms) < 2:
        sys.exit(f"bench: {TRAIN} {preset} failed: {(r.stdout + r.stderr).strip().splitlines()[-1:]}")
    return [m / 1000 for m in ms[1:]]


def run_peer(which, dump):
    r = subprocess.run([PEERS, os.path.join(ROOT, "tests", "bench_peers.py"), which, dump, str(STEPS)],
                       cwd=ROOT, env=ENV, capture_output=True, text=True)
    s = [float(x) for x in re.findall(r"^step \d+ seconds ([\d.]+)", r.stdout, re.M)]
    n = re.search(r"^params (\d+)", r.stdout, re.M)
    if r.returncode or len(s) < 2:
        return None, (r.stdout + r.stderr).strip().splitlines()[-1:]
    return s[1:], int(n[1])


def main():
    ticks = cpu_ticks()
    print(f"load average at start: {load_average()} ({os.cpu_count()} CPUs)")
    waits = ", ".join(f"{k}={ENV[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in ENV)
    print("OpenMP waiting threads: " + (waits or "each system's default (meshmoe: spins for as long as two wake-ups take, then sleeps)"))
    fma, bw, mul_add = machine_limits()
    print("FMA units (build/peak, registers only): " +
          (", ".join(f"{w}-bit {t} thread{'s' if t > 1 else ''} {g:.1f} GFLOP/s" for (w, t), g in sorted(fma.items()))
           if fma else "not measured (no AVX2/AVX-512)"))
    if mul_add:
        print("  the same flops as a multiply and a separate add (the attention core's arithmetic): " +
              ", ".join(f"{w}-bit {t} thread{'s' if t > 1 else ''} {g:.1f} GFLOP/s"
                        + (f" ({g / fma[(w, t)]:.2f} of the FMA loop)" if fma.get((w, t)) else "")
                        for (w, t), g in sorted(mul_add.items())))
    peak, peak_cpu, lib, ordered, shapes = sgemm_peak()
    p2, p2_what = the_peak(fma, peak, lib, ordered)
    print(f"OpenBLAS sgemm, n=2048 ({lib}): " +
          (", ".join(f"{t} thread{'s' if t > 1 else ''} {g:.1f} GFLOP/s" for t, g in sorted(peak.items()))
           if peak else "not measured (no OpenBLAS here and no venv with numpy)"))
    if peak_cpu:
        print("  per CPU-second (the process's CPU time): " + ", ".join(f"{t} thread{'s' if t > 1 else ''} {c}"
                                                                        for t, c in sorted(peak_cpu.items())))
    print("ordered GEMM, n=2048: " + ", ".join(f"{t} thread{'s' if t > 1 else ''} {g} GFLOP/s ({c} per CPU-second)"
                                               for t, (g, c) in sorted(ordered.items())))
    for w, g, c in shapes:
        print(f"  ordered GEMM, 2 threads, {w}: {g} GFLOP/s ({c} per CPU-second)")
    print("memory bandwidth (build/peak, a triad over 3 x 128 MiB): " +
          ", ".join(f"{t} thread{'s' if t > 1 else ''} {g:.1f} GB/s" for t, g in sorted(bw.items())))
    print(f"the peak: {p2:.1f} GFLOP/s, {p2_what}" if p2 else "the peak: not measured")
    print(FLOPS_FORMULA)
    peers = os.path.exists(PEERS)
    print()
    print("| preset | system | s/step (median) | tokens/s | model GFLOP/s | % of the peak | step time / meshmoe's "
          "| each run's median, s |")
    print("|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        flops, tokens = model_flops(read_config(preset))
        # meshmoe runs the preset (remat_policy=full, MaxText's default: the backward
        # recomputes each layer's forward) and, like the peers, with nothing recomputed.
        times = {"meshmoe": [], "meshmoe remat_policy=none": [], "PyTorch eager": [],
                 "PyTorch eager, layers recomputed": [], "JAX jit": []}
        runs = {name: [] for name in times}   # each run's own median: how far the machine moved
        notes = {}
        with tempfile.TemporaryDirectory(prefix="meshmoe-bench.") as tmp:
            dump = os.path.join(tmp, "dump.safetensors")
            if peers:
                r = sh([TRAIN, f"configs/{preset}.yml", f"dump_parity={tmp}", "parity_steps=1"])
                if r.returncode:
                    peers_here, notes["peers"] = False, "the parity dump failed"
                else:
                    peers_here = True
            else:
                peers_here = False
            for _ in range(ROUNDS):   # interleaved: each system once per round
                for name, extra in (("meshmoe", ()), ("meshmoe remat_policy=none", ("remat_policy=none",))):
                    t = run_meshmoe(preset, *extra)
                    times[name] += t
                    runs[name].append(statistics.median(t))
                if peers_here:
                    for name, which in (("PyTorch eager", "torch"), ("PyTorch eager, layers recomputed", "torch-remat"),
                                        ("JAX jit", "jax")):
                        t, info = run_peer(which, dump)
                        if t is None:
                            notes[name] = f"failed: {info}"
                        else:
                            times[name] += t
                            runs[name].append(statistics.median(t))
                            notes.setdefault(name + " params", info)
        base = statistics.median(times["meshmoe"])
        for name, t in times.items():
            if not t:
                why = notes.get(name) or ("not run (make bench-peers)" if not peers else notes.get("peers", "not run"))
                print(f"| {preset} | {name} | {why} | | | | | |")
                continue
            s = statistics.median(t)
            gf = flops / s / 1e9
            pct = f"{100 * gf / p2:.0f}%" if p2 else "-"
            spread = ", ".join(f"{m:.3f}" for m in runs[name])
            print(f"| {preset} | {name} | {s:.3f} | {tokens / s:.0f} | {gf:.1f} | {pct} | {s / base:.2f} | {spread} |")
        print(f"|  | ({preset}: {flops / 1e9:.1f} GFLOP per step, {tokens} tokens; "
              f"{len(times['meshmoe'])} meshmoe steps" +
              (f"; parameters: PyTorch {notes.get('PyTorch eager params')}, JAX {notes.get('JAX jit params')}"
               if peers_here else "") + ") | | | | | | |")
    if SPINS:
        print(f"meshmoe's OpenMP spin counts, run by run: {', '.join(SPINS)}")
    print()
    print(f"Where a step goes (profile=true, {PROFILE_STEPS} steps; the floor of a family: its FLOPs at the "
          f"peak ({p2:.1f} GFLOP/s) or its bytes at the 2-thread bandwidth ({bw.get(2, 0):.1f} GB/s)):")
    print()
    for preset in PRESETS:
        profile_table(preset, p2, bw.get(2), "remat_policy=none")
        profile_table(preset, p2, bw.get(2))
    print(machine_again(fma, bw, peak, ordered))
    print(f"load average at end: {load_average()}; CPU time taken by the hypervisor during the bench "
          f"(steal, /proc/stat): {stolen_since(ticks):.1f}%")


def machine_again(fma, bw, sgemm, ordered):
    """The start's 2-thread figures measured again after the runs, each beside its first
    value: on a shared machine the cores (or the caches and memory behind them) a run gets
    can change during it, and a product that ran at half its first rate says so."""
    fma2, bw2, _ = machine_limits()
    sgemm2, _, _, ordered2, _ = sgemm_peak()
    parts = []
    for (w, t), g in sorted(fma2.items()):
        if t == 2 and (w, t) in fma:
            parts.append(f"FMA loop {w}-bit {g:.1f} GFLOP/s ({fma[(w, t)]:.1f})")
    if 2 in sgemm2 and 2 in sgemm:
        parts.append(f"OpenBLAS sgemm n=2048 {sgemm2[2]:.1f} ({sgemm[2]:.1f})")
    if 2 in ordered2 and 2 in ordered:
        parts.append(f"ordered GEMM n=2048 {ordered2[2][0]} ({ordered[2][0]})")
    if 2 in bw2 and 2 in bw:
        parts.append(f"memory {bw2[2]:.1f} GB/s ({bw[2]:.1f})")
    return ("the machine at the end, 2 threads (at the start in brackets): " + ", ".join(parts)) if parts \
        else "the machine at the end: not measured"


if __name__ == "__main__":
    main()
