"""Hugging Face readers for the Mixture-of-Experts families, and dense Qwen3 (its attention).

`hf._llama_like` reads what these families share with Llama (widths, heads, KV heads, positions,
tied embeddings, the activation); each reader here returns what its family changes on top: the
attention (biases, q/k norms, sinks, per-layer windows) and the experts. Absent keys take the
class default of transformers 5.x; a key that changes shapes in a way shapecalc cannot express is
refused in one line, naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..model.config import ShapecalcError

if TYPE_CHECKING:
    from .hf import _HF

Fields = dict[str, Any]

# Each family's experts: the keys for E (aliases: what the config class's attribute_map sends to
# the same attribute), E's and k's class defaults, and the key and class default of a routed
# expert's width (None: the experts are intermediate_size wide).
_EXPERTS: dict[str, tuple[tuple[str, ...], int, int, str | None, int | None]] = {
    "mixtral": (("num_local_experts", "num_experts"), 8, 2, None, None),
    "phimoe": (("num_local_experts",), 16, 2, None, None),
    "qwen2_moe": (("num_experts",), 60, 4, "moe_intermediate_size", 1408),
    "qwen3_moe": (("num_experts", "num_local_experts"), 128, 8, "moe_intermediate_size", 768),
    "gpt_oss": (("num_local_experts", "num_experts"), 128, 4, None, None),
}
MOE = frozenset(_EXPERTS)  # the families with experts (Qwen3 has none)
_KINDS = {"sliding_attention": "sliding", "full_attention": "full"}


def _one_of(h: _HF, keys: tuple[str, ...], default: Any) -> Any:
    """The value of whichever of `keys` the config gives (they name one attribute), else default."""
    given = [(k, h.get(k)) for k in keys if h.get(k) is not None]
    for k, v in given[1:]:
        if v != given[0][1]:
            raise ShapecalcError(k, f"{v} contradicts {given[0][0]}={given[0][1]}")
    return given[0][1] if given else default


def _windows(types: list[str], window: int | None, n_layers: int) -> Fields:
    """HF layer_types → sliding_window and layer_types, saying only what differs from the
    default (no list when every layer is alike)."""
    other = [t for t in types if t not in _KINDS]
    if other:
        raise ShapecalcError(
            "layer_types", f"{other[0]!r} layers are not modelled; supported: {', '.join(_KINDS)}"
        )
    if len(types) != n_layers:
        raise ShapecalcError(
            "layer_types", f"lists {len(types)} layers, but num_hidden_layers is {n_layers}"
        )
    kinds = [_KINDS[t] for t in types]
    if "sliding" not in kinds:
        return dict(sliding_window=None, layer_types=None)
    if window is None:
        raise ShapecalcError(
            "layer_types", "has sliding layers, but no window (sliding_window null, or "
            "use_sliding_window false)"
        )
    return dict(sliding_window=window, layer_types=tuple(kinds) if "full" in kinds else None)


def _qwen_window(h: _HF) -> int | None:
    """Qwen2-MoE, Qwen3, Qwen3-MoE: sliding_window counts only when use_sliding_window."""
    return h.get("sliding_window", 4096) if h.get("use_sliding_window", False) else None


def _sparse_layers(h: _HF, n_layers: int) -> list[str]:
    """Qwen-MoE: layer i is MoE when not in mlp_only_layers and (i+1) % decoder_sparse_step == 0;
    the others have a dense MLP of intermediate_size."""
    step = h.get("decoder_sparse_step", 1)
    if not isinstance(step, int) or step < 1:
        raise ShapecalcError("decoder_sparse_step", f"must be a positive integer, not {step!r}")
    dense = set(h.get("mlp_only_layers") or [])
    return ["dense" if i in dense or (i + 1) % step else "moe" for i in range(n_layers)]


def _experts(h: _HF, mt: str, f: Fields, routing: Fields,
             ffn_types: list[str] | None = None) -> Fields:
    """E, k, a routed expert's width, the router's `routing` fields and the per-layer FFN kinds;
    {} when no layer is MoE (Qwen-MoE with num_experts 0: every MLP is dense)."""
    keys, e_default, k_default, width_key, width_default = _EXPERTS[mt]
    n_experts = _one_of(h, keys, e_default)
    kinds = ffn_types or ["moe"] * f["n_layers"]
    if mt in ("qwen2_moe", "qwen3_moe") and (not n_experts or "moe" not in kinds):
        return {}
    if not n_experts:
        raise ShapecalcError(keys[0], f"{n_experts!r}: a {mt} model needs experts")
    width = h.get(width_key, width_default) if width_key else None
    return dict(
        n_experts=n_experts,
        experts_per_token=h.get("num_experts_per_tok", k_default),
        d_ff_expert=None if width == f["d_ff"] else width,
        ffn_types=tuple(kinds) if "dense" in kinds else None,
        **routing,
    )


def _mixtral(h: _HF, f: Fields) -> Fields:
    # MistralAttention: no biases. Unlike MistralConfig, sliding_window defaults to None.
    # The router: softmax over E, top k, the k weights renormalised (always).
    return dict(sliding_window=h.get("sliding_window"),
                **_experts(h, "mixtral", f, dict(norm_topk_prob=True)))


def _phimoe(h: _HF, f: Fields) -> Fields:
    # LlamaAttention with attention_bias on q, k, v and o; nn.LayerNorm (γ and β) everywhere;
    # lm_head_bias. The router's sparsemixer picks k=2 by masked softmaxes: softmax scoring,
    # the weights not renormalised (its costs are counted as a softmax router's).
    bias = bool(h.get("attention_bias", False))
    return dict(
        qkv_bias=bias, attn_out_bias=bias, norm="layernorm",
        lm_head_bias=bool(h.get("lm_head_bias", False)),
        sliding_window=h.get("sliding_window"),  # class default None
        **_experts(h, "phimoe", f, {}),
    )


def _qwen2_moe(h: _HF, f: Fields) -> Fields:
    # q, k, v biased (the qkv_bias key, default true); o_proj not. Without layer_types, the
    # 5.x default slides the layers with (i+1) % 2 below max_window_layers, if use_sliding_window.
    n, window = f["n_layers"], _qwen_window(h)
    types = h.get("layer_types") or [
        "sliding_attention" if window is not None and (i + 1) % 2
        and i < h.get("max_window_layers", 28) else "full_attention"
        for i in range(n)
    ]
    # one shared expert per MoE layer, scaled by a sigmoid gate [D→1]
    shared = h.get("shared_expert_intermediate_size", 5632)
    width = h.get("moe_intermediate_size", 1408)
    routing = dict(n_shared_experts=1, shared_expert_gate=True,
                   d_ff_shared=None if shared == width else shared,
                   norm_topk_prob=bool(h.get("norm_topk_prob", False)))
    moe = _experts(h, "qwen2_moe", f, routing, _sparse_layers(h, n))
    if moe and not shared:
        raise ShapecalcError("shared_expert_intermediate_size", f"{shared!r}: an empty shared "
                             "expert (with its gate) is not modelled")
    return dict(qkv_bias=bool(h.get("qkv_bias", True)), **_windows(types, window, n), **moe)


def _qwen3_attention(h: _HF) -> Fields:
    # Qwen3Attention: RMSNorm over each head's Dh on q and k; attention_bias on q, k, v and o
    bias = bool(h.get("attention_bias", False))
    return dict(qk_norm=True, qkv_bias=bias, attn_out_bias=bias)


def qwen_windows(h: _HF, n: int) -> Fields:
    """Qwen2, Qwen3: without layer_types, the layers at or past max_window_layers slide, if
    use_sliding_window (transformers 5.x's default layer_types)."""
    window = _qwen_window(h)
    types = h.get("layer_types") or [
        "sliding_attention" if window is not None and i >= (h.get("max_window_layers", 28) or 0)
        else "full_attention" for i in range(n)
    ]
    return _windows(types, window, n)


def _qwen3(h: _HF, f: Fields) -> Fields:
    # head_dim defaults to 128 (not D/H)
    return dict(head_dim=h.get("head_dim", 128), **_qwen3_attention(h),
                **qwen_windows(h, f["n_layers"]))


def _qwen3_moe(h: _HF, f: Fields) -> Fields:
    # head_dim has no class default (absent: D/H). Qwen3MoeAttention ignores layer_types: with
    # use_sliding_window every layer slides. No shared expert.
    routing = dict(norm_topk_prob=bool(h.get("norm_topk_prob", False)))
    return dict(**_qwen3_attention(h), sliding_window=_qwen_window(h),
                **_experts(h, "qwen3_moe", f, routing, _sparse_layers(h, f["n_layers"])))


def _gpt_oss(h: _HF, f: Fields) -> Fields:
    # Biases on q, k, v, o (attention_bias, default true); a learned sink logit per head; layers
    # alternate sliding (even i) and full unless layer_types says; head_dim defaults to 64.
    # The router [D→E] has a bias; it takes the top k logits and softmaxes those k (the same
    # weights as a softmax over E renormalised over the k). The experts (with biases) apply a
    # clamped SwiGLU whatever hidden_act says (swiglu_alpha, swiglu_limit change no shape).
    # quantization_config (MXFP4 experts) is the weights' storage: choose it with --dtype.
    n = f["n_layers"]
    k = h.get("num_experts_per_tok", 4)
    if h.get("experts_per_token") not in (None, k):  # the original config's name, unread
        raise ShapecalcError("experts_per_token", f"{h.get('experts_per_token')} contradicts "
                             f"num_experts_per_tok={k} (the key transformers reads)")
    types = h.get("layer_types") or [
        "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)
    ]
    bias = bool(h.get("attention_bias", True))
    routing = dict(router_bias=True, expert_bias=True, norm_topk_prob=True)
    return dict(
        head_dim=h.get("head_dim", 64), qkv_bias=bias, attn_out_bias=bias, attention_sinks=True,
        ffn="swiglu", **_windows(types, h.get("sliding_window", 128), n),
        **_experts(h, "gpt_oss", f, routing),
    )


READERS: dict[str, Callable[[_HF, Fields], Fields]] = {
    "gpt_oss": _gpt_oss,
    "mixtral": _mixtral,
    "phimoe": _phimoe,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
}
