#!/usr/bin/env python3
"""A long training run, C against JAX: both trajectories from the same weights on the same batches.

Usage:  long_run.py DUMP.safetensors [--window W] [--control-bits U ...] [--control-seeds N]
                   [--bound B] [--step-bound S]

DUMP is a parity dump of many steps, usually without the per-step snapshots that the
teacher-forced comparison needs (`./train CONFIG dump_parity=DIR parity_steps=N
parity_snapshots=false`; its step losses are a training run's of the same config, bit for
bit). The reference trains its own trajectory of the N steps from the dump's initial weights
and routing bias on the dump's batches (spread.py:free_running), and the two loss curves
are compared:

- per step: |C - JAX| / |JAX| of the loss. Each side starts a step from its own weights, so
  rounding differences compound until, at some step, the trajectories part: the summary says
  at which step the difference first passed 1e-5, 1e-4, 1e-3 and 1e-2;
- per window of W steps (default N / 20): the mean loss and gradient norm of each side and
  the relative difference of the means, which is what "trained the same" means once the two
  trajectories have parted at the level of single steps;
- the controls: the reference's trajectory again with noise on every gradient (each element
  times 1 +- 2^-U at random, as spread.py), for each U of --control-bits (0 for none) and
  each of --control-seeds seeds (default 2). The default U is 23 and 20 for float32 (one
  float32 ulp, and eight: C's step-0 gradients differ from JAX's by 1e-7 to 1e-6 of the
  tensor's largest element, so more in ulps on its smaller ones), 8 for bfloat16 (one
  bfloat16 ulp; C's differences there 2e-3 to 1e-2). They show how far, and from which step,
  two trajectories part when they differ by rounding alone: C against JAX is read against
  them (the table's control columns are the largest over the controls, and each is
  summarised below it).

--bound B fails (exit status 1) if a window's means differ by more than B relatively;
--step-bound S if a step's losses do.
"""

import argparse
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as R  # noqa: E402  (also sets XLA_FLAGS and the matmul precision)
from spread import free_running, ulp_noise  # noqa: E402

LEVELS = (1e-5, 1e-4, 1e-3, 1e-2)


def first_above(rel, level):
    """The first step whose relative difference exceeds level, or None."""
    over = np.nonzero(rel > level)[0]
    return int(over[0]) if over.size else None


def window_means(x, w):
    """Means of x over consecutive windows of w steps (the last may be shorter)."""
    return np.asarray([x[i:i + w].mean() for i in range(0, len(x), w)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--window", type=int, default=0, help="steps a window (default: the run's steps / 20)")
    ap.add_argument("--control-bits", type=int, nargs="+", default=None,
                    help="the controls' noise 2^-U, one or more U (0: no control; default 23 20 for float32, 8 for bfloat16)")
    ap.add_argument("--control-seeds", type=int, default=2, help="seeds a noise level")
    ap.add_argument("--bound", type=float, default=None, help="largest relative difference of a window's mean losses")
    ap.add_argument("--step-bound", type=float, default=None, help="largest relative difference of a step's losses")
    args = ap.parse_args(argv)
    cfg, params, state, inputs, targets, tensors = R.load_dump(args.dump)
    P = int(cfg["parity_steps"])
    c_loss = np.asarray(tensors["c/step_losses"], np.float64)
    c_norm = np.asarray(tensors["c/steps/grad_norm"], np.float64)
    grad_fn = jax.jit(jax.value_and_grad(lambda p, s, x, y: R.loss_fn(p, s, x, y, cfg), has_aux=True))
    update = jax.jit(R.make_optimizer(cfg).update)
    t0 = time.time()
    j_loss, j_norm = free_running(cfg, params, state, inputs, targets, grad_fn, update, P)
    secs = time.time() - t0
    bits = args.control_bits or ([8] if cfg["dtype"] == "bfloat16" else [23, 20])
    controls = []   # (label, step losses)
    for u in (b for b in bits if b > 0):
        for seed in range(1, args.control_seeds + 1):
            noise = ulp_noise(np.random.default_rng(seed), 2.0 ** -u)
            n_loss, _ = free_running(cfg, params, state, inputs, targets, grad_fn, update, P, noise)
            controls.append((f"control 2^-{u} seed {seed}", n_loss))

    w = args.window or max(1, P // 20)
    mj = window_means(j_loss, w)

    def against_jax(loss):   # (each step's, each window mean's) relative difference from JAX
        return np.abs(loss - j_loss) / np.abs(j_loss), np.abs(window_means(loss, w) - mj) / np.abs(mj)
    rel, wrel = against_jax(c_loss)
    sides = [("C", rel, wrel)] + [(label, *against_jax(loss)) for label, loss in controls]
    mc, nc, nj = window_means(c_loss, w), window_means(c_norm, w), window_means(j_norm, w)
    ctl = len(sides) > 1
    print(f"long run: {cfg['decoder_block']} dtype={cfg['dtype']} {P} steps of {inputs.shape[1]} x {inputs.shape[2]} "
          f"tokens, learning_rate={cfg['learning_rate']} (JAX's trajectory {secs:.0f} s; {len(controls)} controls)")
    print(f"  {'':>11}  {'mean loss':^20}  {'C / JAX':^18}  " + (f"{'controls / JAX':^18}  " if ctl else "")
          + f"{'mean grad norm':^19}")
    print(f"  {'steps':>11}  {'C':>9}  {'JAX':>9}  {'mean':>8}  {'step max':>8}  "
          + (f"{'mean':>8}  {'step max':>8}  " if ctl else "") + f"{'C':>8}  {'JAX':>9}")
    for i in range(len(mc)):
        a, b = i * w, min(P, (i + 1) * w) - 1
        cols = ""
        if ctl:
            cols = (f"{max(s[2][i] for s in sides[1:]):8.1e}  "
                    f"{max(s[1][a:b + 1].max() for s in sides[1:]):8.1e}  ")
        print(f"  {a:>5}-{b:<5}  {mc[i]:9.5f}  {mj[i]:9.5f}  {wrel[i]:8.1e}  {rel[a:b + 1].max():8.1e}  "
              + cols + f"{nc[i]:8.4f}  {nj[i]:9.4f}")
    for who, r, wr in sides:
        firsts = ", ".join(f"{lv:.0e} at step {first_above(r, lv)}" if first_above(r, lv) is not None
                           else f"{lv:.0e} never" for lv in LEVELS)
        print(f"  {who} against JAX: a step's loss first differs by more than {firsts}; largest: a step's "
              f"{r.max():.2e} (step {int(r.argmax())}), a window's mean {wr.max():.2e} (steps from {int(wr.argmax()) * w})")
    print(f"  the last {w} steps' mean loss: C {mc[-1]:.5f}, JAX {mj[-1]:.5f}")
    # (written so that a NaN fails: every comparison with one is false)
    bad = [] if np.all(np.isfinite(c_loss)) and np.all(np.isfinite(j_loss)) else ["a loss is not finite"]
    if args.bound is not None and not wrel.max() <= args.bound:
        bad.append(f"a window's mean loss differs by {wrel.max():.2e} > {args.bound:.0e}")
    if args.step_bound is not None and not rel.max() <= args.step_bound:
        bad.append(f"a step's loss differs by {rel.max():.2e} > {args.step_bound:.0e}")
    print("FAIL: " + "; ".join(bad) if bad else "PASS" if args.bound is not None or args.step_bound is not None
          else "(no bound given)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
