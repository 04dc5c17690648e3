"""The Mixture-of-Experts mechanisms: which layers are MoE, E routed experts of a width, k per
token, the router's options, shared experts; and the Phi-MoE and gpt-oss specifics.

E, k and the widths default to the family's config class (hf_families.py); the key E is read
under, and its aliases, are the family's too.
"""

from __future__ import annotations

from ..model.config import ShapecalcError
from .hf_base import HF, Fields, Mechanism, mechanism, positive_step
from .hf_llama import body, qwen_window, windows


@mechanism("decoder_sparse_step", "mlp_only_layers")
def qwen_sparse(h: HF, f: Fields) -> None:
    # Qwen-MoE: layer i is MoE when not in mlp_only_layers and (i+1) % decoder_sparse_step == 0;
    # the others have a dense MLP of intermediate_size
    step = positive_step(h, "decoder_sparse_step")
    dense = set(h.int_list("mlp_only_layers") or [])
    f["ffn_types"] = tuple("dense" if i in dense or (i + 1) % step else "moe"
                           for i in range(f["n_layers"]))


def experts(key: str, width: str | None = None, optional: bool = False) -> Mechanism:
    """E routed experts (read under `key` and the family's aliases of it), k per token, and a
    routed expert's width (`width`'s key; None: intermediate_size). `optional`: E = 0, or no MoE
    layer, leaves a dense model (Qwen-MoE); else E must be positive."""
    def _experts(h: HF, f: Fields) -> None:
        n_experts = h.one_of(key)
        kinds = list(f.pop("ffn_types", None) or ["moe"] * f["n_layers"])
        if optional and (not n_experts or "moe" not in kinds):
            return
        if not n_experts:
            mt = h.family.model_type if h.family else "?"
            raise ShapecalcError(key, f"{n_experts!r}: a {mt} model needs experts")
        wide = h.get(width) if width else None
        f.update(
            n_experts=n_experts,
            experts_per_token=h.get("num_experts_per_tok"),
            d_ff_expert=None if wide == f["d_ff"] else wide,
            ffn_types=tuple(kinds) if "dense" in kinds else None,
        )
    _experts.__name__ = f"experts_{key}"
    return mechanism(key, "num_experts_per_tok", *([width] if width else []))(_experts)


@mechanism("norm_topk_prob")
def norm_topk(h: HF, f: Fields) -> None:
    # the router renormalises the top-k weights when norm_topk_prob
    if "n_experts" in f:
        f["norm_topk_prob"] = bool(h.get("norm_topk_prob", False))


@mechanism("shared_expert_intermediate_size", "moe_intermediate_size")
def qwen_shared(h: HF, f: Fields) -> None:
    # one shared expert per MoE layer, scaled by a sigmoid gate [D→1]
    if "n_experts" not in f:
        return
    shared = h.get("shared_expert_intermediate_size")
    if not shared:
        raise ShapecalcError("shared_expert_intermediate_size", f"{shared!r}: an empty shared "
                             "expert (with its gate) is not modelled")
    f.update(n_shared_experts=1, shared_expert_gate=True,
             d_ff_shared=None if shared == h.get("moe_intermediate_size") else shared)


@mechanism("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")
def qwen2_moe_windows(h: HF, f: Fields) -> None:
    # without layer_types, the 5.x default slides the layers with (i+1) % 2 below
    # max_window_layers, if use_sliding_window
    n, window = f["n_layers"], qwen_window(h)
    types = h.get("layer_types") or [
        "sliding_attention" if window is not None and (i + 1) % 2
        and i < h.get("max_window_layers") else "full_attention"
        for i in range(n)
    ]
    f.update(windows(types, window, n))


@mechanism("use_sliding_window", "sliding_window")
def qwen_sliding(h: HF, f: Fields) -> None:
    # Qwen3MoeAttention ignores layer_types: with use_sliding_window every layer slides
    f["sliding_window"] = qwen_window(h)


@mechanism("qkv_bias")
def qkv_bias(h: HF, f: Fields) -> None:
    # q, k, v biased (Qwen2-MoE's qkv_bias key); o_proj not
    f["qkv_bias"] = bool(h.get("qkv_bias"))


@mechanism("lm_head_bias")
def lm_head_bias(h: HF, f: Fields) -> None:
    f["lm_head_bias"] = bool(h.get("lm_head_bias", False))


@mechanism("num_experts_per_tok", "experts_per_token")
def gpt_oss_k(h: HF, f: Fields) -> None:
    # experts_per_token is the original config's name for k, unread by transformers
    k = h.get("num_experts_per_tok")
    if h.get("experts_per_token") not in (None, k):
        raise ShapecalcError("experts_per_token", f"{h.get('experts_per_token')} contradicts "
                             f"num_experts_per_tok={k} (the key transformers reads)")


@mechanism("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
           "moe_intermediate_size", "head_dim", "num_key_value_heads")
def moe_body(h: HF, f: Fields) -> None:
    # Solar Open: the Llama body with MoE on every layer and no dense MLP (its class has no
    # intermediate_size): Dff is the routed experts' width
    body(h, f, "moe_intermediate_size")


def mlp_layer_types(from_first: bool) -> Mechanism:
    """mlp_layer_types names each layer's MLP, dense or sparse. Without it: the first
    first_k_dense_replace layers dense (`from_first`: EXAONE-MoE), or the first one (HY-V3,
    whose class ignores first_k_dense_replace: a value that disagrees is refused)."""
    def _types(h: HF, f: Fields) -> None:
        n = f["n_layers"]
        first = h.get("first_k_dense_replace")
        if from_first and (type(first) is not int or first < 0):
            raise ShapecalcError("first_k_dense_replace", f"must be a whole number, not "
                                 f"{first!r}")
        lead = first if from_first else min(n, 1)
        kinds = h.get("mlp_layer_types") or ["dense" if i < lead else "sparse" for i in range(n)]
        if not isinstance(kinds, list) or any(k not in ("dense", "sparse") for k in kinds):
            raise ShapecalcError("mlp_layer_types", f"must list dense or sparse per layer, not "
                                 f"{kinds!r}")
        if len(kinds) < n:  # the decoder layer reads entry i of layer i: a longer list builds
            raise ShapecalcError("mlp_layer_types", f"lists {len(kinds)} layers, but "
                                 f"num_hidden_layers is {n}")
        kinds = kinds[:n]
        dense = next((i for i, k in enumerate(kinds) if k == "sparse"), n)
        if not from_first and first is not None and first != dense:
            raise ShapecalcError("first_k_dense_replace", f"{first}, but mlp_layer_types makes "
                                 f"the first {dense} dense (transformers reads mlp_layer_types "
                                 "only)")
        f["ffn_types"] = tuple("moe" if k == "sparse" else "dense" for k in kinds)
    _types.__name__ = "mlp_layer_types" + ("_from_first" if from_first else "")
    return mechanism("mlp_layer_types", "first_k_dense_replace")(_types)


def shared_mlp(scale: str, zero_falls_back: bool) -> Mechanism:
    """One shared MLP of num_shared_experts × moe_intermediate_size, added without a gate, and
    the routing weights scaled by the `scale` key. 0 shared experts: no shared MLP (EXAONE-MoE's
    Qwen2MoeMLP of width 0), or one of intermediate_size (`zero_falls_back`: HY-V3's HYV3MLP
    takes `width or intermediate_size`). The MTP layer (num_nextn_predict_layers) is not built
    by transformers, so not counted."""
    def _shared(h: HF, f: Fields) -> None:
        h.get("num_nextn_predict_layers")
        if "n_experts" not in f:
            return
        n = h.get("num_shared_experts")
        if type(n) is not int or n < 0:
            raise ShapecalcError("num_shared_experts", f"must be a whole number, not {n!r}")
        width = n * h.get("moe_intermediate_size") or (f["d_ff"] if zero_falls_back else 0)
        f["routed_scaling_factor"] = h.get(scale)
        if width:
            f.update(n_shared_experts=1,
                     d_ff_shared=None if width == f.get("d_ff_expert") else width)
    _shared.__name__ = f"shared_mlp_{scale}"
    return mechanism("num_shared_experts", "moe_intermediate_size", scale,
                     "num_nextn_predict_layers")(_shared)


def _uniform(h: HF, key: str, n: int) -> int:
    """A count given once or once per layer (the original code's lists), the same on every
    layer: shapecalc's layer plan has one E and one k."""
    keys = h.names(key)
    h.read.update(keys)
    value = next((h.cfg[k] for k in keys if h.cfg.get(k) is not None), h.default(key))
    if isinstance(value, list):
        if len(value) != n:
            raise ShapecalcError(key, f"lists {len(value)} layers, but num_hidden_layers is {n}")
        if len(set(value)) > 1:
            raise ShapecalcError(key, f"{value!r} differs per layer; shapecalc models one value "
                                 "for every MoE layer")
        value = value[0]
    if type(value) is not int or value < 1:
        raise ShapecalcError(key, f"must be a positive integer, not {value!r}")
    return value


@mechanism("num_experts", "moe_topk", "moe_intermediate_size", "num_shared_expert",
           "use_mixed_mlp_moe", "use_qk_norm", "use_cla", "head_dim")
def hunyuan_moe(h: HF, f: Fields) -> None:
    # HunYuanMoEV1Moe on every layer: a softmax router [D→E] (no bias), top-k renormalised,
    # E experts and one ungated shared MLP, all of intermediate_size, summed. The original
    # code's keys transformers does not read are refused where they would build another model
    if h.get("head_dim") is None:  # getattr(config, "head_dim", D // H) finds the None
        raise ShapecalcError("head_dim", "null or absent, and transformers' hunyuan_v1_moe "
                             "attention cannot be built without it (its scale is head_dim**-0.5)")
    n, width = f["n_layers"], f["d_ff"]
    experts, k = _uniform(h, "num_experts", n), _uniform(h, "moe_topk", n)
    for key, want, why in (
            ("moe_intermediate_size", width, f"the experts are intermediate_size={width} wide"),
            ("num_shared_expert", 1, "it builds one shared MLP"),
            ("use_mixed_mlp_moe", True, "it always adds the shared MLP"),
            ("use_qk_norm", True, "it always norms q and k"),
            ("use_cla", False, "cross-layer KV sharing is not built")):
        value = h.get(key)
        if value is not None and not all(v == want for v in
                                         (value if isinstance(value, list) else [value])):
            raise ShapecalcError(key, f"{value!r}, but transformers' hunyuan_v1_moe ignores it: "
                                 f"{why}")
    f.update(n_experts=experts, experts_per_token=k, n_shared_experts=1, norm_topk_prob=True)


@mechanism("moe_num_experts", "moe_k", "moe_intermediate_size", "moe_num_shared_experts",
           "moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval",
           "num_nextn_predict_layers")
def ernie_moe(h: HF, f: Fields) -> None:
    # ERNIE 4.5: layer i is MoE when (i+1) % moe_layer_interval == 0 and start ≤ i ≤ end (-1:
    # the last layer), the others a dense MLP of intermediate_size. A softmax router [D→E],
    # top-k renormalised; its e_score_correction_bias is a Parameter [1, E] that parameters()
    # counts (E per MoE layer: read as a router bias, which adds no matmul); the shared
    # experts one MLP of n_shared × the expert width (0: none)
    n = f["n_layers"]
    start, end = h.get("moe_layer_start_index"), h.get("moe_layer_end_index")
    if end is None or start is None:  # the class compares layer_idx with both
        raise ShapecalcError("moe_layer_end_index" if end is None else "moe_layer_start_index",
                             "null: transformers' ernie4_5_moe cannot place its MoE layers")
    end = n - 1 if end == -1 else end
    step = positive_step(h, "moe_layer_interval")
    kinds = tuple("moe" if (i + 1) % step == 0 and start <= i <= end else "dense"
                  for i in range(n))
    if "moe" not in kinds:
        raise ShapecalcError("moe_layer_start_index", f"{start} (to {end}, every {step}) leaves "
                             f"no MoE layer of {n}")
    width = h.get("moe_intermediate_size")
    f.update(
        n_experts=h.one_of("moe_num_experts"),
        experts_per_token=h.one_of("moe_k"),
        d_ff_expert=None if width == f["d_ff"] else width,
        n_shared_experts=h.get("moe_num_shared_experts") or 0,
        router_bias=True,
        norm_topk_prob=True,
        ffn_types=kinds if "dense" in kinds else None,
    )
    # the MTP module: transformers drops its weights ("mtp" unexpected keys), not counted
    h.first("num_nextn_predict_layers")
@mechanism("shared_intermediate_size")
def granite_shared(h: HF, f: Fields) -> None:
    # GraniteMoeShared: a shared MLP of shared_intermediate_size, without a gate (0: none)
    width = h.get("shared_intermediate_size")
    if type(width) is not int or width < 0:
        raise ShapecalcError("shared_intermediate_size", f"must be a whole number, not {width!r}")
    if width:
        f.update(n_shared_experts=1,
                 d_ff_shared=None if width == (f.get("d_ff_expert") or f["d_ff"]) else width)


@mechanism("num_dense_layers")
def dense_first(h: HF, f: Fields) -> None:
    # AFMoE: the first num_dense_layers layers have a dense MLP of intermediate_size
    first = h.get("num_dense_layers")
    if type(first) is not int or first < 0:
        raise ShapecalcError("num_dense_layers", f"must be a whole number, not {first!r}")
    f["ffn_types"] = tuple("dense" if i < first else "moe" for i in range(f["n_layers"]))
