"""The mechanisms of Gemma 4's text decoders (gemma4_text, gemma4_unified_text; transformers
5.24's Gemma4TextConfig and Gemma4TextDecoderLayer): 5 sliding layers to 1 full (the last layer
forced full), the full ("global") layers with their own head width and KV heads (per_layer_config,
or global_head_dim and num_global_key_value_heads as the class folds them), K=V there under
attention_k_eq_v, q/k norms with γ and a v norm without, scores × 1, four norms a layer, a layer
scalar, and (gemma4_text) per-layer embeddings. gemma4_unified_text is the same decoder without
the per-layer embeddings and the MoE block.
"""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Family, Fields, mechanism
from .hf_gemma import _theta, final_softcap
from .hf_llama import attention_bias, gated, llama, table, windows


def _global(h: HF, n: int, types: list[str]) -> tuple[int, int | None]:
    """(Dh_g, H_kv_g or None) of the full-attention layers: per_layer_config's overrides where
    given (all full layers alike, no sliding layer overridden), else the class's fold of
    global_head_dim (512) and num_global_key_value_heads (read only with attention_k_eq_v)."""
    plc = h.get("per_layer_config")
    if plc is None:
        dh = h.get("global_head_dim", 512)
        if type(dh) is not int or dh < 1:
            raise ShapecalcError("global_head_dim", f"must be a positive integer, not {dh!r}")
        kv = h.get("num_global_key_value_heads") if h.get("attention_k_eq_v") else None
        if kv is not None and (type(kv) is not int or kv < 1):
            raise ShapecalcError("num_global_key_value_heads",
                                 f"must be a positive integer, not {kv!r}")
        return dh, kv
    if not isinstance(plc, dict):
        raise ShapecalcError("per_layer_config", f"must be an object, not {plc!r}")
    full = {i for i, t in enumerate(types) if t == "full_attention"}
    seen: list[dict[str, Any]] = []
    for key, over in plc.items():
        i = int(key) if isinstance(key, str) and key.isdigit() else None
        if i is None or i >= n or not isinstance(over, dict):
            raise ShapecalcError("per_layer_config", f"{key!r}: not a layer's overrides")
        if i not in full or set(over) - {"head_dim", "num_key_value_heads"}:
            raise ShapecalcError("per_layer_config", f"layer {i}: only the full-attention "
                                 "layers' head_dim and num_key_value_heads are modelled")
        seen.append(over)
    if len(seen) != len(full) or any(o != seen[0] for o in seen):
        raise ShapecalcError("per_layer_config", "overrides that differ between full-attention "
                             "layers are not modelled")
    over = seen[0] if seen else {}
    dh, kv = over.get("head_dim", h.get("head_dim")), over.get("num_key_value_heads")
    for what, v in (("head_dim", dh), ("num_key_value_heads", kv)):
        if v is not None and (type(v) is not int or v < 1):
            raise ShapecalcError("per_layer_config", f"{what} must be a positive integer, "
                                 f"not {v!r}")
    return dh, kv


@mechanism("layer_types", "sliding_window", "use_bidirectional_attention", "per_layer_config",
           "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v",
           "num_kv_shared_layers", "use_double_wide_mlp", "rope_parameters",
           "rope_parameters.partial_rotary_factor")
def gemma4_attention(h: HF, f: Fields) -> None:
    # Gemma4TextAttention: scaling 1.0; q_norm, k_norm (γ), v_norm (no γ) per head; a full
    # layer's rope is "proportional" (its partial_rotary_factor zeroes frequencies, the cos/sin
    # still Dh_g wide: no count changes); sliding layers keep W tokens
    if h.get("use_bidirectional_attention") == "all":
        raise ShapecalcError("use_bidirectional_attention", "'all': attention that is not "
                             "causal is not modelled ('vision' is causal on text)")
    n = f["n_layers"]
    types = h.get("layer_types") or [
        "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    if not isinstance(types, list) or not types:
        raise ShapecalcError("layer_types", f"must be a non-empty list, not {types!r}")
    types = [*types[:-1], "full_attention"]  # the class forces the last layer full
    # the last num_kv_shared_layers layers read the K/V of the last earlier layer of their
    # type (kv_sharing_modes "reuse"; their MLP 2·Dff wide with use_double_wide_mlp)
    shared = h.get("num_kv_shared_layers")
    if type(shared) is not int or not 0 <= shared < n:
        raise ShapecalcError("num_kv_shared_layers", f"must be an integer from 0 to N−1 = "
                             f"{n - 1}, not {shared!r} (some layer must cache K/V)")
    if set(types[n - shared:]) - set(types[:n - shared]):
        raise ShapecalcError("num_kv_shared_layers", f"{shared}: a KV-sharing layer's "
                             "attention type has no earlier layer to read K/V from")
    f.update(kv_shared_layers=shared, shared_ffn_wide=bool(h.get("use_double_wide_mlp")))
    dh, kv = _global(h, n, types)
    h.read.add("rope_parameters.partial_rotary_factor")  # proportional: no count changes
    k_eq_v = bool(h.get("attention_k_eq_v"))
    f.update(norm_position="sandwich", qk_norm=True, v_norm=True, attention_multiplier=1.0,
             layer_scalar=True, global_head_dim=dh, global_kv_heads=kv, global_k_eq_v=k_eq_v,
             rope_base=_theta(h, "full_attention", "rope_theta"),
             rope_base_local=_theta(h, "sliding_attention", "rope_theta"),
             **windows(types, h.get("sliding_window"), n))
    if f["rope_base_local"] == f["rope_base"] or f["sliding_window"] is None:
        f["rope_base_local"] = None


@mechanism("hidden_size_per_layer_input", "vocab_size_per_layer_input", "enable_moe_block")
def per_layer_embeddings(h: HF, f: Fields) -> None:
    # Gemma4TextModel: with hidden_size_per_layer_input (0 or null: none) a table
    # [vocab_size_per_layer_input, N·D_p] and a projection [D → N·D_p]; the MoE block beside
    # the MLP (26B-A4B) is refused
    if h.get("enable_moe_block"):
        raise ShapecalcError("enable_moe_block", "true: the MoE block beside the MLP "
                             "(Gemma4TextRouter, Gemma4TextExperts) is not modelled")
    dp = h.get("hidden_size_per_layer_input")
    if not dp:
        return
    vp = h.get("vocab_size_per_layer_input")
    for key, v in (("hidden_size_per_layer_input", dp), ("vocab_size_per_layer_input", vp)):
        if type(v) is not int or v < 1:
            raise ShapecalcError(key, f"must be a positive integer, not {v!r}")
    f.update(ple_dim=dp, ple_vocab=vp)


def class_defaults(unified: bool) -> dict[str, Any]:
    """Gemma4TextConfig's defaults (Gemma4UnifiedTextConfig's: a window of 1024, 262 144
    positions, no per-layer embeddings and no MoE keys)."""
    out: dict[str, Any] = dict(
        vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        attention_bias=False, final_logit_softcapping=None, layer_types=None,
        use_bidirectional_attention="vision" if unified else None, attention_k_eq_v=False,
        num_kv_shared_layers=0, use_double_wide_mlp=False, per_layer_config=None,
        global_head_dim=512, num_global_key_value_heads=None,
        max_position_embeddings=262144 if unified else 131072,
        sliding_window=1024 if unified else 512,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional",
                                            "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}})
    if not unified:
        out.update(vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256,
                   enable_moe_block=False)
    return out


# the table's entries (hf_families_2025.py names them)
FAMILIES = (
    # Gemma4TextModel: Gemma 3's sandwich blocks with global layers of head width 512, K=V and a
    # v norm, a layer scalar, per-layer embeddings; the unified decoder drops the embeddings
    Family("gemma4_text", "Gemma 4: global layers Dh_g 512 (K=V), per-layer embeddings, 5:1",
           (llama, gated("hidden_activation"), table, attention_bias,
            gemma4_attention, per_layer_embeddings, final_softcap),
           class_defaults(False), fixed=dict(embedding_scale=True),
           ignored=frozenset({"num_experts", "top_k_experts", "moe_intermediate_size"})),
    Family("gemma4_unified_text", "Gemma 4 unified: Gemma 4's decoder, no per-layer embeddings",
           (llama, gated("hidden_activation"), table, attention_bias,
            gemma4_attention, final_softcap),
           class_defaults(True), fixed=dict(embedding_scale=True)),
)
