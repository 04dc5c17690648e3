"""Widths set per layer (dots3's per_layer_config): a table of per-layer lists, each of N values,
over the ModelConfig fields a layer's shapes read. A layer whose values equal the model's is of
the model's widths; the others' differences ride on their LayerSpec (plan.py), so the one layer
plan holds them and layers of equal widths stay one kind."""

from __future__ import annotations

from typing import Any

from .errors import ShapecalcError
from .record import Pos, Record, _doc


class LayerWidths(Record):
    """Each field a list of N values, layer i's the i-th; a field left out is the model's."""

    n_heads: tuple[Pos, ...] | None = _doc(None, "H of each layer (MLA: its K and V heads too)")
    n_kv_heads: tuple[Pos, ...] | None = _doc(None, "H_kv of each layer (GQA; Inkling's sliding "
                                              "layers)")
    head_dim: tuple[Pos, ...] | None = _doc(None, "Dh of each layer (GQA; Inkling's sliding "
                                            "layers)")
    q_lora_rank: tuple[Pos, ...] | None = _doc(None, "D_q of each layer")
    kv_lora_rank: tuple[Pos, ...] | None = _doc(None, "D_c of each layer")
    qk_nope_head_dim: tuple[Pos, ...] | None = _doc(None, "D_n of each layer")
    qk_rope_head_dim: tuple[Pos, ...] | None = _doc(None, "D_r of each layer")
    v_head_dim: tuple[Pos, ...] | None = _doc(None, "D_v of each layer")
    d_ff: tuple[Pos, ...] | None = _doc(None, "Dff of each layer's dense FFN")


MLA_WIDTHS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
GQA_WIDTHS = ("n_kv_heads", "head_dim")  # attention that projects q, k and v itself


def check_widths(w: LayerWidths, n_layers: int, model: Any) -> None:
    """Each list holds N values; MLA's widths need MLA (and a query latent where one is set)."""
    for f in LayerWidths.field_info():
        vals = getattr(w, f)
        if vals is None:
            continue
        if len(vals) != n_layers:
            raise ShapecalcError(f"layer_widths.{f}", f"lists {len(vals)} layers, but "
                                 f"N={n_layers}")
        if f in MLA_WIDTHS and model.kv_lora_rank is None:
            raise ShapecalcError(f"layer_widths.{f}", "is set per layer only with Multi-head "
                                 "Latent Attention (kv_lora_rank set): other attention keeps "
                                 "one head width for every layer")
        if f in GQA_WIDTHS and model.kv_lora_rank is not None:
            raise ShapecalcError(f"layer_widths.{f}", "is set per layer only on attention that "
                                 "projects q, k and v itself (not MLA)")
        if f in ("n_heads", *GQA_WIDTHS) and model.kv_lora_rank is None:
            _gqa_heads(w, model)
        if f in MLA_WIDTHS and getattr(model, f) is None:
            raise ShapecalcError(f"layer_widths.{f}", f"is set per layer, but the model has no "
                                 f"{f}")
        if f == "qk_rope_head_dim" and set(vals) != {model.qk_rope_head_dim}:
            raise ShapecalcError(f"layer_widths.{f}", "differs between layers, but one RoPE "
                                 "table serves them all: D_r must be the model's")


def _gqa_heads(w: LayerWidths, model: Any) -> None:
    """Each layer's own query heads H_ℓ on attention that projects q itself (Laguna), each a
    whole number of the layer's H_kv K/V groups (its own, Inkling's sliding layers', or the
    model's)."""
    n = len(w.n_heads or w.n_kv_heads or w.head_dim or ())
    heads = w.n_heads or (model.n_heads,) * n
    kvs = w.n_kv_heads or (model.n_kv_heads,) * n
    key = "layer_widths." + ("n_heads" if w.n_heads else "n_kv_heads")
    bad = next(((h, kv) for h, kv in zip(heads, kvs, strict=True)
                if kv is not None and h % kv), None)
    if bad is not None:
        raise ShapecalcError(key, f"H_ℓ={bad[0]} is not divisible by H_kv={bad[1]}")
    for f in ("shared_kv", "fused_qkv", "parallel_block"):
        if getattr(model, f):
            raise ShapecalcError(key, f"per-layer heads are not modelled with {f}")
    if "cca" in model.mixers or model.positions == "alibi":
        raise ShapecalcError(key, "per-layer heads are not modelled with CCA or ALiBi")


def overrides(w: LayerWidths | None, model: Any, layer: int) -> tuple[tuple[str, int], ...]:
    """Layer `layer`'s widths that differ from the model's, as (field, value) pairs."""
    if w is None:
        return ()
    return tuple((f, v[layer]) for f in LayerWidths.field_info()
                 if (v := getattr(w, f)) is not None and v[layer] != getattr(model, f))
