"""ZAYA (issue 19), as transformers 5.24's ZayaConfig and modeling_zaya.py define it: every layer
CCA attention (hybrid, or hybrid_sliding with a window) and a top-1 MoE with ZAYA's router and
its skip expert, each residual add scaled, the embeddings scaled, the residual stream in fp32.
ZAYA holds the entry, joined to the table by hf_families.py."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Family, Fields, Refusal, mechanism

ZAYA_TYPES = {"hybrid": "full", "hybrid_sliding": "sliding"}  # ZayaModel's mask functions


def _rope(h: HF, types: list[str]) -> Fields:
    """rope_parameters per layer type (ZayaRotaryEmbedding): θ of each, and one
    partial_rotary_factor (R = int(Dh·factor)) shared by both, as shapecalc has one R."""
    rp = h.get("rope_parameters")
    if not isinstance(rp, dict):
        raise ShapecalcError("rope_parameters", f"must map hybrid (and hybrid_sliding) to their "
                             f"RoPE, not {rp!r}")
    h.read.update([*(f"rope_parameters.{t}" for t in ZAYA_TYPES),
                   "rope_parameters.partial_rotary_factor"])
    per: dict[str, Any] = {}
    for t in sorted(set(types)):
        p = rp.get(t)
        if not isinstance(p, dict) or p.get("rope_type", "default") != "default":
            raise ShapecalcError(f"rope_parameters.{t}", f"must be a default RoPE, not {p!r}")
        per[t] = p
    factors = {p.get("partial_rotary_factor", 1.0) for p in per.values()}
    if len(factors) != 1:
        raise ShapecalcError("rope_parameters", f"the layer types rotate different widths "
                             f"({sorted(factors)}): one R is modelled")
    factor = factors.pop()
    top = h.get("partial_rotary_factor")  # ZayaRotaryEmbedding reads the nested ones only
    if top is not None and top != factor:
        raise ShapecalcError("partial_rotary_factor", f"{top!r} disagrees with rope_parameters' "
                             f"{factor!r}, which ZAYA's rotary embedding reads")
    dh = h.get("head_dim")
    rot = int(dh * factor)
    if rot < 2 or rot % 2 or rot > dh:
        raise ShapecalcError("rope_parameters", f"R = {rot} rotated dims of Dh={dh}: must be "
                             "even, at least 2 and at most Dh")
    full = per.get("hybrid", per.get("hybrid_sliding"))
    out: Fields = dict(rotary_dim=None if rot == dh else rot,
                       rope_base=float(full["rope_theta"]))  # type: ignore[index]
    if "hybrid_sliding" in per and "hybrid" in per:
        out["rope_base_local"] = float(per["hybrid_sliding"]["rope_theta"])
    return out


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "layer_types",
           "sliding_window", "rope_parameters", "rope_parameters.hybrid", "partial_rotary_factor",
           "rope_parameters.hybrid_sliding", "rope_parameters.partial_rotary_factor",
           "attention_bias", "cca_time0", "cca_time1",
           "moe_intermediate_size", "num_experts", "num_experts_per_tok", "router_hidden_size",
           "tie_word_embeddings", "lm_head_bias")
def zaya(h: HF, f: Fields) -> None:
    """ZayaDecoderLayer: RMSNorm, CCA attention (ZayaCCAProjection: q_proj, k_proj, the two
    halves of v, conv_qk_depthwise of cca_time0 and conv_qk_grouped of cca_time1, both with
    biases; ZayaQKNorm's per-KV-head temp; o_proj), ZayaResidualScaling, RMSNorm, ZayaSparseMoe
    (ZayaRouter of router_hidden_size: its down_proj, the previous layer's state from layer 1,
    ZayaRouterMLP, E + 1 classes; ZayaExperts: SwiGLU of moe_intermediate_size, top-1), scaling
    again. Default layer_types: every layer hybrid."""
    n = h.need("num_hidden_layers", "N")
    types = h.get("layer_types")
    if types is None:
        types = ["hybrid"] * n
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ShapecalcError("layer_types", f"must be a list of layer types, not {types!r}")
    bad = next((t for t in types if t not in ZAYA_TYPES), None)
    if bad is not None:
        raise ShapecalcError("layer_types", f"{bad!r} is not one of {', '.join(ZAYA_TYPES)}")
    if len(types) != n:
        raise ShapecalcError("layer_types", f"lists {len(types)} layers, but num_hidden_layers "
                             f"is {n}")
    window = h.get("sliding_window")
    slides = "hybrid_sliding" in types
    if slides and (type(window) is not int or window < 1):
        raise ShapecalcError("sliding_window", f"W must be a positive integer, not {window!r}")
    heads, kv = h.need("num_attention_heads", "H"), h.get("num_key_value_heads")
    dff = h.need("moe_intermediate_size", "Dff_e")
    for key in ("cca_time0", "cca_time1", "router_hidden_size", "head_dim"):
        v = h.get(key)
        if type(v) is not int or v < 1:
            raise ShapecalcError(key, f"must be a positive integer, not {v!r}")
    f.update(vocab_size=h.need("vocab_size", "N_vocab"), d_model=h.need("hidden_size", "D"),
             n_layers=n, n_heads=heads, n_kv_heads=heads if kv is None else kv,
             head_dim=h.get("head_dim"), d_ff=dff, ffn="swiglu", norm="rmsnorm",
             positions="rope", max_positions=h.get("max_position_embeddings"),
             tie_embeddings=bool(h.get("tie_word_embeddings")),
             lm_head_bias=bool(h.get("lm_head_bias")), qkv_bias=bool(h.get("attention_bias")),
             attn_out_bias=bool(h.get("attention_bias")),
             layer_types=tuple(ZAYA_TYPES[t] for t in types),
             sliding_window=window if slides else None, mixer_types=("cca",) * n,
             cca_time0=h.get("cca_time0"), cca_time1=h.get("cca_time1"),
             n_experts=h.need("num_experts", "E"), experts_per_token=h.get("num_experts_per_tok"),
             d_ff_expert=dff, router_hidden=h.get("router_hidden_size"), residual_scaling=True,
             embedding_affine=True, **_rope(h, types))


# ZayaConfig's defaults (transformers 5.24; its docstring names Zyphra/ZAYA1-8B)
_ZAYA = dict(vocab_size=262272, hidden_size=2048, num_hidden_layers=40, num_attention_heads=8,
             num_key_value_heads=2, max_position_embeddings=131072, tie_word_embeddings=True,
             sliding_window=None, moe_intermediate_size=2048, num_experts_per_tok=1,
             num_experts=16, layer_types=None, head_dim=128, attention_bias=False,
             lm_head_bias=False, router_hidden_size=256, cca_time0=2, cca_time1=2,
             hidden_act="silu",
             rope_parameters={"hybrid": {"rope_type": "default", "rope_theta": 5_000_000.0,
                                         "partial_rotary_factor": 0.5},
                              "hybrid_sliding": {"rope_type": "default", "rope_theta": 10_000.0,
                                                 "partial_rotary_factor": 0.5}})

ZAYA: tuple[Family, ...] = (
    Family("zaya", "ZAYA: CCA attention (its q/k convs, a delayed value) and a top-1 MoE with an "
           "MLP router and a skip expert in every layer, residual scaling", (zaya,), _ZAYA,
           refuse={"num_experts_per_tok": Refusal((1,), "ZayaConfig takes top-1 only, not "
                                                  "{value!r}"),
                   "hidden_act": Refusal(("silu",), "ZayaExperts' gate is modelled as SwiGLU "
                                         "(silu), not {value!r}")},
           widths=dict(vocab_size=262272, hidden_size=2048, num_hidden_layers=40,
                       num_attention_heads=8, moe_intermediate_size=2048, num_experts=16)),
)
