"""Hugging Face readers for Gemma 2, Gemma 3 (text) and OLMo 2.

`hf._llama_like` reads what these families share with Llama (widths, heads, KV heads, tied
embeddings, the activation, attention_bias on q, k, v and o); each reader here returns what its
family changes on top, with transformers 5.x class defaults for absent keys. A multimodal `gemma3`
config reaches `gemma3_text` through hf.py's text_config path (its text model is read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..model.config import ShapecalcError
from .hf_moe import _windows

if TYPE_CHECKING:
    from .hf import _HF

Fields = dict[str, Any]


def _theta(h: _HF, layer_type: str, key: str, default: float) -> float:
    """RoPE's base: transformers 5.x writes rope_parameters (per layer type for Gemma 3), older
    files rope_theta / rope_local_base_freq. rope_scaling changes no shape."""
    rp = h.get("rope_parameters")
    if isinstance(rp, dict):
        rp = rp.get(layer_type, rp) if isinstance(rp.get(layer_type), dict) else rp
        if rp.get("rope_theta") is not None:
            return float(rp["rope_theta"])
    value = h.get(key)
    return float(value) if value is not None else default


def _gemma_common(h: _HF, f: Fields, every: int, window: int, qpas: float) -> Fields:
    """Gemma 2 and 3: √D embedding scale, (1+γ) RMSNorms, four norms a layer (input,
    post-attention, pre-FFN, post-FFN), the score scale 1/√query_pre_attn_scalar, local layers
    every `every`-th of which is global (layer_types overrides)."""
    if h.get("use_bidirectional_attention"):
        raise ShapecalcError("use_bidirectional_attention", "true: attention that is not "
                             "causal is not modelled")
    n = f["n_layers"]
    types = h.get("layer_types") or [
        "sliding_attention" if (i + 1) % every else "full_attention" for i in range(n)
    ]
    return dict(
        head_dim=h.get("head_dim", 256), embedding_scale=True, norm_plus_one=True,
        norm_position="sandwich", query_pre_attn_scalar=h.get("query_pre_attn_scalar", qpas),
        **_windows(types, h.get("sliding_window", window), n),
    )


def _gemma2(h: _HF, f: Fields) -> Fields:
    # Gemma2Config: alternate local (even i) and global; softcapping 50 on the scores and 30 on
    # the logits by default (null: none)
    return dict(
        **_gemma_common(h, f, 2, 4096, 256),
        attn_softcap=h.get("attn_logit_softcapping", 50.0),
        final_softcap=h.get("final_logit_softcapping", 30.0),
        rope_base=_theta(h, "", "rope_theta", 10000.0),
    )


def _gemma3_text(h: _HF, f: Fields) -> Fields:
    # Gemma3TextConfig: 5 local : 1 global (sliding_window_pattern 6), q/k RMSNorm per head
    # ((1+γ) too), RoPE θ 1 000 000 on global and 10 000 on local layers; no softcapping unless
    # given. rope_scaling (linear, on global layers) stretches positions, no shape.
    global_theta = _theta(h, "full_attention", "rope_theta", 1_000_000.0)
    local_theta = _theta(h, "sliding_attention", "rope_local_base_freq", 10_000.0)
    fields = _gemma_common(h, f, h.get("sliding_window_pattern", 6), 4096, 256)
    return dict(
        **fields, qk_norm=True,
        attn_softcap=h.get("attn_logit_softcapping"),
        final_softcap=h.get("final_logit_softcapping"),
        rope_base=global_theta,
        rope_base_local=local_theta if fields["sliding_window"] is not None
        and local_theta != global_theta else None,
    )


def _olmo2(h: _HF, f: Fields) -> Fields:
    # Olmo2DecoderLayer: no pre-norms; post_attention_layernorm and post_feedforward_layernorm
    # norm each output before the residual add; q_norm over H·Dh and k_norm over H_kv·Dh, on the
    # projections before the heads split
    return dict(norm_position="output", qk_norm=True, qk_norm_width="all",
                rope_base=_theta(h, "", "rope_theta", 10000.0))


READERS: dict[str, Callable[[_HF, Fields], Fields]] = {
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    "olmo2": _olmo2,
}
# widths the config classes default (a multimodal Gemma 3's text_config leaves some out: the 4B
# gives no head counts, the 27B no vocab_size)
CLASS_DEFAULTS: dict[str, Fields] = {
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216,
                   num_hidden_layers=26, num_attention_heads=8),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                        num_hidden_layers=26, num_attention_heads=8),
    "olmo2": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008,
                  num_hidden_layers=32, num_attention_heads=32),
}
# the class defaults hf._llama_like reads: KV heads, positions, tied embeddings, activation key
DEFAULTS: dict[str, tuple[int | None, int, bool, str]] = {
    "gemma2": (4, 8192, True, "hidden_activation"),
    "gemma3_text": (4, 131072, True, "hidden_activation"),
    "olmo2": (None, 2048, False, "hidden_act"),
}
