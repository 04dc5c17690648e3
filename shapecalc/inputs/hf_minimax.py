"""The Hugging Face mechanism of MiniMax-M3's text model (`minimax_m3_vl_text`, the text_config
of a `minimax_m3_vl` config): per-layer dense or MoE MLPs and dense or block-sparse attention,
as MiniMaxM3VLTextConfig.__post_init__ resolves them (transformers 5.24).

Absent keys take the class defaults. The checkpoint's sparse_attention_config carries the block
indexer under its original names (sparse_num_index_heads, sparse_index_dim, sparse_block_size,
sparse_topk_blocks, sparse_local_block), which override the flat index_* keys, and its
sparse_attention_freq, which gives layer_types when none is given; moe_layer_freq likewise
gives mlp_layer_types. Its other entries (sparse_init_block, sparse_score_type,
sparse_disable_index_value, use_sparse_attention) no transformers code reads.
"""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from . import hf_llama as llama
from .hf_base import HF, Family, Fields, Refusal, mechanism
from .hf_llama import class_defaults

# the flat keys and the names sparse_attention_config gives them (the class's legacy map)
_INDEXER = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
            "index_block_size": "sparse_block_size", "index_topk_blocks": "sparse_topk_blocks",
            "index_local_blocks": "sparse_local_block"}
_FIELDS = {"index_n_heads": "block_index_heads", "index_head_dim": "block_index_head_dim",
           "index_block_size": "index_block_size", "index_topk_blocks": "index_topk_blocks",
           "index_local_blocks": "index_local_blocks"}


def _per_layer(h: HF, key: str, derived: Any, kinds: tuple[str, ...], n: int) -> list[str]:
    """A per-layer list (given, else derived from a 0/1 frequency list, else the default)."""
    given = h.get(key)
    where = key if given is not None else derived[0]
    types = given if given is not None else derived[1]
    if not isinstance(types, list) or any(t not in kinds for t in types):
        raise ShapecalcError(where, f"must give one of {', '.join(kinds)} per layer (or 0/1), "
                             f"not {types!r}")
    if len(types) < n:  # layer i reads entry i: a longer list builds the first n
        raise ShapecalcError(where, f"lists {len(types)} layers, but num_hidden_layers is {n}")
    return types[:n]


def _freq(key: str, value: Any, on: str, off: str, n: int) -> tuple[str, Any]:
    """A 0/1 list as the class maps it (truthy: `on`; not a list: kept, to be refused); none
    given: `on` on every layer when `on` is the default (mlp: sparse), else `off`."""
    if value is None:
        return key, [on if on == "sparse" else off] * n
    if not isinstance(value, list):
        return key, value
    return key, [on if v else off for v in value]


@mechanism("dense_intermediate_size", "shared_intermediate_size", "intermediate_size",
           "num_local_experts", "num_experts_per_tok", "routed_scaling_factor", "swiglu_limit",
           "mlp_layer_types", "moe_layer_freq", "layer_types", "sparse_attention_config",
           *_INDEXER)
def minimax_m3(h: HF, f: Fields) -> None:
    """MiniMaxM3VLDecoderLayer: GQA with per-head q/k norms (and a block indexer on the
    minimax_m3_sparse layers), then a dense MLP of dense_intermediate_size or the MoE block:
    experts of intermediate_size, sigmoid + correction-bias routing, the k weights renormalised
    and × routed_scaling_factor, one shared expert of shared_intermediate_size (always built);
    every MLP a SwiGLU-OAI whose gate and up are clamped at swiglu_limit."""
    n = f["n_layers"]
    sparse = h.get("sparse_attention_config") or {}
    if not isinstance(sparse, dict):
        raise ShapecalcError("sparse_attention_config", f"must be a table, not {sparse!r}")
    attn = _per_layer(h, "layer_types", _freq(
        "sparse_attention_config.sparse_attention_freq", sparse.get("sparse_attention_freq"),
        "minimax_m3_sparse", "full_attention", n), ("full_attention", "minimax_m3_sparse"), n)
    mlp = _per_layer(h, "mlp_layer_types", _freq("moe_layer_freq", h.get("moe_layer_freq"),
                                                 "sparse", "dense", n), ("dense", "sparse"), n)
    experts, k = h.one_of("num_local_experts"), h.get("num_experts_per_tok")
    dense = h.need("dense_intermediate_size", "Dff")
    if "sparse" in mlp:
        if not experts or not k:
            raise ShapecalcError("num_experts_per_tok" if experts else "num_local_experts",
                                 f"{k if experts else experts!r}: the MoE layers need experts")
        f.update(n_experts=experts, experts_per_token=k, router_scoring="sigmoid",
                 norm_topk_prob=True, routed_scaling_factor=h.get("routed_scaling_factor"),
                 n_shared_experts=1, d_ff_shared=h.need("shared_intermediate_size", "Dff_s"),
                 d_ff_expert=h.need("intermediate_size", "Dff_e"),
                 ffn_types=tuple("moe" if t == "sparse" else "dense" for t in mlp)
                 if "dense" in mlp else None)
    f["d_ff"] = dense
    f["swiglu_limit"] = h.get("swiglu_limit")
    blocks = tuple(i for i, t in enumerate(attn) if t == "minimax_m3_sparse")
    if not blocks:  # every layer dense: the indexer's keys are read by no layer
        for key in _INDEXER:
            h.get(key)
        return
    for key, legacy in _INDEXER.items():  # the flat key, which the legacy name overrides
        v = h.get(key)
        v = sparse[legacy] if legacy in sparse else v
        name = f"sparse_attention_config.{legacy}" if legacy in sparse else key
        if type(v) is not int or v <= 0:
            raise ShapecalcError(name, f"must be a whole number > 0, not {v!r}")
        f[_FIELDS[key]] = v
    f["block_sparse_layers"] = None if len(blocks) == n else blocks


# MiniMaxM3VLTextModel: Gemma-style (1 + γ) RMSNorms, per-head q/k norms before a partial RoPE
# (partial_rotary_factor; the class never reads rotary_dim), GQA, the block indexer on the
# minimax_m3_sparse layers; hidden_act is forced to silu (the SwiGLU-OAI gate is inline: its
# swiglu_alpha and up + 1 are elementwise); the MTP modules are not built (their weights are
# ignored when loading)
MINIMAX_M3 = Family(
    "minimax_m3_vl_text", "MiniMax-M3 (text): GQA, block-sparse attention, sigmoid MoE + shared",
    (llama.llama, llama.table, llama.partial_rotary, minimax_m3),
    class_defaults(4, 524288, head_dim=128,
                   num_local_experts=128, num_experts_per_tok=4, routed_scaling_factor=2.0,
                   swiglu_limit=7.0, mlp_layer_types=None, layer_types=None,
                   moe_layer_freq=None, sparse_attention_config=None, index_n_heads=4,
                   index_head_dim=128, index_block_size=128, index_topk_blocks=16,
                   index_local_blocks=1, partial_rotary_factor=None),
    aliases={"num_local_experts": ("num_experts",)},
    fixed=dict(ffn="swiglu", qk_norm=True, norm_plus_one=True),
    refuse={"use_qk_norm": Refusal((True,), "{value!r}: transformers' minimax_m3_vl always "
                                   "builds its q/k norms", True),
            "qk_norm_type": Refusal(("per_head",), "{value!r}: transformers' minimax_m3_vl "
                                    "norms q and k per head", "per_head"),
            "scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' minimax_m3_vl router "
                                    "always scores with sigmoid", "sigmoid"),
            "n_shared_experts": Refusal((1,), "{value!r}: transformers' minimax_m3_vl always "
                                        "builds one shared expert", 1)},
    ignored=frozenset({"rotary_dim", "hidden_act", "swiglu_alpha", "use_routing_bias",
                       "num_mtp_modules", "num_nextn_predict_layers"}),
    widths=dict(vocab_size=200064, hidden_size=6144, num_hidden_layers=60,
                num_attention_heads=64, intermediate_size=3072, dense_intermediate_size=12288,
                shared_intermediate_size=3072))
