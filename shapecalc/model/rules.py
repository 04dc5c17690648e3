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
    beta, floor = m.q_temperature_beta, m.q_temperature_floor
    if (beta is None) != (floor is None):
        raise ShapecalcError("q_temperature_beta" if beta is None else "q_temperature_floor",
                             "the query temperature needs both q_temperature_beta and "
                             "q_temperature_floor")
    if beta is not None and (beta < 0 or m.positions != "rope" or m.mla):
        raise ShapecalcError("q_temperature_beta", "must be ≥ 0, on a RoPE model without MLA")
    if m.routing_on_input and m.n_experts is None:
        raise ShapecalcError("routing_on_input", "is a Mixture-of-Experts field, but "
                             "n_experts is not set")

def check_classic(m: ModelFields) -> None:
    rope = m.positions == "rope"
    for f in ("rotary_dim", "rope_interleaved", "rotary_dim_local"):
        if getattr(m, f) not in (None, False) and not rope:
            raise ShapecalcError(f, "needs positions rope")
    if m.rotary_dim is not None and (m.rotary_dim > m.dh or m.rotary_dim % 2):
        raise ShapecalcError("rotary_dim", f"R={m.rotary_dim} must be even and at most "
                             f"Dh={m.dh} (RoPE rotates pairs of a head's dims)")
    local = m.rotary_dim_local
    if local is not None and (local > m.dh or local % 2 or m.mla):
        raise ShapecalcError("rotary_dim_local", f"R={local} must be even and at most Dh={m.dh}, "
                             "without MLA")
    if m.parallel_norms == 2 and not m.parallel_block:
        raise ShapecalcError("parallel_norms", "2 norms are a parallel block's; set "
                             "parallel_block")
    if m.qk_norm_per_head and m.qk_norm:
        raise ShapecalcError("qk_norm_per_head", "q and k take one norm: qk_norm or "
                             "qk_norm_per_head, not both")
    if not m.norm_weights and (m.norm != "rmsnorm" or m.has_norm_bias or m.norm_plus_one):
        raise ShapecalcError("norm_weights", "false makes every norm a parameter-free RMSNorm: "
                             "it needs norm rmsnorm, without norm_bias or norm_plus_one")
    if m.ffn == "xielu" and m.n_experts is not None:  # its α_p, α_n per expert: not modelled
        raise ShapecalcError("ffn", "xielu is a dense FFN's activation; experts with it are "
                             "not modelled")
    if m.residual_multiplier is not None and m.parallel_block:
        raise ShapecalcError("residual_multiplier", "scales each branch of a sequential "
                             "block; a parallel block with it is not modelled")
    if m.swiglu_limit is not None and m.ffn != "swiglu":
        raise ShapecalcError("swiglu_limit", f"clamps a SwiGLU's gate and up; ffn is {m.ffn}")
    if m.swiglu_limit_routed_only and (m.swiglu_limit is None or m.n_experts is None):
        raise ShapecalcError("swiglu_limit_routed_only", "needs swiglu_limit and routed experts")


DSA_FIELDS = ("index_topk", "index_heads", "index_head_dim")  # DeepSeek Sparse Attention's


def check_mla(m: ModelFields) -> None:
    mla_fields = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if not m.mla:
        given = [f for f in (*mla_fields, *DSA_FIELDS) if getattr(m, f) is not None
                 and not (f == "q_lora_rank" and m.shared_kv)  # DeepSeek-V4's q latent
                 and f != "v_head_dim"]  # attention's own value width (check_sliding_heads)
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
        "parallel_block": m.parallel_block,
        # chunks and Llama 4's q/k variants are not modelled with MLA (windows are: dots3)
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
    check_dsa(m)


def check_dsa(m: ModelFields) -> None:
    """DeepSeek Sparse Attention: its indexer reads the query latent and turns D_r of D_I."""
    if not any(getattr(m, f) is not None for f in DSA_FIELDS):
        return
    for f in DSA_FIELDS:
        if getattr(m, f) is None:
            raise ShapecalcError(f, "DeepSeek Sparse Attention (index_topk set) needs it")
    if m.q_lora_rank is None:
        raise ShapecalcError("q_lora_rank", "the lightning indexer's queries come from the query "
                             "latent (q_lora_rank), so DeepSeek Sparse Attention needs one")
    shared = m.index_shared_layers or ()
    if shared and (0 in shared or max(shared) >= m.n_layers):
        raise ShapecalcError("index_shared_layers", f"{sorted(shared)}: each must be a layer "
                             f"1..{m.n_layers - 1}, after an indexer layer whose selection it "
                             "reuses")
    if m.index_head_dim < m.rot:  # type: ignore[operator]
        raise ShapecalcError("index_head_dim", f"{m.index_head_dim} is narrower than the "
                             f"D_r={m.rot} RoPE dims the indexer turns")


def check_moe(m: ModelFields) -> None:
    moe_fields = ("experts_per_token", "d_ff_expert", "d_ff_shared", "shared_expert_gate",
                  "router_bias", "expert_bias", "norm_topk_prob", "routed_scaling_factor")
    if m.n_experts is None:
        given = [f for f in (*moe_fields, "router_softcap", "hash_moe_layers")
                 if getattr(m, f) not in (None, False, 0)]
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
    moe_layers = (m.ffn_types or ("moe",) * m.n_layers).count("moe")
    if m.hash_moe_layers > moe_layers:
        raise ShapecalcError("hash_moe_layers", f"{m.hash_moe_layers} hash-routed layers, but "
                             f"{moe_layers} MoE layers")
    if m.hash_moe_layers and m.router_scoring == "topk_sigmoid":
        raise ShapecalcError("hash_moe_layers", "hash routing scores every expert; "
                             "topk_sigmoid scores only the top k")


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
MAMBA1_FIELDS = ("mamba_expand", "mamba_dt_rank", "ssm_state")  # N_s: Mamba-2's too
CCA_FIELDS = ("cca_time0", "cca_time1")
SCAN_FIELDS = ("conv_kernel", "scan_chunk")  # both stateful mixers' convolution and chunk


def _fields_of(m: ModelFields, kind: str, fields: tuple[str, ...], extra: list[str]) -> None:
    """A mixer's fields: all given when a layer has it, none otherwise."""
    if kind not in m.mixers and not (kind == "mamba2" and "parallel" in m.mixers):
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
    mamba1, mamba2 = "mamba1" in m.mixers, bool({"mamba2", "parallel"} & set(m.mixers))
    _fields_of(m, "mamba2", MAMBA2_FIELDS[:2] if mamba1 else MAMBA2_FIELDS,
               ["ssm_groups"] if m.ssm_groups != 1 else [])
    falcon = {"ssm_in_multiplier": mamba2, "ssm_multipliers": mamba2,
              "ssm_gated_norm": mamba2, "ssm_out_multiplier": "parallel" in m.mixers,
              "attention_in_multiplier": "parallel" in m.mixers,
              "attention_out_multiplier": "parallel" in m.mixers}
    for f, ok in falcon.items():  # Falcon-H1's: a Mamba-2's, or a parallel layer's
        if not ok and getattr(m, f) not in (None, True):
            raise ShapecalcError(f, "applies to Mamba-2" + (
                "" if f.startswith("ssm_") and f != "ssm_out_multiplier" else " ∥ attention "
                "(parallel)") + " layers, and mixer_types has none")
    # KDA (Kimi Delta Attention) reads gated DeltaNet's fields
    _fields_of(m, "kda" if "kda" in m.mixers else "gated_deltanet", GDN_FIELDS, [])
    _fields_of(m, "mamba1", MAMBA1_FIELDS[:2] if mamba2 else MAMBA1_FIELDS,
               [f for f in ("mamba_proj_bias", "mamba_bcdt_norm") if getattr(m, f)])
    stateful = {"mamba2", "gated_deltanet", "mamba1", "parallel", "kda"} & set(m.mixers)
    if "short_conv" in m.mixers and m.conv_kernel is None:  # one form: no chunk
        raise ShapecalcError("conv_kernel", "short_conv layers (mixer_types) need it")
    for f in SCAN_FIELDS:  # Mamba-1's scan and the short conv have no chunk
        if f == "conv_kernel" and {"short_conv", "inkling"} & set(m.mixers):
            continue
        users = stateful - {"mamba1"} if f == "scan_chunk" else stateful
        if users and getattr(m, f) is None:
            raise ShapecalcError(f, f"{min(users)} layers (mixer_types) need it")
        if not users and getattr(m, f) is not None:
            raise ShapecalcError(f, "is a stateful mixer's field, but no layer in mixer_types "
                                 "is mamba2, gated_deltanet or kda" + (
                                     "" if f == "scan_chunk" else " or mamba1"))
    if mamba2 and m.ssm_heads % m.ssm_groups:  # type: ignore[operator]
        raise ShapecalcError("ssm_groups", f"G={m.ssm_groups} does not divide H_s="
                             f"{m.ssm_heads}: each group's B and C serve whole heads")
    if "gated_deltanet" in m.mixers and m.gdn_v_heads % m.gdn_qk_heads:  # type: ignore[operator]
        raise ShapecalcError("gdn_v_heads", f"H_qk={m.gdn_qk_heads} does not divide H_v="
                             f"{m.gdn_v_heads}: each q/k head serves whole value heads")
    if "kda" in m.mixers:  # KDA's value heads are its q/k heads, as wide
        for f, a, b in (("gdn_v_heads", m.gdn_v_heads, m.gdn_qk_heads),
                        ("gdn_v_dim", m.gdn_v_dim, m.gdn_qk_dim)):
            if a != b:
                raise ShapecalcError(f, f"{a} differs from {b}: KDA's q, k and v heads are "
                                     "the same heads of the same width")
    if stateful or "short_conv" in m.mixers:
        # output: the attention layers' (OLMo-Hybrid), the mixers' blocks stay pre-norm; LFM3
        # sandwiches its short convs (each branch's output normed too)
        positions = ("pre", "output", "sandwich") if not stateful else ("pre", "output")
        for f in ("parallel_block", "norm_position"):
            if (m.parallel_block if f == "parallel_block" else m.norm_position not in positions):
                raise ShapecalcError(f, "stateful mixers are modelled in pre-norm sequential "
                                     "blocks")
    _fields_of(m, "cca", CCA_FIELDS, [])
    if "cca" in m.mixers:
        check_cca(m)
    if m.kda_gate_bound is not None and m.kda_gate_bound >= 0:
        raise ShapecalcError("kda_gate_bound", f"{m.kda_gate_bound} must be negative: the "
                             "forget gate's log-decay lies in (bound, 0)")


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


def check_hyper(m: ModelFields) -> None:
    """Hyper-connections: n_hc streams in pre-norm sequential attention blocks."""
    if m.hc_streams is None:
        for f, given in (("hc_sinkhorn_iters", m.hc_sinkhorn_iters != 20),
                         ("hc_mixing", m.hc_mixing != "sinkhorn")):
            if given:
                raise ShapecalcError(f, "is a hyper-connection field, but hc_streams is not set")
        return
    clashes = {"parallel_block": m.parallel_block, "norm_position": m.norm_position != "pre",
               "mixer_types": set(m.mixers) != {"attention"}, "mtp_layers": m.mtp_layers > 0,
               "residual_multiplier": m.residual_multiplier is not None}
    for f, bad in clashes.items():
        if bad:
            raise ShapecalcError(f, "hyper-connections (hc_streams) are modelled in pre-norm "
                                 "sequential attention blocks without it")


V4_FIELDS = ("o_groups", "o_lora_rank", "compress_ratio_hca", "compress_ratio_csa",
             "csa_index_heads", "csa_index_head_dim", "csa_index_topk")
CSA_FIELDS = ("compress_ratio_csa", "csa_index_heads", "csa_index_head_dim", "csa_index_topk")


def check_shared_kv(m: ModelFields) -> None:
    """DeepSeek-V4's attention: its fields together, a window on every layer, m′ ≤ W."""
    types = m.layer_types or ()
    if not m.shared_kv:
        given = [f for f in V4_FIELDS if getattr(m, f) is not None]
        given += ["layer_types"] if {"hca", "csa"} & set(types) else []
        if given:
            raise ShapecalcError(given[0], "is DeepSeek-V4 attention's, but shared_kv is not set")
        return
    need = ("o_groups", "o_lora_rank", "q_lora_rank", "sliding_window")
    for f in need:
        if getattr(m, f) is None:
            raise ShapecalcError(f, "DeepSeek-V4's attention (shared_kv) needs it")
    if "hca" in types and m.compress_ratio_hca is None:
        raise ShapecalcError("compress_ratio_hca", "hca layers need m′")
    if m.compress_ratio_hca is not None and "hca" not in types:
        raise ShapecalcError("compress_ratio_hca", "is set, but no layer in layer_types is hca")
    for f in CSA_FIELDS:
        if ("csa" in types) != (getattr(m, f) is not None):
            raise ShapecalcError(f, "csa layers need it" if "csa" in types else
                                 "is a csa field, but no layer in layer_types is csa")
    for f in ("compress_ratio_hca", "compress_ratio_csa"):
        if (r := getattr(m, f)) is not None and r > m.sliding_window:  # type: ignore[operator]
            raise ShapecalcError(f, f"{r} exceeds the window W={m.sliding_window}: an entry "
                                 "must close inside it")
    if m.csa_index_head_dim is not None and m.rot > m.csa_index_head_dim:
        raise ShapecalcError("csa_index_head_dim", f"D_I={m.csa_index_head_dim} is narrower "
                             f"than the R={m.rot} dims RoPE turns")
    if any(t not in ("sliding", "hca", "csa") for t in types) or not types:
        raise ShapecalcError("layer_types", "DeepSeek-V4's layers are sliding, hca or csa "
                             "(each has the window W)")
    if m.n_heads * m.dh % m.o_groups:  # type: ignore[operator]
        raise ShapecalcError("o_groups", f"g={m.o_groups} does not divide H·Dh="
                             f"{m.n_heads * m.dh}")
    clashes = {"n_kv_heads": m.kv_heads != 1, "kv_lora_rank": m.mla, "fused_qkv": m.fused_qkv,
               "qk_norm": m.qk_norm, "qkv_bias": m.qkv_bias, "attn_out_bias": m.attn_out_bias,
               "positions": m.positions != "rope", "parallel_block": m.parallel_block,
               "attn_output_gate": m.attn_output_gate, "mtp_layers": m.mtp_layers > 0}
    for f, bad in clashes.items():
        if bad:
            raise ShapecalcError(f, "does not apply to DeepSeek-V4's attention (shared_kv: one "
                                 "K=V head, RoPE, no biases)")


def check_sliding_heads(m: ModelFields) -> None:
    """MiMo-V2-Flash's attention: value heads of their own width D_v, the sliding layers' own
    KV heads and sinks, a value scale; in plain attention layers (not MLA, CCA or DeepSeek-V4)."""
    own = {"v_head_dim": m.v_head_dim is not None and not m.mla,
           "kv_heads_sliding": m.kv_heads_sliding is not None,
           "sinks_sliding_only": m.sinks_sliding_only, "mtp_block": m.mtp_block != "last",
           "mtp_shared_head": m.mtp_shared_head,
           "value_multiplier": m.value_multiplier is not None}
    given = [f for f, on in own.items() if on]
    if not given:
        return
    clashes = {"kv_lora_rank": m.mla, "shared_kv": m.shared_kv, "fused_qkv": m.fused_qkv,
               "mixer_types": set(m.mixers) != {"attention"}, "hc_streams": m.hc_streams
               is not None, "parallel_block": m.parallel_block}
    for f, bad in clashes.items():
        if bad:
            raise ShapecalcError(given[0], f"is modelled in plain attention layers, not with {f}")
    if m.mtp_block == "sliding_dense" and m.sliding_window is None:
        raise ShapecalcError("mtp_block", "sliding_dense needs a window (sliding_window)")
    if m.sinks_sliding_only and not m.attention_sinks:
        raise ShapecalcError("sinks_sliding_only", "needs attention_sinks")
    hs = m.kv_heads_sliding
    if hs is not None:
        if "sliding" not in (m.layer_types or ("sliding",) * (m.sliding_window is not None)):
            raise ShapecalcError("kv_heads_sliding", "is set, but no layer is sliding")
        if m.n_heads % hs:
            raise ShapecalcError("kv_heads_sliding", f"H={m.n_heads} is not divisible by "
                                 f"H_kv,s={hs}")


BLOCK_FIELDS = ("index_block_size", "index_local_blocks", "block_index_heads",
                "block_index_head_dim")  # block-sparse attention's, beside index_topk_blocks


def check_block_sparse(m: ModelFields) -> None:
    """Block-sparse attention (MiniMax-M3): its fields together, on GQA layers of full reach;
    the query's own block always selected (1 ≤ L_blk ≤ K_blk: the kernel's count then needs no
    data), one selection per group of H/H_I query heads."""
    if m.index_topk_blocks is None:
        given = [f for f in (*BLOCK_FIELDS, "block_sparse_layers") if getattr(m, f) is not None]
        if given:
            raise ShapecalcError(given[0], "is a block-sparse attention field, but "
                                 "index_topk_blocks is not set")
        return
    for f in BLOCK_FIELDS:
        if getattr(m, f) is None:
            raise ShapecalcError(f, "block-sparse attention (index_topk_blocks set) needs it")
    if m.index_local_blocks > m.index_topk_blocks:  # type: ignore[operator]
        raise ShapecalcError("index_local_blocks", f"L_blk={m.index_local_blocks} exceeds "
                             f"K_blk={m.index_topk_blocks}: the blocks always kept must fit in "
                             "the selection")
    if m.n_heads % m.block_index_heads:  # type: ignore[operator]
        raise ShapecalcError("block_index_heads", f"H_I={m.block_index_heads} does not divide "
                             f"H={m.n_heads}: each indexer head selects for H/H_I query heads")
    if m.positions == "rope" and m.rot > m.block_index_head_dim:  # type: ignore[operator]
        raise ShapecalcError("block_index_head_dim", f"D_I={m.block_index_head_dim} is narrower "
                             f"than the R={m.rot} dims RoPE turns")
    layers = m.block_sparse_layers or ()
    if layers and (max(layers) >= m.n_layers or len(set(layers)) != len(layers)):
        raise ShapecalcError("block_sparse_layers", f"{list(layers)}: each a distinct layer "
                             f"0..{m.n_layers - 1}")
    clashes = {"kv_lora_rank": m.mla, "shared_kv": m.shared_kv,
               "sliding_window": m.sliding_window is not None,
               "attention_chunk_size": m.attention_chunk_size is not None,
               "parallel_block": m.parallel_block, "mixers": set(m.mixers) != {"attention"}}
    for f, bad in clashes.items():
        if bad:
            raise ShapecalcError(f, "does not apply to block-sparse attention (GQA layers that "
                                 "attend to every cached key)")
