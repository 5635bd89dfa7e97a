#!/usr/bin/env python3
"""How far a parity trajectory moves under rounding-level noise (the measurement behind
the free-running bfloat16 bound of compare.py).

Usage:  spread.py DUMP.safetensors [--seeds N] [--ulp-bits B]

Runs the reference's free-running trajectory of the dump's `parity_steps` steps once as
it is and N more times with noise of one bfloat16 ulp on every gradient: each element of
each step's gradient is scaled by (1 + r * 2^-8), r = +-1 at random. A bf16 gradient is
the rounded gradient of the bf16 weight copy (reference.py, cast point 18), so two
correct implementations that round some intermediate differently get gradients that
differ by about that much (step 0, C against JAX: max abs diff / max |ref| 2e-3 to 1e-2 per
tensor). Prints per step: the C loss's relative deviation from the unperturbed JAX loss,
and the largest relative deviation over the N noisy JAX runs.

--ulp-bits B makes the noise 2^-B in place of bf16's 2^-8: 23 is a float32 ulp, the size of
the differences between C's float32 gradients and JAX's (step 0: max abs diff / max |ref|
1e-7 to 1e-6 per tensor), for a float32 case (the mu_dtype=bfloat16 bound of compare.py).

Run it under other XLA code paths (XLA_FLAGS=--xla_cpu_max_isa=AVX, =SSE4_2, ...) to see
the same trajectory's spread across CPUs.
"""

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as R  # noqa: E402  (also sets XLA_FLAGS and the matmul precision)

ULP = 2.0 ** -8  # bf16 spacing relative to the value, at the bottom of an octave


def ulp_noise(rng, ulp):
    """Noise for free_running: each element of each gradient times (1 + r * ulp), r = +-1 at random."""
    def noise(grads):
        return {k: g * (1.0 + ulp * rng.choice([-1.0, 1.0], size=g.shape).astype(np.float32))
                for k, g in grads.items()}
    return noise


def free_running(cfg, params, state, inputs, targets, grad_fn, update, steps, noise=None):
    """The reference's own trajectory of `steps` clip + AdamW steps from the dump's weights:
    (loss, gradient norm) of each step, float64 arrays. noise(grads) -> grads, where given,
    perturbs each step's gradients before the update."""
    params = {k: jnp.asarray(v) for k, v in params.items()}
    state = {k: jnp.asarray(v) for k, v in state.items()}
    opt_state = R.make_optimizer(cfg).init(params)
    losses, norms = [], []
    for t in range(steps):
        (loss, aux), grads = grad_fn(params, state, jnp.asarray(inputs[t]), jnp.asarray(targets[t]))
        losses.append(float(loss))
        norms.append(float(optax.global_norm(grads)))
        if noise is not None:
            grads = noise(grads)
        updates, opt_state = update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        state = R.bias_update(state, aux["router"], cfg)
    return np.asarray(losses, np.float64), np.asarray(norms, np.float64)


def trajectory(cfg, params, state, inputs, targets, grad_fn, update, rng, ulp=ULP):
    """The step losses of the free-running trajectory; gradient noise when rng is given."""
    return free_running(cfg, params, state, inputs, targets, grad_fn, update, int(cfg["parity_steps"]),
                        ulp_noise(rng, ulp) if rng is not None else None)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--ulp-bits", type=int, default=8)
    args = ap.parse_args(argv)
    cfg, params, state, inputs, targets, tensors = R.load_dump(args.dump)
    grad_fn = jax.jit(jax.value_and_grad(lambda p, s, x, y: R.loss_fn(p, s, x, y, cfg), has_aux=True))
    update = jax.jit(R.make_optimizer(cfg).update)
    ref = trajectory(cfg, params, state, inputs, targets, grad_fn, update, None)
    c = np.asarray(tensors["c/step_losses"], np.float64)
    ulp = 2.0 ** -args.ulp_bits
    noisy = np.stack([trajectory(cfg, params, state, inputs, targets, grad_fn, update, np.random.default_rng(s), ulp)
                      for s in range(1, args.seeds + 1)])
    rel_c = np.abs(c - ref) / np.abs(ref)
    rel_n = np.max(np.abs(noisy - ref) / np.abs(ref), axis=0)
    print(f"spread: {cfg['decoder_block']} dtype={cfg['dtype']} float32_weight_sum={cfg.get('float32_weight_sum')} "
          f"mu_dtype={cfg.get('mu_dtype', '')!r} noise 2^-{args.ulp_bits} XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print("  step      " + " ".join(f"{t:>8d}" for t in range(len(ref))))
    print("  jax loss  " + " ".join(f"{x:8.5f}" for x in ref))
    print("  C rel     " + " ".join(f"{x:8.1e}" for x in rel_c))
    print(f"  noise max " + " ".join(f"{x:8.1e}" for x in rel_n) + f"   ({args.seeds} seeds)")
    print(f"  max over steps: C {rel_c.max():.2e}, noise {rel_n.max():.2e}")


if __name__ == "__main__":
    main()
