#!/usr/bin/env python3
"""Compare the C trainer's parity results with the JAX reference's.

Usage:  compare.py DUMP.safetensors JAX_OUT.safetensors --case NAME [--dtype float32|bfloat16]

DUMP holds the C results (`c/...`), JAX_OUT the reference's (`jax/...`, from
reference.py). Prints one row per tensor: name, shape, max abs diff, max rel diff
(= max abs diff / max |ref|, ref = JAX), tolerance and status, then one summary line
`case NAME: PASS` or `case NAME: FAIL (n tensors)`. Exit status 1 on any FAIL.

Status: PASS / FAIL against the tolerance; REPORT = shown, never fails (final weights
beyond 1e-4, and everything but the losses in bfloat16 mode); TIE = router sets differ
only at tied scores (reported, not a failure); MISSING = the C dump lacks a result the
reference wrote (FAIL); EXTRA = a C result the reference did not write (FAIL: a check
the reference stopped making must not pass unseen).

Tolerances, float32: loss, ce_loss, aux_loss relative 1e-5; logits max abs 1e-4; each
gradient max abs / max |ref| 1e-4; grad_norm relative 1e-4; each parity step's loss
relative 1e-4; router weights and scores 1e-4 relative to max |ref|; router sets must
match except at ties (scores equal within 1e-6 relative). Final weights 1e-4 relative to
max |ref|, REPORT beyond (AdamW's normalisation amplifies tiny gradient differences).
Teacher-forced rows (`steps/...`: JAX's step t from C's weights before step t): loss
relative 1e-5, gradient norm relative 1e-4, router sets equal except at ties.
bfloat16: loss and ce_loss relative 1e-2; teacher-forced loss and gradient norm
TF_LOSS_TOL_BF16 and TF_NORM_TOL_BF16; the free-running step losses FREE_STEP_TOL_BF16;
the rest REPORT.
"""

import argparse
import json
import sys

import numpy as np
from safetensors import safe_open

TIE_RTOL = 1e-6
# bfloat16 bounds, from measurements of the four bf16 cases of run_parity.sh (10 steps)
# on an AMD EPYC Zen 4 (AVX-512), jax 0.10.2, under XLA's default code path,
# --xla_cpu_max_isa=AVX2, =AVX (no FMA) and =SSE4_2; tests/parity/README.md "bfloat16"
# has the table.
# Teacher-forced (both sides from C's weights of the step), C against JAX, relative:
# loss at most 2.7e-4 and gradient norm at most 7.7e-4 in the steps where the routing
# agrees; one token of one layer routed differently (deepseek-bf16-wsum16, step 4, 1 of
# 192 token-layers, default and =AVX code paths) moved that step's loss by 8.4e-4. The
# bounds allow several such flips in a step and stay 10 times tighter than the
# free-running bound.
TF_LOSS_TOL_BF16 = 5e-3
TF_NORM_TOL_BF16 = 5e-3
# Free-running: C against JAX up to 1.8e-2 (deepseek-bf16-wsum32, step 9, default code
# path; 1.6e-2 under =SSE4_2, 1.3e-2 for deepseek-bf16-wsum16 under =AVX). The JAX
# trajectory alone moves as far: up to 2.3e-2 under one-ulp gradient noise (spread.py,
# 8 seeds) and 1.6e-2 between XLA code paths, so a bound must clear that spread; it is
# about twice the largest spread measured.
FREE_STEP_TOL_BF16 = 5e-2


def load(path):
    with safe_open(path, framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, (f.metadata() or {})


def diffs(c, j):
    """(max abs diff, max abs diff / max |ref|) with ref = JAX."""
    c, j = np.asarray(c, np.float64), np.asarray(j, np.float64)
    if c.size == 0:
        return 0.0, 0.0
    d = float(np.max(np.abs(c - j)))
    scale = float(np.max(np.abs(j)))
    return d, (d / scale if scale > 0 else (0.0 if d == 0 else float("inf")))


def group_score(row, e, groups):
    """DeepSeek group score of expert e's group: the sum of its n_best best selection scores
    (groups = (G, n_best): 2 for V3's sigmoid scores, 1 for V2's probabilities)."""
    G, n_best = groups
    E = row.shape[-1]
    g = row.reshape(G, E // G)[e // (E // G)]
    return float(np.sum(np.sort(g)[-n_best:]))


def close(a, b):
    return abs(a - b) <= TIE_RTOL * max(abs(a), abs(b), 1e-30)


def is_tie(scores_rows, a, b, groups):
    """Experts a (chosen by C only) and b (chosen by JAX only) tie in either side's scores,
    directly or (group-limited routing) through equal group scores."""
    for row in scores_rows:
        if close(float(row[a]), float(row[b])):
            return True
        if groups[0] > 0 and close(group_score(row, a, groups), group_score(row, b, groups)):
            return True
    return False


class Table:
    def __init__(self):
        self.rows = []
        self.failed = []

    def add(self, name, shape, absd, reld, tol, status):
        self.rows.append((name, shape, absd, reld, tol, status))
        if status in ("FAIL", "MISSING", "EXTRA"):
            self.failed.append(name)

    def print(self):
        w = max([len(r[0]) for r in self.rows] + [4])
        print(f"{'name':<{w}}  {'shape':<16} {'max abs diff':>12} {'max rel diff':>12}  {'tolerance':<14} status")
        for name, shape, absd, reld, tol, status in self.rows:
            a = f"{absd:12.3e}" if isinstance(absd, float) else f"{absd:>12}"
            r = f"{reld:12.3e}" if isinstance(reld, float) else f"{reld:>12}"
            print(f"{name:<{w}}  {str(list(shape)):<16} {a} {r}  {tol:<14} {status}")


def routing_groups(cfg):
    """(G, n_best) of group-limited routing: G = -1 with the groups off."""
    n_best = {"sigmoid": 2, "softmax": 1}.get(cfg.get("routed_score_func"))
    return (int(cfg.get("n_routing_groups", -1)), n_best) if n_best else (-1, 0)


def set_diffs(ci, ji, cs, js, groups):
    """Per token, whether C's and JAX's expert sets agree; counts of tokens whose sets
    differ and of those that differ only at ties. cs (C's scores) may be None."""
    K = ci.shape[-1]
    cf, jf = ci.reshape(-1, K), ji.reshape(-1, K)
    rows_c = cs.reshape(-1, cs.shape[-1]) if cs is not None else None
    rows_j = js.reshape(-1, js.shape[-1])
    n_diff = n_tie = 0
    same = np.zeros(cf.shape[0], bool)
    for n in range(cf.shape[0]):
        sc, sj = set(cf[n].tolist()), set(jf[n].tolist())
        if sc == sj:
            same[n] = True
            continue
        n_diff += 1
        rows = [rows_j[n]] + ([rows_c[n]] if rows_c is not None else [])
        if all(is_tie(rows, a, b, groups) for a in sc - sj for b in sj - sc):
            n_tie += 1
    return same, n_diff, n_tie


def compare_router(t, name, cres, jres, cfg, bf16):
    """Router choices: sets per token, ties detected and reported; then weights, scores."""
    pre = name  # router/layers_i
    ci, ji = cres[f"c/{pre}/indices"], jres[f"jax/{pre}/indices"]
    if ci.shape != ji.shape:
        t.add(f"{pre}/indices", ci.shape, "shape", "differs", "-", "FAIL")
        return
    cs, js = cres.get(f"c/{pre}/scores"), jres[f"jax/{pre}/scores"]
    K = ci.shape[-1]
    cf, jf = ci.reshape(-1, K), ji.reshape(-1, K)
    same, n_diff, n_tie = set_diffs(ci, ji, cs, js, routing_groups(cfg))
    nontie = n_diff - n_tie
    status = "PASS" if n_diff == 0 else ("REPORT" if bf16 else ("FAIL" if nontie else "TIE"))
    t.add(f"{pre}/indices", ci.shape, f"{n_diff} tok", f"{n_tie} ties", "sets equal", status)

    # weights, compared per expert on tokens whose sets agree
    cw, jw = cres.get(f"c/{pre}/weights"), jres[f"jax/{pre}/weights"]
    if cw is None:
        t.add(f"{pre}/weights", jw.shape, "-", "-", "-", "MISSING")
    else:
        oc = np.argsort(cf, axis=-1, kind="stable")
        oj = np.argsort(jf, axis=-1, kind="stable")
        wc = np.take_along_axis(cw.reshape(-1, K), oc, axis=-1)[same]
        wj = np.take_along_axis(jw.reshape(-1, K), oj, axis=-1)[same]
        a, r = diffs(wc, wj)
        t.add(f"{pre}/weights", cw.shape, a, r, "rel 1e-04", "REPORT" if bf16 else ("PASS" if r <= 1e-4 else "FAIL"))
    if cs is None:
        t.add(f"{pre}/scores", js.shape, "-", "-", "-", "MISSING")
    else:
        a, r = diffs(cs, js)
        t.add(f"{pre}/scores", cs.shape, a, r, "rel 1e-04", "REPORT" if bf16 else ("PASS" if r <= 1e-4 else "FAIL"))


def compare_steps(t, cres, jres, cfg, bf16):
    """Teacher-forced rows: JAX's step s recomputed from C's weights and routing bias before
    C's step s (reference.py:teacher_forced), against C's step s: loss, gradient norm and,
    per MoE layer, the tokens whose expert sets differ over all steps."""
    if "jax/steps/loss" not in jres:   # (the reference recomputes them from the dump's steps/)
        t.add("steps/loss", (), "-", "-", "-", "MISSING")
        return
    loss_tol, norm_tol = (TF_LOSS_TOL_BF16, TF_NORM_TOL_BF16) if bf16 else (1e-5, 1e-4)
    for n, tol in (("loss", loss_tol), ("grad_norm", norm_tol)):
        j, c = jres["jax/steps/" + n], cres.get("c/steps/" + n)
        if c is None or c.shape != j.shape:
            t.add(f"steps/{n}", j.shape, "-", "-", "-", "MISSING")
            continue
        for k in range(j.shape[0]):
            a, r = diffs(c[k], j[k])
            t.add(f"steps/{n}[{k}]", (), a, r, f"rel {tol:.0e}", "PASS" if r <= tol else "FAIL")
    layers = sorted({k.split("/")[3] for k in jres if k.startswith("jax/steps/router/")}, key=lambda x: int(x.split("_")[-1]))
    for layer in layers:
        name = f"steps/router/{layer}/indices"
        ji, ci = jres["jax/" + name], cres.get("c/" + name)
        if ci is None or ci.shape != ji.shape:
            t.add(name, ji.shape, "-", "-", "-", "MISSING")
            continue
        cs, js = cres.get(f"c/steps/router/{layer}/scores"), jres[f"jax/steps/router/{layer}/scores"]
        n_diff = n_tie = 0
        for k in range(ji.shape[0]):
            _, d, tie = set_diffs(ci[k], ji[k], None if cs is None else cs[k], js[k], routing_groups(cfg))
            n_diff, n_tie = n_diff + d, n_tie + tie
        status = "PASS" if n_diff == 0 else ("REPORT" if bf16 else ("FAIL" if n_diff > n_tie else "TIE"))
        t.add(name, ji.shape, f"{n_diff} tok", f"{n_tie} ties", "sets equal", status)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("jax_out")
    ap.add_argument("--case", required=True)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    args = ap.parse_args(argv)

    cres, meta = load(args.dump)
    jres, _ = load(args.jax_out)
    cfg = json.loads(meta.get("config", "{}"))
    dtype = args.dtype or cfg.get("dtype", "float32")
    bf16 = dtype == "bfloat16"
    loss_tol = 1e-2 if bf16 else 1e-5
    step_tol = FREE_STEP_TOL_BF16 if bf16 else 1e-4
    if cfg.get("parity_snapshots", True) is False:
        print(f"case {args.case}: FAIL (the dump was written with parity_snapshots=false: it has no weights before "
              f"each step for the teacher-forced rows; compare its trajectory with long_run.py)")
        return 1

    print(f"== case {args.case}: {cfg.get('decoder_block')} dtype={dtype} sparse_matmul={cfg.get('sparse_matmul')} "
          f"capacity_factor={cfg.get('capacity_factor')} A={cfg.get('gradient_accumulation_steps')} "
          f"parity_steps={cfg.get('parity_steps')}")
    t = Table()
    jnames = sorted(k[4:] for k in jres if k.startswith("jax/"))
    routers = sorted({n.rsplit("/", 1)[0] for n in jnames if n.startswith("router/")},
                     key=lambda s: int(s.split("_")[-1]))
    for n in jnames:
        if n.startswith("router/") or n.startswith("steps/"):
            continue
        j = jres["jax/" + n]
        if "c/" + n not in cres:
            t.add(n, j.shape, "-", "-", "-", "MISSING")
            continue
        c = cres["c/" + n]
        if c.shape != j.shape:
            t.add(n, c.shape, "shape", f"jax {list(j.shape)}", "-", "FAIL")
            continue
        if n == "step_losses":
            for s in range(j.shape[0]):
                a, r = diffs(c[s], j[s])
                t.add(f"step_losses[{s}]", (), a, r, f"rel {step_tol:.0e}", "PASS" if r <= step_tol else "FAIL")
            continue
        a, r = diffs(c, j)
        if n in ("loss", "ce_loss"):
            tol, ok, report = f"rel {loss_tol:.0e}", r <= loss_tol, False
        elif n == "aux_loss":
            tol, ok, report = f"rel {loss_tol:.0e}", r <= loss_tol, bf16
        elif n == "logits":
            tol, ok, report = "abs 1e-04", a <= 1e-4, bf16
        elif n.startswith("grad/") or n == "grad_norm":
            tol, ok, report = "rel 1e-04", r <= 1e-4, bf16
        elif n.startswith("final/") or n.startswith("final_state/"):
            tol, ok, report = "rel 1e-04", r <= 1e-4, True
        else:
            tol, ok, report = "-", True, True
        if report and bf16:
            status = "REPORT"
        elif report:
            status = "PASS" if ok else "REPORT"
        else:
            status = "PASS" if ok else "FAIL"
        t.add(n, c.shape, a, r, tol, status)
    compare_steps(t, cres, jres, cfg, bf16)
    for pre in routers:
        compare_router(t, pre, cres, jres, cfg, bf16)
    extra = sorted(k for k in cres if k.startswith("c/") and "jax/" + k[2:] not in jres)
    for k in extra:
        t.add(k[2:], cres[k].shape, "-", "-", "-", "EXTRA")
    t.print()
    if t.failed:
        print(f"case {args.case}: FAIL ({len(t.failed)} tensors)")
        return 1
    print(f"case {args.case}: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
