"""The mechanisms of the gated-DeltaNet hybrids: Qwen3-Next's layer types (gated DeltaNet or
gated attention), the DeltaNet sizes, and its attention's extras (an output gate, (1+γ) norms,
partial RoPE)."""

from __future__ import annotations

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, mechanism
from .hf_llama import rotary_fields

MIXERS = {"linear_attention": "gated_deltanet", "full_attention": "attention"}
CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size: Qwen3NextGatedDeltaNet never sets it


@mechanism("layer_types", "full_attention_interval", "linear_num_key_heads",
           "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
           "linear_conv_kernel_dim", "partial_rotary_factor",
           "rope_parameters.partial_rotary_factor", "rope_scaling.partial_rotary_factor")
def qwen3_next(h: HF, f: Fields) -> None:
    """Qwen3NextDecoderLayer: x + mixer(Norm(x)), then x + MLP(Norm(x)); the mixer gated
    DeltaNet (linear_attention) or attention (full_attention) with q_proj's second half an
    output gate, q/k norms over each head and (1+γ) RMSNorms (Qwen3NextRMSNorm)."""
    n = f["n_layers"]
    types = h.get("layer_types")
    if types is None:  # Qwen3NextConfig.__post_init__: every interval-th layer attends
        step = h.get("full_attention_interval", 4)
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise ShapecalcError("full_attention_interval", f"must be a positive integer, not "
                                 f"{step!r}")
        types = ["linear_attention" if (i + 1) % step else "full_attention" for i in range(n)]
    bad = next((t for t in types if t not in MIXERS), None)
    if bad is not None:
        raise ShapecalcError("layer_types", f"{bad!r} is not one of {', '.join(MIXERS)}")
    if len(types) != n:
        raise ShapecalcError("layer_types", f"lists {len(types)} layers, but "
                             f"num_hidden_layers is {n}")
    f.update(rotary_fields(h, f.get("head_dim") or f["d_model"] // f["n_heads"], 0.25),
             mixer_types=tuple(MIXERS[t] for t in types), attn_output_gate=True,
             norm_plus_one=True)
    if "gated_deltanet" in f["mixer_types"]:
        f.update(gdn_qk_heads=h.get("linear_num_key_heads"),
                 gdn_v_heads=h.get("linear_num_value_heads"),
                 gdn_qk_dim=h.get("linear_key_head_dim"),
                 gdn_v_dim=h.get("linear_value_head_dim"),
                 conv_kernel=h.get("linear_conv_kernel_dim"), scan_chunk=CHUNK)


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "moe_intermediate_size", "num_experts",
           "num_experts_per_tok", "shared_expert_intermediate_size")
def qwen3_5_moe(h: HF, f: Fields) -> None:
    """Qwen3.5-MoE's text model: every layer a sparse MoE (softmax top-k, always renormalised)
    with one shared expert and its sigmoid gate; no dense MLP, so no intermediate_size (Dff
    reads as Dff_e)."""
    heads = h.need("num_attention_heads", "H")
    de = h.need("moe_intermediate_size", "Dff_e")
    shared = h.need("shared_expert_intermediate_size", "Dff_s")
    f.update(vocab_size=h.need("vocab_size", "N_vocab"), d_model=h.need("hidden_size", "D"),
             n_layers=h.need("num_hidden_layers", "N"), n_heads=heads,
             n_kv_heads=h.get("num_key_value_heads") or heads, head_dim=h.get("head_dim"),
             d_ff=de, norm="rmsnorm", positions="rope", n_experts=h.need("num_experts", "E"),
             experts_per_token=h.need("num_experts_per_tok", "k"), n_shared_experts=1,
             d_ff_shared=None if shared == de else shared, shared_expert_gate=True,
             norm_topk_prob=True)


def _olmo_types(h: HF, n: int) -> list[str]:
    """OlmoHybridConfig's layer types: given, or every 4th layer (from the 4th) full attention,
    the last one if none is; at least one of each kind (its validate_architecture)."""
    types = h.get("layer_types")
    if types is None:
        types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n)]
        types[-1] = types[-1] if "full_attention" in types else "full_attention"
    if not isinstance(types, list):
        raise ShapecalcError("layer_types", f"must list each layer's type, not {types!r}")
    bad = next((t for t in types if t not in MIXERS), None)
    if bad is not None:
        raise ShapecalcError("layer_types", f"{bad!r} is not one of {', '.join(MIXERS)}")
    if len(types) != n:
        raise ShapecalcError("layer_types", f"lists {len(types)} layers, but "
                             f"num_hidden_layers is {n}")
    if len(set(types)) < 2:
        raise ShapecalcError("layer_types", f"all {types[0]}: OLMo-Hybrid needs at least one "
                             "linear_attention and one full_attention layer")
    return types


@mechanism("layer_types", "linear_num_key_heads", "linear_num_value_heads",
           "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
           "linear_allow_neg_eigval", "rope_parameters", "rope_theta")
def olmo_hybrid(h: HF, f: Fields) -> None:
    """OlmoHybrid's layers: gated DeltaNet (linear_attention) in a Llama pre-norm block, or
    OLMo 3's attention (full_attention: whole-width q/k norms, its output and the MLP's normed
    before the residual); the DeltaNet's q, k, v, a, b and its gate g each their own projection
    (Qwen3.5's unfused counts), β = 2·σ(b) with linear_allow_neg_eigval. RoPE only when a
    rope_theta is set: the released checkpoint sets none (NoPE)."""
    n, heads, d = f["n_layers"], f["n_heads"], f["d_model"]
    types = _olmo_types(h, n)
    hk = h.get("linear_num_key_heads") or heads  # OlmoHybridConfig.__post_init__'s defaults
    hv = h.get("linear_num_value_heads") or heads
    dk = h.get("linear_key_head_dim") or int(0.75 * d / hk)
    dv = h.get("linear_value_head_dim") or 2 * dk
    rp, flat = h.get("rope_parameters"), h.get("rope_theta")
    nope = (isinstance(rp, dict) and "rope_theta" in rp and rp["rope_theta"] is None) or (
        "rope_theta" in h.cfg and flat is None)
    theta = rp.get("rope_theta") if isinstance(rp, dict) else flat
    f.update(mixer_types=tuple(MIXERS[t] for t in types), positions="none" if nope else "rope",
             rope_base=float(theta) if theta is not None else 10000.0,
             gdn_qk_heads=hk, gdn_v_heads=hv, gdn_qk_dim=dk, gdn_v_dim=dv,
             conv_kernel=h.get("linear_conv_kernel_dim"), scan_chunk=CHUNK,
             gdn_neg_eigval=bool(h.get("linear_allow_neg_eigval")))
