"""ZAYA's compressed convolutional attention (CCA), the q/k/v of an attention layer, as
transformers 5.24's ZayaCCAProjection and ZayaQKNorm compute them on the torch path.

q and k are projected, concatenated and passed through two causal convolutions over the tokens:
a depthwise one of kernel K_d (cca_time0), then one grouped by head of kernel K_g (cca_time1),
each head's Dh channels mixed (both with biases). The input is padded by K_q = K_d + K_g − 2
tokens (the cache's window), so the depthwise conv runs over T + K_g − 1 positions. Residual
paths add (q + repeat(k))/2 to q and its mean over each KV head's group to k. The value is half
this token's projection and half the previous token's delayed projection (the first token's is
v_proj_delayed of a zero token). q and k are L2-normed to √Dh, k × a learned scale per KV head.
The layer's cache: its K and V, the conv window [(H + H_kv)·Dh, K_q] and the last delayed value
[H_kv·Dh/2]. One form (no chunked algebra): verify checks the prefill's final state and outputs
against T single-token decode steps.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .config import ModelConfig
from .expr import Dim, Expr
from .ops import Ops
from .sizes import Sizes


def cca_qkv(ops: Ops, m: ModelConfig, z: Sizes, h: Any, layer: int) -> tuple[Any, Any, Any]:
    qw, kvw = z.H * z.Dh, z.Hkv * z.Dh
    vh = Dim(kvw.value // 2, kvw.expr * Expr.const(Fraction(1, 2)))  # H_kv·Dh/2
    q = ops.linear(h, "attn.q", "q projection", z.D, qw, m.qkv_bias, "column")  # [B,T,H·Dh]
    k = ops.linear(h, "attn.k", "k projection", z.D, kvw, m.qkv_bias, "column")  # [B,T,H_kv·Dh]
    qr, kr = ops.cca_residual(q, k, "cca.residual", "q/k residuals")  # [B,T,H·Dh], [B,T,H_kv·Dh]
    qk = ops.concat([q, k], "cca.qk", "[q; k]")  # [B,T,(H+H_kv)·Dh]
    qk = ops.cca_conv(qk, layer, "cca.conv", "q/k convs", qw + kvw)  # [B,T,(H+H_kv)·Dh]
    qc, kc = ops.split(qk, [qw, kvw])  # [B,T,H·Dh], [B,T,H_kv·Dh]
    q = ops.add(qc, qr, "cca.q_add", "conv q + residual")  # [B,T,H·Dh]
    k = ops.add(kc, kr, "cca.k_add", "conv k + residual")  # [B,T,H_kv·Dh]
    vn = ops.linear(h, "cca.v_now", "v projection (this token)", z.D, vh, m.qkv_bias,
                    "column")  # [B,T,H_kv·Dh/2]
    vd = ops.linear(h, "cca.v_delayed", "v projection (delayed)", z.D, vh, m.qkv_bias,
                    "column")  # [B,T,H_kv·Dh/2]
    vd = ops.delay(vd, layer, "cca.delay", "delayed v: the previous token's")  # [B,T,H_kv·Dh/2]
    v = ops.concat([vn, vd], "cca.v", "[v now; v delayed]")  # [B,T,H_kv·Dh]
    q = ops.split_heads(q, "attn.q.heads", "q", z.H, z.Dh)  # [B,H,T,Dh]
    k = ops.split_heads(k, "attn.k.heads", "k", z.Hkv, z.Dh)  # [B,H_kv,T,Dh]
    v = ops.split_heads(v, "attn.v.heads", "v", z.Hkv, z.Dh)  # [B,H_kv,T,Dh]
    q = ops.norm(q, "attn.q_l2norm", "q L2 norm (to √Dh)", z.Dh, "l2norm")  # [B,H,T,Dh]
    k = ops.norm(k, "attn.k_l2norm", "k L2 norm (to √Dh)", z.Dh, "l2norm")  # [B,H_kv,T,Dh]
    k = ops.head_scale(k, "cca.k_scale", "k × its KV head's scale", z.Hkv)  # [B,H_kv,T,Dh]
    return q, k, v
