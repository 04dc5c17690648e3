"""Hyper-connections (manifold-constrained, mHC: DeepSeek-V4, Hunyuan 4), part of the one forward
definition, as transformers 5.24's DeepseekV4HyperConnection and DeepseekV4HyperHead compute them.

The residual is n_hc streams of D each, [B,T,n_hc,D] (n_hc·D per token, what crosses a pipeline
boundary). Before each block half (attention, FFN) the streams are flattened, RMS-normed without
weights over n_hc·D and projected to (n_hc+2)·n_hc mixing logits: pre [n_hc], post [n_hc] and comb
[n_hc,n_hc]. pre = σ(·)+ε collapses the streams into the block's input Σ_j pre_j·x_j; post =
2σ(·) spreads the block's output y back; comb = softmax(·)+ε, made doubly stochastic by t_max
Sinkhorn steps (2·t_max − 1 normalisations), mixes the streams: x′ = post ⊗ y + combᵀ·x. The head
collapses the streams once more with its own pre (σ(·)+ε of an [n_hc·D → n_hc] projection).
"""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .sizes import Sizes


def expand(ops: Ops, m: ModelConfig, z: Sizes, x: Any) -> Any:
    """The embedding copied into every stream: [B,T,D] → [B,T,n_hc,D]."""
    return ops.hc_expand(x, "hc.expand", "streams (copies of the embedding)", _n(m, z))


def open_half(ops: Ops, m: ModelConfig, z: Sizes, x: Any, half: str) -> tuple[Any, Any]:
    """(the block half's input [B,T,D], its post and comb weights) from the streams x."""
    n = _n(m, z)
    sinkhorn = m.hc_mixing == "sinkhorn"
    f = ops.hc_flatten(x, f"hc.{half}.flat", "streams flattened")  # [B,T,n_hc·D]
    f = ops.norm(f, f"hc.{half}.norm", "mHC norm", n * z.D, "l2norm")  # [B,T,n_hc·D], no γ
    w = ops.linear(f, f"hc.{half}.proj", "mHC projection", n * z.D,  # [B,T,(n_hc+2)·n_hc]
                   (n + 2) * n if sinkhorn else n * 2, False, "replicated")  # (or 2·n_hc)
    ws = ops.hc_weights(w, f"hc.{half}.weights", "mHC weights", n,  # [B,T,n_hc] ×2,
                        m.hc_sinkhorn_iters)  # and comb [B,T,n_hc,n_hc] (sinkhorn)
    h = ops.hc_collapse(x, ws[0], f"hc.{half}.collapse", "streams collapsed (pre)")  # [B,T,D]
    return h, (ws[1], ws[2] if sinkhorn else None)


def close_half(ops: Ops, x: Any, y: Any, mix: Any, half: str) -> Any:
    """x′ = post ⊗ y + combᵀ·x (+ x without comb): the block half's output y [B,T,D] back
    into the streams."""
    post, comb = mix
    return ops.hc_merge(x, y, post, comb, f"hc.{half}.merge",  # [B,T,n_hc,D]
                        "streams mixed (post ⊗ y + combᵀ·x)")


def head(ops: Ops, m: ModelConfig, z: Sizes, x: Any) -> Any:
    """The streams collapsed before the final norm: [B,T,n_hc,D] → [B,T,D]."""
    n = _n(m, z)
    f = ops.hc_flatten(x, "hc.head.flat", "streams flattened")  # [B,T,n_hc·D]
    f = ops.norm(f, "hc.head.norm", "mHC head norm", n * z.D, "l2norm")  # [B,T,n_hc·D]
    w = ops.linear(f, "hc.head.proj", "mHC head projection", n * z.D, n, False,  # [B,T,n_hc]
                   "replicated")
    pre = ops.hc_weights(w, "hc.head.weights", "mHC head weights", n, 0)[0]  # [B,T,n_hc]
    return ops.hc_collapse(x, pre, "hc.head.collapse", "streams collapsed (pre)")  # [B,T,D]


def _n(m: ModelConfig, z: Sizes) -> Any:
    return z.sym("n_hc", m.hc_streams or 1)
