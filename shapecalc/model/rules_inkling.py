"""Inkling's rules (model/inkling.py): its fields given exactly when a layer is inkling; the
layer's attention has its own q/k norms, scale and bias, so the other attention variants do not
apply; its MoE scores n_s ≥ 1 shared experts of the routed experts' width in one softmax."""

from __future__ import annotations

from .errors import ShapecalcError
from .model_fields import ModelFields

INKLING_FIELDS = ("rel_dim", "rel_extent")
SWA_FIELDS = ("log_scaling_floor",)
# what Inkling's layers do not have (their attention and MoE are their own)
NOT_INKLING = ("qkv_bias", "attn_out_bias", "fused_qkv", "parallel_block", "qk_norm",
               "qk_norm_per_head", "qk_l2_norm", "attention_sinks", "attn_output_gate",
               "attn_head_gate", "kv_lora_rank", "attn_softcap", "query_pre_attn_scalar",
               "attention_multiplier", "residual_multiplier", "router_bias", "routing_bias",
               "expert_bias", "shared_expert_gate", "norm_topk_prob", "routing_on_input",
               "router_hidden", "router_softcap", "swiglu_limit", "attention_chunk_size",
               "d_ff_shared", "residual_scaling", "hc_streams", "shared_kv", "ffn_bias")


def check_inkling(m: ModelFields) -> None:
    if "inkling" not in m.mixers:
        given = [f for f in INKLING_FIELDS + SWA_FIELDS if getattr(m, f) is not None]
        if given:
            raise ShapecalcError(given[0], "is an inkling field, but no layer in mixer_types is "
                                 "inkling")
        return
    for f in (*INKLING_FIELDS, "conv_kernel"):
        if getattr(m, f) is None:
            raise ShapecalcError(f, "inkling layers (mixer_types) need it")
    for f in NOT_INKLING:
        if getattr(m, f) not in (None, False):
            raise ShapecalcError(f, "does not apply to inkling layers (their attention and MoE "
                                 "are Inkling's own)")
    if m.positions != "none":
        raise ShapecalcError("positions", f"inkling layers apply no {m.positions} positions "
                             "(their relative bias is the positions)")
    if m.norm != "rmsnorm" or m.norm_position != "pre":
        raise ShapecalcError("norm_position" if m.norm == "rmsnorm" else "norm",
                             "inkling layers are modelled as pre-norm RMSNorm blocks")
    if m.ffn != "swiglu":
        raise ShapecalcError("ffn", f"inkling layers' MLPs and experts are SwiGLU, not {m.ffn}")
    if m.moe and m.n_shared_experts < 1:
        raise ShapecalcError("n_shared_experts", "inkling's router scores its shared experts "
                             "beside the routed ones: at least 1")
    if m.log_scaling_alpha < 0:
        raise ShapecalcError("log_scaling_alpha", f"{m.log_scaling_alpha} must be ≥ 0")
    for f in ("rel_extent", "sliding_window"):
        if getattr(m, f) is not None and getattr(m, f) < 1:
            raise ShapecalcError(f, "must be at least 1")
