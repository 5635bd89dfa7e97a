#!/usr/bin/env python3
"""tests/combos.py: random combinations of the model's options, the meshes and the switches.

The hand-written tests pair each mesh or switch with a few model options; this one draws
combinations of them (a seed makes the draw, so a run is repeatable) and checks, for each:

  mesh    the model options on one device, then with a mesh and switches that keep the bits
          (trainer/rows.c's "bit" rows, remat, offload, scan, shard_mode, ...): the losses and
          grad norms of 3 steps bit-identical, and the sample's text one device's (a drawn
          decode strategy, temperature and prompt: draw_sample);
  resume  2 of 4 steps on one mesh with switches, saved, then 2 more resumed on another mesh
          with other switches: the 4 losses and grad norms those of one device's 4 steps;
  plan    the dry-run planner (dry_run=true) against the measured step: every device's peak
          bytes, peak by tag and live bytes by tag, byte for byte;
  gpu     (not in "all"; --gpu-train build/train_emu, or ./train_gpu on a GPU) the same
          combination trained by ./train and with device=gpu (the ordered GEMM and the default
          attention): 2 steps' losses and grad norms bit-identical, every device's peaks, and the
          sample's text (a drawn decode strategy, as mesh's).
  mpi     (not in "all"; ./train_mpi under mpirun, make mpi) the mesh mode's combination with
          one of its axes cut in two between 2 processes (dcn_X=2, ici_X halved): 3 steps'
          losses and grad norms bit-identical to ./train on the same global mesh, and the
          sample's text the same; or (every other draw) the resume mode's, its first 2 steps
          over the processes and saved, the next 2 resumed by ./train on another mesh.

A combination the trainer refuses must be refused before its first training step, with one
message naming what it refuses ("meshmoe: ...", last), exit status 1 and no crash; it counts
as neither pass nor fail. Usage:

  python3 tests/combos.py [--mode mesh|resume|plan|all|gpu|mpi] [--seed S] [--n N] [--train ./train]
                          [--gpu-train build/train_emu] [--mpi-train ./train_mpi]

`make combos` runs every mode on many draws (COMBOS_N, COMBOS_SEED); `make test` a few.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

FAST = "sample_length=0 eval_steps=1 eval_interval=0 max_target_length=32 log_period=100".split()
GLOBAL_BATCH = 8   # sequences per optimizer step, on every mesh

MESHES = [   # (axes, devices)
    ({"ici_data_parallelism": 2}, 2), ({"ici_fsdp_parallelism": 2}, 2), ({"ici_fsdp_parallelism": 4}, 4),
    ({"ici_tensor_parallelism": 2}, 2), ({"ici_expert_parallelism": 2}, 2), ({"ici_expert_parallelism": 4}, 4),
    ({"ici_data_parallelism": 2, "ici_tensor_parallelism": 2}, 4),
    ({"ici_fsdp_parallelism": 2, "ici_expert_parallelism": 2}, 4),
    ({"ici_fsdp_parallelism": 2, "ici_tensor_parallelism": 2}, 4),
    ({"ici_fsdp_parallelism": 2, "ici_tensor_parallelism": 2, "ici_expert_parallelism": 2}, 8),
    ({"ici_data_parallelism": 2, "shard_optimizer_over_data": "true"}, 2),
    ({"ici_pipeline_parallelism": 2}, 2), ({"ici_pipeline_parallelism": 4}, 4),
    ({"ici_pipeline_parallelism": 2, "ici_fsdp_parallelism": 2}, 4),
    ({"ici_pipeline_parallelism": 2, "ici_tensor_parallelism": 2}, 4),
    ({"ici_pipeline_parallelism": 2, "ici_expert_parallelism": 2}, 4),
]
# Switches that keep every bit (each checked on its own by tests/sweep.sh, remat.sh, ...).
SWITCHES = [
    ("remat_policy", ["none", "full", "minimal", "minimal_with_context", "save_dot_except_mlp",
                      "save_dot_with_context_except_mlp", "save_qkv_proj", "save_out_proj", "minimal_offloaded",
                      "qkv_proj_offloaded"]),
    ("scan_layers", ["false"]), ("overlap_collectives", ["true"]), ("skip_trivial_specs", ["false"]),
    ("remove_size_one_mesh_axis", ["false"]), ("rmsnorm_fused_scale", ["false"]), ("use_iota_embed", ["true"]),
    ("implicit_causal_mask", ["false"]), ("moe_skip_redundant_cast", ["false"]), ("donate_buffers", ["false"]),
    ("shard_mode", ["explicit"]), ("optimizer_memory_host_offload", ["true"]),
    ("parameter_memory_host_offload", ["true"]), ("moe_reshard_io", ["true"]), ("shard_variables_at_init", ["true"]),
    ("skip_noop_grad_cast", ["false"]), ("megablox", ["true"]), ("pipeline_schedule", ["1f1b"]),
    ("pipeline_shift_impl", ["slice"]), ("pipeline_save_decoder_layer_input", ["false"]),
    ("pipeline_fsdp_ag_once", ["true"]), ("matmul_impl", ["plain"]), ("attn_block_q", ["16"]),
]
REMAT_PARTS = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "context", "out_proj", "mlpwi", "mlpwo")


def model_options(rng):
    """A preset and options that change the math (the same on both sides of a comparison)."""
    preset = rng.choice(["mixtral-tiny", "deepseek-tiny"])
    o = {}
    if rng.random() < 0.5:
        o["dtype"] = "bfloat16"
        o["bf16_storage"] = rng.choice(["off", "kept", "per_unit"])
        if rng.random() < 0.2: o["float32_weight_sum"] = "false"
    o["opt_type"] = rng.choice(["adamw", "adamw", "adafactor", "sgd", "muon", "adam_pax"])
    if o["opt_type"] in ("adamw", "muon") and rng.random() < 0.3: o["mu_dtype"] = "bfloat16"
    if rng.random() < 0.3:
        o["sparse_matmul"] = "false"
        if rng.random() < 0.5: o["capacity_factor"] = "1.0"
    for key, value, p in (("attention", "flash", 0.3), ("num_vocab_tiling", "2", 0.3),
                          ("load_balance_loss_weight", "0.01", 0.3), ("z_loss_multiplier", "1e-4", 0.2),
                          ("ema_decay", "0.9", 0.2), ("float32_logits", "true", 0.2),
                          ("float32_qk_product", "true", 0.15), ("reduce_leaf_tokens", "16", 0.15),
                          ("tensor_reduce_chunks", "2", 0.15)):
        if rng.random() < p: o[key] = value
    if rng.random() < 0.15:   # yarn's RoPE (its correction range inside the rotated dimensions)
        o.update(rope_type="yarn", original_max_position_embeddings="1024", rope_factor="8",
                 rope_interleave=rng.choice(["true", "false"]))
    if preset == "deepseek-tiny":
        if rng.random() < 0.2: o["q_lora_rank"] = "0"
        if rng.random() < 0.2: o.update(n_routing_groups="-1", topk_routing_group="-1")
        if rng.random() < 0.2: o["shared_experts"] = "2"
        if rng.random() < 0.2: o["routed_bias"] = "false"
        # (deepseek-tiny's 4 layers, the first dense: its 3 others split into no pipeline's
        # stages, so 0 or 2 dense layers half the time, 4 or 2 layers that do)
        if rng.random() < 0.5: o["first_num_dense_layers"] = rng.choice(["0", "2"])
    elif rng.random() < 0.2:
        o["num_experts_per_tok"] = rng.choice(["1", "3"])
    if rng.random() < 0.15:
        o["remat_policy"] = "custom"
        qkv = rng.choice(["device", "offload", "remat"])
        o.update(decoder_layer_input=rng.choice(["device", "offload"]), query_proj=qkv, key_proj=qkv, value_proj=qkv,
                 context=rng.choice([qkv, "remat"]), out_proj=rng.choice(["device", "offload", "remat"]))
        o["mlpwi"] = o["mlpwo"] = rng.choice(["device", "offload", "remat"])
        if o["out_proj"] == "remat": o["context"] = "remat"   # (recomputing out_proj recomputes the core)
    return preset, o


def draw_model(rng):
    """Model options, gradient accumulation, and whether the mesh has a context axis."""
    preset, o = model_options(rng)
    ga = rng.choice([1, 1, 2])
    context = rng.random() < 0.2
    if context: o["context_reduce_chunks"] = "2"
    model = [f"configs/{preset}.yml"] + [f"{k}={v}" for k, v in o.items()] + [f"gradient_accumulation_steps={ga}"]
    return preset, o, ga, context, model


def pipelined_layers(preset, o):
    """The layers a pipeline's stages share (deepseek-tiny's dense ones stay out of it)."""
    if preset != "deepseek-tiny": return 4
    return 4 - int(o.get("first_num_dense_layers", "1"))


def draw_mesh(rng, preset, o, ga, context):
    """A mesh, its per-device batch and bit-keeping switches for these options: a mesh whose
    pipeline's stages cannot share the layers is drawn again (the trainer's refusal of it is
    tested by tests/pipeline.sh), and no switch names what these options do not have."""
    while True:
        axes, devices = rng.choice(MESHES)
        if pipelined_layers(preset, o) % axes.get("ici_pipeline_parallelism", 1) == 0: break
    axes = dict(axes)
    sw = dict(rng.sample([(k, rng.choice(v)) for k, v in SWITCHES], rng.randint(0, 4)))
    if o["opt_type"] == "sgd": sw.pop("optimizer_memory_host_offload", None)   # (SGD has no state)
    pipeline = axes.get("ici_pipeline_parallelism", 1)
    if "ici_expert_parallelism" in axes and o.get("sparse_matmul") == "false":
        axes, devices, pipeline = {"ici_data_parallelism": 2}, 2, 1   # (experts apart: the sparse path)
    if o.get("remat_policy") == "custom": sw.pop("remat_policy", None)
    if pipeline > 1:
        sw.pop("scan_layers", None)   # (refused with a pipeline)
        if sw.get("remat_policy", o.get("remat_policy", "full")) != "full":   # (every layer keeps its input)
            sw.pop("pipeline_save_decoder_layer_input", None)
        if rng.random() < 0.3: sw["num_pipeline_microbatches"] = str(2 * pipeline)
        if pipelined_layers(preset, o) % (2 * pipeline) == 0 and rng.random() < 0.2: sw["num_pipeline_repeats"] = "2"
    if pipeline == 1:
        for k in ("pipeline_schedule", "num_pipeline_microbatches"): sw.pop(k, None)
    if context:
        axes["ici_context_parallelism"] = 2
        devices *= 2
    while devices * ga > GLOBAL_BATCH:   # (a device runs at least one sequence)
        axes, devices = ({"ici_context_parallelism": 2}, 2) if context else ({}, 1)
    pdb = GLOBAL_BATCH // devices // ga
    # (a pipeline's microbatches split the sequences of the devices the batch is split over)
    shards = 1
    for k in ("ici_data_parallelism", "ici_fsdp_parallelism", "ici_expert_parallelism"): shards *= axes.get(k, 1)
    if pdb * devices // shards % int(sw.get("num_pipeline_microbatches", 1)): sw.pop("num_pipeline_microbatches")
    return [f"{k}={v}" for k, v in axes.items()] + [f"{k}={v}" for k, v in sw.items()] + [f"per_device_batch_size={pdb}"]


class Trainer:
    def __init__(self, train, tmp, launcher=()):
        self.train, self.tmp, self.count, self.launcher = train, tmp, 0, list(launcher)

    def run(self, args):
        """(metrics rows, None) or (None, why): why is the refusal's message, or 'CRASH ...'."""
        self.count += 1
        m = os.path.join(self.tmp, f"{self.count}.jsonl")
        p = subprocess.run(self.launcher + [self.train] + args + [f"metrics_file={m}"], capture_output=True,
                           text=True, timeout=1800, stdin=subprocess.DEVNULL)
        self.out = p.stdout
        if p.returncode != 0:   # a refusal: exit 1 and its message last, on stderr
            last = (p.stderr.strip().splitlines() or [""])[-1]
            if p.returncode != 1 or not last.startswith("meshmoe: "):
                return None, f"CRASH (exit {p.returncode}): {(p.stdout + p.stderr).strip()[-400:]}"
            if re.search(r"^step +[0-9]+ \| loss ", p.stdout, re.M):
                return None, f"CRASH (refused after a training step): {last}"
            return None, last
        with open(m) as f:
            return [json.loads(l) for l in f if l.strip()], None


def sample_text(out):
    """The sample's text in a run's output (its lines between the header and "----"), or None."""
    m = re.search(r"^---- sample [^\n]*\n(.*?)\n----$", out, re.M | re.S)
    return m.group(1) if m else None


def draw_sample(desc):
    """The sample's keys for a combination: 12 tokens by one of MaxText's decode strategies at a
    drawn temperature, after a prompt or the held-out text's start. Drawn from a generator seeded
    with desc, the combination's own text: the combination's draws do not depend on them."""
    srng = random.Random(desc)
    s = ["sample_length=12", f"sample_temperature={srng.choice(['0.5', '0.8', '2'])}"]
    strategy = srng.choice(["weighted", "greedy", "topk", "nucleus"])
    s.append(f"decode_sampling_strategy={strategy}")
    if strategy == "topk": s.append(f"decode_sampling_top_k={srng.choice([1, 2, 5, 40])}")
    if strategy == "nucleus": s.append(f"decode_sampling_nucleus_p={srng.choice(['0.3', '0.9', '1'])}")
    prompt = srng.choice([None, "prompt=ROMEO:\\n", "prompt=[84][104][101][32]"])
    return s + ([prompt] if prompt else [])


def steps(rows):
    return [(r["loss_bits"], r["grad_norm"]) for r in rows if "loss_bits" in r]


PEAK = re.compile(r'"device": [0-9]*, "peak_bytes": [0-9]*, "peak_bytes_by_tag": \{[^}]*\}, '
                  r'"live_bytes_by_tag": \{[^}]*\}')


def peaks(rows):
    return PEAK.findall("\n".join(json.dumps(r) for r in rows))


def one_gpu(rng, t, gpu):
    """./train against device=gpu on one combination: the losses, the peaks and the sample's text."""
    preset, o, ga, context, model = draw_model(rng)
    args = (model + [a for a in draw_mesh(rng, preset, o, ga, context) if not a.startswith("matmul_impl")]
            + ["steps=2"] + FAST)
    desc = " ".join(args[:-len(FAST)])
    sample = draw_sample(desc)
    desc += " | sample: " + " ".join(sample[1:])
    cpu, why = t.run(args + sample)
    if cpu is None: return ("FAIL" if why.startswith("CRASH") else "refused"), desc, why
    text = sample_text(t.out)
    g = Trainer(gpu, t.tmp)
    dev, why = g.run(args + sample + ["device=gpu"])
    if dev is None: return "FAIL", desc, "device=gpu: " + why
    if steps(cpu) != steps(dev) or len(steps(cpu)) != 2:
        return "FAIL", desc, f"./train    {steps(cpu)}\n      device=gpu {steps(dev)}"
    if text is None or sample_text(g.out) != text:
        return "FAIL", desc, f"sample: ./train    {text!r}\n      device=gpu {sample_text(g.out)!r}"
    if peaks(cpu) != peaks(dev):
        return "FAIL", desc, "peaks differ:\n      " + "\n      ".join(
            f"{x}\n      {y}" for x, y in zip(peaks(cpu), peaks(dev)) if x != y)
    return "ok", desc, ""


# Over processes: every process prints what it refuses, mpirun's own lines may follow, and
# its exit status is the first failing process's; --mca btl tcp,self sends the bytes through
# sockets, so that they really leave the process (as tests/mpi.sh).
MPIRUN = "mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2".split()
ICI_AXES = ("data", "fsdp", "tensor", "expert", "context", "pipeline")


def axes_to_cut(mesh):
    """The mesh's axes of 2 or more devices."""
    sizes = dict(a.split("=", 1) for a in mesh)
    return [x for x in ICI_AXES if int(sizes.get(f"ici_{x}_parallelism", "1")) >= 2]


def over_processes(rng, mesh):
    """The mesh's keys with one of its axes of 2 or more devices cut in two between 2
    processes: dcn_X=2, ici_X halved."""
    sizes = dict(a.split("=", 1) for a in mesh)
    x = rng.choice(axes_to_cut(mesh))
    sizes[f"ici_{x}_parallelism"] = str(int(sizes[f"ici_{x}_parallelism"]) // 2)
    sizes[f"dcn_{x}_parallelism"] = "2"
    return [f"{k}={v}" for k, v in sizes.items() if not (k == f"ici_{x}_parallelism" and v == "1")]


def one_mpi(rng, t, mpi):
    """./train against ./train_mpi over 2 processes on the same global mesh; or, for every other
    draw, 2 of 4 steps over the processes, saved, and 2 more resumed by ./train on another mesh,
    against one device's 4 steps."""
    preset, o, ga, context, model = draw_model(rng)
    mesh = draw_mesh(rng, preset, o, ga, context)
    while not axes_to_cut(mesh):   # (a mesh of one device: nothing to cut)
        mesh = draw_mesh(rng, preset, o, ga, context)
    split = over_processes(rng, mesh)
    resume = rng.random() < 0.5
    desc = " ".join(model + mesh) + " | over 2 processes: " + " ".join(a for a in split if a.startswith("dcn_"))
    if not hasattr(t, "mpi"):   # (its own folder: the two trainers count their metrics files apart)
        os.mkdir(os.path.join(t.tmp, "mpi"))
        t.mpi = Trainer(mpi, os.path.join(t.tmp, "mpi"), MPIRUN)
    n = 4 if resume else 3
    sample = [] if resume else draw_sample(desc)
    if sample: desc += " | sample: " + " ".join(sample[1:])
    base, why = (t.run(model + [f"steps={n}", f"per_device_batch_size={GLOBAL_BATCH // ga}"] + FAST) if resume
                 else t.run(model + mesh + [f"steps={n}"] + FAST + sample))
    if base is None: return ("FAIL" if why.startswith("CRASH") else "refused"), desc, why
    text = sample_text(t.out)
    if resume:
        ck = os.path.join(t.tmp, f"ck-mpi{t.count}.st")
        first, why = t.mpi.run(model + split + [f"steps={n}", "run_steps=2", f"save_checkpoint={ck}", "num_threads=1"]
                               + FAST)
        if first is None:   # (refused over processes alone: said before training, one message, as on one)
            return ("FAIL" if why.startswith("CRASH") else "refused"), desc, "./train_mpi: " + why
        mesh2 = draw_mesh(rng, preset, o, ga, context)
        desc += " | resumed by ./train on " + " ".join(mesh2)
        second, why = t.run(model + mesh2 + [f"steps={n}", f"load_checkpoint={ck}"] + FAST)
        if second is None: return ("FAIL" if why.startswith("CRASH") else "refused"), desc, why
        a, b = steps(base), steps(first + second)
        if len(a) == n and a == b: return "ok", desc, ""
        return "FAIL", desc, f"one device  {a}\n      resumed     {b}"
    many, why = t.mpi.run(model + split + [f"steps={n}", "num_threads=1"] + FAST + sample)
    if many is None:
        return ("FAIL" if why.startswith("CRASH") else "refused"), desc, "./train_mpi: " + why
    if steps(base) != steps(many) or len(steps(many)) != n:
        return "FAIL", desc, f"./train     {steps(base)}\n      ./train_mpi {steps(many)}"
    if text is None or sample_text(t.mpi.out) != text:
        return "FAIL", desc, f"sample: ./train {text!r}\n      ./train_mpi {sample_text(t.mpi.out)!r}"
    return "ok", desc, ""


def one(mode, rng, t, tmp):
    """Draws and checks one combination: ('ok' | 'FAIL' | 'refused', description, detail)."""
    preset, o, ga, context, model = draw_model(rng)
    mesh = draw_mesh(rng, preset, o, ga, context)
    desc = " ".join(model + mesh)
    if mode == "plan":
        step1 = model + mesh + ["steps=1", "eval_steps=1", "sample_length=0", "max_target_length=32"]
        plan, why = t.run(step1 + ["dry_run=true"])
        real, why2 = (t.run(step1) if plan is not None else (None, why))
        if plan is None or real is None:
            return ("FAIL" if (why or why2).startswith("CRASH") else "refused"), desc, why or why2
        a, b = peaks(plan), peaks(real)
        if a and a == b: return "ok", desc, f"{len(a)} devices"
        diff = [f"plan {x}\n      measured {y}" for x, y in zip(a, b) if x != y][:2]
        return "FAIL", desc, "\n      ".join(diff) or "no peaks written"
    n = 4 if mode == "resume" else 3
    # mesh mode samples too: on every mesh the text is one device's (docs/pipeline.md#the-sample)
    sample = draw_sample(desc) if mode == "mesh" else []
    if sample: desc += " | sample: " + " ".join(sample[1:])
    base, why = t.run(model + [f"steps={n}", f"per_device_batch_size={GLOBAL_BATCH // ga}"] + FAST + sample)
    if base is None:
        return ("FAIL" if why.startswith("CRASH") else "refused"), desc, why
    text = sample_text(t.out)
    if mode == "mesh":
        got, why = t.run(model + mesh + [f"steps={n}"] + FAST + sample)
        if got is not None and (text is None or sample_text(t.out) != text):
            return "FAIL", desc, f"sample: one device {text!r}\n      this       {sample_text(t.out)!r}"
    else:
        ck = os.path.join(tmp, f"ck{t.count}.st")
        first, why = t.run(model + mesh + [f"steps={n}", "run_steps=2", f"save_checkpoint={ck}"] + FAST)
        got = None
        if first is not None:
            mesh2 = draw_mesh(rng, preset, o, ga, context)
            desc += " | resumed on " + " ".join(mesh2)
            second, why = t.run(model + mesh2 + [f"steps={n}", f"load_checkpoint={ck}"] + FAST)
            got = first + second if second is not None else None
    if got is None:
        return ("FAIL" if why.startswith("CRASH") else "refused"), desc, why
    a, b = steps(base), steps(got)
    if len(a) == n and a == b: return "ok", desc, " ".join(x for x, _ in b)
    return "FAIL", desc, f"one device {a}\n      this       {b}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="all", choices=["mesh", "resume", "plan", "all", "gpu", "mpi"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=20, help="combinations per mode")
    ap.add_argument("--train", default="./train")
    ap.add_argument("--gpu-train", default="build/train_emu", help="the device=gpu trainer of --mode gpu")
    ap.add_argument("--mpi-train", default="./train_mpi", help="the trainer over processes of --mode mpi")
    args = ap.parse_args()
    modes = ["mesh", "resume", "plan"] if args.mode == "all" else [args.mode]
    passed = failed = refused = 0
    with tempfile.TemporaryDirectory(prefix="meshmoe-combos.") as tmp:
        t = Trainer(args.train, tmp)
        for mode in modes:
            rng = random.Random(f"{args.seed}-{mode}")
            print(f"== {mode}: {args.n} combinations, seed {args.seed}")
            passed_before = passed
            for i in range(args.n):
                status, desc, detail = (one_gpu(rng, t, args.gpu_train) if mode == "gpu" else
                                        one_mpi(rng, t, args.mpi_train) if mode == "mpi" else one(mode, rng, t, tmp))
                print(f"  {status:7} [{i}] {desc}\n      {detail}" if status != "ok" else f"  ok      [{i}] {desc}")
                sys.stdout.flush()
                passed += status == "ok"
                failed += status == "FAIL"
                refused += status == "refused"
            if args.n > 0 and passed == passed_before:   # (refusals alone test nothing)
                print(f"  FAIL    {mode}: none of the {args.n} combinations trained")
                failed += 1
    print(f"({refused} refused before training, each with one message)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
