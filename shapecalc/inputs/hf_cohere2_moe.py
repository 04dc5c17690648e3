"""Cohere 2 MoE's layout over Cohere 2's parallel block (hf_classic.cohere2): its norm, the dense
prefix and its own window pattern, which layers turn RoPE, the top-k router and the shared MLP."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, mechanism
from .hf_llama import windows


def _count(h: HF, key: str, least: int) -> int:
    v = h.get(key)
    if type(v) is not int or v < least:
        raise ShapecalcError(key, f"must be an integer ≥ {least}, not {v!r}")
    return v


def _kinds(h: HF, n: int, first: int) -> list[str]:
    """mlp_layer_types (the decoder layer reads entry i), else the first k dense."""
    kinds: Any = h.get("mlp_layer_types") or ["dense" if i < first else "sparse"
                                              for i in range(n)]
    if not isinstance(kinds, list) or any(k not in ("dense", "sparse") for k in kinds):
        raise ShapecalcError("mlp_layer_types", f"must list dense or sparse per layer, not "
                             f"{kinds!r}")
    if len(kinds) < n:
        raise ShapecalcError("mlp_layer_types", f"lists {len(kinds)} layers, but "
                             f"num_hidden_layers is {n}")
    return kinds[:n]


@mechanism("rms_norm_eps", "first_k_dense_replace", "mlp_layer_types", "layer_types",
           "sliding_window", "sliding_window_pattern", "prefix_dense_sliding_window_pattern",
           "prefix_dense_intermediate_size", "num_experts", "num_experts_per_tok",
           "num_shared_experts", "shared_expert_combination_strategy", "expert_selection_fn",
           "norm_topk_prob")
def cohere2_moe(h: HF, f: Fields) -> None:
    # Cohere2MoeConfig: without layer_types, the first first_k_dense_replace layers follow
    # prefix_dense_sliding_window_pattern and the rest sliding_window_pattern (layer i slides
    # when (i+1) % pattern), and those first layers are dense. A dense layer's MLP is
    # prefix_dense_intermediate_size wide (null: intermediate_size); the experts (Mixtral's)
    # and the shared MLP (num_shared_experts × intermediate_size) take intermediate_size.
    # Cohere2MoeAttention turns RoPE on the sliding layers, and on the dense ones when the
    # prefix pattern is 1. rms_norm_eps set: RMSNorm instead of the γ-only LayerNorm.
    n, width = f["n_layers"], f["d_ff"]
    if h.get("rms_norm_eps") is not None:
        f.update(norm="rmsnorm", norm_bias=None)
    first = _count(h, "first_k_dense_replace", 0)
    prefix, rest = (_count(h, k, 1) for k in ("prefix_dense_sliding_window_pattern",
                                             "sliding_window_pattern"))
    types = h.get("layer_types") or [
        "sliding_attention" if (i + 1) % prefix else "full_attention" for i in range(first)
    ] + ["sliding_attention" if (i + 1) % rest else "full_attention" for i in range(n - first)]
    f.update(windows(types, h.get("sliding_window"), n))
    kinds = _kinds(h, n, first)
    dense = h.get("prefix_dense_intermediate_size")
    if dense is not None and (type(dense) is not int or dense < 1):
        raise ShapecalcError("prefix_dense_intermediate_size", f"must be a positive integer or "
                             f"null, not {dense!r}")
    roped = [t == "sliding_attention" or (k == "dense" and prefix == 1)
             for t, k in zip(types, kinds, strict=True)]
    f["nope_layers"] = tuple(i for i, r in enumerate(roped) if not r) or None
    if "sparse" not in kinds:  # every layer dense: no router, no experts
        f["d_ff"] = dense or width
        return
    scoring = h.get("expert_selection_fn")
    if scoring not in ("softmax", "sigmoid"):
        raise ShapecalcError("expert_selection_fn", f"{scoring!r}: the router takes softmax or "
                             "sigmoid")
    shared = _count(h, "num_shared_experts", 0)
    how = h.get("shared_expert_combination_strategy")
    if shared and how != "sum":
        raise ShapecalcError("shared_expert_combination_strategy", f"{how!r}: only sum is "
                             "modelled (average halves routed + shared, a scale shapecalc does "
                             "not apply)")
    f.update(
        n_experts=_count(h, "num_experts", 1),
        experts_per_token=_count(h, "num_experts_per_tok", 1),
        d_ff=dense or width,
        d_ff_expert=None if (dense or width) == width else width,
        ffn_types=tuple("moe" if k == "sparse" else "dense" for k in kinds)
        if "dense" in kinds else None,
        # a softmax of the top k logits: the renormalised top k of a softmax
        router_scoring=scoring,
        norm_topk_prob=bool(h.get("norm_topk_prob")) or scoring == "softmax",
    )
    if shared:
        f.update(n_shared_experts=1, d_ff_shared=None if shared == 1 else shared * width)
