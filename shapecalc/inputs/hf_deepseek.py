"""Hugging Face readers for DeepSeek-V2, DeepSeek-V3 and Kimi K2 (the V3 architecture, which
transformers itself maps `kimi_k2` to): Multi-head Latent Attention and DeepSeekMoE.

`hf._llama_like` reads what they share with Llama (widths, heads, positions, tied embeddings, the
activation); the reader here adds MLA's widths and the experts. Absent keys take transformers
5.x's class defaults. Keys the original remote code reads but transformers does not are refused
where they would change the model (`moe_layer_freq` ≠ 1, `scoring_func` against the family).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..model.config import ShapecalcError

if TYPE_CHECKING:
    from .hf import _HF

Fields = dict[str, Any]

# the class defaults of transformers 5.24: V2, V3 (Kimi K2 is read as V3)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v2": dict(experts=64, k=None, width=1407, shared=2, first_dense=0, q_lora=1536,
                        scale=1.0, norm_topk=False, scoring="softmax"),
    "deepseek_v3": dict(experts=256, k=8, width=2048, shared=1, first_dense=3, q_lora=1536,
                        scale=2.5, norm_topk=True, scoring="sigmoid"),
}


def _deepseek(h: _HF, f: Fields, mt: str) -> Fields:
    d = _DEFAULTS["deepseek_v2" if mt == "deepseek_v2" else "deepseek_v3"]
    n, heads = f["n_layers"], f["n_heads"]
    # MLA: K and V of all H heads come from kv_b_proj; eager attention then repeats them by
    # H / num_key_value_heads, which only runs when that is 1
    if f["n_kv_heads"] != heads:
        raise ShapecalcError("num_key_value_heads", f"{f['n_kv_heads']} differs from "
                             f"num_attention_heads={heads}; MLA makes K and V for every head")
    rope = h.get("qk_rope_head_dim", 64)
    if h.get("head_dim") not in (None, rope):  # V3's config sets head_dim = qk_rope_head_dim
        raise ShapecalcError("head_dim", f"{h.get('head_dim')} is not qk_rope_head_dim={rope}; "
                             "MLA's head widths are qk_nope_head_dim, qk_rope_head_dim, "
                             "v_head_dim")
    if h.get("moe_layer_freq", 1) != 1:  # the remote code's key; transformers ignores it
        raise ShapecalcError("moe_layer_freq", f"{h.get('moe_layer_freq')}: MoE on every "
                             "k-th layer only is read by DeepSeek's remote code, not by "
                             "transformers; shapecalc follows transformers (1)")
    scoring = h.get("scoring_func", d["scoring"])
    if scoring != d["scoring"]:
        raise ShapecalcError("scoring_func", f"{scoring!r}: transformers' {mt} router always "
                             f"scores with {d['scoring']}")
    if mt == "deepseek_v2":
        method = h.get("topk_method", "greedy")
        if method not in ("greedy", "group_limited_greedy"):
            raise ShapecalcError("topk_method", f"{method!r} is not one of greedy, "
                                 "group_limited_greedy (DeepSeek-V2's router)")
        if h.get("norm_topk_prob", False):
            raise ShapecalcError("norm_topk_prob", "true, but transformers' DeepSeek-V2 router "
                                 "never renormalises the top-k weights")
        norm_topk = False
    else:  # noaux_tc: sigmoid scores + e_score_correction_bias (a buffer, not a parameter)
        norm_topk = bool(h.get("norm_topk_prob", d["norm_topk"]))
    # n_group / topk_group restrict which experts may be chosen (group-limited routing); a
    # token still runs k experts, so they change no count
    experts = h.get("n_routed_experts", h.get("num_local_experts", h.get("num_experts",
                                                                          d["experts"])))
    k = h.get("num_experts_per_tok", d["k"])
    if not experts or not k:
        raise ShapecalcError("num_experts_per_tok" if experts else "n_routed_experts",
                             f"{k if experts else experts!r}: a DeepSeek model needs experts")
    first = h.get("first_k_dense_replace", d["first_dense"]) or 0
    width = h.get("moe_intermediate_size", d["width"])
    shared = h.get("n_shared_experts", d["shared"]) or 0
    bias = bool(h.get("attention_bias", False))
    out: Fields = dict(
        n_kv_heads=None,
        head_dim=None,
        kv_lora_rank=h.get("kv_lora_rank", 512),
        q_lora_rank=h.get("q_lora_rank", d["q_lora"]),  # null: a plain q_proj
        qk_nope_head_dim=h.get("qk_nope_head_dim", 128),
        qk_rope_head_dim=rope,
        v_head_dim=h.get("v_head_dim", 128),
        qkv_bias=bias,  # attention_bias: on q_a_proj and kv_a_proj_with_mqa (and o_proj)
        attn_out_bias=bias,
        n_experts=experts,
        experts_per_token=k,
        d_ff_expert=None if width == f["d_ff"] else width,
        n_shared_experts=shared,  # one MLP of n_shared_experts × moe_intermediate_size
        router_scoring=scoring,
        norm_topk_prob=norm_topk,
        routed_scaling_factor=h.get("routed_scaling_factor", d["scale"]),
        ffn_types=tuple("dense" if i < first else "moe" for i in range(n)) if first else None,
    )
    if first >= n:
        raise ShapecalcError("first_k_dense_replace", f"{first} leaves no MoE layer of {n}")
    if mt == "deepseek_v2":  # V2's MLPs (dense and shared) take mlp_bias; V3's have none
        out["ffn_bias"] = bool(h.get("mlp_bias", False))
    # num_nextn_predict_layers: DeepSeek-V3's multi-token-prediction module (14 B on the Hub)
    # is a training / speculative-decoding head that transformers does not build; like
    # transformers (and the published 671 B), shapecalc counts the main model. Read, so that the
    # key audit knows it is handled here and refuses it for families that have no such module.
    h.get("num_nextn_predict_layers")
    return out


READERS: dict[str, Callable[[_HF, Fields], Fields]] = {
    mt: partial(_deepseek, mt=mt) for mt in ("deepseek_v2", "deepseek_v3", "kimi_k2")
}
