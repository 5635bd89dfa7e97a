#!/usr/bin/env python3
"""Self-tests of the JAX reference (no C trainer needed).

Usage:  selftest.py            (two to three minutes on 2 cores; tiny configs only)

1. bf16 rounding survives jit (no convert pair is simplified away).
2. Capacity dropping on MaxText's documented example.
3. DeepSeek group-limited routing against a brute-force numpy version.
4. jax.grad of loss_fn against central finite differences, in float64, for Mixtral and
   DeepSeek configs covering: sparse, dense, dense + capacity, load-balance loss, z-loss,
   q_lora_rank = 0, nonzero routing bias.
5. Dense and sparse dispatch agree (float32, capacity off): logits, loss and gradients.
6. Gradient accumulation: a loop over microbatches that sums unnormalised terms and
   divides once equals loss_fn on the whole global batch (loss and gradients).
7. Learning-rate schedule against the formula of docs/model.md#optimizer-and-schedule; one optax update against a
   hand-written clip + AdamW step.
8. Aux-loss-free bias update rule.
9. bf16 mode: values are bf16-representable, the loss is close to float32, and
   float32_weight_sum changes the result.
10. compare.py: PASS on a dump whose c/ results are the JAX ones, FAIL when perturbed;
    the per-step bounds (teacher-forced and free-running, float32 and bfloat16); MISSING and
    EXTRA rows fail.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reference as ref  # noqa: E402  (sets XLA flags and jax config first)
import make_fake_dump as mfd  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

jax.config.update("jax_enable_x64", True)

TINY = ["base_emb_dim=16", "vocab_size=32", "max_target_length=8", "per_device_batch_size=2", "parity_steps=1"]
TINY_MIXTRAL = TINY + ["base_num_query_heads=2", "base_num_kv_heads=1", "head_dim=8", "base_mlp_dim=24"]
TINY_DEEPSEEK = TINY + ["base_num_query_heads=2", "base_num_kv_heads=2", "q_lora_rank=8", "kv_lora_rank=8",
                        "qk_nope_head_dim=4", "qk_rope_head_dim=4", "v_head_dim=4", "base_mlp_dim=24",
                        "base_moe_mlp_dim=12"]
FAILURES = []


def check(name, ok, detail=""):
    print(f"  [{'ok' if ok else 'FAIL'}] {name} {detail}")
    if not ok:
        FAILURES.append(name)


def setup(preset, overrides, dtype=np.float32, seed=0, bias_std=0.0):
    base = TINY_MIXTRAL if preset == "mixtral" else TINY_DEEPSEEK
    cfg, extra = mfd.build_config(preset, base + list(overrides))
    extra.update(seed=seed, bias_std=bias_std)
    t = mfd.make_dump(cfg, **extra)
    params = {k[6:]: jnp.asarray(v.astype(dtype)) for k, v in t.items() if k.startswith("param/")}
    state = {k[6:]: jnp.asarray(v.astype(dtype)) for k, v in t.items() if k.startswith("state/")}
    return cfg, params, state, jnp.asarray(t["batch/inputs"][0]), jnp.asarray(t["batch/targets"][0])


def rel_max(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def test_rounding():
    print("1. bf16 rounding under jit")
    c = ref.Casts({"dtype": "bfloat16"}, jnp.float32)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(4096).astype(np.float32))
    f = jax.jit(lambda v: c.rb(c.rb(v * 1.001) + 1e-3))
    expect = (np.asarray(x * 1.001).astype(jnp.bfloat16).astype(np.float32) + np.float32(1e-3))
    expect = expect.astype(jnp.bfloat16).astype(np.float32)
    check("jit keeps the rounding", np.array_equal(np.asarray(f(x)), expect))


def test_capacity():
    print("2. capacity dropping (MaxText example: tokens -> [0,1] and [1,3], C=1)")
    idx = jnp.asarray([[[0, 1], [1, 3]]])
    keep = np.asarray(ref.capacity_keep(idx, 4, 1.0))
    check("second assignment to expert 1 dropped", keep.tolist() == [[[True, True], [False, True]]], keep.tolist())
    idx = jnp.asarray(np.random.default_rng(1).integers(0, 4, size=(3, 10, 2)))
    keep = np.asarray(ref.capacity_keep(idx, 4, 1.5))  # C = int(ceil(20/4)*1.5) = 7
    ok = True
    for b in range(3):
        seen = {}
        for s in range(10):
            for k in range(2):
                e = int(idx[b, s, k])
                seen[e] = seen.get(e, 0) + 1
                ok &= keep[b, s, k] == (seen[e] <= 7)
    check("running count, s-major, C=7", bool(ok))


def test_group_routing():
    print("3. DeepSeek group-limited routing vs brute force")
    cfg = {"num_experts_per_tok": 3, "n_routing_groups": 4, "topk_routing_group": 2, "routed_scaling_factor": 2.5}
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((2, 16, 8)).astype(np.float32)
    bias = (rng.standard_normal(8) * 0.1).astype(np.float32)
    c = ref.Casts({"dtype": "float32"}, jnp.float32)
    w, idx, sel = ref.route_deepseek(jnp.asarray(logits), jnp.asarray(bias), cfg, c)
    ok = True
    for b in range(2):
        for t in range(16):
            s = 1 / (1 + np.exp(-logits[b, t].astype(np.float64)))
            sp = s + bias
            gs = np.sort(sp.reshape(4, 2), axis=1)[:, -2:].sum(1)
            groups = sorted(np.argsort(-gs, kind="stable")[:2])
            allowed = [e for e in range(8) if e // 2 in groups]
            chosen = sorted(allowed, key=lambda e: -sp[e])[:3]
            ok &= sorted(chosen) == sorted(np.asarray(idx[b, t]).tolist())
            ww = s[np.asarray(idx[b, t])]
            ok &= np.allclose(ww / ww.sum() * 2.5, np.asarray(w[b, t]), rtol=1e-5)
    check("selection and weights", bool(ok))
    # DeepSeek-V2's group_limited_greedy: softmax probabilities, a group ranked by its best
    cfg.update(decoder_block="deepseek", num_experts_per_tok=2, topk_routing_group=1)
    w, idx, p = ref.route_softmax(jnp.asarray(logits), cfg, c)
    ok = True
    for b in range(2):
        for t in range(16):
            pr = np.exp(logits[b, t].astype(np.float64))
            pr /= pr.sum()
            group = int(np.argmax(pr.reshape(4, 2).max(1)))
            chosen = sorted(range(2 * group, 2 * group + 2), key=lambda e: -pr[e])
            ok &= chosen == np.asarray(idx[b, t]).tolist()
            ok &= np.allclose(pr[chosen] * 2.5, np.asarray(w[b, t]), rtol=1e-5)
    check("softmax scores, groups ranked by their best (DeepSeek-V2): selection and weights", bool(ok))


def fd_check(label, preset, overrides, bias_std=0.0, n_per_tensor=2, h=1e-6):
    cfg, params, state, x, y = setup(preset, overrides, np.float64, seed=3, bias_std=bias_std)

    def f(p):
        return ref.loss_fn(p, state, x, y, cfg, base=jnp.float64)[0]

    loss_j = jax.jit(f)
    g = jax.jit(jax.grad(f))(params)
    rng = np.random.default_rng(4)
    worst = 0.0
    for name in sorted(params):
        arr = np.asarray(params[name])
        for _ in range(n_per_tensor):
            i = tuple(int(rng.integers(0, s)) for s in arr.shape)
            plus, minus = arr.copy(), arr.copy()
            plus[i] += h
            minus[i] -= h
            fd = (float(loss_j({**params, name: jnp.asarray(plus)})) -
                  float(loss_j({**params, name: jnp.asarray(minus)}))) / (2 * h)
            an = float(np.asarray(g[name])[i])
            err = abs(fd - an) / max(abs(an), 1e-3)
            worst = max(worst, err)
    check(f"grad vs finite differences: {label}", worst < 1e-5, f"(worst rel err {worst:.2e})")


def test_fd():
    print("4. jax.grad vs central finite differences (float64)")
    fd_check("mixtral sparse", "mixtral", ["sparse_matmul=true"])
    fd_check("mixtral dense", "mixtral", ["sparse_matmul=false"])
    fd_check("mixtral dense capacity 1.0", "mixtral", ["sparse_matmul=false", "capacity_factor=1.0"])
    fd_check("mixtral lb 0.01 + z-loss 1e-4", "mixtral", ["load_balance_loss_weight=0.01", "z_loss_multiplier=1e-4"])
    fd_check("deepseek sparse, bias", "deepseek", ["sparse_matmul=true"], bias_std=0.05)
    fd_check("deepseek dense q_lora 0, lb 0.01", "deepseek",
             ["sparse_matmul=false", "q_lora_rank=0", "load_balance_loss_weight=0.01"], bias_std=0.05)


def test_dense_vs_sparse():
    print("5. dense vs sparse dispatch (float32, capacity off)")
    for preset in ("mixtral", "deepseek"):
        res = {}
        for sparse in (True, False):
            cfg, params, state, x, y = setup(preset, [f"sparse_matmul={json.dumps(sparse)}", "capacity_factor=-1"],
                                             seed=5, bias_std=0.05)
            (loss, aux), g = jax.jit(jax.value_and_grad(lambda p: ref.loss_fn(p, state, x, y, cfg), has_aux=True))(params)
            res[sparse] = (loss, aux["logits"], g)
        dl = abs(float(res[True][0]) - float(res[False][0])) / abs(float(res[False][0]))
        dz = rel_max(res[True][1], res[False][1])
        dg = max(rel_max(res[True][2][k], res[False][2][k]) for k in res[False][2])
        check(f"{preset}: loss {dl:.1e}, logits {dz:.1e}, worst grad {dg:.1e}", max(dl, dz, dg) < 1e-5)


def test_ga():
    print("6. gradient accumulation: microbatch loop == one global batch")
    for preset, ov in (("mixtral", ["load_balance_loss_weight=0.01", "z_loss_multiplier=1e-4"]),
                       ("deepseek", ["load_balance_loss_weight=0.01"])):
        A = 2
        cfg, params, state, x, y = setup(preset, ov + [f"gradient_accumulation_steps={A}"], np.float64, seed=6)
        B = cfg["per_device_batch_size"]
        full = jax.jit(jax.value_and_grad(lambda p: ref.loss_fn(p, state, x, y, cfg, base=jnp.float64)[0]))
        loss_full, g_full = full(params)
        n_tok = float(jnp.sum(y >= 0))
        n_seq = x.shape[0]
        n_moe = sum(ref.is_moe_layer(i, cfg) for i in range(cfg["base_num_decoder_layers"]))

        def micro(p, xm, ym):
            t = ref.loss_terms(p, state, xm, ym, cfg, base=jnp.float64)
            return t["ce_sum"] / n_tok + sum(t["lb_seq_sums"]) / n_seq / n_moe

        mg = jax.jit(jax.value_and_grad(micro))
        loss_loop, g_loop = 0.0, None
        for m in range(A):
            lm, gm = mg(params, x[m * B:(m + 1) * B], y[m * B:(m + 1) * B])
            loss_loop += float(lm)
            g_loop = gm if g_loop is None else jax.tree.map(jnp.add, g_loop, gm)
        dl = abs(loss_loop - float(loss_full)) / abs(float(loss_full))
        dg = max(rel_max(g_loop[k], g_full[k]) for k in g_full)
        check(f"{preset} A=2: loss {dl:.1e}, worst grad {dg:.1e}", max(dl, dg) < 1e-12)


def test_optimizer():
    print("7. schedule and optimizer")
    ok = True
    # MaxText's pieces written out: the warm-up reaches the peak at its last step (W - 1
    # transitions; a warm-up of one step is 0), the cosine's last step is the final rate (a
    # cosine of one step is), the wsd's linear decay of one step stays at the peak.
    def want_lr(cfg, k):
        lr, steps = cfg["learning_rate"], cfg["steps"]
        length = cfg.get("learning_rate_schedule_steps", steps)
        final = 0.1 * lr
        warm = int(cfg["warmup_steps_fraction"] * length)
        if k >= length:
            return 0.0
        if k < warm:
            return lr * k / (warm - 1) if warm > 1 else 0.0

        def cos_piece(n, j):
            a = 0.5 * (math.cos(math.pi * (j / (n - 1) if n > 1 else 1.0)) + 1)
            return lr * a + final * (1 - a)
        if cfg.get("lr_schedule_type", "cosine") == "cosine":
            return cos_piece(length - warm, k - warm)
        decay = int(cfg["wsd_decay_steps_fraction"] * length)
        j = k - (length - decay)
        if j < 0:
            return lr
        if cfg["wsd_decay_style"] == "cosine":
            return cos_piece(decay, j)
        return lr + (final - lr) * j / (decay - 1) if decay > 1 else lr

    cases = [dict(steps=10, warmup_steps_fraction=0.1), dict(steps=8, warmup_steps_fraction=0.25),
             dict(steps=5, warmup_steps_fraction=0.0), dict(steps=5, warmup_steps_fraction=0.8),
             dict(steps=1, warmup_steps_fraction=0.0), dict(steps=10, warmup_steps_fraction=0.3),
             dict(steps=12, warmup_steps_fraction=0.25, learning_rate_schedule_steps=8),
             dict(steps=300, warmup_steps_fraction=0.21)]   # int(0.21 * 300) = 63, the float32's 62.99999
    for style in ("linear", "cosine"):
        for warm, decay in ((0.2, 0.4), (0.0, 0.1), (0.3, 0.7), (0.1, 0.0)):
            cases.append(dict(steps=10, warmup_steps_fraction=warm, lr_schedule_type="wsd",
                              wsd_decay_steps_fraction=decay, wsd_decay_style=style))
    for case in cases:
        cfg = dict(case, learning_rate=3e-3, learning_rate_final_fraction=0.1)
        sched = ref.lr_schedule(cfg)
        for k in range(cfg["steps"]):
            ok &= abs(float(sched(k)) - want_lr(cfg, k)) <= 1e-6 * 3e-3
    check(f"lr schedule matches MaxText's pieces ({len(cases)} schedules: cosine, wsd linear and cosine, warm-up of 0 and 1 step, pieces of one step, a schedule shorter than the run)", bool(ok))

    cfg = {"learning_rate": 1e-2, "steps": 4, "warmup_steps_fraction": 0.25, "learning_rate_final_fraction": 0.1,
           "adam_b1": 0.9, "adam_b2": 0.95, "adam_eps": 1e-8, "adam_weight_decay": 0.1,
           "gradient_clipping_threshold": 1.0}
    rng = np.random.default_rng(7)
    p = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(5)}
    gs = [{k: rng.standard_normal(v.shape) * 0.7 for k, v in p.items()} for _ in range(3)]
    opt = ref.make_optimizer(cfg)
    st = opt.init(p)
    pj = dict(p)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    ph = {k: v.copy() for k, v in p.items()}
    sched = ref.lr_schedule(cfg)
    for t, g in enumerate(gs):
        u, st = opt.update(g, st, pj)
        pj = optax.apply_updates(pj, u)
        norm = math.sqrt(sum(float(np.sum(x ** 2)) for x in g.values()))
        scale = 1.0 if norm < 1.0 else 1.0 / norm
        lr = float(sched(t))
        for k in p:
            gc = g[k] * scale
            m[k] = 0.9 * m[k] + 0.1 * gc
            v2[k] = 0.95 * v2[k] + 0.05 * gc ** 2
            mh = m[k] / (1 - 0.9 ** (t + 1))
            vh = v2[k] / (1 - 0.95 ** (t + 1))
            ph[k] = ph[k] - lr * (mh / (np.sqrt(vh) + 1e-8) + 0.1 * ph[k])
    err = max(float(np.max(np.abs(np.asarray(pj[k]) - ph[k]))) for k in p)
    check("clip + optax.adamw == p -= lr*(mhat/(sqrt(vhat)+eps) + wd*p), lr(t) for update t",
          err < 1e-12, f"(max diff {err:.1e}; first update uses lr(0) = {float(sched(0))})")


def test_bias_update():
    print("8. aux-loss-free bias update")
    cfg = {"routed_bias": True, "routed_bias_update_rate": 0.01, "num_experts": 4, "num_experts_per_tok": 2}
    state = {"decoder/layers_1/MoeBlock_0/gate/bias": jnp.zeros(4, jnp.float32)}
    counts = jnp.asarray([10, 6, 8, 8])  # T*K = 32, T*K/E = 8
    new = ref.bias_update(state, {1: {"counts": counts}}, cfg)
    got = np.asarray(new["decoder/layers_1/MoeBlock_0/gate/bias"]).tolist()
    check("b += rate*sign(T*K/E - count)", np.allclose(got, [-0.01, 0.01, 0.0, 0.0]), got)


def test_bf16():
    print("9. bf16 mode")
    for preset in ("mixtral", "deepseek"):
        out = {}
        for mode in ("float32", "bfloat16"):
            for wsum in (True, False):
                cfg, params, state, x, y = setup(preset, [f"dtype={mode}", f"float32_weight_sum={json.dumps(wsum)}"], seed=8)
                loss, aux = jax.jit(lambda p: ref.loss_fn(p, state, x, y, cfg))(params)   # the forward pass only
                out[(mode, wsum)] = (float(loss), np.asarray(aux["logits"]))
        lg = out[("bfloat16", True)][1]
        representable = np.array_equal(lg, lg.astype(jnp.bfloat16).astype(np.float32))
        rel = abs(out[("bfloat16", True)][0] - out[("float32", True)][0]) / out[("float32", True)][0]
        dw = out[("bfloat16", False)][0] - out[("bfloat16", True)][0]
        df32 = out[("float32", False)][0] - out[("float32", True)][0]
        check(f"{preset}: bf16 logits are bf16 values", representable)
        check(f"{preset}: |loss bf16 - loss f32| / loss = {rel:.1e} < 1e-2", rel < 1e-2)
        check(f"{preset}: float32_weight_sum false - true = {dw:+.2e} (bf16), {df32:+.1e} (f32 mode: no effect)",
              dw != 0.0 and df32 == 0.0)


def check_step_bounds(py, dump, jout, meta, fake_c):
    """The per-step rows of compare.py: teacher-forced losses (float32 1e-5, bfloat16
    TF_LOSS_TOL_BF16) and the free-running bfloat16 trajectory (FREE_STEP_TOL_BF16), each
    passing inside its bound and failing outside; a bf16 dump without them fails."""
    import compare

    def verdict(dtype, changes, drop=""):
        c = {k: v for k, v in fake_c.items() if not (drop and k.startswith(drop))}
        c.update(changes)
        save_file(c, dump, metadata=meta)
        r = subprocess.run([py, os.path.join(HERE, "compare.py"), dump, jout, "--case", "self", "--dtype", dtype],
                           capture_output=True, text=True)
        return r.returncode, r.stdout.splitlines()[-1], r.stdout

    def off(name, step, rel):
        a = fake_c[name].copy()
        a[step] *= 1.0 + rel
        return {name: a}

    one_fail = (1, "case self: FAIL (1 tensors)")
    check("float32: teacher-forced step-1 loss off by 2e-5 FAILs", verdict("float32", off("c/steps/loss", 1, 2e-5))[:2] == one_fail)
    tf, free = compare.TF_LOSS_TOL_BF16, compare.FREE_STEP_TOL_BF16
    check(f"bfloat16: teacher-forced step-1 loss off by {tf / 2:.0e} PASSes", verdict("bfloat16", off("c/steps/loss", 1, tf / 2))[0] == 0)
    check(f"bfloat16: ... off by {2 * tf:.0e} FAILs", verdict("bfloat16", off("c/steps/loss", 1, 2 * tf))[:2] == one_fail)
    check(f"bfloat16: free-running step-1 loss off by {free / 2:.0e} PASSes", verdict("bfloat16", off("c/step_losses", 1, free / 2))[0] == 0)
    check(f"bfloat16: ... off by {2 * free:.0e} FAILs", verdict("bfloat16", off("c/step_losses", 1, 2 * free))[:2] == one_fail)
    rc, _, out = verdict("bfloat16", {}, drop="c/steps/")
    check("bfloat16: C results without the teacher-forced steps FAIL (MISSING)", rc == 1 and " MISSING" in out)
    rc, _, out = verdict("float32", {"c/grad/not_in_the_reference": np.zeros(4, np.float32)})
    check("float32: a C result the reference did not write FAILs (EXTRA)", rc == 1 and " EXTRA" in out)


def test_compare():
    print("10. compare.py on a self-made C result")
    with tempfile.TemporaryDirectory() as d:
        cfg, extra = mfd.build_config("deepseek", TINY_DEEPSEEK + ["parity_steps=2"])
        t = mfd.make_dump(cfg, **extra)
        meta = {"config": json.dumps(cfg)}
        dump = os.path.join(d, "dump.safetensors")
        save_file(t, dump, metadata=meta)
        jout = os.path.join(d, "jax.safetensors")
        py = sys.executable
        subprocess.run([py, os.path.join(HERE, "reference.py"), dump, jout], check=True, capture_output=True)
        from safetensors.numpy import load_file
        j = load_file(jout)
        fake_c = dict(t)
        for k, v in j.items():
            fake_c["c/" + k[4:]] = v
        save_file(fake_c, dump, metadata=meta)
        r = subprocess.run([py, os.path.join(HERE, "compare.py"), dump, jout, "--case", "self"], capture_output=True, text=True)
        check("identical results PASS", r.returncode == 0 and "case self: PASS" in r.stdout, r.stdout.strip().splitlines()[-1])
        check_step_bounds(py, dump, jout, meta, fake_c)
        save_file(fake_c, dump, metadata=meta)
        # a tie: C picked another expert whose selection score equals the replaced one's.
        # A real tie is seen by both sides (their scores agree to rounding), so the tied
        # score goes into both files; otherwise the scores row itself (rightly) FAILs.
        idx, sc = "c/router/layers_1/indices", "c/router/layers_1/scores"
        fake_c[idx], fake_c[sc] = fake_c[idx].copy(), fake_c[sc].copy()
        tok = fake_c[idx][0, 0]
        other = [e for e in range(cfg["num_experts"]) if e not in tok][0]
        fake_c[sc][0, 0, other] = fake_c[sc][0, 0, tok[-1]]
        tok[-1] = other
        save_file(fake_c, dump, metadata=meta)
        j["jax/router/layers_1/scores"] = fake_c[sc].copy()
        save_file(j, jout)
        r = subprocess.run([py, os.path.join(HERE, "compare.py"), dump, jout, "--case", "self"], capture_output=True, text=True)
        tie_row = [ln for ln in r.stdout.splitlines() if ln.startswith("router/layers_1/indices")]
        check("router difference at a tie is TIE, case PASS",
              r.returncode == 0 and tie_row and tie_row[0].split()[-1] == "TIE", tie_row[0] if tie_row else r.stdout)
        # a non-tie router difference and a gradient off by 1e-3 of its max
        tok = fake_c[idx][1, 2]
        tok[:] = [e for e in range(cfg["num_experts"]) if e not in tok][: len(tok)]
        name = "c/grad/decoder/moe_layers_0/DeepSeekMoeBlock_0/MoeBlock_0/wi_0"
        fake_c[name] = fake_c[name] + 1e-3 * np.abs(fake_c[name]).max()
        save_file(fake_c, dump, metadata=meta)
        r = subprocess.run([py, os.path.join(HERE, "compare.py"), dump, jout, "--case", "self"], capture_output=True, text=True)
        check("perturbed gradient and non-tie router difference FAIL",
              r.returncode == 1 and r.stdout.splitlines()[-1] == "case self: FAIL (2 tensors)", r.stdout.splitlines()[-1])


def main():
    test_rounding()
    test_capacity()
    test_group_routing()
    test_fd()
    test_dense_vs_sparse()
    test_ga()
    test_optimizer()
    test_bias_update()
    test_bf16()
    if os.path.exists(os.path.join(HERE, "compare.py")):
        test_compare()
    print(f"selftest: {'PASS' if not FAILURES else 'FAIL: ' + ', '.join(FAILURES)}")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
