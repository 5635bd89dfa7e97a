#!/usr/bin/env python3
"""Where a kernel's time goes, from Nsight Compute (ncu) on a GPU machine: make bench-gpu runs
it after the profile (tests/bench_gpu.py), standard library only.

profile=true says how long each kernel family and each kernel of the seam takes; it cannot
say why. ncu can: for each GPU kernel listed in KERNELS, its first launches in one training
step of a preset cut to a layer or two (every layer runs the same kernels), the sections
SpeedOfLight, Occupancy and WarpStateStats, and from them one row per kernel: its time, the
share of the SMs' and of memory's peak throughput it reached, the achieved and theoretical
occupancy, and the three reasons its warps most often waited (per issued instruction:
barrier = __syncthreads, long_scoreboard = device memory, short_scoreboard = shared memory,
mio_throttle = the shared-memory pipe full, math_pipe_throttle = a compute pipe full).

    python3 tests/ncu_kernels.py PRESET [key=value ...]   (TRAIN, default ./train_gpu; NCU, default ncu)
"""
import csv
import glob
import io
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The kernels asked about: attention on tensor cores (gpu/attn_mma.cu, gpu/attn_mma_bwd.cu: the
# backward's kernels with their scores in registers, dq from the dS in memory, or through shared
# memory; the forward's with its scores in registers, the default), the RMS norm (gpu/norm.cu),
# the experts' grouped products by gpu/grouped16.cu (run() asks for them with
# MESHMOE_GROUPED=kernel where the products are cuBLAS's: the default takes cuBLAS's calls
# since 2026-12-04, so that ncu sees the kernel), the embedding's gradient (gpu/embedding.cu), the MoE combine's backward and
# packed gather (gpu/moe.cu: the sixth profile had them at 0.6-2 TB/s), and the optimizer's
# gradient norm and AdamW (gpu/optim.cu: against the copy bandwidth).
KERNELS = ["mma_forward_kernel", "mma_forward_regs_kernel", "mma_dq_ds_kernel", "mma_dq_regs_kernel",
           "mma_dkdv_regs_kernel", "mma_dq_kernel",
           "mma_dkdv_kernel", "row_dots_kernel", "rmsnorm_forward_kernel", "rmsnorm_backward_dx_kernel",
           "rmsnorm_dscale_leaf_kernel", "grouped16_kernel", "embedding_chains_kernel", "combine_dw_kernel",
           "combine_dy4_kernel", "gather_rows_packed4_kernel", "squares_kernel", "adamw4_kernel"]
# One or two layers (deepseek's first is dense): every layer launches the same kernels.
LAYERS = {"mixtral-medium": ["base_num_decoder_layers=1"],
          "deepseek-medium": ["base_num_decoder_layers=2", "first_num_dense_layers=1"]}
LAUNCHES = 40   # enough for each kernel's first launch in one step of those layers (norms: 3 x 4 leaves)


def ncu_path():
    """NCU, or ncu on the PATH, or in a CUDA toolkit or Nsight Compute install."""
    if os.environ.get("NCU"):
        return os.environ["NCU"]
    found = shutil.which("ncu") or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ncu")) +
                                             sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))), None)
    return found or "ncu"


# The kernel's time, asked for by name as well (the table had none from the H200's ncu,
# 2026-12-04), and the DRAM throughput under either of the names ncu versions give it.
DURATION = "gpu__time_duration.sum"
DRAM = ["dram__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
# ncu's units of time, in either of its spellings.
TIME_UNITS = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def command(train, preset, extra=()):
    # (unanchored: ncu's name may carry template arguments; no other kernel's name holds these)
    return [ncu_path(), "--kernel-name", "regex:(" + "|".join(KERNELS) + ")",
            "--launch-count", str(LAUNCHES), "--section", "SpeedOfLight", "--section", "Occupancy",
            "--section", "WarpStateStats", "--metrics", DURATION, "--page", "raw", "--csv",
            train, f"configs/{preset}.yml", "device=gpu", "steps=1", "eval_steps=1", "sample_length=0",
            *LAYERS.get(preset, []), *extra]


def number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def kernel_name(text):
    """The function's name in ncu's kernel name, with or without "void ", template arguments
    and parameters: "void mma_forward_kernel<8>(float *, ...)" -> "mma_forward_kernel"."""
    m = re.search(r"(\w+)\s*(?:<[^()]*>)?\s*\(", text) or re.match(r"(?:void\s+)?(\w+)", text.strip())
    return m[1] if m else None


def parse(out):
    """The raw page's rows as dicts (metric name -> text), the first launch of each kernel; the
    CSV starts at its header line ("ID", ...), other lines (the trainer's, ncu's) are skipped."""
    lines = out.splitlines()
    start = next((i for i, x in enumerate(lines) if x.startswith('"ID"')), None)
    if start is None:
        return []
    rows, seen, units = [], set(), {}
    for r in csv.DictReader(io.StringIO("\n".join(x for x in lines[start:] if x.startswith('"')))):
        if not r.get("ID"):
            units = r   # the units row: ncu scales each metric as it likes (nsecond, usecond, ...)
            continue
        name = kernel_name(r.get("Kernel Name", "") or "")
        if not name or not r["ID"].isdigit() or name in seen:
            continue   # (a later launch of a kernel already kept)
        seen.add(name)
        ns = number(r.get(DURATION, "") or "")
        scale = TIME_UNITS.get((units.get(DURATION) or "").strip())
        rows.append(dict(r, kernel=name, ns=ns * scale if ns is not None and scale else None))
    return rows


def stalls(r, top=3):
    """The top reasons a warp waited, warps per issued instruction, largest first."""
    found = []
    for key, text in r.items():
        m = re.match(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$", key or "")
        v = number(text or "")
        if m and v is not None and m[1] not in ("selected",):
            found.append((v, m[1]))
    return ", ".join(f"{name} {v:.1f}" for v, name in sorted(found, reverse=True)[:top]) or "?"


def value(r, key, fmt="{:.1f}"):
    v = number(r.get(key, "") or "")
    return fmt.format(v) if v is not None else "?"


def table(rows):
    lines = ["| kernel | grid x block | us | SM % of peak | memory % of peak | DRAM % | occupancy achieved / theoretical % "
             "| registers | top stalls (warps per issue) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ns = r["ns"]
        lines.append(f"| {r['kernel']} | {r.get('Grid Size', '?')} x {r.get('Block Size', '?')} | "
                     f"{ns / 1e3 if ns is not None else float('nan'):.1f} | "
                     f"{value(r, 'sm__throughput.avg.pct_of_peak_sustained_elapsed')} | "
                     f"{value(r, 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed')} | "
                     f"{next((value(r, k) for k in DRAM if number(r.get(k, '') or '') is not None), '?')} | "
                     f"{value(r, 'sm__warps_active.avg.pct_of_peak_sustained_active')} / "
                     f"{value(r, 'sm__maximum_warps_per_active_cycle_pct')} | "
                     f"{value(r, 'launch__registers_per_thread', '{:.0f}')} | {stalls(r)} |")
    return lines


def run(train, preset, extra=(), limit=90):
    """(the table's lines or None, ncu's whole output)."""
    cmd = command(train, preset, extra)
    if not shutil.which(cmd[0]):
        return None, f"{cmd[0]} not found"
    env = dict(os.environ)
    if any(a.startswith("gpu_matmul=cublas") for a in extra):   # (MESHMOE_GROUPED wants cuBLAS's products)
        env.setdefault("MESHMOE_GROUPED", "kernel")
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit, env=env)
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or "") + f"\nTIMEOUT after {limit} s"
    rows = parse(out)
    return (table(rows) if rows else None), " ".join(cmd) + "\n" + out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lines, out = run(os.environ.get("TRAIN", "./train_gpu"), sys.argv[1], sys.argv[2:])
    if lines is None:
        print(out)
        sys.exit(1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
