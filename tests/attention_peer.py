#!/usr/bin/env python3
"""The attention core of a preset by PyTorch's scaled_dot_product_attention, for `make bench-gpu`.

Usage:  attention_peer.py DESCRIBE.json [DESCRIBE.json ...]

Each DESCRIBE.json is what `./train describe CONFIG` prints (one process for all, so torch
starts once). On the same shapes as meshmoe's attention family (batch x query heads x
sequence x head width, causal, the config's key and value heads and widths: GQA's shared
heads, MLA's 192-wide queries and keys with 128-wide values), in bf16, this times one layer's
forward and forward + backward by each backend of torch's scaled_dot_product_attention that
accepts them (FlashAttention-2, cuDNN's fused attention, the memory-efficient kernel), the
best of REPS (environment, default 5) after a warm-up, so that the bench can set meshmoe's
attention family beside what tuned kernels take on the same
GPU. Prints, per file, `describe PATH`, then per backend:

    sdpa BACKEND forward_ms F forward_backward_ms T
    sdpa BACKEND refused: REASON

and first `shapes ...` and `layer_tflop X` (one layer's FLOPs forward and backward, the causal
half of the scores' and values' products: 3.5 times the forward's 2 B N S^2 (Dqk + Dv) / 2).
Without a GPU it runs on the CPU at 1/8 of the sequence (a check of the script, not a timing).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import attention_dims  # noqa: E402  (make bench's reading of the config's heads)


def shapes(cfg):
    """(B, Nq, Nkv, S, Dqk, Dv) of the config's attention core."""
    nq, nkv, dqk, dv = attention_dims(cfg)
    return cfg["per_device_batch_size"], nq, nkv, cfg["max_target_length"], dqk, dv


def best(fn, sync, reps):
    """The shortest of reps timed calls of fn, after one untimed."""
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    import torch
    reps = int(os.environ.get("REPS", "5"))
    for path in sys.argv[1:]:
        print(f"describe {path}", flush=True)
        try:
            one_config(torch, json.load(open(path))["config"], reps)
        except Exception as e:   # (out of memory, say): the next config still runs
            print(f"failed: {type(e).__name__}: {' '.join(str(e).split())[:160]}", flush=True)


def one_config(torch, cfg, reps):
    """The lines above for one config."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    B, Nq, Nkv, S, Dqk, Dv = shapes(cfg)
    if dev == "cpu":
        S = max(64, S // 8)
    print(f"shapes B {B} query_heads {Nq} kv_heads {Nkv} S {S} Dqk {Dqk} Dv {Dv} on {dev}")
    print(f"layer_tflop {3.5 * 2 * B * Nq * S * S * (Dqk + Dv) / 2 / 1e12:.4f}")
    gen = torch.Generator(device=dev).manual_seed(0)

    def draw(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
    # GQA's shared key and value heads as torch 2.5 and later take them (enable_gqa); an older
    # torch gets each shared head repeated for its queries, the same products.
    old_torch = tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 5)
    kv_heads = Nq if old_torch else Nkv
    q, k, v = draw(B, Nq, S, Dqk), draw(B, kv_heads, S, Dqk), draw(B, kv_heads, S, Dv)
    dout = torch.randn(B, Nq, S, Dv, device=dev, dtype=torch.bfloat16, generator=gen)
    gqa = {"enable_gqa": True} if kv_heads != Nq else {}

    def forward():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

    def forward_backward():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        torch.autograd.backward(o, dout)
        q.grad = k.grad = v.grad = None

    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    if dev == "cpu":
        backends = [("math", SDPBackend.MATH)]
    for name, backend in backends:
        try:
            with sdpa_kernel(backend):
                f = best(forward, sync, reps)
                fb = best(forward_backward, sync, reps)
            print(f"sdpa {name} forward_ms {f * 1e3:.3f} forward_backward_ms {fb * 1e3:.3f}", flush=True)
        except Exception as e:   # a backend that does not take these shapes (or this GPU) says why
            why = " ".join(str(e).split())[:160]
            print(f"sdpa {name} refused: {type(e).__name__}: {why}", flush=True)


if __name__ == "__main__":
    main()
