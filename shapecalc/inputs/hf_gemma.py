"""The mechanisms of Gemma 1–3 and OLMo 2: Gemma's activation key, its four norms a layer with
(1+γ), √D embedding scale, local layers every `sliding_window_pattern`-th of which is global,
softcaps and per-layer-type RoPE θ; OLMo 2's output norms and whole-width q/k norms.

A multimodal `gemma3` config reaches `gemma3_text` through hf.py's text_config path (its text
model is read).
"""

from __future__ import annotations

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, Mechanism, mechanism
from .hf_llama import windows


def _theta(h: HF, layer_type: str, key: str) -> float:
    """RoPE's base: transformers 5.x writes rope_parameters (per layer type for Gemma 3), older
    files rope_theta / rope_local_base_freq. rope_scaling changes no shape."""
    rp = h.get("rope_parameters")
    if isinstance(rp, dict):
        rp = rp.get(layer_type, rp) if isinstance(rp.get(layer_type), dict) else rp
        if rp.get("rope_theta") is not None:
            return float(rp["rope_theta"])
    value = h.get(key)
    return float(value if value is not None else h.default(key))  # null: the class default


@mechanism("hidden_activation", "hidden_act")
def gemma_act(h: HF, f: Fields) -> None:
    # older transformers read hidden_activation (ignoring hidden_act); newer read hidden_act
    key = "hidden_activation" if h.get("hidden_activation") else "hidden_act"
    f["ffn"] = h.act(key, gated=True)


def local_global(every: int | None) -> Mechanism:
    """Gemma 2 and 3: √D embedding scale, (1+γ) RMSNorms, four norms a layer (input,
    post-attention, pre-FFN, post-FFN), the score scale 1/√query_pre_attn_scalar, local layers
    every `every`-th of which is global (None: sliding_window_pattern says; layer_types
    overrides)."""
    def _layers(h: HF, f: Fields) -> None:
        if h.get("use_bidirectional_attention"):
            raise ShapecalcError("use_bidirectional_attention", "true: attention that is not "
                                 "causal is not modelled")
        n = f["n_layers"]
        step = every or h.get("sliding_window_pattern")
        types = h.get("layer_types") or [
            "sliding_attention" if (i + 1) % step else "full_attention" for i in range(n)
        ]
        f.update(norm_plus_one=True, norm_position="sandwich",
                 query_pre_attn_scalar=h.get("query_pre_attn_scalar"),
                 **windows(types, h.get("sliding_window"), n))
    _layers.__name__ = f"local_global_{every or 'pattern'}"
    keys = ("use_bidirectional_attention", "layer_types", "sliding_window",
            "query_pre_attn_scalar", *(() if every else ("sliding_window_pattern",)))
    return mechanism(*keys)(_layers)


@mechanism("final_logit_softcapping")
def final_softcap(h: HF, f: Fields) -> None:
    # Gemma 2's head on its own, the logits c·tanh(logits/c) (nanochat)
    f["final_softcap"] = h.get("final_logit_softcapping")


@mechanism("attn_logit_softcapping", "final_logit_softcapping")
def softcaps(h: HF, f: Fields) -> None:
    # tanh caps on the scores and the logits (null: none)
    f.update(attn_softcap=h.get("attn_logit_softcapping"),
             final_softcap=h.get("final_logit_softcapping"))


@mechanism("rope_parameters", "rope_theta")
def rope_theta(h: HF, f: Fields) -> None:
    f["rope_base"] = _theta(h, "", "rope_theta")


@mechanism("rope_parameters", "rope_theta", "rope_local_base_freq")
def rope_theta_local(h: HF, f: Fields) -> None:
    # Gemma 3: θ 1 000 000 on global and 10 000 on local layers (rope_scaling, linear on the
    # global layers, stretches positions, no shape)
    global_theta = _theta(h, "full_attention", "rope_theta")
    local_theta = _theta(h, "sliding_attention", "rope_local_base_freq")
    f.update(rope_base=global_theta,
             rope_base_local=local_theta if f["sliding_window"] is not None
             and local_theta != global_theta else None)


@mechanism("mup_enabled")
def mup_scale(h: HF, f: Fields) -> None:
    # AFMoE: with mup_enabled the embeddings are scaled by √D
    f["embedding_scale"] = bool(h.get("mup_enabled"))
