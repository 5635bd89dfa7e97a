#!/usr/bin/env python3
"""The same training step as meshmoe in PyTorch eager and in JAX jit, for `make bench`.

Usage:  bench_peers.py {torch,torch-remat,torch-compile,jax} DUMP STEPS            (make bench, the CPU)
        bench_peers.py {torch,torch-remat,torch-compile,jax} DESCRIBE.json STEPS   (make bench-gpu)

DUMP is a parity dump of the C trainer (`./train CONFIG dump_parity=DIR parity_steps=1`):
its config gives the model's dimensions and its first batch the tokens, so both peers
train the very model and batch that meshmoe trains. DESCRIBE.json is what `./train describe
CONFIG` prints for a model too large to dump (the GPU presets): the config and every
tensor's name and shape; the weights are then drawn by the framework on its device (normal,
std 0.02; norm scales 1: torch's model draws its own, at transformers' initialisation) and
the batch is random tokens, which is all a timing needs. Prints one line per step,
`step N seconds T loss L`, then `params P` (the trained parameter count, to check the
mapping) and, on a GPU, `peak_bytes B` (the framework's allocator peak).

On a GPU (CUDA visible to the framework) the peers run there, in the config's dtype:
bfloat16 is torch.autocast over float32 master weights with the fused AdamW (torch), and
tests/parity/reference.py's model with bfloat16 compute over float32 master weights (jax);
torch-compile is the torch peer under torch.compile.

torch: transformers' MixtralForCausalLM or DeepseekV3ForCausalLM with the dimensions
mapped from the config, float32, train mode, loss.backward(), gradient clipping at the
config's threshold, torch.optim.AdamW; `torch.set_num_threads(2)`, PyTorch's default
attention implementation. torch-remat: the same with transformers' gradient checkpointing
(each decoder layer's forward recomputed in the backward, torch.utils.checkpoint without
reentry): what meshmoe's presets do with remat_policy=full.
jax: tests/parity/reference.py's model (the JAX reference of the parity tests), one
jax.jit of value_and_grad + optax's clip and AdamW (make_optimizer), float32.
"""
import functools
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_model(cfg):
    import torch
    import transformers as tf

    common = dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["base_emb_dim"],
                  num_hidden_layers=cfg["base_num_decoder_layers"],
                  num_attention_heads=cfg["base_num_query_heads"],
                  max_position_embeddings=cfg["max_target_length"],
                  rms_norm_eps=cfg["normalization_layer_epsilon"], tie_word_embeddings=False,
                  rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_max_timescale"]},
                  num_experts_per_tok=cfg["num_experts_per_tok"], use_cache=False)
    if cfg["decoder_block"] == "deepseek":
        conf = tf.DeepseekV3Config(
            intermediate_size=cfg["base_mlp_dim"], moe_intermediate_size=cfg["base_moe_mlp_dim"],
            num_key_value_heads=cfg["base_num_query_heads"], n_shared_experts=cfg["shared_experts"],
            n_routed_experts=cfg["num_experts"], routed_scaling_factor=cfg["routed_scaling_factor"],
            kv_lora_rank=cfg["kv_lora_rank"], q_lora_rank=cfg["q_lora_rank"] or None,
            qk_rope_head_dim=cfg["qk_rope_head_dim"], v_head_dim=cfg["v_head_dim"],
            qk_nope_head_dim=cfg["qk_nope_head_dim"], n_group=cfg["n_routing_groups"],
            topk_group=cfg["topk_routing_group"], first_k_dense_replace=cfg["first_num_dense_layers"],
            **common)
        model = tf.DeepseekV3ForCausalLM(conf)
    else:
        conf = tf.MixtralConfig(
            intermediate_size=cfg["base_mlp_dim"], num_key_value_heads=cfg["base_num_kv_heads"],
            head_dim=cfg["head_dim"], num_local_experts=cfg["num_experts"], **common)
        model = tf.MixtralForCausalLM(conf)
    return model.to(torch.float32).train()


def run_torch(cfg, inputs, steps, compiled=False, remat=False):
    import contextlib
    import torch
    gpu = torch.cuda.is_available()
    dev = "cuda" if gpu else "cpu"
    if not gpu:
        torch.set_num_threads(2)
    torch.manual_seed(0)
    with torch.device(dev):   # the weights made and initialised on the GPU: seconds, not minutes
        model = torch_model(cfg)
    if remat:   # every decoder layer's forward again in the backward (older transformers: gradient_*)
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"], betas=(cfg["adam_b1"], cfg["adam_b2"]),
                            eps=cfg["adam_eps"], weight_decay=cfg["adam_weight_decay"], fused=gpu)
    bf16 = gpu and cfg["dtype"] == "bfloat16"
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    forward = torch.compile(model) if compiled else model
    x = torch.from_numpy(inputs.astype("int64")).to(dev)
    times, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        with autocast():
            loss = forward(input_ids=x, labels=x).loss
        loss.backward()
        if cfg["gradient_clipping_threshold"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["gradient_clipping_threshold"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))   # (waits for the step: the time includes all of it)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if gpu else None
    return times, losses, sum(p.numel() for p in model.parameters()), peak


def run_jax(cfg, params, state, inputs, targets, steps):
    sys.path.insert(0, os.path.join(HERE, "parity"))
    # JAX's allocator holds 75% of a GPU by default: deepseek-medium's jitted step asked for
    # one more 36.94 GiB buffer than that left (an H200, 2026-11-30); the other peers may use
    # the whole GPU too.
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    dump = os.environ.get("BENCH_XLA_DUMP")   # (make bench-gpu: how XLA lowered the experts' products)
    if dump:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*jit_step.*").strip()
    import jax
    import jax.numpy as jnp
    import optax
    import reference as ref

    if params is None:   # a DESCRIBE.json: the weights drawn on the device (see from_describe)
        params, state = draw_jax(cfg["shapes"], cfg["state_shapes"])
    params = {k: jnp.asarray(v) for k, v in params.items()}
    state = {k: jnp.asarray(v) for k, v in state.items()}
    opt = ref.make_optimizer(cfg)
    opt_state = opt.init(params)
    gpu = jax.default_backend() == "gpu"
    # On a GPU in bfloat16 the compute dtype is bfloat16 (float32 masters, float32 accumulation
    # in the products); elsewhere the reference's float32.
    base = jnp.bfloat16 if gpu and cfg["dtype"] == "bfloat16" else jnp.float32

    # The parameters and the optimizer state are donated, as a JAX trainer does: the step
    # writes their new values over the old ones' buffers rather than beside them.
    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(p, o, x, y):
        (loss, _), grads = jax.value_and_grad(lambda q: ref.loss_fn(q, state, x, y, cfg, base), has_aux=True)(p)
        updates, o = opt.update(grads, o, p)
        return optax.apply_updates(p, updates), o, loss

    x, y = jnp.asarray(inputs), jnp.asarray(targets)
    times, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, x, y)
        losses.append(float(loss))   # (waits for the step)
        times.append(time.perf_counter() - t0)
    peak = jax.devices()[0].memory_stats().get("peak_bytes_in_use") if gpu else None
    if dump:
        print(ragged_dots(dump))
    return times, losses, sum(int(v.size) for v in params.values()), peak


def ragged_dots(dump):
    """How XLA lowered the step's jax.lax.ragged_dot ops (the sparse experts' products and their
    gradients), from its HLO dumps: those left ragged-dot after its optimizations became grouped
    products (cuDNN's fusion on NVIDIA GPUs); the others it expanded to dense products over
    operands padded with zeros to every expert, num_experts / experts_per_tok times the FLOPs."""
    import glob

    def count(kind):
        names = sorted(glob.glob(os.path.join(dump, f"*jit_step*{kind}.txt")))
        return sum(open(n, errors="replace").read().count(" ragged-dot(") for n in names[-1:]) if names else None

    before, after = count("before_optimizations"), count("after_optimizations")
    if before is None or after is None:
        return f"xla ragged_dot: no HLO dump of the step in {dump}"
    if before == 0:   # (JAX on a CPU, or a JAX that does not hand XLA the instruction)
        return "xla ragged_dot: the step's HLO holds no ragged-dot op: JAX lowered jax.lax.ragged_dot itself"
    return (f"xla ragged_dot: {after} of the step's {before} ragged_dot ops kept as grouped products after XLA's "
            f"optimizations, {before - after} expanded to zero-padded dense products")


def draw_jax(shapes, state_shapes):
    """Weights of the given shapes drawn by JAX on its device: normal with std 0.02, norm
    scales 1; the state (the routers' biases) zeros."""
    import jax
    import jax.numpy as jnp
    keys = jax.random.split(jax.random.PRNGKey(0), len(shapes))
    params = {k: (jnp.ones(s, jnp.float32) if k.endswith("/scale") else 0.02 * jax.random.normal(key, s, jnp.float32))
              for key, (k, s) in zip(keys, sorted(shapes.items()))}
    return params, {k: jnp.zeros(s, jnp.float32) for k, s in state_shapes.items()}


def from_describe(path):
    """The config and a random batch for DESCRIBE.json (see the docstring); the weights are
    drawn by the framework that trains them (params None, their shapes in the config)."""
    import json
    import numpy as np
    with open(path) as f:
        d = json.load(f)
    cfg = dict(d["config"], shapes={k: tuple(s) for k, s in d["params"].items()},
               state_shapes={k: tuple(s) for k, s in d["state"].items()})
    rng = np.random.default_rng(0)
    B = cfg["per_device_batch_size"] * cfg.get("gradient_accumulation_steps", 1)
    ids = rng.integers(0, cfg["vocab_size"], size=(B, cfg["max_target_length"] + 1), dtype=np.int32)
    return cfg, None, None, ids[:, :-1], ids[:, 1:]


def from_dump(dump):
    """The config, weights and first batch of a parity dump."""
    from safetensors import safe_open
    import json
    with safe_open(dump, framework="numpy") as f:
        cfg = json.loads(f.metadata()["config"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    params = {k[len("param/"):]: v for k, v in tensors.items() if k.startswith("param/")}
    state = {k[len("state/"):]: v for k, v in tensors.items() if k.startswith("state/")}
    return cfg, params, state, tensors["batch/inputs"][0], tensors["batch/targets"][0]


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("torch", "torch-remat", "torch-compile", "jax"):
        sys.exit("usage: bench_peers.py {torch,torch-remat,torch-compile,jax} DUMP.safetensors|DESCRIBE.json STEPS")
    which, source, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, os.path.join(HERE, "parity"))
    cfg, params, state, inputs, targets = (from_describe if source.endswith(".json") else from_dump)(source)
    if which == "jax":
        times, losses, n, peak = run_jax(cfg, params, state, inputs, targets, steps)
    else:
        times, losses, n, peak = run_torch(cfg, inputs, steps, compiled=which == "torch-compile",
                                           remat=which == "torch-remat")
    for i, (t, loss) in enumerate(zip(times, losses)):
        print(f"step {i} seconds {t:.4f} loss {loss:.6g}")
    print(f"params {n}")
    if peak is not None:
        print(f"peak_bytes {peak}")


if __name__ == "__main__":
    main()
