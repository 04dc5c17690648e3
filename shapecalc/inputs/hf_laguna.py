"""Laguna's mechanisms (transformers 5.24's models/laguna): LagunaAttention's head count per layer
(num_attention_heads_per_layer; K and V keep num_key_value_heads), its softplus output gate
(gating: one gate a head or one per channel), RoPE per layer type (rope_parameters keyed by
full_attention and sliding_attention, each its own θ and partial_rotary_factor), and
LagunaSparseMoeBlock (mlp_layer_types; a sigmoid router over E experts choosing by score +
e_score_correction_bias, a Parameter that parameters() counts, the k sigmoids renormalised × the
routed scaling factor, logits optionally softcapped; one ungated shared MLP added), and the
family's entry over them (ENTRY, which hf_families_2025's table lists)."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from ..model.widths import LayerWidths
from . import hf_llama as llama
from .hf_base import HF, Family, Fields, Refusal, mechanism
from .hf_llama import BODY, rotary_fields, windows
from .hf_llama import class_defaults as _llama

_TYPES = ("full_attention", "sliding_attention")
_ROPE = tuple(f"rope_parameters.{k}" for k in ("partial_rotary_factor", "rope_theta"))


def _list(h: HF, key: str, n: int, default: list[Any], ok: Any) -> list[Any]:
    """A per-layer list (LagunaConfig's validate_architecture: exactly N entries), else the
    class's default list; each entry passes `ok`."""
    v = h.get(key)
    v = default if v is None else v
    if not isinstance(v, list) or not all(ok(x) for x in v):
        raise ShapecalcError(key, f"must list one entry per layer, not {v!r}")
    if len(v) != n:
        raise ShapecalcError(key, f"lists {len(v)} layers, but num_hidden_layers is {n}")
    return v


def _rope(h: HF, kinds: set[str]) -> dict[str, dict[str, Any]]:
    """rope_parameters as LagunaRotaryEmbedding reads it: one dict per layer type in use."""
    rope = h.get("rope_parameters")
    h.read.update(_ROPE)
    if rope is None:
        rope = {"full_attention": dict(rope_theta=500000.0, partial_rotary_factor=0.5),
                "sliding_attention": dict(rope_theta=10000.0, partial_rotary_factor=1.0)}
    if not isinstance(rope, dict):
        raise ShapecalcError("rope_parameters", f"must be an object, not {rope!r}")
    for t in sorted(kinds):
        if not isinstance(rope.get(t), dict):
            raise ShapecalcError("rope_parameters", f"gives no {t} entry, which Laguna's rotary "
                                 "embedding reads for its layers of that type")
    return rope


def _number(params: dict[str, Any], key: str, default: float) -> float:
    """A layer type's rope_theta or partial_rotary_factor: a number (absent: the default)."""
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ShapecalcError("rope_parameters", f"{key} must be a positive number, not {v!r}")
    return float(v)


def _rotary(h: HF, dh: int, params: dict[str, Any]) -> int:
    """The width RoPE turns on one layer type: int(Dh · its partial_rotary_factor)."""
    view = HF({"partial_rotary_factor": _number(params, "partial_rotary_factor", 1.0)})
    return rotary_fields(view, dh, 1.0)["rotary_dim"] or dh


@mechanism("layer_types", "sliding_window", "num_attention_heads_per_layer", "gating",
           "rope_parameters", *_ROPE)
def laguna_attention(h: HF, f: Fields) -> None:
    # LagunaAttention: layer_types (default every layer full), each layer's query heads, RMSNorm
    # q/k norms per head (llama.qk_norm), RoPE per layer type, then o ⊙ softplus(x·W_g) before
    # o_proj, W_g [D → H_ℓ] (gating true or "per-head": broadcast over each head's Dh) or
    # [D → H_ℓ·Dh] (anything else: one gate a channel), unbiased
    n, H, kv = f["n_layers"], f["n_heads"], f["n_kv_heads"]
    types = _list(h, "layer_types", n, ["full_attention"] * n, lambda t: t in _TYPES)
    f.update(windows(types, h.get("sliding_window"), n))
    heads = _list(h, "num_attention_heads_per_layer", n, [H] * n,
                  lambda x: type(x) is int and x > 0)
    bad = next((x for x in heads if x % kv), None)
    if bad is not None:
        raise ShapecalcError("num_attention_heads_per_layer", f"{bad} heads do not split into "
                             f"num_key_value_heads={kv} groups")
    # each layer's own H_ℓ, in the one per-layer mechanism (K and V keep H_kv)
    f["layer_widths"] = LayerWidths(n_heads=tuple(heads)) if set(heads) != {H} else None
    rope, dh = _rope(h, set(types)), f["head_dim"] or f["d_model"] // H
    full, local = (rope.get(t) if t in types else None for t in _TYPES)
    main = full or local or {}
    f.update(rotary_dim=None if _rotary(h, dh, main) == dh else _rotary(h, dh, main),
             rope_base=_number(main, "rope_theta", 10000.0))
    if full is not None and local is not None:
        r_local, theta = _rotary(h, dh, local), _number(local, "rope_theta", 10000.0)
        f.update(rotary_dim_local=r_local if r_local != (f["rotary_dim"] or dh) else None,
                 rope_base_local=theta if theta != f["rope_base"] else None)
    h.read.add("gating")  # true, false or a string: not of its default's kind alone
    gating = h.cfg.get("gating", h.default("gating"))
    if not isinstance(gating, (bool, str)):
        raise ShapecalcError("gating", f"must be true, false, \"per-head\" or \"per-element\", "
                             f"not {gating!r}")
    per_head = gating is True or gating == "per-head"
    f.update(attn_head_gate=per_head, attn_output_gate=not per_head, attn_gate_act="softplus")


@mechanism("mlp_layer_types", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
           "shared_expert_intermediate_size", "moe_routed_scaling_factor",
           "moe_router_logit_softcapping", "mlp_only_layers", "decoder_sparse_step")
def laguna_moe(h: HF, f: Fields) -> None:
    # LagunaDecoderLayer: mlp_layer_types[i] sparse builds LagunaSparseMoeBlock, dense a SwiGLU
    # MLP of intermediate_size (default: the first dense). The original code's placement keys
    # (mlp_only_layers, decoder_sparse_step), which transformers does not read, must agree
    n = f["n_layers"]
    kinds = _list(h, "mlp_layer_types", n, ["dense"] + ["sparse"] * (n - 1),
                  lambda k: k in ("dense", "sparse"))
    only, step = h.get("mlp_only_layers"), h.get("decoder_sparse_step")
    if only is not None or step is not None:
        if not isinstance(only or [], list) or (step is not None and (
                type(step) is not int or step < 1)):
            raise ShapecalcError("mlp_only_layers" if step is None else "decoder_sparse_step",
                                 "must be a list of layers and a positive step")
        theirs = ["dense" if i in (only or []) or (i + 1) % (step or 1) else "sparse"
                  for i in range(n)]
        if theirs != kinds:
            raise ShapecalcError("mlp_only_layers" if only is not None else "decoder_sparse_step",
                                 "places the MoE layers other than mlp_layer_types (the key "
                                 "transformers' laguna reads)")
    if "sparse" not in kinds:
        return
    experts = h.get("num_experts")
    if type(experts) is not int or experts < 1:
        raise ShapecalcError("num_experts", f"{experts!r}: a Laguna MoE layer needs experts")
    wide, shared = h.get("moe_intermediate_size"), h.get("shared_expert_intermediate_size")
    scale = h.get("moe_routed_scaling_factor")
    for key, v, what in (("moe_intermediate_size", wide, "a positive integer"),
                         ("moe_routed_scaling_factor", scale, "a number")):
        if v is None or (key == "moe_intermediate_size" and type(v) is not int):
            raise ShapecalcError(key, f"must be {what}, not {v!r}")
    if type(shared) is not int or shared < 0:
        raise ShapecalcError("shared_expert_intermediate_size", f"must be a whole number, not "
                             f"{shared!r}")
    cap = h.get("moe_router_logit_softcapping")
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap < 0:
        raise ShapecalcError("moe_router_logit_softcapping", f"must be a number ≥ 0, not {cap!r}")
    f.update(n_experts=experts, experts_per_token=h.get("num_experts_per_tok"),
             d_ff_expert=None if wide == f["d_ff"] else wide,
             ffn_types=tuple("moe" if k == "sparse" else "dense" for k in kinds)
             if "dense" in kinds else None,
             routed_scaling_factor=float(scale),
             router_softcap=float(cap) if cap > 0 else None,
             router_scoring="sigmoid", routing_bias=True, norm_topk_prob=True)
    if shared:  # LagunaMLP of that width (0: a [D→0] MLP, nothing)
        f.update(n_shared_experts=1, d_ff_shared=None if shared == (wide or f["d_ff"])
                 else shared)


# the table's entry (hf_families_2025.NEW): LagunaConfig's defaults (transformers 5.24)
ENTRY = Family("laguna", "Laguna: heads per layer, softplus output gate, sigmoid MoE + shared",
               (*BODY, llama.qk_norm, laguna_attention, laguna_moe),
               _llama(8, 131072, head_dim=128, attention_bias=False, sliding_window=512,
                      layer_types=None, rope_parameters=None, gating=True,
                      num_attention_heads_per_layer=None, mlp_layer_types=None, num_experts=256,
                      num_experts_per_tok=8, moe_intermediate_size=512,
                      shared_expert_intermediate_size=512, moe_routed_scaling_factor=1.0,
                      moe_router_logit_softcapping=0.0, moe_apply_router_weight_on_input=False),
               refuse={"moe_apply_router_weight_on_input": Refusal((False,), "{value!r}: "
                                                                   "transformers' laguna raises "
                                                                   "NotImplementedError", False),
                       "norm_topk_prob": Refusal((True,), "{value!r}: transformers' laguna always "
                                                 "renormalises the top k", True)},
               widths=dict(vocab_size=100352, hidden_size=2048, intermediate_size=8192,
                           num_hidden_layers=40, num_attention_heads=48))
