"""Hunyuan 4 (hy_v4), as transformers 5.24's HYV4Config and modeling_hy_v4.py build it: MLA
with DeepSeek-V3.2's lightning indexer (its RoPE on the last D_r of each head, the same count),
layers that reuse the previous full layer's top-k (indexer_types, default full on layer 0 and
every 4th from layer 1), a sink per head and an elementwise output gate sigmoid(x·W_g) [D →
H·D_v] on every layer; Hunyuan's hyper-connections (pre and post, no comb); the first layer
dense, the rest a sigmoid top-k MoE (a correction bias, a buffer, chooses; renormalised,
× routed_scaling_factor) plus n_shared × the expert width shared, the routed experts' SwiGLU
clamped (not the dense or shared MLPs'). The HC mixing, the router, the sinks, the indexer's
k_norm and weights_proj and the LM head are fp32 in transformers (weight bytes: not modelled).
HY_V4 holds the entry, joined to the table by hf_families.py."""

from __future__ import annotations

from ..model.config import ShapecalcError
from . import hf_deepseek as deepseek
from . import hf_moe as moe
from .hf_base import HF, Family, Fields, mechanism
from .hf_llama import BODY


@mechanism("num_key_value_heads", "head_dim", "qk_head_dim", "kv_lora_rank", "q_lora_rank",
           "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "attention_bias",
           "layer_types")
def hy_attention(h: HF, f: Fields) -> None:
    # HYV4Config.__post_init__ sets num_key_value_heads = H (MLA keys every head) and head_dim
    # = qk_rope_head_dim, whatever the config.json says; every layer is indexed_attention (the
    # model reads layer_types only as that mask's name)
    h.get("num_key_value_heads")
    f["n_kv_heads"] = f["n_heads"]
    types = h.get("layer_types")
    if types is not None and (not isinstance(types, list)
                              or any(t != "indexed_attention" for t in types)):
        raise ShapecalcError("layer_types", f"{types!r}: transformers' hy_v4 runs indexed "
                             "attention on every layer (indexed_attention)")
    deepseek.mla_dsa.read(h, f)


@mechanism("indexer_types")
def hy_indexer_types(h: HF, f: Fields) -> None:
    """HYV4Config's indexer_types: given, else full on layer 0 and where (i − 1) % 4 == 0; a
    shared layer reuses the most recent full layer's top-k (HYV4Attention's prev_topk_indices)."""
    n = f["n_layers"]
    types = h.get("indexer_types")
    if types is None:
        types = ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(n)]
    f["index_shared_layers"] = deepseek.shared_layers(types, "indexer_types", n)


@mechanism("n_shared_experts", "moe_intermediate_size", "routed_scaling_factor",
           "norm_topk_prob", "n_group", "topk_group", "swiglu_limit")
def hy_moe(h: HF, f: Fields) -> None:
    # HYV4MoE: HYV4TopkRouter (Glm4MoeLite's: sigmoid, + e_score_correction_bias to choose,
    # group-limited by n_group/topk_group: no count), the routed experts (HYV4Experts, SwiGLU
    # clamped at swiglu_limit) and one shared HYV4MLP of n_shared × moe_intermediate_size
    h.get("n_group"), h.get("topk_group")
    n = h.get("n_shared_experts")
    if type(n) is not int or n < 0:
        raise ShapecalcError("n_shared_experts", f"must be a whole number, not {n!r}")
    width = n * h.get("moe_intermediate_size")
    limit = h.get("swiglu_limit")
    if limit is not None and (isinstance(limit, bool) or limit <= 0):
        # the docstring says ≤ 0 disables it; HYV4Experts clamps at it whatever it is
        raise ShapecalcError("swiglu_limit", f"{limit!r}: HYV4Experts clamps the gate at it and "
                             "the up to ±it (a limit ≤ 0 zeroes the experts), not modelled")
    if "n_experts" not in f:  # every layer dense (mlp_layer_types): no router, no clamp
        return
    f.update(router_scoring="sigmoid", norm_topk_prob=bool(h.get("norm_topk_prob")),
             routed_scaling_factor=h.get("routed_scaling_factor"), swiglu_limit=limit,
             swiglu_limit_routed_only=limit is not None)
    if width:
        f.update(n_shared_experts=1, d_ff_shared=None if width == f.get("d_ff_expert") else width)


@mechanism("hc_mult", "hc_magnitude", "hc_eps")
def hy_hyper(h: HF, f: Fields) -> None:
    # HYV4HyperConnection: post = hc_magnitude·σ(·) + hc_eps (the same count as DeepSeek-V4's 2)
    h.get("hc_magnitude"), h.get("hc_eps")
    f.update(hc_streams=h.get("hc_mult"), hc_mixing="none")


_DEFAULTS = dict(
    num_key_value_heads=32, max_position_embeddings=262144, tie_word_embeddings=False,
    hidden_act="silu", head_dim=64, attention_bias=False, kv_lora_rank=512, q_lora_rank=1536,
    qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, qk_head_dim=None,
    n_routed_experts=256, num_experts_per_tok=8, moe_intermediate_size=768, n_shared_experts=1,
    routed_scaling_factor=2.827, norm_topk_prob=True, n_group=1, topk_group=1,
    mlp_layer_types=None, layer_types=None, index_topk=2048, index_head_dim=128,
    index_n_heads=16, indexer_types=None, hc_mult=4, hc_magnitude=2.0, hc_eps=1e-6,
    swiglu_limit=10.0)

HY_V4: tuple[Family, ...] = (
    Family("hy_v4", "Hunyuan 4: MLA with DSA's indexer (reused top-k), sinks, output gate, "
           "hyper-connections, sigmoid MoE",
           (*BODY, hy_attention, moe.mlp_layer_types(False),
            moe.experts("n_routed_experts", "moe_intermediate_size", optional=True), hy_moe,
            deepseek.indexer, hy_indexer_types, hy_hyper),
           _DEFAULTS, aliases={"n_routed_experts": ("num_local_experts",)},
           fixed=dict(attention_sinks=True, attn_output_gate=True),
           widths=dict(vocab_size=120832, hidden_size=2816, intermediate_size=6912,
                       num_hidden_layers=34, num_attention_heads=32)),
)
