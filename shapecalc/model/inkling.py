"""Inkling's decoder layer, as transformers 5.24's InklingDecoderLayer computes it on its eager
torch path (modeling_inkling.py).

Every layer is attention with a short convolution in four places: on k and on v after their
projections, on the attention output and on the channel mixer's output. Each is x + a causal
depthwise conv of x (kernel K_c, no bias) computed in fp32, and keeps its own window of the
last K_c inputs (fp32) in the cache: four conv states a layer. The attention has no RoPE: q and
k are RMS-normed per head and the scores are scaled by 1/Dh (not 1/√Dh); a bias by distance is
added, mixed per token from D_rel learned profiles over X_rel distances (a sliding layer's over
its window W) by r = h·W_r. Sliding layers may have heads of their own (H, H_kv and Dh as
layer_widths: forward runs the layer widened, so m and z here are the layer's own).
With log_scaling_floor n_f, a full layer's q and bias are × τ = 1 + α·ln(max(1, (pos+1)/n_f)):
(q·τ)·kᵀ/Dh + τ·b, each score row × τ, as its scores are scaled here.
The MoE's router scores E routed and n_s shared experts: the top k routed by sigmoid (+ a
correction bias, a buffer), then one softmax over the log-sigmoids of the k and the n_s shared
logits weighs both (the shared experts are a sink), × route_scale × a learned scalar. A dense
MLP's output is × a learned scalar. The embeddings are RMS-normed; the LM head reads h/m (the
μP width multiplier), which the logit scale 1/m expresses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .config import ModelConfig, Workload
from .ops import Ops
from .plan import LayerSpec
from .sizes import Sizes


def inkling_block(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, x: Any,
                  layer: int, ffn: Callable[..., Any]) -> Any:
    """x + conv(Attn(Norm(x))), then + conv(FFN(Norm(x))); `ffn` forward's dense FFN."""
    h = ops.norm(x, "attn.norm", "attention norm")  # [B,T,D]
    a = _attention(ops, m, spec, wl, z, h, layer)  # [B,T,D]
    a = ops.res_conv(a, layer, "conv.attn", "attention output short conv", z.D)  # [B,T,D]
    x = ops.add(x, a, "residual", "residual")  # [B,T,D]
    h = ops.norm(x, "ffn.norm", "FFN norm")  # [B,T,D]
    if spec.ffn == "moe":
        f = _moe(ops, m, z, h)  # [B,T,D]
    else:  # InklingMLP: × its global_scale
        f = ops.learned_scale(ffn(ops, m, z, h, False), "ffn.scale", "MLP global scale")
    f = ops.res_conv(f, layer, "conv.ffn", "FFN output short conv", z.D)  # [B,T,D]
    return ops.add(x, f, "residual", "residual")  # [B,T,D]


def _attention(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, h: Any,
               layer: int) -> Any:
    qw, kvw = z.H * z.Dh, z.Hkv * z.Dh
    W = spec.window
    X = z.sym("W", W) if W is not None else z.sym("X_rel", m.rel_extent or 0)
    q = ops.linear(h, "attn.q", "q projection", z.D, qw, False, "column")  # [B,T,H·Dh]
    k = ops.linear(h, "attn.k", "k projection", z.D, kvw, False, "column")  # [B,T,H_kv·Dh]
    k = ops.res_conv(k, layer, "conv.k", "k short conv", kvw)  # [B,T,H_kv·Dh]
    v = ops.linear(h, "attn.v", "v projection", z.D, kvw, False, "column")  # [B,T,H_kv·Dh]
    v = ops.res_conv(v, layer, "conv.v", "v short conv", kvw)  # [B,T,H_kv·Dh]
    r = ops.linear(h, "attn.r", "relative-state projection", z.D,
                   z.H * z.sym("D_rel", m.rel_dim or 0), False, "column")  # [B,T,H·D_rel]
    q = ops.split_heads(q, "attn.q.heads", "q", z.H, z.Dh)  # [B,H,T,Dh]
    k = ops.split_heads(k, "attn.k.heads", "k", z.Hkv, z.Dh)  # [B,H_kv,T,Dh]
    v = ops.split_heads(v, "attn.v.heads", "v", z.Hkv, z.Dh)  # [B,H_kv,T,Dh]
    q = ops.norm(q, "attn.q_norm", "q norm", z.Dh, "rmsnorm")  # [B,H,T,Dh]
    k = ops.norm(k, "attn.k_norm", "k norm", z.Dh, "rmsnorm")  # [B,H_kv,T,Dh]
    Tk, Tc = z.keys(spec)
    k, v = ops.kv_cache(k, v, layer, Tk, Tc)  # [B,H_kv,T′,Dh] each
    groups = z.H.value // z.Hkv.value
    if groups > 1:  # GQA: each KV head serves `groups` query heads
        k = ops.repeat_kv(k, "attn.repeat_kv", "repeat k", groups, z.H)  # [B,H,T′,Dh]
        v = ops.repeat_kv(v, "attn.repeat_kv", "repeat v", groups, z.H)  # [B,H,T′,Dh]
    kt = ops.transpose_last(k, "attn.kT", "kᵀ")  # [B,H,Dh,T′]
    s = ops.matmul(q, kt, "attn.scores", "QKᵀ", causal=True, window=W)  # [B,H,T,T′]
    # q and k are RMS-normed per head: 1/Dh, not 1/√Dh
    s = ops.scale(s, "attn.scale", "scale", 1 / z.Dh.value, "1/Dh")  # [B,H,T,T′]
    s = ops.rel_bias(s, r, "attn.rel_bias", "relative position bias", X)  # [B,H,T,T′]
    if m.log_scaling_floor is not None and W is None:  # τ on q and on the bias: on the rows
        s = ops.log_scale(s, "attn.log_scale", "logarithmic logit scaling", m.log_scaling_alpha,
                          m.log_scaling_floor)  # [B,H,T,T′]
    if wl.phase == "prefill":
        s = ops.mask(s, "attn.mask", "causal mask", "causal")
    if wl.phase == "prefill" and W is not None and W < wl.seq:
        s = ops.mask(s, "attn.mask", "sliding-window mask", "window", W)
    if wl.padding_mask:
        s = ops.mask(s, "attn.mask", "padding mask", "padding")
    a = ops.softmax(s, "attn.softmax", "softmax")  # [B,H,T,T′]
    o = ops.matmul(a, v, "attn.values", "A·V", causal=True, window=W)  # [B,H,T,Dh]
    o = ops.merge_heads(o, "attn.merge", "merge heads")  # [B,T,H·Dh]
    return ops.linear(o, "attn.out", "output projection WO", qw, z.D, False, "row")  # [B,T,D]


def _moe(ops: Ops, m: ModelConfig, z: Sizes, h: Any) -> Any:
    """The routed experts and the bank of n_s shared experts (Dff_s each, one matmul of
    n_s·Dff_s as InklingSharedExperts' bmm counts), each shared expert's output × its weight."""
    ns = z.sym("n_s", m.n_shared_experts)
    logits = ops.linear(h, "moe.router", "router (routed + shared)", z.D, z.E + ns, False,
                        "replicated")  # [B,T,E+n_s]
    routing, g = ops.sink_route(logits, "moe.route", "routing (shared experts in the softmax)",
                                z.k, ns)  # k experts, g [B,T,n_s]
    y = ops.experts(h, routing, z.D, z.E, z.k, z.Dffe)  # [B,T,D]
    gate = ops.linear(h, "moe.shared.gate", "shared experts gate", z.D, z.Dffs, False,
                      "column")  # [B,T,n_s·Dff_s]
    up = ops.linear(h, "moe.shared.up", "shared experts up", z.D, z.Dffs, False,
                    "column")  # [B,T,n_s·Dff_s]
    u = ops.mul(ops.activation(gate, "moe.shared.act", "activation", "silu"), up,
                "moe.shared.mul", "gate ⊙ up")  # [B,T,n_s·Dff_s]
    u = ops.bank_scale(u, g, "moe.shared.scale", "× each shared expert's weight", ns)
    s = ops.linear(u, "moe.shared.down", "shared experts down", z.Dffs, z.D, False,
                   "row")  # [B,T,D]
    return ops.add(y, s, "moe.add_shared", "routed + shared")  # [B,T,D]
