"""The mechanisms of DeepSeek-V2, DeepSeek-V3 and Kimi K2 (the V3 architecture, which
transformers itself maps `kimi_k2` to): Multi-head Latent Attention and DeepSeekMoE.

Absent keys take the family's class defaults (transformers 5.24). Keys the original remote code
reads but transformers does not are refused where they would change the model (the family's
`refuse`: `moe_layer_freq` ≠ 1, `scoring_func` against the family).
"""

from __future__ import annotations

from ..model.config import ShapecalcError
from . import hf_moe as moe
from .hf_base import HF, Fields, mechanism
from .hf_llama import rotary_factor


def _latent(h: HF, f: Fields) -> None:
    """MLA's fields: K and V of all H heads come from kv_b_proj; eager attention then repeats
    them by H / num_key_value_heads, which only runs when that is 1."""
    heads = f["n_heads"]
    if f["n_kv_heads"] != heads:
        raise ShapecalcError("num_key_value_heads", f"{f['n_kv_heads']} differs from "
                             f"num_attention_heads={heads}; MLA makes K and V for every head")
    bias = bool(h.get("attention_bias", False))
    f.update(
        n_kv_heads=None,
        head_dim=None,
        kv_lora_rank=h.get("kv_lora_rank"),
        q_lora_rank=h.get("q_lora_rank"),  # null: a plain q_proj
        qk_nope_head_dim=h.get("qk_nope_head_dim"),
        qk_rope_head_dim=h.get("qk_rope_head_dim"),
        v_head_dim=h.get("v_head_dim"),
        qkv_bias=bias,  # attention_bias: on q_a_proj and kv_a_proj_with_mqa (and o_proj)
        attn_out_bias=bias,
    )


_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
             "head_dim", "attention_bias")


@mechanism(*_MLA_KEYS)
def mla(h: HF, f: Fields) -> None:
    rope = h.get("qk_rope_head_dim")
    if h.get("head_dim") not in (None, rope):  # V3's config sets head_dim = qk_rope_head_dim
        raise ShapecalcError("head_dim", f"{h.get('head_dim')} is not qk_rope_head_dim={rope}; "
                             "MLA's head widths are qk_nope_head_dim, qk_rope_head_dim, "
                             "v_head_dim")
    _latent(h, f)


@mechanism(*_MLA_KEYS, "partial_rotary_factor", "rope_parameters.partial_rotary_factor",
           "rope_scaling.partial_rotary_factor")
def mla_qk_head(h: HF, f: Fields) -> None:
    # Mistral 4: the class sets head_dim to the q/k head, nope + rope (a given head_dim is
    # overwritten), and its rotary embedding turns int(head_dim · partial_rotary_factor) dims
    # (default rope / head_dim), which must be the rope part q and k carry
    nope, rope = h.get("qk_nope_head_dim"), h.get("qk_rope_head_dim")
    h.get("head_dim")
    factor = rotary_factor(h, rope / (nope + rope))
    if int((nope + rope) * factor) != rope:
        raise ShapecalcError("partial_rotary_factor", f"{factor} turns "
                             f"{int((nope + rope) * factor)} of the {nope + rope}-wide q/k head, "
                             f"not its qk_rope_head_dim={rope} rope dims")
    _latent(h, f)


@mechanism("n_routed_experts", "num_experts_per_tok", "first_k_dense_replace",
           "moe_intermediate_size", "n_shared_experts", "routed_scaling_factor",
           "norm_topk_prob", "scoring_func", "num_nextn_predict_layers")
def deepseek_moe(h: HF, f: Fields) -> None:
    # n_group / topk_group restrict which experts may be chosen (group-limited routing); a
    # token still runs k experts, so they change no count
    n = f["n_layers"]
    experts = h.first("n_routed_experts")
    k = h.get("num_experts_per_tok")
    if not experts or not k:
        raise ShapecalcError("num_experts_per_tok" if experts else "n_routed_experts",
                             f"{k if experts else experts!r}: a DeepSeek model needs experts")
    first = h.get("first_k_dense_replace") or 0
    width = h.get("moe_intermediate_size")
    f.update(
        n_experts=experts,
        experts_per_token=k,
        d_ff_expert=None if width == f["d_ff"] else width,
        n_shared_experts=h.get("n_shared_experts") or 0,  # one MLP of n_shared × the width
        router_scoring=h.get("scoring_func"),  # the family's refuse holds it to its own
        # noaux_tc: sigmoid scores + e_score_correction_bias (a buffer, not a parameter); V2's
        # router never renormalises (its family refuses norm_topk_prob true)
        norm_topk_prob=bool(h.get("norm_topk_prob")),
        routed_scaling_factor=h.get("routed_scaling_factor"),
        ffn_types=tuple("dense" if i < first else "moe" for i in range(n)) if first else None,
    )
    if first >= n:
        raise ShapecalcError("first_k_dense_replace", f"{first} leaves no MoE layer of {n}")
    # num_nextn_predict_layers: DeepSeek-V3's multi-token-prediction modules (14 B on the Hub), a
    # training / speculative-decoding head that transformers does not build: counted apart
    # (totals.mtp_params), left out of params as the published 671 B leaves it out
    f["mtp_layers"] = mtp_count(h)


def mtp_count(h: HF) -> int:
    """num_nextn_predict_layers: the multi-token-prediction modules, a whole number (absent or
    null: none)."""
    mtp = h.first("num_nextn_predict_layers")
    if mtp is not None and (type(mtp) is not int or mtp < 0):
        raise ShapecalcError("num_nextn_predict_layers", f"must be a whole number ≥ 0 of "
                             f"multi-token-prediction modules, not {mtp!r}")
    return mtp or 0


@mechanism(*_MLA_KEYS, "qk_head_dim")
def mla_dsa(h: HF, f: Fields) -> None:
    # DeepseekV32Config (and GLM-5's) sets head_dim = qk_rope_head_dim and qk_head_dim = nope +
    # rope in __post_init__, whatever the config.json says (GLM-5.2's says head_dim 192)
    h.get("head_dim"), h.get("qk_head_dim")
    _latent(h, f)


@mechanism("indexer_types", "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset")
def indexer_types(h: HF, f: Fields) -> None:
    """GLM-5's IndexShare (GlmMoeDsaConfig.__post_init__): each layer runs its indexer ("full")
    or reuses the previous full layer's top-k ("shared"): indexer_types, else the pattern
    index_topk_pattern ("F"/"S"), else full where max(i − offset + 1, 0) is a multiple of
    index_topk_freq (offset index_skip_topk_offset, default 2; freq default 1: every layer)."""
    n = f["n_layers"]
    types, key = h.get("indexer_types"), "indexer_types"
    if types is None and (pattern := h.get("index_topk_pattern")) is not None:
        key = "index_topk_pattern"
        if isinstance(pattern, str) and set(pattern) <= {"F", "S"}:
            types = [{"F": "full", "S": "shared"}[c] for c in pattern]
        else:
            types = pattern
    elif types is None:
        freq, offset = h.get("index_topk_freq"), h.get("index_skip_topk_offset")
        if type(freq) is not int or type(offset) is not int:
            raise ShapecalcError("index_topk_freq" if type(freq) is not int else
                                 "index_skip_topk_offset", "must be a whole number")
        freq = max(freq, 1)
        types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    f["index_shared_layers"] = shared_layers(types, key, n)


def shared_layers(types: object, key: str, n: int) -> tuple[int, ...] | None:
    """The layers an indexer_types list (read under `key`) marks "shared", checked: one entry
    per layer, each "full" or "shared", the first full (GLM-5's and Hunyuan 4's alike)."""
    if not isinstance(types, list) or any(t not in ("full", "shared") for t in types):
        raise ShapecalcError(key, f"must give 'full' or 'shared' per layer, not {types!r}")
    if len(types) != n:
        raise ShapecalcError(key, f"gives {len(types)} layers, but num_hidden_layers is {n}")
    if types[0] != "full":
        raise ShapecalcError(key, "starts with a shared layer: it has no earlier indexer layer "
                             "whose top-k it could reuse")
    return tuple(i for i, t in enumerate(types) if t == "shared") or None


@mechanism("index_topk", "index_n_heads", "index_head_dim")
def indexer(h: HF, f: Fields) -> None:
    """DeepSeek Sparse Attention (DeepseekV32Indexer): each query's top index_topk keys, picked
    by a lightning indexer of index_n_heads heads of index_head_dim."""
    for key, field in (("index_topk", "index_topk"), ("index_n_heads", "index_heads"),
                       ("index_head_dim", "index_head_dim")):
        v = h.get(key)
        if type(v) is not int or v <= 0:
            raise ShapecalcError(key, f"must be a whole number > 0, not {v!r}")
        f[field] = v
    if f.get("q_lora_rank") is None:  # DeepseekV32Attention always builds q_a_proj
        raise ShapecalcError("q_lora_rank", "null, but DeepSeek Sparse Attention's indexer reads "
                             "the query latent (q_a_proj): it needs one")


@mechanism("mlp_layer_types", "first_k_dense_replace")
def mlp_layer_types_dense_first(h: HF, f: Fields) -> None:
    # DeepseekV32Config: mlp_layer_types (default: first_k_dense_replace dense, the rest MoE,
    # which deepseek_moe has set) names each layer's MLP; a list given wins, read as EXAONE-MoE's
    if h.get("mlp_layer_types") is not None:
        moe.mlp_layer_types(True).read(h, f)
        _needs_experts(f)


def _needs_experts(f: Fields) -> None:
    """ffn_types from mlp_layer_types: a model of this family needs a sparse layer (None: all)."""
    if "moe" not in f["ffn_types"]:
        raise ShapecalcError("mlp_layer_types", "has no sparse layer; the model needs experts")
    if "dense" not in f["ffn_types"]:
        f["ffn_types"] = None


@mechanism("mlp_layer_types", "first_k_dense_replace")
def mlp_layer_types(h: HF, f: Fields) -> None:
    # GLM-4.7-Flash (glm4_moe_lite): each layer's MLP from mlp_layer_types alone (default: the
    # first dense), read as HY-V3's is (hf_moe.mlp_layer_types); and the model needs experts
    given = h.get("mlp_layer_types")
    if isinstance(given, list) and "sparse" not in given[:f["n_layers"]]:
        raise ShapecalcError("mlp_layer_types", "has no sparse layer; the model needs experts")
    moe.mlp_layer_types(False).read(h, f)
    _needs_experts(f)
