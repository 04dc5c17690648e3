"""The Gemma 2/3 and OLMo 2 parts of forward(): RoPE tables per layer kind, the score scale,
the q/k norms over the whole width, and the norms on each branch's output. forward.py calls
these with its Ops."""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .expr import Dim
from .ops import Ops
from .plan import LayerSpec, layer_plan


def rope_angles(ops: Ops, m: ModelConfig, T: Dim, R: Dim, R_local: Dim) -> tuple[Any, Any]:
    """(full layers' angles, sliding layers' angles): one table, or two where the sliding layers
    have their own base θ (Gemma 3: 10 000 local, 1 000 000 global) or the two layer types their
    own rotated width (Laguna: partial RoPE on the full layers only; Gemma 4: the full layers'
    Dh_g, `R` here)."""
    if m.positions != "rope":
        return None, None
    angles = ops.rope_angles(T, R, m.rope_base)
    own = (m.rope_base_local is not None or m.rotary_dim_local is not None
           or m.global_head_dim is not None)
    if not own or "sliding" not in (s.attention for s in layer_plan(m).kinds):
        return angles, angles
    return angles, ops.rope_angles(T, R_local, m.rope_base_local or m.rope_base, sliding=True)


def score_scale(m: ModelConfig) -> tuple[float, str]:
    """The factor the scores are scaled by, and how the trace writes it."""
    if m.attention_multiplier is not None:  # Granite: instead of 1/√Dh
        return m.attention_multiplier, f"{m.attention_multiplier:g}"
    if m.query_pre_attn_scalar is not None:  # Gemma 2/3
        s = m.query_pre_attn_scalar
        return s**-0.5, f"1/√{s:g} (query_pre_attn_scalar)"
    return m.dh**-0.5, "1/√Dh"


def qk_norm_all(ops: Ops, m: ModelConfig, q: Any, k: Any, qw: Dim, kvw: Dim) -> tuple[Any, Any]:
    """OLMo 2: RMSNorm over all of q's H·Dh and k's H_kv·Dh, before the heads split (with
    tp > 1 refused: a rank holds only its heads)."""
    if not (m.qk_norm and m.qk_norm_width == "all"):
        return q, k
    return (ops.norm(q, "attn.q_norm", "q norm", qw, "rmsnorm"),
            ops.norm(k, "attn.k_norm", "k norm", kvw, "rmsnorm"))


def post_norm(ops: Ops, spec: LayerSpec, y: Any, part: str) -> Any:
    """Gemma 2/3 (sandwich) and OLMo 2 (output) norm each branch's output before its residual
    add: after the all-reduce, as the norm needs all of D."""
    if spec.norm_position not in ("sandwich", "output"):
        return y
    name = {"attn": "post-attention norm", "mixer": "post-mixer norm"}.get(part, "post-FFN norm")
    return ops.norm(y, f"{part}.post_norm", name)
