#!/usr/bin/env python3
"""`make bench-gpu` (tests/gpu_bench.sh runs this on a GPU machine; standard library only).

For each GPU preset (configs/mixtral-medium.yml, configs/deepseek-medium.yml: bf16, sized
for one 80 GB GPU), in one run on the same GPU, side by side:
  meshmoe        ./train_gpu CONFIG device=gpu gpu_matmul=cublas_bf16 gpu_attention=tensor_cores
                 (the layers' weight products and the attention core on tensor cores;
                 MESHMOE_ARGS replaces those keys)
  PyTorch eager  transformers' MixtralForCausalLM / DeepseekV3ForCausalLM with the same
                 config, bf16 autocast over float32 masters, fused AdamW (tests/bench_peers.py)
  JAX jit        tests/parity/reference.py's model, bf16 compute over float32 masters, optax;
                 under the table, how many of its jax.lax.ragged_dot ops (the sparse experts)
                 XLA kept as grouped products: the others it expands to dense products over
                 every expert, zeros padded in (num_experts / experts_per_tok times the FLOPs)
  meshmoe, gpu_attention=cudnn, profile=true  the attention core by cuDNN's fused flash
                 attention (gpu/attn_cudnn.cu) where the default runs the backend's own
                 tensor-core kernels (gpu/attn_mma.cu), first of the variants, its kernel table
                 beside the default's
  meshmoe, MESHMOE_CUBLAS_LT=off  the 16-bit products by cublasGemmEx, which asks cuBLAS's
                 heuristic for each new shape, where the default keeps one cuBLASLt algorithm
                 per class of shapes (gpu/matmul_lt.cu)
  meshmoe, bf16_storage=off, profile=true  the weights' bf16 copy and the activations at the
                 cast points as float32 arrays holding bf16 values, where the presets keep them
                 as 16-bit numbers (bf16_storage: kept, the weights' copy kept from update to
                 update and written by AdamW, the products reading it as stored:
                 docs/bf16-storage.md)
  meshmoe, megablox=...  the experts' products the other way than the preset's (one grouped
                 cuBLAS call for all the experts, or a call per expert)
  meshmoe, MESHMOE_GROUPED=kernel  the experts' grouped products by the backend's own
                 tensor-core kernel (gpu/grouped16.cu), where the default takes what cuBLAS's
                 grouped call refuses in bf16 a cuBLAS call per expert; for the presets with
                 megablox=true
  meshmoe, MESHMOE_ATTN_DQ=scores  the tensor-core attention's dq kernel making S, dP and dS
                 again (the default reads the dS that the dk, dv kernel wrote to device memory),
                 when there is time
  meshmoe, MESHMOE_CUBLAS_BF16=convert, profile=true  the weight products' operands converted to bf16 by
                 gpu/matmul.cu's kernel before cuBLAS (the default hands them over as float32,
                 converted inside cuBLAS's kernels), when there is time
  PyTorch's SDPA the attention core alone by torch's scaled_dot_product_attention backends
                 (FlashAttention-2, cuDNN, memory-efficient) on each preset's shapes, after the
                 profiles (tests/attention_peer.py), set beside meshmoe's attention family
  torch.compile  the PyTorch peer compiled, after the first three variants (cuDNN, cuBLASLt off,
                 the own grouped kernel), when the time budget has room for it
  meshmoe, per_device_batch_size=8  twice the preset's tokens a step (the optimizer's pass and
                 the products' fixed costs shared by twice the tokens), its MFU of its own FLOPs
                 and its time per token beside the default's, when there is time
  meshmoe, gpu_attention=tiles  the attention core on CUDA cores, when there is time
  meshmoe, ordered GEMM  gpu_matmul=ordered (the default: the CPU's bits, no tensor cores),
                 last, when the time budget has room for it
The peers build the model from `./train describe CONFIG` (the config and every tensor's
shape), with drawn weights and a random batch of the same shape as meshmoe's.
Before the runs, the planner's peak for meshmoe's run (dry_run=true hbm_capacity=80GB, the
same keys), printed under the table beside the peak the run measured.
Per system: the median step time over its steps after the first WARMUP (3), tokens/s, the allocator's
peak GPU memory, and MFU = model FLOPs per step / (step time x the GPU's dense bf16 peak),
model FLOPs by tests/bench.py's formula (printed). Then, time permitting, where meshmoe's
step goes by kernel family (`profile=true`), each family next to its floor: its FLOPs at
cuBLAS's rate or its bytes at the copy bandwidth, both measured on the same GPU (LIMITS),
and the matmul family by product form and shape; then ncu's view of the attention, norm and
grouped-product kernels (tests/ncu_kernels.py: throughput, occupancy, what the warps wait for).

Environment: BUDGET (seconds for everything, default 420), STEPS (default 8), PRESETS,
TRAIN (default ./train_gpu), PEERS (python with torch/jax/transformers; default python3),
MESHMOE_ARGS (key=value for meshmoe; default "gpu_matmul=cublas_bf16 gpu_attention=tensor_cores").
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from bench import FLOPS_FORMULA, floor_table, model_flops  # noqa: E402  (make bench's formula and floors)
import ncu_kernels  # noqa: E402  (Nsight Compute's view of chosen kernels)

TRAIN = os.environ.get("TRAIN", "./train_gpu")
STEPS = int(os.environ.get("STEPS", "8"))
# Steps not counted: the first takes cuBLAS's and the pool's set-up, and runs on 16-bit
# temporaries shortened over their first four or five steps on an H200 (docs/performance-gpu.md).
WARMUP = 3
PRESETS = os.environ.get("PRESETS", "mixtral-medium deepseek-medium").split()
PEERS = os.environ.get("PEERS", "python3")
EXTRA = os.environ.get("MESHMOE_ARGS", "gpu_matmul=cublas_bf16 gpu_attention=tensor_cores").split()
MESHMOE = "meshmoe " + " ".join(EXTRA) if EXTRA else "meshmoe"
DEADLINE = time.time() + float(os.environ.get("BUDGET", "420"))

# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) from the vendors' data sheets,
# by a piece of the name nvidia-smi prints; the first match wins.
PEAKS = [("H200", 989.4), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("A100", 312.0),
         ("L40S", 362.0)]


def gpu_name():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    except OSError:
        return "no nvidia-smi"
    return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unknown GPU"


def run(cmd, limit, env=None):
    """(stdout+stderr, exit code, seconds) of cmd under min(limit, the time left), env added."""
    left = DEADLINE - time.time()
    if left < 20:
        return "not run: the time budget is spent", None, 0
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=min(limit, left),
                           env={**os.environ, **(env or {})})
        return r.stdout + r.stderr, r.returncode, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return out + f"\nTIMEOUT after {min(limit, left):.0f} s", 124, time.time() - t0


def counted(steps):
    """The steps the median is taken over: those after the first WARMUP, or, of a run stopped
    before it had more, every step but the first."""
    return steps[WARMUP:] if len(steps) > WARMUP else steps[1:]


def last_line(out):
    lines = [x for x in out.strip().splitlines() if x.strip()]
    return lines[-1][:140] if lines else "(no output)"


# A run stopped at its limit keeps the steps it printed: the trainer's output line-buffered
# (stdbuf), the peers' unbuffered (python -u).
LINES = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []


def meshmoe(preset, extra=(), limit=120, env=None):
    out, rc, _ = run([*LINES, TRAIN, f"configs/{preset}.yml", "device=gpu", f"steps={STEPS}", "log_period=1",
                      "eval_steps=1", *EXTRA, *extra], limit, env)
    print(out, file=LOG, flush=True)
    ms = [float(x) for x in re.findall(r"^step +\d+ \| loss .*?\| +([\d.]+) ms \|", out, re.M)]
    loss = re.findall(r"^step +\d+ \| loss ([\d.]+)", out, re.M)
    peak = re.search(r"^device 0 peak ([\d.]+ \w+)", out, re.M)   # the allocator's (report/print.c)
    if rc is None:
        return {"why": out}   # not run: the budget is spent
    if (rc != 0 and rc != 124) or len(ms) < 2:
        return {"why": f"failed (exit {rc}): {last_line(out)}"}
    stopped = f" (stopped at the limit after {len(ms)} steps)" if rc == 124 else ""
    # which way its products and attention calls went (gpu/matmul_lt.cu, gpu/attn_cudnn.cu)
    ways = re.findall(r"^device 0: (cuBLASLt ran .*|gpu_attention=cudnn: .*)$", out, re.M)
    return {"s": [m / 1000 for m in counted(ms)], "peak": peak[1] if peak else "?",
            "loss": f"{loss[0]} -> {loss[-1]}{stopped}", "out": out, "ways": ways}


def peer(which, describe, limit):
    env = None
    if which == "jax":   # XLA's HLO of the step, to say how it lowered the experts' ragged_dot
        env = {"BENCH_XLA_DUMP": tempfile.mkdtemp(prefix="meshmoe-xla.", dir=os.path.dirname(describe))}
    out, rc, _ = run([PEERS, "-u", os.path.join(ROOT, "tests", "bench_peers.py"), which, describe, str(STEPS)], limit,
                     env)
    print(f"==== {which}\n{out}", file=LOG, flush=True)
    s = [float(x) for x in re.findall(r"^step \d+ seconds ([\d.]+)", out, re.M)]
    loss = re.findall(r"^step \d+ seconds [\d.]+ loss (\S+)", out, re.M)
    peak = re.search(r"^peak_bytes (\d+)", out, re.M)
    if rc is None:
        return {"why": out}
    if (rc != 0 and rc != 124) or len(s) < 2:
        return {"why": f"failed (exit {rc}): {last_line(out)}"}
    stopped = f" (stopped at the limit after {len(s)} steps)" if rc == 124 else ""
    ragged = re.search(r"^xla ragged_dot: (.*)$", out, re.M)
    return {"s": counted(s), "peak": f"{int(peak[1]) / 2**30:.2f} GiB" if peak else "?",
            "loss": f"{loss[0]} -> {loss[-1]}{stopped}", **({"ragged": ragged[1]} if ragged else {})}


def ncu(preset, limit=90):
    """ncu_kernels' table for the preset, or why there is none."""
    left = DEADLINE - time.time()
    if left < 40:
        return {"why": "not run: the time budget is spent"}
    lines, out = ncu_kernels.run(TRAIN, preset, EXTRA, min(limit, left - 10))
    print(f"==== ncu {preset}\n{out}", file=LOG, flush=True)
    return {"lines": lines} if lines else {"why": f"no kernel measured: {last_line(out)}"}


def attention_peer(paths, limit=90):
    """{path: tests/attention_peer.py's lines for that describe file, or why there are none}:
    each preset's attention core by PyTorch's scaled_dot_product_attention, each backend, on
    the same GPU (one process for all, torch started once)."""
    out, rc, _ = run([PEERS, os.path.join(ROOT, "tests", "attention_peer.py"), *paths], limit)
    print(f"==== attention peer\n{out}", file=LOG, flush=True)
    got = {}
    for block in re.split(r"^describe ", out, flags=re.M)[1:]:
        path, _, rest = block.partition("\n")
        lines = re.findall(r"^(?:shapes|layer_tflop|sdpa|failed:) .*$", rest, re.M)
        got[path.strip()] = {"lines": lines} if lines else {"why": "no lines"}
    why = {"why": f"not measured (exit {rc}): {last_line(out)}"}
    return {p: got.get(p, why) for p in paths}


def attention_beside(preset, res, peer_res):
    """meshmoe's attention family (its profile) beside the fastest SDPA backend's forward and
    backward of every layer, on the same shapes and GPU."""
    if "lines" not in peer_res:
        return f"attention by PyTorch's SDPA, {preset}: {peer_res['why']}"
    layers = res["cfg"]["base_num_decoder_layers"]
    timed = [(float(fb), name) for name, fb in
             (re.match(r"sdpa (\w+) forward_ms [\d.]+ forward_backward_ms ([\d.]+)", x).groups()
              for x in peer_res["lines"] if "forward_backward_ms" in x)]
    text = [f"attention by PyTorch's SDPA, {preset} (tests/attention_peer.py: one layer, bf16, causal, the "
            f"best of 5):"] + peer_res["lines"]
    fam = re.search(r"^\| attention \|\s*(\d+)\s*\|\s*([\d.]+)\s*\|", res["profile"].get("out", ""), re.M)
    if timed and fam:
        fb, name = min(timed)
        text.append(f"{layers} layers' forward and backward by `{name}`: {layers * fb:.1f} ms a step; meshmoe's "
                    f"attention family in its profile: {float(fam[2]):.1f} ms ({fam[1]} calls), "
                    f"{float(fam[2]) / (layers * fb):.2f} times as long")
    return "\n".join(text)


def describe(preset, path):
    r = subprocess.run([TRAIN, "describe", f"configs/{preset}.yml", *EXTRA], cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"bench-gpu: {TRAIN} describe {preset} failed: {r.stderr.strip()}")
    with open(path, "w") as f:
        f.write(r.stdout)
    import json
    return json.loads(r.stdout)["config"]


def plan(preset):
    """The planner's verdict on meshmoe's run (dry_run=true hbm_capacity=80GB, the same keys),
    made before any run: "FITS: largest device peak N B (X GiB) ...", "DOES NOT FIT: ..." (exit
    status 2), or why there is none."""
    r = subprocess.run([TRAIN, f"configs/{preset}.yml", "device=gpu", "dry_run=true", "hbm_capacity=80GB", *EXTRA],
                       cwd=ROOT, capture_output=True, text=True)
    print(f"==== plan {preset}\n{r.stdout}{r.stderr}", file=LOG, flush=True)
    found = re.search(r"^plan: (.*)$", r.stdout, re.M)
    return found[1] if r.returncode in (0, 2) and found else f"failed (exit {r.returncode}): {last_line(r.stdout + r.stderr)}"


def row(preset, name, res, flops, tokens, peak_tflops, base, times=1):
    """A system's row; `times` the step's batch over the preset's (its FLOPs and tokens that many
    times the preset's, its ratio to meshmoe's taken per token)."""
    if "s" not in res:
        print(f"| {preset} | {name} | {res['why']} | | | | | |")
        return
    s = statistics.median(res["s"])
    flops, tokens = flops * times, tokens * times
    mfu = f"{100 * flops / s / (peak_tflops * 1e12):.1f}%" if peak_tflops else "-"
    ratio = f"{s / times / base:.2f}" if base else "-"
    print(f"| {preset} | {name} | {s:.3f} | {tokens / s:.0f} | {res['peak']} | {mfu} | {ratio} | {res['loss']} |")


# The GPU's measured limits, for the profile's floors: cuBLAS's product rate (torch.mm, n =
# 8192, bf16 and float32, the best of 5 after a warm-up) and the copy bandwidth (a 1 GiB
# copy, bytes read + written). Run in the peers' python; on a machine without a GPU it
# measures the CPU, and says so.
LIMITS = r"""
import time, torch
dev = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
def best(f, reps=5):
    f(); sync()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); sync(); t.append(time.perf_counter() - t0)
    return min(t)
n = 8192 if dev == "cuda" else 1024
for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
    print(f"matmul {name} TFLOP/s {2 * n ** 3 / best(lambda: a @ b) / 1e12:.1f}")
    del a, b
x = torch.empty(1 << 28 if dev == "cuda" else 1 << 24, device=dev)
y = torch.empty_like(x)
print(f"copy GB/s {2 * x.numel() * 4 / best(lambda: y.copy_(x)) / 1e9:.1f}")
print(f"on {torch.cuda.get_device_name() if dev == 'cuda' else 'the CPU (no GPU)'}")
"""


def limits():
    """{"bf16", "fp32": TFLOP/s, "copy": GB/s, "on": where}, or {} if the peers' python cannot."""
    out, rc, _ = run([PEERS, "-c", LIMITS], 120)
    print(f"==== limits\n{out}", file=LOG, flush=True)
    got = {k: float(v) for k, v in re.findall(r"^matmul (\w+) TFLOP/s ([\d.]+)$", out, re.M)}
    copy, where = re.search(r"^copy GB/s ([\d.]+)$", out, re.M), re.search(r"^on (.*)$", out, re.M)
    if rc != 0 or len(got) != 2 or not copy:
        print(f"the GPU's limits: not measured ({last_line(out)})")
        return {}
    got.update(copy=float(copy[1]), on=where[1] if where else "?")
    return got


# The two 16-bit variants run with profile=true (CUDA events around each kernel, read at the
# step's end), which cost the default 2.4% of its step on an H200 (318.7 against 311.1 ms).
CONVERT = "meshmoe, MESHMOE_CUBLAS_BF16=convert, profile=true"  # the operands converted before cuBLAS (gpu/matmul.cu)
TILES = "meshmoe, gpu_attention=tiles"              # the attention core on CUDA cores
MEGABLOX = "meshmoe, megablox flipped"             # the experts' products the other way (model/moe_experts.c)
DQ_SCORES = "meshmoe, MESHMOE_ATTN_DQ=scores"  # attention's dq making its scores again (gpu/attn_mma_bwd.cu)
STORAGE_OFF = "meshmoe, bf16_storage=off, profile=true"  # the weights' copy as float32 arrays (model/weights16.h)
GROUPED_KERNEL = "meshmoe, MESHMOE_GROUPED=kernel"  # the experts' grouped products by gpu/grouped16.cu
LT_OFF = "meshmoe, MESHMOE_CUBLAS_LT=off"  # the 16-bit products by cublasGemmEx, no algorithm kept (gpu/matmul_lt.cu)
CUDNN = "meshmoe, gpu_attention=cudnn, profile=true"  # the attention core by cuDNN (gpu/attn_cudnn.cu)
# Twice the preset's sequences a step (the planner: 65.14 and 67.19 GiB with cuBLAS's workspace,
# both within an 80 GB GPU): the optimizer's pass over 3 billion parameters (about 92 GB of
# traffic, 22-29 ms) and each expert product's fixed costs shared by twice the tokens.
BATCH2 = "meshmoe, per_device_batch_size=8 (2 x the tokens; step time / meshmoe's per token)"


def megablox_on(preset):
    """The preset's megablox (false unless it says true)."""
    with open(f"configs/{preset}.yml") as f:
        return re.search(r"^megablox:\s*true\s*$", f.read(), re.M) is not None


def megablox_flipped(preset):
    """The megablox=... argument that flips the preset's value."""
    return f"megablox={'false' if megablox_on(preset) else 'true'}"


def main():
    name = gpu_name()
    peak_tflops = next((p for key, p in PEAKS if key in name), None)
    print(f"GPU: {name}; dense bf16 peak {peak_tflops} TFLOP/s" if peak_tflops else
          f"GPU: {name}; its bf16 peak is not in tests/bench_gpu.py's table: MFU not given")
    print(FLOPS_FORMULA + "; MFU = model FLOPs / (step time x the dense bf16 peak)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="meshmoe-bench-gpu.") as tmp:
        # Every system once per preset first; torch.compile (slow to start) after, if there is time.
        for preset in PRESETS:
            path = os.path.join(tmp, preset + ".json")
            cfg = describe(preset, path)
            results[preset] = {"cfg": cfg, "plan": plan(preset), "meshmoe": meshmoe(preset),
                               "PyTorch eager": peer("torch", path, 120),
                               "JAX jit": peer("jax", path, 150)}
        # Then where meshmoe's step goes (profile=true), before the variants: the variants
        # only inform the next defaults, the profile says where the time of this one goes.
        lim = limits()
        for preset in PRESETS:
            results[preset]["profile"] = meshmoe(preset, ("steps=3", "profile=true"), 120)
        # Then the attention core by tuned kernels (PyTorch's SDPA backends) on the same shapes:
        # what meshmoe's attention family could take on this GPU.
        sdpa = attention_peer([os.path.join(tmp, preset + ".json") for preset in PRESETS])
        for preset in PRESETS:
            results[preset]["sdpa"] = sdpa[os.path.join(tmp, preset + ".json")]
        # Then why the slowest kernels are slow (ncu, one or two layers of each preset).
        for preset in PRESETS:
            results[preset]["ncu"] = ncu(preset)
        # Then meshmoe's variants that decide its next defaults (cuDNN's attention first, then
        # cuBLASLt's kept algorithms off, then the own grouped kernel, rewritten since its last
        # run and a candidate default: each a meshmoe run of about 20 s), torch.compile (a peer
        # the acceptance counts, which no run has yet reached for deepseek-medium: up to 150 s
        # each), twice the batch, then the variants measured in earlier runs (megablox flipped,
        # bf16 storage off, ...) and the ordered GEMM.
        for preset in PRESETS:
            results[preset][CUDNN] = meshmoe(preset, ("gpu_attention=cudnn", "profile=true"))
        for preset in PRESETS:
            results[preset][LT_OFF] = meshmoe(preset, env={"MESHMOE_CUBLAS_LT": "off"})
        for preset in PRESETS:
            results[preset][GROUPED_KERNEL] = (meshmoe(preset, env={"MESHMOE_GROUPED": "kernel"}) if megablox_on(preset)
                                               else {"why": "not run: no grouped products (megablox=false)"})
        for preset in PRESETS:
            results[preset]["torch.compile"] = peer("torch-compile", os.path.join(tmp, preset + ".json"), 150)
        for preset in PRESETS:
            results[preset][BATCH2] = meshmoe(preset, ("per_device_batch_size=8",))
        for preset in PRESETS:
            results[preset][MEGABLOX] = meshmoe(preset, (megablox_flipped(preset),))
        for preset in PRESETS:
            results[preset][DQ_SCORES] = meshmoe(preset, env={"MESHMOE_ATTN_DQ": "scores"})
        for preset in PRESETS:
            results[preset][STORAGE_OFF] = meshmoe(preset, ("bf16_storage=off", "profile=true"))
        for preset in PRESETS:
            results[preset][CONVERT] = meshmoe(preset, ("profile=true",), env={"MESHMOE_CUBLAS_BF16": "convert"})
        for preset in PRESETS:
            results[preset][TILES] = meshmoe(preset, ("gpu_attention=tiles",))
        for preset in PRESETS:
            results[preset]["meshmoe, ordered GEMM"] = meshmoe(preset, ("gpu_matmul=ordered",))
    print()
    print("| preset | system | s/step (median) | tokens/s | peak GPU memory | MFU | step time / meshmoe's | loss first -> last |")
    print("|---|---|---|---|---|---|---|---|")
    for preset in PRESETS:
        res = results[preset]
        flops, tokens = model_flops(res["cfg"])
        base = statistics.median(res["meshmoe"]["s"]) if "s" in res["meshmoe"] else None
        for system in ("meshmoe", "PyTorch eager", "torch.compile", "JAX jit", CUDNN, LT_OFF, BATCH2, MEGABLOX,
                       GROUPED_KERNEL, DQ_SCORES, STORAGE_OFF, CONVERT, TILES, "meshmoe, ordered GEMM"):
            name = f"meshmoe, {megablox_flipped(preset)}" if system == MEGABLOX else system
            row(preset, MESHMOE if system == "meshmoe" else name, res[system], flops, tokens, peak_tflops, base,
                2 if system == BATCH2 else 1)
        print(f"|  | ({preset}: {flops / 1e12:.2f} TFLOP per step, {tokens} tokens, {STEPS} steps a system, the "
              f"first {WARMUP} not counted) | | | | | | |")
    # The planner's peak, made before the runs, beside the one meshmoe's run measured.
    print()
    for preset in PRESETS:
        res = results[preset]
        print(f"{preset}: the planner (dry_run=true hbm_capacity=80GB, before the runs): {res['plan']}; "
              f"meshmoe's run measured: {res['meshmoe'].get('peak', 'no run')}")
    # How XLA lowered the JAX peer's sparse experts (jax.lax.ragged_dot): expanded to dense
    # products over every expert, its row pays num_experts / experts_per_tok times their FLOPs.
    for preset in PRESETS:
        if "ragged" in results[preset]["JAX jit"]:
            print(f"{preset}, JAX jit: {results[preset]['JAX jit']['ragged']}")
    # Which way meshmoe's 16-bit products and attention calls went in each of its rows: a row
    # named for cuBLASLt or cuDNN timed them only where these lines say so.
    for preset in PRESETS:
        for system in ("meshmoe", CUDNN, LT_OFF):
            for way in results[preset].get(system, {}).get("ways", []):
                print(f"{preset}, {MESHMOE if system == 'meshmoe' else system}: {way}")
    print()
    # Where meshmoe's step goes (report/profile.c's tables): each family
    # against its floor, its FLOPs at cuBLAS's measured rate (bf16 where meshmoe's products
    # run in bf16) or its bytes at the measured copy bandwidth.
    kind = "bf16" if "gpu_matmul=cublas_bf16" in EXTRA else "fp32"
    if lim:
        print(f"the GPU's limits ({lim['on']}): cuBLAS via torch.mm (n = 8192 on a GPU): bf16 {lim['bf16']} TFLOP/s, fp32 "
              f"{lim['fp32']} TFLOP/s; copy {lim['copy']} GB/s; the floors below at the {kind} rate")
    # The default's profile, then the 16-bit variants' (each ran with profile=true: CUDA events,
    # no waits, so their step times are unprofiled ones): which kernels their time moved to.
    for preset in PRESETS:
        for system, name in (("profile", "meshmoe, profile=true"), (CUDNN, CUDNN), (STORAGE_OFF, STORAGE_OFF),
                             (CONVERT, CONVERT)):
            res = results[preset][system]
            if "out" not in res:
                print(f"{preset}, {name}: {res['why']}")
                continue
            head = re.search(r"^profile: .*$", res["out"], re.M)
            table = floor_table(res["out"], lim[kind] * 1e3, lim["copy"]) if lim else None
            if table is None:   # no limits: the tables as printed
                table = re.findall(r"^(?:products: .*|\|.*\|)$", res["out"], re.M)
            print(f"{preset}, {name}: " + (head[0] if head else "") + "\n" + "\n".join(table))
        print(attention_beside(preset, results[preset], results[preset].get("sdpa", {"why": "not run"})))
    for preset in PRESETS:
        res = results[preset].get("ncu", {"why": "not run"})
        print(f"\nncu, {preset} (tests/ncu_kernels.py: the first launch of each kernel in one step of "
              f"{' '.join(ncu_kernels.LAYERS.get(preset, []))}): " + ("\n" + "\n".join(res["lines"]) if "lines" in res
                                                                  else res["why"]))
    # The tables are printed whatever failed; the exit status says whether meshmoe itself ran
    # (a peer that failed is a row of the table, not a failure of the bench).
    failed = [preset for preset in PRESETS if "out" not in results[preset]["meshmoe"]]
    if failed:
        print(f"\nbench-gpu: meshmoe's own run failed on {', '.join(failed)} (its row above says why)")
    return 1 if failed else 0


if __name__ == "__main__":
    LOG = open(os.environ.get("BENCH_LOG", os.devnull), "a")
    sys.exit(main())
