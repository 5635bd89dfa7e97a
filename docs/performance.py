#!/usr/bin/env python3
"""How a mixtral-small training step grows with sequence length and width (docs/performance.md).

    python3 docs/performance.py            # prints the two tables, writes docs/performance-scaling.svg

Each point trains mixtral-small (per_device_batch_size=2, fp32, sparse experts, 1 device) for
1 and for 4 steps; a step's cost is the difference of the two runs' CPU time over 3 (all threads,
user + system), so start-up, initialisation and the evals cancel. CPU time, not the
clock, because the machine these figures come from is shared: the clock would measure the
other users. On an idle 2-core machine a step takes about half its CPU time. GFLOP per
CPU-second uses the model FLOPs of tests/bench.py (3 x forward, attention over all S keys).
"""
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import bench  # noqa: E402  (model_flops, read_config)

TRAIN = os.environ.get("TRAIN", "./train")
ENV = dict(os.environ, OMP_WAIT_POLICY="passive")
BASE = ["per_device_batch_size=2", "log_period=100", "eval_steps=1"]
EXTRA = 3   # a step's cost: (the CPU time of 1 + EXTRA steps - that of 1 step) / EXTRA


def cpu_seconds(args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([TRAIN, "configs/mixtral-small.yml"] + BASE + args, cwd=ROOT, env=ENV,
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"performance.py: {' '.join(args)} failed: {r.stderr.strip().splitlines()[-1:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def step_cost(overrides):
    """CPU seconds of one step, and the model GFLOP of one step."""
    one = cpu_seconds(overrides + ["steps=1"])
    more = cpu_seconds(overrides + [f"steps={1 + EXTRA}"])
    cfg = bench.read_config("mixtral-small")
    for kv in overrides + BASE:
        k, v = kv.split("=")
        cfg[k] = int(v)
    flops, tokens = bench.model_flops(cfg)
    return (more - one) / EXTRA, flops / 1e9, tokens


def sweep(name, key, values, extra):
    rows = []
    print(f"| {name} | tokens | model GFLOP/step | CPU s/step | GFLOP per CPU-second |")
    print("|---|---|---|---|---|")
    for v in values:
        cost, gflop, tokens = step_cost([f"{key}={v}"] + extra(v))
        rows.append((v, cost))
        print(f"| {v} | {tokens} | {gflop:.1f} | {cost:.2f} | {gflop / cost:.1f} |", flush=True)
    print()
    return rows


def panel(x0, title, xlabel, rows):
    """One plot, 300 x 220 at x0: CPU s/step against the swept value, linear axes from 0."""
    w, h, left, top = 300, 220, 50, 30
    xmax = max(v for v, _ in rows) * 1.05
    ymax = max(c for _, c in rows) * 1.15
    X = lambda v: x0 + left + (w - left - 10) * v / xmax
    Y = lambda c: top + (h - top - 40) * (1 - c / ymax)
    out = [f'<text x="{x0 + w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
           f'<line x1="{X(0)}" y1="{Y(0)}" x2="{X(xmax)}" y2="{Y(0)}" stroke="black"/>',
           f'<line x1="{X(0)}" y1="{Y(0)}" x2="{X(0)}" y2="{Y(ymax)}" stroke="black"/>',
           f'<text x="{x0 + w / 2}" y="{h - 5}" text-anchor="middle" font-size="11">{xlabel}</text>',
           f'<text x="{x0 + 12}" y="{(top + h - 40) / 2}" font-size="11" text-anchor="middle" '
           f'transform="rotate(-90 {x0 + 12} {(top + h - 40) / 2})">CPU s / step</text>']
    for v, _ in rows:
        out.append(f'<text x="{X(v)}" y="{Y(0) + 14}" text-anchor="middle" font-size="10">{v}</text>')
    for i in range(5):
        c = ymax * i / 5
        out.append(f'<text x="{X(0) - 4}" y="{Y(c) + 3}" text-anchor="end" font-size="10">{c:.1f}</text>')
    pts = " ".join(f"{X(v):.1f},{Y(c):.1f}" for v, c in rows)
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for v, c in rows:
        out.append(f'<circle cx="{X(v):.1f}" cy="{Y(c):.1f}" r="3" fill="#1f77b4"/>')
    return out


def main():
    seq = sweep("max_target_length", "max_target_length", [128, 256, 512, 1024], lambda v: [])
    width = sweep("base_emb_dim (head_dim = d/8, base_mlp_dim = 2d)", "base_emb_dim", [256, 512, 768, 1024],
                  lambda d: [f"head_dim={d // 8}", f"base_mlp_dim={2 * d}"])
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="620" height="230" font-family="sans-serif">',
           '<rect width="620" height="230" fill="white"/>']
    svg += panel(0, "sequence length (batch 2, d 512)", "max_target_length", seq)
    svg += panel(310, "width (batch 2, S 256)", "base_emb_dim", width)
    svg.append("</svg>")
    with open(os.path.join(ROOT, "docs", "performance-scaling.svg"), "w") as f:
        f.write("\n".join(svg) + "\n")
    print("wrote docs/performance-scaling.svg")


if __name__ == "__main__":
    main()
