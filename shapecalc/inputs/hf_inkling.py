"""Inkling (issue 19), as transformers 5.24's InklingTextConfig and modeling_inkling.py define its
text decoder (model_type inkling_text; a multimodal inkling_mm_model config is read through its
text_config, the vision and audio towers not counted): every layer attention with four short
convs, a relative position bias from the hidden states (log-scaled on the full layers from
log_scaling_n_floor on), per-layer-type heads (layer_widths), and a dense MLP or a MoE whose
shared experts join the router's softmax (model/inkling.py). INKLING holds the entry, joined
to the table by hf_families.py."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from ..model.widths import LayerWidths
from .hf_base import HF, Family, Fields, Refusal, mechanism

INKLING_TYPES = {"hybrid": "full", "hybrid_sliding": "sliding"}  # InklingTextModel's masks
MLP_TYPES = {"dense": "dense", "sparse": "moe"}


def _pattern(h: HF, key: str, n: int, kinds: dict[str, str], default: list[str]) -> list[str]:
    """A per-layer list of `kinds` under `key` (default `default`), N long."""
    v = h.get(key)
    if v is None:
        return default
    if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
        raise ShapecalcError(key, f"must be a list of layer types, not {v!r}")
    bad = next((t for t in v if t not in kinds), None)
    if bad is not None:
        raise ShapecalcError(key, f"{bad!r} is not one of {', '.join(kinds)}")
    if len(v) != n:
        raise ShapecalcError(key, f"lists {len(v)} layers, but num_hidden_layers is {n}")
    return v


def _count(h: HF, key: str, fallback: Any = None) -> int:
    v = h.one_of(key, fallback) if h.family and key in h.family.aliases else h.get(key, fallback)
    if type(v) is not int or v < 1:
        raise ShapecalcError(key, f"must be a positive integer, not {v!r}")
    return v


def _layers(h: HF, n: int) -> tuple[list[str], list[str]]:
    """(layer_types, mlp_layer_types) as InklingTextConfig.__post_init__ derives them: every
    layer whose index + 1 is not a multiple of 6 sliding unless local_layer_ids names them;
    the first dense_mlp_idx layers dense, the rest sparse."""
    local = h.get("local_layer_ids")
    if local is not None and (not isinstance(local, list) or not all(
            type(i) is int and 0 <= i < n for i in local)):
        raise ShapecalcError("local_layer_ids", f"must list layer indices below {n}, not "
                             f"{local!r}")
    ids = set(local) if local is not None else {i for i in range(n) if (i + 1) % 6}
    types = _pattern(h, "layer_types", n, INKLING_TYPES,
                     ["hybrid_sliding" if i in ids else "hybrid" for i in range(n)])
    dense = h.get("dense_mlp_idx", 0)
    if type(dense) is not int or dense < 0:
        raise ShapecalcError("dense_mlp_idx", f"must be an integer ≥ 0, not {dense!r}")
    mlps = _pattern(h, "mlp_layer_types", n, MLP_TYPES,
                    ["dense" if i < dense else "sparse" for i in range(n)])
    return types, mlps


@mechanism("vocab_size", "unpadded_vocab_size", "hidden_size", "num_hidden_layers",
           "num_attention_heads", "num_key_value_heads", "head_dim", "swa_num_attention_heads",
           "swa_num_key_value_heads", "swa_head_dim", "sliding_window_size", "d_rel",
           "rel_extent", "local_layer_ids", "layer_types", "max_position_embeddings",
           "conv_kernel_size", "mlp_layer_types", "dense_mlp_idx", "dense_intermediate_size",
           "intermediate_size", "moe_intermediate_size", "n_routed_experts",
           "num_experts_per_tok", "n_shared_experts", "route_scale",
           "logits_mup_width_multiplier", "log_scaling_n_floor", "log_scaling_alpha")
def inkling(h: HF, f: Fields) -> None:
    """InklingDecoderLayer: RMSNorm, InklingAttention (q_proj; k_proj and v_proj each through a
    residual fp32 short conv; r_proj [D → H·d_rel] and the rel_logits_proj profiles [d_rel,
    rel_extent], a sliding layer's over its window; q/k RMSNorms over Dh; scale 1/Dh; o_proj),
    attn_sconv, RMSNorm, InklingMLP (× global_scale) or InklingMoE (InklingTopkRouter over
    n_routed_experts + n_shared_experts, InklingExperts, InklingSharedExperts), mlp_sconv.
    The embeddings RMS-normed; the head reads h / logits_mup_width_multiplier, never tied."""
    n = h.need("num_hidden_layers", "N")
    types, mlps = _layers(h, n)
    vocab = h.need("vocab_size", "N_vocab")
    unpadded = h.get("unpadded_vocab_size")  # logits past it are dropped: a view, no count
    if unpadded is not None and (type(unpadded) is not int or not 1 <= unpadded <= vocab):
        raise ShapecalcError("unpadded_vocab_size", f"must be an integer in 1..{vocab}, not "
                             f"{unpadded!r}")
    heads, kv, dh = (_count(h, k) for k in ("num_attention_heads", "num_key_value_heads",
                                              "head_dim"))
    swa = tuple(_count(h, k) for k in ("swa_num_attention_heads", "swa_num_key_value_heads",
                                       "swa_head_dim"))
    for (k, hq, hk) in (("num_key_value_heads", heads, kv),
                        ("swa_num_key_value_heads", swa[0], swa[1])):
        if hq % hk:
            raise ShapecalcError(k, f"{hk} KV heads do not divide {hq} query heads")
    slides = "hybrid_sliding" in types
    window = _count(h, "sliding_window_size") if slides else None
    dff = _count(h, "intermediate_size")
    dffe = _count(h, "moe_intermediate_size")
    if h.get("dense_intermediate_size") is not None:  # then intermediate_size is the experts'
        dff, dffe = _count(h, "dense_intermediate_size"), dff
    mup = h.one_of("logits_mup_width_multiplier")
    if isinstance(mup, bool) or not isinstance(mup, (int, float)) or mup <= 0:
        raise ShapecalcError("logits_mup_width_multiplier", f"must be a positive number, not "
                             f"{mup!r}")
    floor, alpha = h.get("log_scaling_n_floor"), h.get("log_scaling_alpha")
    if floor is not None:  # the full layers' logarithmic logit scaling
        if type(floor) is not int or floor < 1:
            raise ShapecalcError("log_scaling_n_floor", f"must be a positive integer, not "
                                 f"{floor!r}")
        if alpha < 0:
            raise ShapecalcError("log_scaling_alpha", f"must be ≥ 0, not {alpha!r}")
        f.update(log_scaling_floor=floor, log_scaling_alpha=float(alpha))
    moe = "sparse" in mlps
    if moe:
        scale = h.get("route_scale")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise ShapecalcError("route_scale", f"must be a positive number, not {scale!r}")
        f.update(n_experts=_count(h, "n_routed_experts"),
                 experts_per_token=_count(h, "num_experts_per_tok"), d_ff_expert=dffe,
                 n_shared_experts=_count(h, "n_shared_experts"),
                 routed_scaling_factor=float(scale))
    # the sliding layers' own H, H_kv and Dh, in the one per-layer mechanism (layer_widths)
    own = {k: tuple(w if t == "hybrid_sliding" else g for t in types)
           for k, g, w in zip(("n_heads", "n_kv_heads", "head_dim"), (heads, kv, dh), swa,
                              strict=True) if slides and w != g}
    f["layer_widths"] = LayerWidths(**own) if own else None
    f.update(vocab_size=vocab, d_model=h.need("hidden_size", "D"), n_layers=n, n_heads=heads,
             n_kv_heads=kv, head_dim=dh, d_ff=dff, ffn="swiglu", norm="rmsnorm",
             positions="none", max_positions=_count(h, "max_position_embeddings"),
             tie_embeddings=False, embedding_norm=True, logit_scale=1 / mup,
             layer_types=tuple(INKLING_TYPES[t] for t in types), sliding_window=window,
             ffn_types=tuple(MLP_TYPES[t] for t in mlps), mixer_types=("inkling",) * n,
             conv_kernel=_count(h, "conv_kernel_size"), rel_dim=_count(h, "d_rel"),
             rel_extent=_count(h, "rel_extent"))


# InklingTextConfig's defaults (transformers 5.24; its docstring names thinkingmachines/Inkling)
_INKLING = dict(vocab_size=201024, unpadded_vocab_size=None, hidden_size=6144,
                num_hidden_layers=66, num_attention_heads=64, num_key_value_heads=8,
                head_dim=128, swa_num_attention_heads=64, swa_num_key_value_heads=16,
                swa_head_dim=128, sliding_window_size=512, d_rel=16, rel_extent=1024,
                log_scaling_n_floor=None, log_scaling_alpha=0.1, local_layer_ids=None,
                layer_types=None, max_position_embeddings=131072, conv_kernel_size=4,
                mlp_layer_types=None, dense_mlp_idx=0, dense_intermediate_size=None,
                intermediate_size=24576, hidden_act="silu", moe_intermediate_size=3072,
                n_routed_experts=256, num_experts_per_tok=6, n_shared_experts=2,
                shared_expert_sink=True, route_scale=8.0, logits_mup_width_multiplier=24.0,
                num_mtp_layers=None)

INKLING: tuple[Family, ...] = (
    Family("inkling_text", "Inkling: attention with short convs on k, v and both branches, a "
           "relative bias from the hidden states, own sliding-layer heads, shared experts in the "
           "router's softmax", (inkling,), _INKLING,
           aliases={"sliding_window_size": ("sliding_window",),
                    "n_routed_experts": ("num_local_experts",),
                    "conv_kernel_size": ("sconv_kernel_size",),
                    "max_position_embeddings": ("model_max_length",),
                    "logits_mup_width_multiplier": ("embedding_multiplier",)},
           refuse={"hidden_act": Refusal(("silu",), "Inkling's MLPs and experts are modelled as "
                                         "SwiGLU (silu), not {value!r}", "silu")},
           # shared_expert_sink: the modeling code always scores the shared experts; the MTP
           # layers: InklingForCausalLM builds none (their checkpoint weights are dropped);
           # tie_word_embeddings: never tied (_tied_weights_keys is empty);
           # number_of_conv_states: __post_init__ sets 4 whatever is given
           ignored=frozenset(("shared_expert_sink", "num_mtp_layers",
                              "chain_hidden_post_norm", "mtp_hidden_states_first",
                              "mtp_local_layer_ids", "tie_word_embeddings",
                              "number_of_conv_states")),
           widths=dict(vocab_size=201024, hidden_size=6144, num_hidden_layers=66)),
)
