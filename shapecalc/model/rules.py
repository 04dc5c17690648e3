"""The rules between a model's fields, one function per variant (MoE, MLA, Llama 4, the classic
families): ModelConfig checks them after its own, so that downstream code trusts its input. Each
rule names the field it refuses and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ShapecalcError

if TYPE_CHECKING:
    from .model_fields import ModelFields


def check_llama4(m: ModelFields) -> None:
    chunked = m.layer_types is not None and "chunked" in m.layer_types
    if chunked and m.attention_chunk_size is None:
        raise ShapecalcError("layer_types", "chunked layers need attention_chunk_size (C)")
    if m.attention_chunk_size is not None:
        if m.layer_types is not None and not chunked:
            raise ShapecalcError("attention_chunk_size", "is set, but no layer in "
                                 "layer_types is chunked")
        if m.layer_types is None and m.sliding_window is not None:
            raise ShapecalcError("attention_chunk_size", "and sliding_window both set: "
                                 "layer_types must say which layers are chunked")
    for f in ("nope_layers", "qk_l2_norm", "attn_temperature_tuning"):
        if getattr(m, f) not in (None, False) and m.positions != "rope":
            raise ShapecalcError(f, f"applies to RoPE models; positions is {m.positions!r}")
    if m.nope_layers is not None:
        bad = [i for i in m.nope_layers if i >= m.n_layers]
        if bad:
            raise ShapecalcError("nope_layers", f"layer {bad[0]} does not exist "
                                 f"(N={m.n_layers})")
        if len(set(m.nope_layers)) != len(m.nope_layers):
            raise ShapecalcError("nope_layers", "lists a layer twice")
    if m.routing_on_input and m.n_experts is None:
        raise ShapecalcError("routing_on_input", "is a Mixture-of-Experts field, but "
                             "n_experts is not set")

def check_classic(m: ModelFields) -> None:
    rope = m.positions == "rope"
    for f in ("rotary_dim", "rope_interleaved"):
        if getattr(m, f) not in (None, False) and not rope:
            raise ShapecalcError(f, "needs positions rope")
    if m.rotary_dim is not None and (m.rotary_dim > m.dh or m.rotary_dim % 2):
        raise ShapecalcError("rotary_dim", f"R={m.rotary_dim} must be even and at most "
                             f"Dh={m.dh} (RoPE rotates pairs of a head's dims)")
    if m.parallel_norms == 2 and not m.parallel_block:
        raise ShapecalcError("parallel_norms", "2 norms are a parallel block's; set "
                             "parallel_block")
    if m.qk_norm_per_head and m.qk_norm:
        raise ShapecalcError("qk_norm_per_head", "q and k take one norm: qk_norm or "
                             "qk_norm_per_head, not both")
    if m.residual_multiplier is not None and m.parallel_block:
        raise ShapecalcError("residual_multiplier", "scales each branch of a sequential "
                             "block; a parallel block with it is not modelled")

def check_mla(m: ModelFields) -> None:
    mla_fields = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if not m.mla:
        given = [f for f in mla_fields if getattr(m, f) is not None]
        if given:
            raise ShapecalcError(given[0], "is a Multi-head Latent Attention field, but "
                                 "kv_lora_rank is not set")
        return
    for f in mla_fields[1:]:
        if getattr(m, f) is None:
            raise ShapecalcError(f, "Multi-head Latent Attention (kv_lora_rank set) needs it")
    # MLA fixes the head widths and has no separate K/V heads: these would be contradictions
    clashes = {"head_dim": m.head_dim is not None, "n_kv_heads": m.n_kv_heads not in (
        None, m.n_heads), "fused_qkv": m.fused_qkv, "qk_norm": m.qk_norm,
        "attention_sinks": m.attention_sinks, "parallel_block": m.parallel_block,
        # windows, chunks and Llama 4's q/k variants are not modelled with MLA
        "sliding_window": m.sliding_window is not None,
        "attention_chunk_size": m.attention_chunk_size is not None,
        "nope_layers": m.nope_layers is not None, "qk_l2_norm": m.qk_l2_norm,
        "attn_temperature_tuning": m.attn_temperature_tuning,
        "positions": m.positions not in ("rope", "none"),
        "rotary_dim": m.rotary_dim is not None}
    for f, bad in clashes.items():
        if bad:
            raise ShapecalcError(f, "does not apply to Multi-head Latent Attention "
                                 "(kv_lora_rank set)")
    if m.positions == "rope" and m.rot % 2:
        raise ShapecalcError("qk_rope_head_dim", f"RoPE rotates pairs, so D_r="
                             f"{m.rot} must be even")

def check_moe(m: ModelFields) -> None:
    moe_fields = ("experts_per_token", "d_ff_expert", "d_ff_shared", "shared_expert_gate",
                  "router_bias", "expert_bias", "norm_topk_prob", "routed_scaling_factor")
    if m.n_experts is None:
        given = [f for f in moe_fields if getattr(m, f) not in (None, False)]
        given += ["n_shared_experts"] if m.n_shared_experts else []
        given += ["router_scoring"] if m.router_scoring != "softmax" else []
        if given:
            raise ShapecalcError(given[0], "is a Mixture-of-Experts field, but n_experts "
                                 "is not set")
        if m.ffn_types is not None and "moe" in m.ffn_types:
            raise ShapecalcError("ffn_types", "moe layers need n_experts (E)")
        return
    if m.experts_per_token is None:
        raise ShapecalcError("experts_per_token", "a Mixture-of-Experts model needs k")
    if m.experts_per_token > m.n_experts:
        raise ShapecalcError("experts_per_token", f"k={m.experts_per_token} exceeds "
                             f"E={m.n_experts} experts")
    if m.shared_expert_gate and not m.n_shared_experts:
        raise ShapecalcError("shared_expert_gate", "gates shared experts; n_shared_experts "
                             "is 0")
    if m.ffn_types is not None:
        if len(m.ffn_types) != m.n_layers:
            raise ShapecalcError("ffn_types", f"lists {len(m.ffn_types)} layers, but "
                                 f"N={m.n_layers}")
        if "moe" not in m.ffn_types:
            raise ShapecalcError("n_experts", "is set, but no layer in ffn_types is moe")
    if m.parallel_block:
        raise ShapecalcError("parallel_block", "a parallel block with Mixture-of-Experts "
                             "layers is not modelled")


def check_gemma(m: ModelFields) -> None:
    """Gemma 2/3 and OLMo 2."""
    if m.qk_norm_width != "head" and not m.qk_norm:
        raise ShapecalcError("qk_norm_width", "is set, but qk_norm is false")
    if m.norm_plus_one and m.norm != "rmsnorm":
        raise ShapecalcError("norm_plus_one", f"(1+γ) is Gemma's RMSNorm; norm is {m.norm}")
    if m.rope_base_local is not None and m.positions != "rope":
        raise ShapecalcError("rope_base_local", f"needs RoPE, not {m.positions}")


MAMBA2_FIELDS = ("ssm_heads", "ssm_head_dim", "ssm_state")
GDN_FIELDS = ("gdn_qk_heads", "gdn_v_heads", "gdn_qk_dim", "gdn_v_dim")
CCA_FIELDS = ("cca_time0", "cca_time1")
SCAN_FIELDS = ("conv_kernel", "scan_chunk")  # both stateful mixers' convolution and chunk


def _fields_of(m: ModelFields, kind: str, fields: tuple[str, ...], extra: list[str]) -> None:
    """A mixer's fields: all given when a layer has it, none otherwise."""
    if kind not in m.mixers:
        given = [f for f in fields if getattr(m, f) is not None] + extra
        if given:
            raise ShapecalcError(given[0], f"is a {kind} field, but no layer in mixer_types "
                                 f"is {kind}")
        return
    for f in fields:
        if getattr(m, f) is None:
            raise ShapecalcError(f, f"{kind} layers (mixer_types) need it")


def check_mixers(m: ModelFields) -> None:
    """The token mixers: a pattern of N layers; each stateful mixer's sizes when a layer has it,
    none otherwise; G dividing H_s, H_qk dividing H_v."""
    if m.mixer_types is not None and len(m.mixer_types) != m.n_layers:
        raise ShapecalcError("mixer_types", f"lists {len(m.mixer_types)} layers, but "
                             f"N={m.n_layers}")
    if m.ffn_types is not None and len(m.ffn_types) != m.n_layers:
        raise ShapecalcError("ffn_types", f"lists {len(m.ffn_types)} layers, but N={m.n_layers}")
    _fields_of(m, "mamba2", MAMBA2_FIELDS, ["ssm_groups"] if m.ssm_groups != 1 else [])
    _fields_of(m, "gated_deltanet", GDN_FIELDS, [])
    stateful = {"mamba2", "gated_deltanet"} & set(m.mixers)
    if "short_conv" in m.mixers and m.conv_kernel is None:  # one form: no chunk
        raise ShapecalcError("conv_kernel", "short_conv layers (mixer_types) need it")
    for f in SCAN_FIELDS:
        if f == "conv_kernel" and "short_conv" in m.mixers:
            continue
        if stateful and getattr(m, f) is None:
            raise ShapecalcError(f, f"{min(stateful)} layers (mixer_types) need it")
        if not stateful and getattr(m, f) is not None:
            raise ShapecalcError(f, "is a stateful mixer's field, but no layer in mixer_types "
                                 "is mamba2 or gated_deltanet")
    if "mamba2" in m.mixers and m.ssm_heads % m.ssm_groups:  # type: ignore[operator]
        raise ShapecalcError("ssm_groups", f"G={m.ssm_groups} does not divide H_s="
                             f"{m.ssm_heads}: each group's B and C serve whole heads")
    if "gated_deltanet" in m.mixers and m.gdn_v_heads % m.gdn_qk_heads:  # type: ignore[operator]
        raise ShapecalcError("gdn_v_heads", f"H_qk={m.gdn_qk_heads} does not divide H_v="
                             f"{m.gdn_v_heads}: each q/k head serves whole value heads")
    if stateful or "short_conv" in m.mixers:
        # LFM3 puts its short convs in sandwich blocks (each branch's output normed too)
        ok = ("pre", "sandwich") if not stateful else ("pre",)
        for f in ("parallel_block", "norm_position"):
            if (m.parallel_block if f == "parallel_block" else m.norm_position not in ok):
                raise ShapecalcError(f, "stateful mixers are modelled in pre-norm sequential "
                                     "blocks")
    _fields_of(m, "cca", CCA_FIELDS, [])
    if "cca" in m.mixers:
        check_cca(m)
    for f in ("attn_output_gate", "attn_head_gate"):
        if getattr(m, f) and m.mla:
            raise ShapecalcError(f, "is not modelled with Multi-head Latent Attention")


def check_cca(m: ModelFields) -> None:
    """CCA's layers: attention whose q/k come from its own convs and norms, so the other q/k
    variants do not apply; its value halves need an even H_kv·Dh; a window of K_q ≥ 1 tokens."""
    if m.cca_time0 + m.cca_time1 < 3:  # type: ignore[operator]
        raise ShapecalcError("cca_time1", "K_d = K_g = 1: the conv keeps no past token "
                             "(K_q = K_d + K_g − 2 = 0), not modelled")
    if (m.kv_heads * m.dh) % 2:
        raise ShapecalcError("head_dim", f"CCA splits each value into two halves: H_kv·Dh = "
                             f"{m.kv_heads * m.dh} must be even")
    for f in ("kv_lora_rank", "qk_norm", "qk_norm_per_head", "qk_l2_norm", "fused_qkv",
              "attn_output_gate", "attn_head_gate", "parallel_block", "attention_sinks"):
        if getattr(m, f) not in (None, False):
            raise ShapecalcError(f, "does not apply to cca layers (their q/k come from CCA's "
                                 "convs and L2 norms)")
    if m.norm_position != "pre":
        raise ShapecalcError("norm_position", "cca layers are modelled in pre-norm blocks")


def check_zaya(m: ModelFields) -> None:
    """ZAYA's router is a Mixture-of-Experts router of its own; its residual scaling is modelled
    in pre-norm sequential blocks of attention (or CCA)."""
    if m.router_hidden is not None:
        if m.n_experts is None:
            raise ShapecalcError("router_hidden", "is ZAYA's MoE router, but n_experts is not "
                                 "set")
        for f in ("router_bias", "routing_bias", "n_shared_experts", "routing_on_input"):
            if getattr(m, f):
                raise ShapecalcError(f, "does not apply with ZAYA's router (router_hidden)")
        if m.router_scoring != "softmax":
            raise ShapecalcError("router_scoring", "ZAYA's router scores by softmax")
    if m.residual_scaling:
        if m.norm_position != "pre" or m.parallel_block:
            raise ShapecalcError("residual_scaling", "is modelled in pre-norm sequential blocks")
        other = set(m.mixers) - {"attention", "cca"}
        if other:
            raise ShapecalcError("residual_scaling", f"is modelled with attention and cca "
                                 f"layers, not {min(other)}")
