"""The mechanisms of the KDA hybrids: Kimi-Linear's and Ling 3.0's layer types (Kimi Delta
Attention or MLA), the KDA sizes, each layer's MLP (dense or sparse), and their DeepSeek-V3 MoE
under the names their config's attribute map gives them."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, mechanism
from .hf_deepseek import _latent

MIXERS = {"linear_attention": "kda", "full_attention": "attention"}
# chunk_kimi_delta_attention's chunk_size: KimiLinearDeltaAttention never sets it
CHUNK = 64


def _types(key: str, types: Any, n: int, allowed: tuple[str, ...]) -> list[str]:
    """A per-layer list of N names from `allowed`, else one line naming `key`."""
    if not isinstance(types, list):
        raise ShapecalcError(key, f"must list each layer's type, not {types!r}")
    bad = next((t for t in types if t not in allowed), None)
    if bad is not None:
        raise ShapecalcError(key, f"{bad!r} is not one of {', '.join(allowed)}")
    if len(types) != n:
        raise ShapecalcError(key, f"lists {len(types)} layers, but num_hidden_layers is {n}")
    return types


def _one_based(lac: dict, n: int) -> list[str]:
    """linear_attn_config's full_attn_layers and kda_layers (1-based, as the checkpoint writes
    them) → each layer's type; every layer must be in exactly one list."""
    types: list[Any] = [None] * n
    for key, kind in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
        for i in lac[key]:
            if not isinstance(i, int) or not 1 <= i <= n or types[i - 1] is not None:
                raise ShapecalcError("linear_attn_config", f"{key} holds {i!r}: each of layers "
                                     f"1…{n} must be in exactly one of full_attn_layers, "
                                     "kda_layers")
            types[i - 1] = kind
    if None in types:
        raise ShapecalcError("linear_attn_config", f"layer {types.index(None) + 1} is in neither "
                             "full_attn_layers nor kda_layers")
    return types


@mechanism("layer_types", "linear_attn_config", "linear_head_dim", "linear_num_heads",
           "linear_conv_kernel_dim", "mlp_layer_types", "first_k_dense_replace", "head_dim",
           *("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
             "attention_bias"))
def kimi_linear(h: HF, f: Fields) -> None:
    """KimiLinearDecoderLayer: x + mixer(Norm(x)), then x + MLP(Norm(x)); the mixer KDA
    (linear_attention) or MLA that applies no RoPE (full_attention: k_rope is still cached and
    shared, never rotated); the MLP dense or DeepSeek-V3's MoE (sparse)."""
    n = f["n_layers"]
    lac = h.get("linear_attn_config") or {}
    if not isinstance(lac, dict):
        raise ShapecalcError("linear_attn_config", f"must be an object, not {lac!r}")
    # KimiLinearConfig.__post_init__: the checkpoint's sub-dict wins over the flat keys
    head = lac.get("head_dim", h.get("linear_head_dim"))
    heads = lac.get("num_heads", h.get("linear_num_heads"))
    kernel = lac.get("short_conv_kernel_size", h.get("linear_conv_kernel_dim"))
    types = h.get("layer_types")
    if types is None:
        types = (_one_based(lac, n) if "full_attn_layers" in lac and "kda_layers" in lac else
                 ["full_attention" if i and i % 4 == 0 else "linear_attention"
                  for i in range(n)])
    h.get("head_dim")  # DeepseekV3Config.__post_init__ overwrites it with qk_rope_head_dim
    _layers(h, f, types, heads, head, kernel)
    f["positions"] = "none"


def _layers(h: HF, f: Fields, types: Any, heads: Any, head: Any, kernel: Any) -> None:
    """Each layer's mixer (`types`, checked), its MLP (mlp_layer_types, else dense on the first
    first_k_dense_replace layers), MLA's fields and KDA's sizes (H heads of D_k)."""
    n = f["n_layers"]
    types = _types("layer_types", types, n, tuple(MIXERS))
    mlp, first = h.get("mlp_layer_types"), h.get("first_k_dense_replace")  # the list wins
    if mlp is None:
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise ShapecalcError("first_k_dense_replace", f"must be a whole number ≥ 0, not "
                                 f"{first!r}")
        mlp = ["dense" if i < first else "sparse" for i in range(n)]
    mlp = _types("mlp_layer_types", mlp, n, ("dense", "sparse"))
    _latent(h, f)
    kinds = tuple("moe" if t == "sparse" else "dense" for t in mlp)
    f.update(head_dim=None, mixer_types=tuple(MIXERS[t] for t in types),
             ffn_types=kinds if "dense" in kinds else None)
    if "sparse" not in mlp:  # a dense model: the MoE's fields go
        for k in ("n_experts", "experts_per_token", "d_ff_expert", "routed_scaling_factor"):
            f.pop(k, None)
        f.update(n_shared_experts=0, ffn_types=None)
    if "kda" in f["mixer_types"]:
        if not isinstance(head, int) or isinstance(head, bool) or head < 1:
            raise ShapecalcError("head_dim", f"KDA's head width must be a positive integer, "
                                 f"not {head!r}")
        f.update(gdn_qk_heads=heads, gdn_v_heads=heads, gdn_qk_dim=head, gdn_v_dim=head,
                 conv_kernel=kernel, scan_chunk=CHUNK)


@mechanism("layer_types", "layer_group_size", "mlp_layer_types", "first_k_dense_replace",
           "head_dim", "short_conv_kernel_size", "kda_safe_gate", "kda_lower_bound",
           "rope_parameters", "rope_theta",
           *("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
             "attention_bias"))
def bailing_hybrid(h: HF, f: Fields) -> None:
    """BailingHybridDecoderLayer (Kimi-Linear's): KDA with full-rank gates (f_proj, g_proj
    [D → H·D_k]) and, with kda_safe_gate, the bounded forget gate g = kda_lower_bound·
    σ(e^{A_log}·(f + b_dt)); or MLA with RoPE on k_rope and q_rope and a head-wise output gate
    [D → H]. The last layer of each group of layer_group_size attends; H KDA heads of head_dim
    (read before __post_init__ sets head_dim to qk_rope_head_dim)."""
    n = f["n_layers"]
    types, g = h.get("layer_types"), h.get("layer_group_size")  # the list wins
    if types is None:
        if not isinstance(g, int) or isinstance(g, bool) or g < 1:
            raise ShapecalcError("layer_group_size", f"must be a positive integer, not {g!r}")
        types = ["full_attention" if (i + 1) % g == 0 else "linear_attention" for i in range(n)]
    _layers(h, f, types, f["n_heads"], h.get("head_dim"), h.get("short_conv_kernel_size"))
    safe, bound = h.get("kda_safe_gate"), h.get("kda_lower_bound")
    if safe and not (isinstance(bound, (int, float)) and bound < 0):
        raise ShapecalcError("kda_lower_bound", f"must be a negative number (the forget gate's "
                             f"log-decay lies in (bound, 0)), not {bound!r}")
    rp, flat = h.get("rope_parameters"), h.get("rope_theta")
    theta = rp.get("rope_theta") if isinstance(rp, dict) and rp.get("rope_theta") else flat
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or theta <= 0:
        raise ShapecalcError("rope_theta", f"must be a positive number (the MLA layers' RoPE "
                             f"base), not {theta!r}")
    f.update(positions="rope", rope_base=float(theta), attn_head_gate=True, kda_low_rank=False,
             kda_gate_bound=float(bound) if safe and "kda" in f["mixer_types"] else None)


@mechanism("num_local_experts", "num_experts", "num_experts_per_tok", "num_experts_per_token",
           "n_shared_experts", "num_shared_experts", "norm_topk_prob", "moe_renormalize",
           "n_group", "num_expert_group", "topk_group", "moe_intermediate_size",
           "routed_scaling_factor")
def kimi_moe(h: HF, f: Fields) -> None:
    """KimiLinearMoE (DeepSeek-V3's): E experts of Dff_e, k per token chosen by sigmoid scores
    plus a correction bias (a buffer) within the topk_group best of n_group groups, and one
    MLP of n_shared × Dff_e every token goes through. Groups change no count, but must split
    the experts evenly (scores.view(−1, n_group, E / n_group))."""
    experts, k = h.one_of("num_local_experts"), h.one_of("num_experts_per_tok")
    groups, top = h.one_of("n_group"), h.get("topk_group")
    if not isinstance(experts, int) or experts < 1:
        raise ShapecalcError("num_experts", f"must be a positive integer, not {experts!r}")
    if not isinstance(groups, int) or groups < 1 or experts % groups:
        raise ShapecalcError("num_expert_group", f"{groups!r} groups do not split the "
                             f"{experts} experts evenly")
    if not isinstance(top, int) or not 1 <= top <= groups:
        raise ShapecalcError("topk_group", f"{top!r} is not a number of groups from 1 to "
                             f"{groups}")
    width = h.get("moe_intermediate_size")
    f.update(n_experts=experts, experts_per_token=k,
             d_ff_expert=None if width == f["d_ff"] else width,
             n_shared_experts=h.one_of("n_shared_experts") or 0, router_scoring="sigmoid",
             norm_topk_prob=bool(h.one_of("norm_topk_prob")),
             routed_scaling_factor=h.get("routed_scaling_factor"))
