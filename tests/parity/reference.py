#!/usr/bin/env python3
"""Independent JAX reference for meshmoe (Mixtral- and DeepSeek-style MoE decoders).

Usage:  reference.py DUMP.safetensors OUT.safetensors

Reads a dump written by the C trainer (`./train CONFIG dump_parity=DIR`, format in
tests/parity/README.md), rebuilds the model from the config stored in the dump's
metadata, runs the same forward, backward and `parity_steps` optimizer updates, and
writes its results under the names the C side uses, with prefix `jax/` instead of `c/`.

The math is docs/model.md (MaxText's definitions, which both programs implement). Each
function below names the docs/model.md section it implements. Nothing here is translated
from the C code: both sides were written from MaxText's definitions.

How numbers are represented
---------------------------
Every tensor in this program is stored as float32 (float64 in selftest.py). In bfloat16
mode a value is "rounded to bf16" by `rb(x) = x.astype(bfloat16).astype(float32)`
(round to nearest even), so a bf16 tensor is a float32 tensor whose values are exactly
representable in bf16. Products of two bf16 values are exact in float32, so a matmul of
bf16-valued float32 operands at HIGHEST precision *is* "bf16 inputs, float32
accumulation". Every place where a value is rounded is one call to a `Casts` helper, and
the complete list is here. In float32 mode every helper is the identity.

Cast points in bfloat16 mode (`dtype == "bfloat16"`; rb = round to bf16)
------------------------------------------------------------------------
 1. Weights: every float32 master parameter is rounded once per step before use:
    W = rb(W_master) (embedding, norm scales, all kernels). The master copy, its
    gradient and the optimizer state stay float32.
    Exception: the router gate kernel, when `float32_gate_logits` is true, is used
    unrounded (float32 master), as MaxText's float32 GateLogit does.
 2. Embedding: output = rows of rb(table); no further rounding (already bf16).
 3. RMSNorm (also q_norm / kv_norm in MLA): ms = mean(x^2) in float32;
    y = rb(x * rsqrt(ms + eps)); out = rb(y * scale).
 4. Matmuls (q/k/v/out projections, MLA wq_a/wq_b/wkv_a/wkv_b/out, dense and shared
    MLP wi_0/wi_1/wo, expert wi_0/wi_1/wo, the logits head): bf16 operands, float32
    accumulation, out = rb(x @ W).
 5. Gate logits: logits = x @ Wg accumulated in float32, then rb() unless
    `float32_gate_logits` (then kept float32, with Wg unrounded: see 1).
    "gate dtype rounding" gd(v) below means rb(v) unless float32_gate_logits, else v.
 6. RoPE: cos and sin computed in float32 then rb(); out = rb(x*cos + rotate_half(x)*sin)
    (both products and the sum in float32, one rounding). rope_type=yarn: sin and cos
    stay float32 (MaxText's complex64 table); out = rb(the complex product's parts).
 7. MLA query scale: q = rb(concat(q_nope, q_rope) * rb(scale)), scale =
    (qk_nope_head_dim + qk_rope_head_dim)^-0.5 (the constant itself is rounded to bf16,
    as JAX's weak typing does for bf16_array * python_float); past the original context
    the scale times yarn's mscale^2 (mla_scale). Splits, concatenations and
    the broadcast of k_rope are exact.
 8. Attention scores: s = q.k accumulated in float32; s = rb(s) unless
    `float32_qk_product`.
 9. Attention softmax (statistics always float32): mask by replacement in float32;
    m = max(s); e = exp(s - m) in float32; if not `float32_logits`: e = rb(e);
    l = sum(e) in float32 (of the e actually used); num = e @ v accumulated in float32;
    if not `float32_logits`: num = rb(num); out = rb(num / l).
10. Residual adds: h = rb(x + attn), x = rb(h + ffn).
11. SwiGLU (experts, dense MLP, shared experts): a = rb(x@wi_0), b = rb(x@wi_1) (point 4);
    h = rb(silu(a) * b) (silu and product in float32, one rounding); out = rb(h@wo).
12. Router weights, routed_score_func "" (Mixtral) and softmax: w = rb(the float32 weights).
13. DeepSeek router: s = gd(sigmoid(logits)) (sigmoid in float32); bias b = gd(b);
    s' = gd(s + b) (the selection scores); group score = float32 sum of the top-2 s' in
    the group; weights w = rb(routed_scaling_factor * s[idx] / (sum_k s[idx] + 1e-20))
    (computed in float32, one rounding).
14. MoE combine (both dispatch paths; dropped assignments have weight 0):
    float32_weight_sum = true:  out = rb(sum_k w_k * y_k) in float32 from the bf16 values.
    float32_weight_sum = false: every product and every partial sum is rounded to bf16,
      accumulated over the selected experts in ascending expert index:
      acc = 0; for e ascending: acc = rb(acc + rb(w_e * y_e)); out = acc.
15. Shared experts: out = rb(routed + shared).
16. Logits: point 4 (bf16), then promoted to float32 (exact) for the loss
    (`cast_logits_to_fp32`; when it is false this reference still computes the loss in
    float32 from the same bf16 logits).
17. Loss: cross entropy, z-loss, load-balance loss (P = softmax of the gate logits in
    float32) and all optimizer arithmetic in float32.
18. Backward: plain JAX autodiff of the above. Each rb() in the forward rounds the
    incoming cotangent to bf16 in the backward (the transpose of a convert), so the
    gradient of each master weight is the bf16-rounded gradient of its bf16 copy, stored
    as float32 (grad_dtype float32).
"""

import os

# Keep every explicit f32->bf16->f32 rounding: never let XLA drop a convert pair.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_allow_excess_precision=false").strip()

import argparse
import json
import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from safetensors import safe_open
from safetensors.numpy import save_file

jax.config.update("jax_enable_x64", False)
jax.config.update("jax_default_matmul_precision", "highest")

HIGHEST = jax.lax.Precision.HIGHEST
# Causal mask value (docs/model.md#gqa-attention): replacement by -0.7 * FLT_MAX, not -inf.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


# ----------------------------------------------------------------------------------------
# Precision helpers: one line per cast point (see the list in the module docstring).
# ----------------------------------------------------------------------------------------
class Casts:
    """The rounding helpers of the cast-point list. Identity in float32 mode.

    `base` is the storage/compute dtype: float32 here, float64 in selftest.py.
    """

    def __init__(self, cfg, base=jnp.float32):
        self.base = base
        self.bf16 = cfg["dtype"] == "bfloat16"
        self.f32_gate = bool(cfg.get("float32_gate_logits", False))
        self.f32_qk = bool(cfg.get("float32_qk_product", False))
        self.f32_logits = bool(cfg.get("float32_logits", False))
        self.f32_wsum = bool(cfg.get("float32_weight_sum", True))

    def rb(self, x):
        """Round to bf16 (kept in `base` storage). Cast points 2-4, 6-16."""
        if not self.bf16:
            return x
        return x.astype(jnp.bfloat16).astype(self.base)

    def weight(self, w):
        """Cast point 1: master weight -> the copy used in the forward."""
        return self.rb(w)

    def gate(self, x):
        """Cast points 5, 13: gate dtype rounding gd()."""
        return x if self.f32_gate else self.rb(x)

    def scores(self, s):
        """Cast point 8: attention scores."""
        return s if self.f32_qk else self.rb(s)

    def attn_probs(self, x):
        """Cast point 9: exp weights and the unnormalised e @ v."""
        return x if self.f32_logits else self.rb(x)


def mm(spec, x, w, c):
    """Cast point 4: matmul with float32 accumulation, output rounded to bf16."""
    return c.rb(jnp.einsum(spec, x, w, precision=HIGHEST, preferred_element_type=c.base))


# ----------------------------------------------------------------------------------------
# Layers
# ----------------------------------------------------------------------------------------
def rms_norm(x, scale, eps, c):
    """docs/model.md#rmsnorm: y = x * rsqrt(mean(x^2) + eps) * scale (statistics in f32).

    bf16 (cast point 3): the normalised value is rounded before the multiply by the
    (bf16) scale, and the product is rounded again.
    """
    ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    y = c.rb(x * jax.lax.rsqrt(ms + eps))
    return c.rb(y * scale)


def rope(x, min_timescale, max_timescale, c):
    """docs/model.md#rope (half-split layout).

    x: [B, S, H, Dr]; positions are 0..S-1 in every sequence.
    timescale_i = min * (max/min)^(2i/Dr), theta = pos / timescale_i,
    out = x*[cos,cos] + rotate_half(x)*[sin,sin], rotate_half([x1,x2]) = [-x2, x1].
    bf16: cast point 6.
    """
    S, Dr = x.shape[1], x.shape[-1]
    half = Dr // 2
    fraction = 2.0 * jnp.arange(half, dtype=jnp.float32) / Dr
    timescale = min_timescale * (max_timescale / min_timescale) ** fraction  # float32
    pos = jnp.arange(S, dtype=jnp.float32)
    theta = pos[:, None] / timescale[None, :]  # [S, half], float32
    cos = c.rb(jnp.cos(theta).astype(c.base))
    sin = c.rb(jnp.sin(theta).astype(c.base))
    cos = jnp.concatenate([cos, cos], axis=-1)[None, :, None, :]  # [1, S, 1, Dr]
    sin = jnp.concatenate([sin, sin], axis=-1)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    rot = jnp.concatenate([-x2, x1], axis=-1)
    return c.rb(x * cos + rot * sin)


def yarn_freqs(cfg, Dr):
    """docs/model.md#yarn: MaxText's YarnRotaryEmbedding frequencies (rope_type=yarn).

    The default 1 / theta^(2i/Dr) in float32; the correction range [low, high] of
    dimensions from beta_fast and beta_slow rotations over original_max_position_embeddings
    (Python floats, floor and ceil under rope_truncate, clamped to [0, Dr-1]); a frequency
    below the range divided by rope_factor, above it kept, mixed linearly inside.
    """
    half, theta = Dr // 2, cfg["rope_max_timescale"]
    orig = cfg["original_max_position_embeddings"]

    def corr(rotations):
        return Dr * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = corr(cfg["beta_fast"]), corr(cfg["beta_slow"])
    if cfg["rope_truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, Dr - 1)
    if low == high:
        high += 0.001
    i = jnp.arange(half, dtype=jnp.float32)
    freqs = 1.0 / (theta ** (2.0 * i / Dr))
    keep = 1 - jnp.clip((i - low) / (high - low), 0, 1)
    return freqs / cfg["rope_factor"] * (1 - keep) + freqs * keep


def rope_yarn(x, cfg, c):
    """docs/model.md#yarn: x [B, S, H, Dr] rotated by the angles pos * freq (float32), as
    complex numbers: pairs (x[2i], x[2i+1]) under rope_interleave, else the halves; the
    output always the halves [real | imag]; times 0.1 ln(rope_factor) + 1 under
    rope_attention_scaling. bf16: the output rounded once (no rounding of sin and cos).
    """
    S, Dr = x.shape[1], x.shape[-1]
    half = Dr // 2
    theta = jnp.outer(jnp.arange(S, dtype=jnp.float32), yarn_freqs(cfg, Dr))
    cis = jnp.exp(1j * theta)[None, :, None, :]
    a, b = (x[..., 0::2], x[..., 1::2]) if cfg["rope_interleave"] else (x[..., :half], x[..., half:])
    z = (a + 1j * b) * cis
    out = jnp.concatenate([jnp.real(z), jnp.imag(z)], axis=-1).astype(c.base)
    if cfg["rope_attention_scaling"] and cfg["rope_factor"] > 1:
        out = out * (0.1 * math.log(cfg["rope_factor"]) + 1.0)
    return c.rb(out)


def rope_cfg(x, cfg, c):
    """The RoPE of the config: yarn's or the default one."""
    if cfg.get("rope_type", "default") == "yarn":
        return rope_yarn(x, cfg, c)
    return rope(x, cfg["rope_min_timescale"], cfg["rope_max_timescale"], c)


def mla_scale(cfg):
    """docs/model.md#mla: (nope + rope)^-0.5, times mscale^2 past the original context
    (max_position_embeddings > original_max_position_embeddings), mscale = 0.1 * mscale *
    ln(rope_factor) + 1 (Python floats, as MaxText's attention_mla.py)."""
    scale = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
    if cfg.get("max_position_embeddings", 0) > cfg.get("original_max_position_embeddings", 0):
        m = 0.1 * cfg["mscale"] * math.log(cfg["rope_factor"]) + 1.0
        scale = scale * m * m
    return scale


def causal_attention(q, k, v, c):
    """docs/model.md#gqa-attention: causal softmax attention, split as MaxText does it.

    q: [B, S, N, Dq], k: [B, S, N, Dq], v: [B, S, N, Dv] (kv already expanded per head).
    scores s = q.k (no runtime scale here), mask by replacement where(col <= row, s,
    -0.7*FLT_MAX), m = max(s), e = exp(s - m), out = (e @ v) / sum(e).
    bf16: cast points 8, 9.
    """
    S = q.shape[1]
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=HIGHEST, preferred_element_type=c.base)
    s = c.scores(s)
    row = jnp.arange(S)[:, None]
    col = jnp.arange(S)[None, :]
    s = jnp.where(col <= row, s, jnp.asarray(MASK_VALUE, c.base))
    m = jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True))
    e = c.attn_probs(jnp.exp(s - m))
    denom = jnp.sum(e, axis=-1, keepdims=True)  # [B, N, S, 1]
    num = c.attn_probs(jnp.einsum("bhqk,bkhd->bqhd", e, v, precision=HIGHEST, preferred_element_type=c.base))
    return c.rb(num / jnp.transpose(denom, (0, 2, 1, 3)))


def gqa_attention(x, p, pre, cfg, c):
    """docs/model.md#gqa-attention (Mixtral).

    q = x Wq [D,N,Dh], k = x Wk [D,Nkv,Dh], v = x Wv [D,Nkv,Dh]; RoPE on q and k; query
    head h uses kv head h // (N/Nkv); no runtime 1/sqrt(Dh); out = o Wo [N,Dh,D].
    """
    N, Nkv = cfg["base_num_query_heads"], cfg["base_num_kv_heads"]
    q = mm("bsd,dnh->bsnh", x, p[pre + "query/kernel"], c)
    k = mm("bsd,dnh->bsnh", x, p[pre + "key/kernel"], c)
    v = mm("bsd,dnh->bsnh", x, p[pre + "value/kernel"], c)
    q = rope_cfg(q, cfg, c)
    k = rope_cfg(k, cfg, c)
    group = N // Nkv
    k = jnp.repeat(k, group, axis=2)  # head h -> kv head h // group
    v = jnp.repeat(v, group, axis=2)
    o = causal_attention(q, k, v, c)
    return mm("bsnh,nhd->bsd", o, p[pre + "out/kernel"], c)


def mla_attention(x, p, pre, cfg, c):
    """docs/model.md#mla (DeepSeek).

    query: x Wq (q_lora_rank == 0) or RMSNorm_q(x Wq_a) Wq_b; last axis nope then rope.
    kv: c = x Wkv_a -> [latent | k_rope]; kv = RMSNorm_kv(latent) Wkv_b -> per head
    [k_nope | v]; k_rope is one head shared by all heads. RoPE on q_rope and k_rope.
    q = concat(q_nope, q_rope) * (nope + rope)^-0.5; k = concat(k_nope, k_rope).
    """
    nope, rdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
    kv_rank, eps = cfg["kv_lora_rank"], cfg.get("mla_norm_epsilon") or cfg["normalization_layer_epsilon"]
    if cfg["q_lora_rank"] > 0:
        low = mm("bsd,dr->bsr", x, p[pre + "wq_a/kernel"], c)
        low = rms_norm(low, p[pre + "q_norm/scale"], eps, c)
        q = mm("bsr,rnh->bsnh", low, p[pre + "wq_b/kernel"], c)
    else:
        q = mm("bsd,dnh->bsnh", x, p[pre + "query/kernel"], c)
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    q_rope = rope_cfg(q_rope, cfg, c)
    scale = mla_scale(cfg)
    q = c.rb(jnp.concatenate([q_nope, q_rope], axis=-1) * c.rb(jnp.asarray(scale, c.base)))  # cast point 7

    ckv = mm("bsd,dr->bsr", x, p[pre + "wkv_a/kernel"], c)
    latent, k_rope = ckv[..., :kv_rank], ckv[..., kv_rank:]
    latent = rms_norm(latent, p[pre + "kv_norm/scale"], eps, c)
    kv = mm("bsr,rnh->bsnh", latent, p[pre + "wkv_b/kernel"], c)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    k_rope = rope_cfg(k_rope[:, :, None, :], cfg, c)  # one head: [B, S, 1, rope]
    k_rope = jnp.broadcast_to(k_rope, k_nope.shape[:3] + (rdim,))
    k = jnp.concatenate([k_nope, k_rope], axis=-1)
    o = causal_attention(q, k, v, c)
    return mm("bsnh,nhd->bsd", o, p[pre + "out/kernel"], c)


def swiglu(x, wi0, wi1, wo, c):
    """docs/model.md#swiglu, expert FFN: (silu(x wi_0) * (x wi_1)) wo.

    Also the dense MLP and the shared experts. bf16: cast point 11.
    """
    a = mm("...d,dh->...h", x, wi0, c)
    b = mm("...d,dh->...h", x, wi1, c)
    h = c.rb(jax.nn.silu(a) * b)
    return mm("...h,hd->...d", h, wo, c)


# ----------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------
def route_mixtral(logits, K, c):
    """docs/model.md#moe-routing, Mixtral routing.

    w, idx = top_k(logits, K) (ties: lower index first); w = softmax over the K
    selected logits only, in float32. Returns (weights [..,K], idx [..,K], scores) where
    scores (for tie detection) are the gate logits. bf16: cast point 12.
    """
    top, idx = jax.lax.top_k(logits, K)
    w = c.rb(jax.nn.softmax(top, axis=-1))
    return w, idx, logits


def keep_best_groups(sel, cfg, n_best):
    """Group-limited routing: sel [.., E] reshaped to [G, E/G]; a group's score is the sum of
    its n_best best entries (2: DeepSeek-V3, 1: V2's group_limited_greedy); the experts outside
    the best `topk_routing_group` groups become -inf. sel unchanged with the groups off."""
    E, G, topg = sel.shape[-1], cfg["n_routing_groups"], cfg["topk_routing_group"]
    if G <= 0:
        return sel
    grouped = sel.reshape(sel.shape[:-1] + (G, E // G))
    best, _ = jax.lax.top_k(grouped, n_best)
    group_score = jnp.sum(best, axis=-1)  # [.., G]
    _, gidx = jax.lax.top_k(group_score, topg)
    gmask = jnp.sum(jax.nn.one_hot(gidx, G, dtype=jnp.float32), axis=-2) > 0  # [.., G]
    emask = jnp.repeat(gmask, E // G, axis=-1)  # [.., E]
    return jnp.where(emask, sel, -jnp.inf)


def route_softmax(logits, cfg, c):
    """MaxText's routed_score_func = "softmax": a softmax over all experts before the top-k.

    p = softmax(logits) in float32; with routing groups, DeepSeek-V2's group_limited_greedy
    (a group ranked by its best p); idx = top_k of the eligible p; the weights are, for the
    Mixtral block, a softmax over the K chosen p, and for the DeepSeek block the K chosen p
    times routed_scaling_factor. Returns (weights, idx, p). bf16: cast point 12 on the weights.
    """
    p = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    _, idx = jax.lax.top_k(jax.lax.stop_gradient(keep_best_groups(p, cfg, 1)), cfg["num_experts_per_tok"])
    top = jnp.take_along_axis(p, idx, axis=-1)
    if cfg["decoder_block"] == "deepseek":
        w = top * cfg["routed_scaling_factor"]
    else:
        w = jax.nn.softmax(top, axis=-1)
    return c.rb(w), idx, p


def route_deepseek(logits, bias, cfg, c):
    """docs/model.md#moe-routing, DeepSeek routing (routed_score_func = sigmoid).

    s = sigmoid(logits); s' = s + b (selection only, no gradient through b); the groups
    ranked by their two best s'; idx = top_k of the eligible s'; w = s[idx] (unbiased,
    gradient flows through s); w = w / (sum(w) + 1e-20) * routed_scaling_factor.
    Returns (weights, idx, selection scores s'). bf16: cast point 13.
    """
    K = cfg["num_experts_per_tok"]
    s = c.gate(jax.nn.sigmoid(logits))
    sel = c.gate(s + c.gate(jax.lax.stop_gradient(bias)))
    sel = jax.lax.stop_gradient(sel)  # selection is not differentiated
    _, idx = jax.lax.top_k(keep_best_groups(sel, cfg, 2), K)
    w = jnp.take_along_axis(s, idx, axis=-1)
    w = w / (jnp.sum(w, axis=-1, keepdims=True) + 1e-20)
    w = c.rb(w * cfg["routed_scaling_factor"])
    return w, idx, sel


def capacity_keep(idx, E, cf):
    """docs/model.md#dense-path-and-capacity-dropping (capacity_factor > 0).

    idx [B, S, K]. C = int(max(ceil(S*K/E)*cf, cf)); within each sequence, the position
    of assignment (s, k) for its expert is the running count over the flattened (s, k)
    order, s-major; keep it if that 1-based position is <= C. Returns keep [B, S, K].
    """
    B, S, K = idx.shape
    cf = float(str(np.float32(cf)))   # the decimal written, where the dump has the float's 9 digits
    cap = int(max(math.ceil(S * K / E) * cf, cf))
    onehot = jax.nn.one_hot(idx.reshape(B, S * K), E, dtype=jnp.int32)  # [B, S*K, E]
    position = jnp.sum(jnp.cumsum(onehot, axis=1) * onehot, axis=-1)  # 1-based, [B, S*K]
    return (position <= cap).reshape(B, S, K)


# ----------------------------------------------------------------------------------------
# Expert dispatch and combine
# ----------------------------------------------------------------------------------------
def combine_sequential_bf16(w, y, c):
    """Cast point 14, float32_weight_sum = false: bf16 products and bf16 running sum.

    w [..., J], y [..., J, D], with the J axis already in ascending expert order.
    """
    acc = jnp.zeros(y.shape[:-2] + y.shape[-1:], c.base)
    for j in range(w.shape[-1]):
        acc = c.rb(acc + c.rb(w[..., j, None] * y[..., j, :]))
    return acc


def moe_dense(x, w_bse, wi0, wi1, wo, c):
    """docs/model.md#dense-path-and-capacity-dropping (sparse_matmul = false).

    Every expert runs on every token; the combine weights w_bse [B,S,E] (zeros for
    unselected and dropped assignments) multiply the expert outputs and the combine is
    a sum over E.
    """
    a = mm("bsd,edh->bseh", x, wi0, c)
    b = mm("bsd,edh->bseh", x, wi1, c)
    h = c.rb(jax.nn.silu(a) * b)
    y = mm("bseh,ehd->bsed", h, wo, c)  # [B, S, E, D]
    if c.bf16 and not c.f32_wsum:
        return combine_sequential_bf16(w_bse, y, c)  # E axis is ascending expert order
    return c.rb(jnp.einsum("bsed,bse->bsd", y, w_bse, precision=HIGHEST))


def moe_sparse(x, idx, w, wi0, wi1, wo, c):
    """docs/model.md#sparse-path-dropless (sparse_matmul = true).

    Sort the (token, slot) pairs by expert (stable argsort), run one grouped matmul per
    expert (jax.lax.ragged_dot), unsort, combine over K with the routing weights.
    """
    B, S, D = x.shape
    K, E = idx.shape[-1], wi0.shape[0]
    T = B * S
    flat = idx.reshape(T * K)
    order = jnp.argsort(flat, stable=True)  # sorted position -> (token, slot)
    group_sizes = jnp.bincount(flat, length=E).astype(jnp.int32)
    x_rep = jnp.repeat(x.reshape(T, D), K, axis=0)[order]  # [T*K, D], grouped by expert

    def gmm(lhs, rhs):
        return c.rb(jax.lax.ragged_dot(lhs, rhs, group_sizes, precision=HIGHEST, preferred_element_type=c.base))

    h = c.rb(jax.nn.silu(gmm(x_rep, wi0)) * gmm(x_rep, wi1))
    y_sorted = gmm(h, wo)  # [T*K, D]
    y = jnp.zeros_like(y_sorted).at[order].set(y_sorted).reshape(T, K, D)  # unsort
    wt = w.reshape(T, K)
    if c.bf16 and not c.f32_wsum:
        slot_order = jnp.argsort(idx.reshape(T, K), axis=-1, stable=True)  # ascending expert
        wt = jnp.take_along_axis(wt, slot_order, axis=-1)
        y = jnp.take_along_axis(y, slot_order[..., None], axis=1)
        out = combine_sequential_bf16(wt, y, c)
    else:
        out = c.rb(jnp.einsum("tkd,tk->td", y, wt, precision=HIGHEST))
    return out.reshape(B, S, D)


def load_balance_loss(logits, idx, E, weight):
    """docs/model.md#load-balance-loss (used for both families).

    P = softmax(gate logits) over all E (float32); f[b,e] = (1/S) sum_s sum_k 1[idx=e];
    Pbar[b,e] = (1/S) sum_s P; L = weight * E^2 * mean_{b,e}(f * Pbar), over every
    sequence of the global batch. f uses the selection before capacity dropping.
    """
    P = jax.nn.softmax(logits, axis=-1)
    f = jnp.mean(jnp.sum(jax.nn.one_hot(idx, E, dtype=logits.dtype), axis=-2), axis=1)  # [B, E]
    pbar = jnp.mean(P, axis=1)  # [B, E]
    return weight * E * E * jnp.mean(f * pbar)


def moe_block(x, p, master, state, moe_pre, cfg, c):
    """docs/model.md#moe-routing, #expert-dispatch, #shared-experts: the whole MoE block.

    Returns (out, info) where info holds the routing choices, the per-expert counts and
    the load-balance loss of this layer.
    """
    E, K = cfg["num_experts"], cfg["num_experts_per_tok"]
    mb = moe_pre + "MoeBlock_0/"
    wg = c.gate(master[mb + "gate/kernel"])  # cast point 1 exception / 5
    logits = c.gate(jnp.einsum("bsd,de->bse", x, wg, precision=HIGHEST, preferred_element_type=c.base))
    if cfg["routed_score_func"] == "sigmoid":
        bias = state.get(mb + "gate/bias", jnp.zeros((E,), c.base))  # state/<...>/MoeBlock_0/gate/bias
        w, idx, scores = route_deepseek(logits, bias, cfg, c)
    elif cfg["routed_score_func"] == "softmax":
        w, idx, scores = route_softmax(logits, cfg, c)
    else:  # "": Mixtral's rule
        w, idx, scores = route_mixtral(logits, K, c)

    wi0, wi1, wo = p[mb + "wi_0"], p[mb + "wi_1"], p[mb + "wo"]
    if cfg["sparse_matmul"]:
        out = moe_sparse(x, idx, w, wi0, wi1, wo, c)
    else:
        w_kept = w
        if cfg["capacity_factor"] > 0:
            w_kept = w * capacity_keep(idx, E, cfg["capacity_factor"]).astype(w.dtype)
        w_bse = jnp.sum(jax.nn.one_hot(idx, E, dtype=w.dtype) * w_kept[..., None], axis=-2)
        out = moe_dense(x, w_bse, wi0, wi1, wo, c)

    if cfg["decoder_block"] == "deepseek" and cfg["shared_experts"] > 0:
        sh = moe_pre + "shared_experts/"
        shared = swiglu(x, p[sh + "wi_0/kernel"], p[sh + "wi_1/kernel"], p[sh + "wo/kernel"], c)
        out = c.rb(out + shared)  # cast point 15

    lb = jnp.zeros((), c.base)
    if cfg["load_balance_loss_weight"] > 0:
        lb = load_balance_loss(logits, idx, E, cfg["load_balance_loss_weight"])
    counts = jnp.bincount(idx.reshape(-1), length=E)
    info = {"indices": idx, "weights": w, "scores": scores, "counts": counts, "lb": lb}
    return out, info


# ----------------------------------------------------------------------------------------
# Decoder
# ----------------------------------------------------------------------------------------
def is_moe_layer(i, cfg):
    """Layer i has an MoE FFN unless i < first_num_dense_layers (docs/model.md#decoder-stack)."""
    return i >= cfg.get("first_num_dense_layers", 0)


def layer_prefixes(i, cfg):
    """MaxText's unscanned parameter paths of layer i: (the layer's prefix, its MoE block's).

    Mixtral: decoder/layers_<i>/ for both. DeepSeek counts its dense and MoE layers apart:
    decoder/dense_layers_<i>/ below first_num_dense_layers, else
    decoder/moe_layers_<i - first_num_dense_layers>/, whose MoE block (routed and shared
    experts) sits under DeepSeekMoeBlock_0/.
    """
    if cfg.get("decoder_block") != "deepseek":
        return f"decoder/layers_{i}/", f"decoder/layers_{i}/"
    first = cfg.get("first_num_dense_layers", 0)
    if i < first:
        return f"decoder/dense_layers_{i}/", f"decoder/dense_layers_{i}/"
    pre = f"decoder/moe_layers_{i - first}/"
    return pre, pre + "DeepSeekMoeBlock_0/"


def decoder_layer(x, i, p, master, state, cfg, c):
    """docs/model.md#decoder-stack: h = x + Attn(RMSNorm_pre(x)); x = h + FFN(RMSNorm_post(h))."""
    pre, moe_pre = layer_prefixes(i, cfg)
    eps = cfg["normalization_layer_epsilon"]
    y = rms_norm(x, p[pre + "pre_self_attention_layer_norm/scale"], eps, c)
    if cfg["attention_type"] == "mla":
        a = mla_attention(y, p, pre + "self_attention/", cfg, c)
    else:
        a = gqa_attention(y, p, pre + "self_attention/", cfg, c)
    h = c.rb(x + a)  # cast point 10
    y = rms_norm(h, p[pre + "post_self_attention_layer_norm/scale"], eps, c)
    info = None
    if is_moe_layer(i, cfg):
        f, info = moe_block(y, p, master, state, moe_pre, cfg, c)
    else:
        f = swiglu(y, p[pre + "mlp/wi_0/kernel"], p[pre + "mlp/wi_1/kernel"], p[pre + "mlp/wo/kernel"], c)
    return c.rb(h + f), info  # cast point 10


def forward(params, state, inputs, cfg, base=jnp.float32):
    """docs/model.md#decoder-stack and #embedding: ids [R, S] -> logits [R, S, V] (float32).

    Returns (logits, infos) with infos[i] the routing info of MoE layer i (None for a
    dense layer).
    """
    c = Casts(cfg, base)
    p = {k: c.weight(v) for k, v in params.items()}  # cast point 1
    x = jnp.take(p["token_embedder/embedding"], inputs, axis=0)  # cast point 2
    infos = []
    for i in range(cfg["base_num_decoder_layers"]):
        x, info = decoder_layer(x, i, p, params, state, cfg, c)
        infos.append(info)
    x = rms_norm(x, p["decoder/decoder_norm/scale"], cfg["normalization_layer_epsilon"], c)
    logits = mm("bsd,dv->bsv", x, p["decoder/logits_dense/kernel"], c)  # cast point 16
    return logits, infos


def loss_terms(params, state, inputs, targets, cfg, base=jnp.float32):
    """Unnormalised loss terms of one (micro)batch, for gradient accumulation checks.

    Returns dict: ce_sum (sum of per-token losses over valid targets), n_tokens,
    lb_seq_sums (per MoE layer: sum over sequences of L_lb per sequence, i.e.
    weight*E^2*mean_e(f*Pbar) summed over b), n_seqs, plus logits and infos.
    """
    logits, infos = forward(params, state, inputs, cfg, base)
    z = logits.astype(base)
    lse = jax.nn.logsumexp(z, axis=-1)
    valid = targets >= 0
    z_t = jnp.take_along_axis(z, jnp.maximum(targets, 0)[..., None], axis=-1)[..., 0]
    per_tok = lse - z_t + cfg["z_loss_multiplier"] * jnp.square(lse)
    ce_sum = jnp.sum(jnp.where(valid, per_tok, 0.0))
    n_tok = jnp.sum(valid).astype(base)
    lbs = [inf["lb"] * inputs.shape[0] for inf in infos if inf is not None]
    return {"ce_sum": ce_sum, "n_tokens": n_tok, "lb_seq_sums": lbs, "n_seqs": inputs.shape[0],
            "logits": logits, "infos": infos}


def loss_fn(params, state, inputs, targets, cfg, base=jnp.float32):
    """docs/model.md#output-head-and-loss: total = CE mean + aux.

    Per token l = lse(z) - z_target + z_loss_multiplier * lse^2 over targets >= 0; the
    mean is over all valid tokens of the global batch (all microbatches: gradient
    accumulation is one forward over the A*B rows, which is the same math as summing
    and dividing once). aux = mean over MoE layers of L_lb.
    Returns (total, aux dict).
    """
    t = loss_terms(params, state, inputs, targets, cfg, base)
    ce = t["ce_sum"] / jnp.maximum(t["n_tokens"], 1.0)
    lbs = [s / t["n_seqs"] for s in t["lb_seq_sums"]]
    aux_loss = sum(lbs) / len(lbs) if (lbs and cfg["load_balance_loss_weight"] > 0) else jnp.zeros((), base)
    total = ce + aux_loss
    router = {}
    for i, inf in enumerate(t["infos"]):
        if inf is not None:
            router[i] = {k: inf[k] for k in ("indices", "weights", "scores", "counts")}
    return total, {"ce_loss": ce, "aux_loss": aux_loss, "logits": t["logits"], "router": router}


# ----------------------------------------------------------------------------------------
# Optimizer
# ----------------------------------------------------------------------------------------
def lr_schedule(cfg):
    """docs/model.md#optimizer-and-schedule: MaxText's schedule, its pieces joined by
    optax.join_schedules as maxtext_utils.create_learning_rate_schedule joins them.

    L = learning_rate_schedule_steps (steps when -1 or absent), W = int(L *
    warmup_steps_fraction): optax.linear_schedule(0, lr, W - 1) over steps 0..W-1; then
    lr_schedule_type cosine: over the other L - W steps, pct = k/(n-1) (1 if n == 1),
    a = 0.5*(cos(pi*pct)+1), lr*a + final*(1-a); or wsd: lr held, then over the last
    D = int(L * wsd_decay_steps_fraction) steps optax.linear_schedule(lr, final, D - 1) or
    the cosine piece; from L to steps, 0. final = learning_rate_final_fraction * lr.
    optax calls it with the update count t = 0, 1, ... (update t uses lr(t)).
    """
    lr = float(cfg["learning_rate"])
    steps = int(cfg["steps"])
    length = int(cfg.get("learning_rate_schedule_steps", -1))
    length = steps if length <= 0 else length
    final = float(cfg["learning_rate_final_fraction"]) * lr

    def steps_of(key):   # int(n * fraction) of the decimal the user wrote, as MaxText's Python
        return int(length * float(str(np.float32(cfg[key]))))   # the dump has the float's 9 digits
    warm = steps_of("warmup_steps_fraction")

    def cosine(n):
        def piece(k):   # k: optax's update count (an int32 array) less the piece's start
            k = jnp.asarray(k, jnp.float32)
            pct = k / (n - 1) if n > 1 else jnp.ones_like(k)
            a = 0.5 * (jnp.cos(jnp.pi * pct) + 1.0)
            return lr * a + final * (1.0 - a)
        return piece

    pieces, ends = [], []
    if warm > 0:
        pieces.append(optax.linear_schedule(0.0, lr, warm - 1))
        ends.append(warm)
    if cfg.get("lr_schedule_type", "cosine") == "cosine":
        if length - warm > 0:
            pieces.append(cosine(length - warm))
            ends.append(length)
    else:
        decay = steps_of("wsd_decay_steps_fraction")
        stable = length - warm - decay
        if stable > 0:
            pieces.append(optax.constant_schedule(lr))
            ends.append(warm + stable)
        if decay > 0:
            if cfg["wsd_decay_style"] == "linear":
                pieces.append(optax.linear_schedule(lr, final, decay - 1))
            else:
                pieces.append(cosine(decay))
            ends.append(length)
    if steps > length:
        pieces.append(optax.constant_schedule(0.0))
        ends.append(steps)
    return optax.join_schedules(pieces, ends[:-1])


def muon_dimension_numbers(name):
    """MaxText's muon dimension numbers for a parameter path (maxtext/utils/muon_utils.py's
    transform_logic, its rules on the path's components): None for the tensors AdamW updates."""
    mdn = optax.contrib.MuonDimensionNumbers
    parts = name.split("/")
    if any(p in parts for p in ("scale", "bias", "embedding", "logits_dense")):
        return None
    if "MoeBlock_0" in parts and any(p in parts for p in ("wi_0", "wi_1", "wo")):
        return mdn((-2,), (-1,))
    if "self_attention" in parts:
        if "out" in parts:
            return mdn((0, -2), (-1,))
        if any(p in parts for p in ("query", "key", "value", "wq_b", "wkv_b")):
            return mdn((0,), (-2, -1))
    return mdn((0,), (-1,))


def adam_pax(schedule, b1, b2, eps, eps_root, weight_decay):
    """MaxText's opt_type=adam_pax (maxtext optimizers.adam_pax, after praxis's sharded Adam),
    written here from its formula: the decays of update t (1-based) bias-corrected,
    d = b (1 - b^(t-1)) / (1 - b^t), mu = (1 - d1) g + d1 mu, nu = (1 - d2) g^2 + d2 nu, the
    moments then used as they are: u = mu / (sqrt(nu + eps_root) + eps) + wd p, times -lr."""

    def corrected(count, decay):
        t = count.astype(jnp.float32) + 1.0
        return decay * (1.0 - jnp.power(decay, t - 1.0)) / (1.0 - jnp.power(decay, t))

    def init(params):
        zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, params)
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=zeros(), nu=zeros())

    def update(updates, state, params=None):
        d1, d2 = corrected(state.count, b1), corrected(state.count, b2)
        mu = jax.tree_util.tree_map(lambda g, m: (1.0 - d1) * g + d1 * m, updates, state.mu)
        nu = jax.tree_util.tree_map(lambda g, v: (1.0 - d2) * (g * g) + d2 * v, updates, state.nu)
        u = jax.tree_util.tree_map(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu, nu)
        if weight_decay > 0:
            u = jax.tree_util.tree_map(lambda x, p: x + weight_decay * p, u, params)
        step = -1.0 * schedule(state.count)
        u = jax.tree_util.tree_map(lambda x: step * x, u)
        return u, optax.ScaleByAdamState(count=state.count + 1, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def make_optimizer(cfg):
    """docs/model.md#optimizer-and-schedule: global-norm clipping, then AdamW (optax), or
    optax.adafactor with its defaults when the config says opt_type=adafactor, or
    optax.contrib.muon as MaxText builds it for opt_type=muon, or MaxText's adam_pax.

    optax.adamw: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; mhat = m/(1-b1^t);
    vhat = v/(1-b2^t); p += -lr * (mhat/(sqrt(vhat+eps_root)+eps) + wd*p). No mask: every trained
    parameter decays. The routing bias is not an optax parameter. mu_dtype (MaxText's key,
    optax's argument): the dtype m is kept in between updates ("" = the weights').
    """
    if cfg.get("opt_type", "adamw") == "adafactor":
        # MaxText's opt_type=adafactor: optax.adafactor(learning_rate=schedule), optax's defaults.
        adamw = optax.adafactor(learning_rate=lr_schedule(cfg))
    elif cfg.get("opt_type") == "adam_pax":
        adamw = adam_pax(lr_schedule(cfg), cfg["adam_b1"], cfg["adam_b2"], cfg["adam_eps"],
                         cfg.get("adam_eps_root", 0.0), cfg["adam_weight_decay"])
    elif cfg.get("opt_type") == "muon":
        # MaxText's opt_type=muon (maxtext optimizers.get_optimizer): optax.contrib.muon with
        # MaxText's per-parameter dimension numbers, eps = adam_eps, Nesterov (the default).
        crms = cfg.get("muon_consistent_rms", 0.0)
        mu_dtype = {"": None, "float32": jnp.float32, "bfloat16": jnp.bfloat16}[cfg.get("mu_dtype", "")]
        adamw = optax.contrib.muon(
            lr_schedule(cfg), eps=cfg["adam_eps"], beta=cfg["muon_beta"], weight_decay=cfg["muon_weight_decay"],
            muon_weight_dimension_numbers=lambda params: {name: muon_dimension_numbers(name) for name in params},
            consistent_rms=crms if crms > 0 else None, adam_b1=cfg["adam_b1"], adam_b2=cfg["adam_b2"],
            adam_eps_root=cfg.get("adam_eps_root", 0.0), adam_weight_decay=cfg["adam_weight_decay"], mu_dtype=mu_dtype)
    else:
        mu_dtype = {"": None, "float32": jnp.float32, "bfloat16": jnp.bfloat16}[cfg.get("mu_dtype", "")]
        adamw = optax.adamw(lr_schedule(cfg), b1=cfg["adam_b1"], b2=cfg["adam_b2"], eps=cfg["adam_eps"],
                            eps_root=cfg.get("adam_eps_root", 0.0), weight_decay=cfg["adam_weight_decay"],
                            mu_dtype=mu_dtype)
    thr = cfg["gradient_clipping_threshold"]
    if thr > 0:
        return optax.chain(optax.clip_by_global_norm(thr), adamw)
    return adamw


def bias_update(state, router, cfg):
    """docs/model.md#moe-routing, the selection-only bias: aux-loss-free balancing, after each optimizer step.

    b_e += rate * sign(T*K/E - count_e), count over the step's whole global batch.
    """
    rate = cfg.get("routed_bias_update_rate", 0.0)
    if not (cfg.get("routed_bias", False) and rate > 0):
        return state
    E = cfg["num_experts"]
    new = dict(state)
    for i, r in router.items():
        name = layer_prefixes(i, cfg)[1] + "MoeBlock_0/gate/bias"
        counts = r["counts"].astype(jnp.float32)
        target = jnp.sum(counts) / E  # = T*K/E, T = tokens in the global batch
        new[name] = state[name] + rate * jnp.sign(target - counts)
    return new


# ----------------------------------------------------------------------------------------
# Dump I/O and driver
# ----------------------------------------------------------------------------------------
def load_dump(path):
    """Read a dump: (cfg dict, params {name: f32}, state {name: f32}, inputs, targets, rest)."""
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    cfg = json.loads(meta["config"])
    params = {k[len("param/"):]: v.astype(np.float32) for k, v in tensors.items() if k.startswith("param/")}
    state = {k[len("state/"):]: v.astype(np.float32) for k, v in tensors.items() if k.startswith("state/")}
    return cfg, params, state, tensors["batch/inputs"], tensors["batch/targets"], tensors


def run_reference(cfg, params, state, inputs, targets, steps=None):
    """Run step 0 (forward + backward) and `parity_steps` updates; return {name: array}.

    With `steps` (the dump's per-step C weights, see teacher_forced), also recompute every
    step from C's starting point."""
    P = int(cfg["parity_steps"])
    assert inputs.shape[0] >= P, "batch/inputs has fewer than parity_steps batches"
    params = {k: jnp.asarray(v) for k, v in params.items()}
    state = {k: jnp.asarray(v) for k, v in state.items()}

    def f(prm, st, x, y):
        return loss_fn(prm, st, x, y, cfg)

    grad_fn = jax.jit(jax.value_and_grad(f, has_aux=True))
    opt = make_optimizer(cfg)
    opt_state = opt.init(params)
    update = jax.jit(opt.update)

    out, step_losses = {}, []
    for t in range(P):
        (loss, aux), grads = grad_fn(params, state, jnp.asarray(inputs[t]), jnp.asarray(targets[t]))
        step_losses.append(float(loss))
        if t == 0:
            out["jax/logits"] = np.asarray(aux["logits"], np.float32)
            out["jax/loss"] = np.asarray(loss, np.float32)
            out["jax/ce_loss"] = np.asarray(aux["ce_loss"], np.float32)
            out["jax/aux_loss"] = np.asarray(aux["aux_loss"], np.float32)
            for i, r in aux["router"].items():
                out[f"jax/router/layers_{i}/indices"] = np.asarray(r["indices"], np.int32)
                out[f"jax/router/layers_{i}/weights"] = np.asarray(r["weights"], np.float32)
                out[f"jax/router/layers_{i}/scores"] = np.asarray(r["scores"], np.float32)
            for k, g in grads.items():
                out["jax/grad/" + k] = np.asarray(g, np.float32)
            out["jax/grad_norm"] = np.asarray(optax.global_norm(grads), np.float32)
        updates, opt_state = update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        state = bias_update(state, aux["router"], cfg)
    out["jax/step_losses"] = np.asarray(step_losses, np.float32)
    for k, v in params.items():
        out["jax/final/" + k] = np.asarray(v, np.float32)
    for k, v in state.items():
        out["jax/final_state/" + k] = np.asarray(v, np.float32)
    if steps is not None:
        out.update(teacher_forced(grad_fn, steps, inputs, targets))
    return out


def dump_steps(tensors):
    """The dump's per-step C starting points: ({name: [P, ...]} weights, {name: [P, E]}
    routing biases) from `steps/param/...` and `steps/state/...`; None if the dump has none."""
    prm = {k[len("steps/param/"):]: v for k, v in tensors.items() if k.startswith("steps/param/")}
    st = {k[len("steps/state/"):]: v for k, v in tensors.items() if k.startswith("steps/state/")}
    return (prm, st) if prm else None


def teacher_forced(grad_fn, steps, inputs, targets):
    """Every parity step again, each from C's weights and routing bias before that step
    (teacher forcing), so that rounding differences do not compound over steps: the loss,
    the gradient norm and the routing of step t from the same starting point as C's.
    Returns jax/steps/loss [P], jax/steps/grad_norm [P], jax/steps/router/layers_<i>/
    {indices [P, A*B, S, K], scores [P, A*B, S, E]}."""
    prm_steps, st_steps = steps
    P = next(iter(prm_steps.values())).shape[0]
    losses, norms, router = [], [], {}
    for t in range(P):
        prm = {k: jnp.asarray(v[t], jnp.float32) for k, v in prm_steps.items()}
        st = {k: jnp.asarray(v[t], jnp.float32) for k, v in st_steps.items()}
        (loss, aux), grads = grad_fn(prm, st, jnp.asarray(inputs[t]), jnp.asarray(targets[t]))
        losses.append(float(loss))
        norms.append(float(optax.global_norm(grads)))
        for i, r in aux["router"].items():
            router.setdefault(i, []).append((np.asarray(r["indices"], np.int32), np.asarray(r["scores"], np.float32)))
    out = {"jax/steps/loss": np.asarray(losses, np.float32), "jax/steps/grad_norm": np.asarray(norms, np.float32)}
    for i, rs in router.items():
        out[f"jax/steps/router/layers_{i}/indices"] = np.stack([r[0] for r in rs])
        out[f"jax/steps/router/layers_{i}/scores"] = np.stack([r[1] for r in rs])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("out")
    args = ap.parse_args(argv)
    cfg, params, state, inputs, targets, tensors = load_dump(args.dump)
    out = run_reference(cfg, params, state, inputs, targets, dump_steps(tensors))
    out = {k: np.asarray(v, order="C") for k, v in out.items()}
    save_file(out, args.out, metadata={"config": json.dumps(cfg), "written_by": "tests/parity/reference.py"})
    steps = " ".join(f"{x:.7f}" for x in out["jax/step_losses"].tolist())
    print(f"reference: {cfg['decoder_block']} dtype={cfg['dtype']} step losses [{steps}] -> {args.out}")


if __name__ == "__main__":
    main()
