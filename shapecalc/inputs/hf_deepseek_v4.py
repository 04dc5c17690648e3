"""The mechanism of DeepSeek-V4 (deepseek_v4), as transformers 5.24's DeepseekV4Config and
modeling_deepseek_v4.py build it: its attention (shared_kv: q through the latent, one K=V head,
sinks, the grouped low-rank output projection, a window on every layer; csa and hca layers
with their compressors and the csa indexer), the hyper-connections (hc_mult streams, Sinkhorn),
the MoE (sqrtsoftplus scores, the first layers hash-routed, one shared expert of
moe_intermediate_size, clamped SwiGLU) and the streams' head.

The legacy keys DeepseekV4Config folds in (compress_ratios, compress_rate_csa/_hca,
num_hash_layers, qk_rope_head_dim) are read as it reads them. num_nextn_predict_layers is the
checkpoint's MTP module, which transformers does not build (not counted)."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, mechanism

_TYPES = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
          "heavily_compressed_attention": "hca"}
_RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention",
                128: "heavily_compressed_attention"}


def _layer_types(h: HF, n: int) -> list[str]:
    """DeepseekV4Config's layer_types: given, else the legacy per-layer compress_ratios, else
    2 hca then csa/hca alternating; the first N."""
    types = h.get("layer_types")
    legacy = h.get("compress_ratios")
    if types is None and legacy is not None:
        if not isinstance(legacy, list):
            raise ShapecalcError("compress_ratios", f"must be a list of ratios, not {legacy!r}")
        bad = [r for r in legacy if type(r) is not int or r not in _RATIO_TYPES]
        if bad:
            raise ShapecalcError("compress_ratios", f"{bad[0]!r}: DeepSeek-V4's ratios are 0, 4 "
                                 "and 128")
        types = [_RATIO_TYPES[r] for r in legacy]
    if types is None:
        types = ["heavily_compressed_attention"] * min(n, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
            for i in range(max(n - 2, 0))]
    types = list(types)[:n]
    bad = [t for t in types if t not in _TYPES]
    if bad or len(types) != n:
        raise ShapecalcError("layer_types", f"{bad[0]!r} is not a DeepSeek-V4 layer type" if bad
                             else f"lists {len(types)} layers, but N={n}")
    return [_TYPES[t] for t in types]


def _hash_layers(h: HF, n: int) -> int:
    """How many leading layers route by the token id (mlp_layer_types' hash_moe prefix)."""
    kinds = h.get("mlp_layer_types")
    if kinds is None:
        legacy = h.get("num_hash_layers")
        return min(n, 3 if legacy is None else legacy)
    kinds = list(kinds)[:n]
    k = next((i for i, t in enumerate(kinds) if t != "hash_moe"), len(kinds))
    if any(t != "moe" for t in kinds[k:]) or len(kinds) != n:
        raise ShapecalcError("mlp_layer_types", "DeepSeek-V4's hash_moe layers must lead and "
                             f"the rest be moe, one per layer (N={n})")
    return k


def _ratios(h: HF) -> dict[str, Any]:
    rates = dict(h.get("compress_rates") or {"compressed_sparse_attention": 4,
                                               "heavily_compressed_attention": 128})
    for key, kind in (("compress_rate_csa", "compressed_sparse_attention"),
                      ("compress_rate_hca", "heavily_compressed_attention")):
        if h.get(key) is not None:
            rates[kind] = h.get(key)
    return rates


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "q_lora_rank", "partial_rotary_factor",
           "qk_rope_head_dim", "sliding_window", "o_groups", "o_lora_rank", "layer_types",
           "compress_ratios", "compress_rates", "compress_rate_csa", "compress_rate_hca",
           "index_n_heads", "index_head_dim", "index_topk", "attention_bias",
           "max_position_embeddings", "tie_word_embeddings")
def v4_attention(h: HF, f: Fields) -> None:
    n, dh = h.get("num_hidden_layers"), h.get("head_dim")
    if h.get("num_key_value_heads") != 1:
        raise ShapecalcError("num_key_value_heads", f"{h.get('num_key_value_heads')}: "
                             "DeepSeek-V4's attention has one K=V head")
    legacy = h.get("qk_rope_head_dim")
    factor = h.get("partial_rotary_factor")
    rot = int(dh * factor) if factor is not None else (legacy if legacy is not None else 64)
    types = _layer_types(h, n)
    rates = _ratios(h)
    csa = "csa" in types
    # attention_bias: DeepseekV4Attention builds its projections without biases whatever it says
    h.get("attention_bias")
    f.update(
        vocab_size=h.get("vocab_size"), d_model=h.get("hidden_size"),
        n_layers=n, n_heads=h.get("num_attention_heads"), n_kv_heads=1, head_dim=dh,
        norm="rmsnorm", positions="rope", rotary_dim=None if rot == dh else rot,
        attention_sinks=True, shared_kv=True, q_lora_rank=h.get("q_lora_rank"),
        sliding_window=h.get("sliding_window"), o_groups=h.get("o_groups"),
        o_lora_rank=h.get("o_lora_rank"), layer_types=tuple(types),
        compress_ratio_hca=rates["heavily_compressed_attention"] if "hca" in types else None,
        compress_ratio_csa=rates["compressed_sparse_attention"] if csa else None,
        csa_index_heads=h.get("index_n_heads") if csa else None,
        csa_index_head_dim=h.get("index_head_dim") if csa else None,
        csa_index_topk=h.get("index_topk") if csa else None,
        max_positions=h.get("max_position_embeddings"),
        tie_embeddings=h.get("tie_word_embeddings"))


@mechanism("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
           "n_shared_experts", "scoring_func", "norm_topk_prob", "routed_scaling_factor",
           "mlp_layer_types", "num_hash_layers", "swiglu_limit", "hidden_act", "mlp_bias",
           "num_nextn_predict_layers")
def v4_moe(h: HF, f: Fields) -> None:
    n = f["n_layers"]
    width = h.first("moe_intermediate_size")  # or intermediate_size (attribute_map)
    if h.get("hidden_act") != "silu":
        raise ShapecalcError("hidden_act", f"{h.get('hidden_act')!r}: DeepSeek-V4's experts "
                             "are SwiGLU (silu)")
    if h.get("mlp_bias"):
        raise ShapecalcError("mlp_bias", "true: biases on the shared expert only are not "
                             "modelled")
    scoring = h.get("scoring_func")
    if scoring not in ("sqrtsoftplus", "softmax", "sigmoid"):
        raise ShapecalcError("scoring_func", f"{scoring!r}: DeepSeek-V4 scores with "
                             "sqrtsoftplus, softmax or sigmoid")
    # n_shared_experts: DeepseekV4SparseMoeBlock builds one shared MLP of
    # moe_intermediate_size whatever it says; norm_topk_prob: its routers always renormalise;
    # num_nextn_predict_layers: the MTP module transformers does not build
    for key in ("n_shared_experts", "norm_topk_prob", "num_nextn_predict_layers"):
        h.get(key)
    f.update(
        d_ff=width, ffn="swiglu", n_experts=h.first("n_routed_experts"),
        experts_per_token=h.get("num_experts_per_tok"), n_shared_experts=1,
        router_scoring=scoring, norm_topk_prob=True,
        routed_scaling_factor=h.get("routed_scaling_factor"),
        hash_moe_layers=_hash_layers(h, n), swiglu_limit=h.get("swiglu_limit"))


@mechanism("hc_mult", "hc_sinkhorn_iters", "hc_eps")
def v4_hyper(h: HF, f: Fields) -> None:
    h.get("hc_eps")  # the Sinkhorn floor: no count changes
    f.update(hc_streams=h.get("hc_mult"), hc_sinkhorn_iters=h.get("hc_sinkhorn_iters"))


MECHANISMS = (v4_attention, v4_moe, v4_hyper)
