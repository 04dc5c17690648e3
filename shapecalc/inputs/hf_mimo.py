"""The mechanisms of MiMo-V2-Flash (transformers 5.24's mimo_v2_flash): its attention, whose
sliding layers hold twice the KV heads and a sink logit per head, values narrower than q/k
(v_head_dim) scaled by attention_value_scale, a window that keeps sliding_window_size + 1 keys,
a RoPE θ and partial rotary factor per layer type; and its MoE, DeepSeek-V3's router without a
shared expert."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, mechanism
from .hf_deepseek import mtp_count
from .hf_llama import rotary_of, windows

# MiMoV2FlashConfig's rope_parameters: one entry per layer type
MIMO_ROPE = {kind: {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.334}
             for kind, theta in (("full_attention", 5000000.0), ("sliding_attention", 10000.0))}
# each layer type's entry of rope_parameters, as the key audit writes them dotted
_ROPE = ("rope_parameters", "rope_parameters.rope_theta", "rope_parameters.partial_rotary_factor")


def _rope(h: HF, kind: str) -> dict[str, Any]:
    """One layer type's RoPE parameters (MiMoV2FlashConfig's defaults where not given)."""
    rp = h.get("rope_parameters")
    if rp is None:
        rp = h.default("rope_parameters")
    if not isinstance(rp, dict) or not isinstance(rp.get(kind), dict):
        raise ShapecalcError("rope_parameters", f"needs an object per layer type "
                             f"({kind} among them), not {rp!r}")
    return rp[kind]


@mechanism("layer_types", "sliding_window", "sliding_window_size", "v_head_dim",
           "attention_value_scale", *_ROPE)
def mimo_attention(h: HF, f: Fields) -> None:
    # MiMoV2FlashAttention: a sliding layer has 2·H_kv KV heads and sinks, a full one H_kv and
    # none; q/k heads of head_dim, v heads of v_head_dim, o_proj [H·D_v → D]; v × the value
    # scale after its projection
    n, hkv = f["n_layers"], f["n_kv_heads"]
    types = h.get("layer_types") or [
        "full_attention" if i == 0 or not (i + 1) % 6 else "sliding_attention" for i in range(n)]
    size = h.get("sliding_window_size")  # the SGLang key: that many keys before the query
    if size is not None and (type(size) is not int or size < 0):
        raise ShapecalcError("sliding_window_size", f"must be a whole number, not {size!r}")
    window = size + 1 if size is not None else h.get("sliding_window")
    f.update(windows(types, window, n))
    sliding = f["sliding_window"] is not None
    if sliding:
        if f["n_heads"] % (2 * hkv):
            raise ShapecalcError("num_key_value_heads", f"the sliding layers' 2·H_kv={2 * hkv} "
                                 f"KV heads do not divide H={f['n_heads']}")
        f.update(kv_heads_sliding=2 * hkv, attention_sinks=True, sinks_sliding_only=True)
    dh = f["head_dim"] or f["d_model"] // f["n_heads"]
    dv = h.get("v_head_dim")
    if type(dv) is not int or dv < 1:
        raise ShapecalcError("v_head_dim", f"must be a positive integer, not {dv!r}")
    f["v_head_dim"] = None if dv == dh else dv
    scale = h.get("attention_value_scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or scale <= 0):
        raise ShapecalcError("attention_value_scale", f"must be a number > 0, not {scale!r}")
    f["value_multiplier"] = float(scale) if scale is not None else None  # null: × 1.0
    # RoPE per layer type: θ each; R = int(Dh · partial_rotary_factor) (default 0.334)
    full, local = _rope(h, "full_attention"), _rope(h, "sliding_attention")
    h.read.update(_ROPE)
    rots = []
    for kind, rp in (("full_attention", full), ("sliding_attention", local)):
        factor = rp.get("partial_rotary_factor", 0.334)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise ShapecalcError(f"rope_parameters.{kind}.partial_rotary_factor",
                                 f"must be a number, not {factor!r}")
        rots.append(rotary_of(dh, factor)["rotary_dim"])
        theta = rp.get("rope_theta")
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0:
            raise ShapecalcError(f"rope_parameters.{kind}.rope_theta", f"must be a number > 0, "
                                 f"not {theta!r}")
    if sliding and rots[0] != rots[1]:
        raise ShapecalcError("rope_parameters.sliding_attention.partial_rotary_factor",
                             "turns other dims than the full layers': one R per model")
    f.update(rotary_dim=rots[0], rope_base=float(full["rope_theta"]),
             rope_base_local=float(local["rope_theta"]) if sliding
             and local["rope_theta"] != full["rope_theta"] else None)


@mechanism("routed_scaling_factor", "n_group", "topk_group")
def mimo_router(h: HF, f: Fields) -> None:
    # MiMoV2FlashTopkRouter (DeepSeek-V3's): sigmoid scores [D → E], the choice by scores + a
    # correction bias (a buffer), group-limited (n_group, topk_group: no count changes), the k
    # renormalised when norm_topk_prob, × routed_scaling_factor (null: 1.0); no shared expert
    groups, top = h.get("n_group"), h.get("topk_group")
    experts = f.get("n_experts") or 0
    if type(groups) is not int or groups < 1 or experts % groups:
        raise ShapecalcError("n_group", f"must be a positive integer dividing E={experts}, "
                             f"not {groups!r}")
    if type(top) is not int or not 1 <= top <= groups:
        raise ShapecalcError("topk_group", f"must be an integer in 1..n_group={groups}, "
                             f"not {top!r}")
    scale = h.get("routed_scaling_factor")
    f["routed_scaling_factor"] = 1.0 if scale is None else scale


@mechanism("num_nextn_predict_layers")
def mimo_mtp(h: HF, f: Fields) -> None:
    # the checkpoint's MTP layers (model.mtp.layers.*, which transformers skips; vLLM and SGLang
    # build num_nextn_predict_layers of them): enorm, hnorm, eh_proj [2D → D], a sliding block
    # (2·H_kv, sinks) with a dense MLP of intermediate_size, a final norm; the model's embedding
    # and LM head. Counted apart (totals.mtp_params), 0.33 B each at the preset's widths
    n = mtp_count(h)
    f["mtp_layers"] = n
    if n:
        if f.get("sliding_window") is None:
            raise ShapecalcError("num_nextn_predict_layers", "MiMo's MTP blocks slide; the "
                                 "model has no sliding layer to take the window from")
        f.update(mtp_block="sliding_dense", mtp_shared_head=True)
