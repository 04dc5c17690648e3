"""Model-state memory of one training rank: weights, gradients and optimizer states, placed by
tensor, pipeline and expert parallelism (model/parallel.py's placement) and sharded by ZeRO over
the data-parallel group.

Bytes per parameter, by term (`PRECISIONS`):
  mixed     bf16 weights 2 + bf16 gradients 2 + fp32 master weights 4, AdamW m 4 and v 4 = 16
            (the ZeRO paper's "2 + 2 + 12")
  fp32      fp32 weights 4 + fp32 gradients 4 + AdamW m 4 and v 4 = 16 (no master copy)
  adam8bit  bf16 weights 2 + bf16 gradients 2 + fp32 master 4, 8-bit m 1 and v 1 = 10
            (bitsandbytes' block-wise constants, one fp32 absmax per block of each state, and
            its fp32 states for tensors under 4096 elements are not counted)

ZeRO over dp ranks: stage 1 shards the optimizer states, stage 2 also the gradients, stage 3
(FSDP's full sharding) also the weights. Sharding rule: the rank's P parameters are flattened and
padded to a multiple of dp, so each rank holds ⌈P/dp⌉ of them (DeepSpeed's and FSDP's flat
buffers); unsharded terms hold all P. With expert parallelism (Megatron's layout) the routed
experts are sharded over the expert-data-parallel group, dp/ep ranks, and the rest over dp.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..interpret.mixer_rules import TRAINABLE
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div
from ..model.parallel import ep_rank_expert_params, stage_params, stage_sums
from ..model.plan import layer_plan
from ..model.stage import EXPERT_ROLES, Stage


class Term(NamedTuple):
    name: str  # weights, gradients, optimizer
    bytes_per_param: int
    what: str


PRECISIONS: dict[str, tuple[Term, ...]] = {
    "mixed": (Term("weights", 2, "bf16 weights"), Term("gradients", 2, "bf16 gradients"),
              Term("optimizer", 12, "fp32 master weights 4 + AdamW m 4 + v 4")),
    "fp32": (Term("weights", 4, "fp32 weights"), Term("gradients", 4, "fp32 gradients"),
             Term("optimizer", 8, "AdamW m 4 + v 4 (fp32)")),
    "adam8bit": (Term("weights", 2, "bf16 weights"), Term("gradients", 2, "bf16 gradients"),
                 Term("optimizer", 6, "fp32 master weights 4 + 8-bit Adam m 1 + v 1")),
}
# the terms each ZeRO stage shards over the data-parallel group
ZERO_SHARDED = {0: (), 1: ("optimizer",), 2: ("optimizer", "gradients"),
                3: ("optimizer", "gradients", "weights")}


def check_trainable(model: ModelConfig) -> None:
    """A token mixer without a backward rule (interpret/mixer_rules.py's registry) is refused,
    never counted as something else."""
    missing = sorted(set(model.mixers) - set(TRAINABLE))
    if missing:
        raise ShapecalcError("model", f"its {', '.join(missing)} layers have no backward rules "
                             f"yet: train and verify --train take {', '.join(TRAINABLE[2:])} "
                             "and attention layers")
    if model.attn_head_gate:  # LFM3's per-head gate: no backward rule either
        raise ShapecalcError("attn_head_gate", "has no backward rule yet: train and verify "
                             "--train take attention without it")
    if model.dsa:  # the gather, top-k and per-query matmuls have no backward rules yet
        raise ShapecalcError("model", "its DeepSeek Sparse Attention (index_topk) has no "
                             "backward rules yet: train and verify --train take attention "
                             "models without an indexer")
    if model.mla and (model.attention_sinks or model.attn_output_gate):  # Hunyuan 4's MLA
        raise ShapecalcError("attention_sinks" if model.attention_sinks else "attn_output_gate",
                             "with Multi-head Latent Attention has no backward rule yet")
    if model.hc_streams is not None:  # no backward rules for the streams' mixing yet
        raise ShapecalcError("hc_streams", "hyper-connections have no backward rules yet: train "
                             "and verify --train take models with one plain residual")
    variants = {"shared_kv": model.shared_kv,  # DeepSeek-V4's attention and compressors
                "index_topk_blocks": model.block_sparse,  # MiniMax-M3's block indexer
                "swiglu_limit": model.swiglu_limit is not None,
                "hash_moe_layers": model.hash_moe_layers > 0,
                "router_softcap": model.router_softcap is not None,
                "router_scoring": model.router_scoring == "sqrtsoftplus",
                # MiMo-V2-Flash's attention: its per-layer KV heads and narrower values
                "kv_heads_sliding": model.kv_heads_sliding is not None,
                "v_head_dim": model.v_head_dim is not None and not model.mla,
                "value_multiplier": model.value_multiplier is not None,
                # Gemma 4's per-layer embeddings, K=V and KV sharing
                "ple_dim": model.ple_dim is not None, "global_k_eq_v": model.global_k_eq_v,
                "kv_shared_layers": model.kv_shared_layers > 0,
                # Laguna's softplus gate
                "attn_gate_act": model.attn_gate_act != "sigmoid"}
    for key, given in variants.items():  # DeepSeek-V4's routing and activation variants
        if given:
            raise ShapecalcError(key, "has no backward rule yet: train and verify --train do "
                                 "not count it")
    if model.layer_widths is not None:  # dots3: the activation terms read the model's widths
        raise ShapecalcError("layer_widths", "widths set per layer are not in train's "
                             "activation model yet: train and verify --train take one width")
    if model.ffn == "xielu":  # its learned α_p, α_n have no backward rule
        raise ShapecalcError("ffn", "xielu has no backward rule yet: train and verify --train "
                             "take the other activations")


def check_training(model: ModelConfig, precision: str, zero: int, dp: int, ep: int) -> None:
    check_trainable(model)
    if precision not in PRECISIONS:
        raise ShapecalcError("precision", f"unknown {precision!r}; known: {', '.join(PRECISIONS)}")
    if dp < 1:
        raise ShapecalcError("dp", f"must be ≥ 1, not {dp}")
    if zero not in ZERO_SHARDED:
        raise ShapecalcError("zero", f"ZeRO stage must be 0, 1, 2 or 3, not {zero}")
    if ep > 1 and dp % ep:
        raise ShapecalcError("ep", f"ep={ep} must divide dp={dp}: the experts are split over "
                             "ep of the data-parallel ranks")
    if model.quantization is not None:  # its bytes are not a training state's: say so
        raise ShapecalcError("quantization", "train plans weights, gradients and optimizer "
                             "state at --precision, not a quantized checkpoint's format: "
                             "--set quantization=null trains the model at its width")


def _per_layer(st: list[Stage], kind: int, experts: bool | None = None) -> int:
    return sum(s.params for s in st if s.kind == kind
               and (experts is None or (s.role in EXPERT_ROLES) == experts))


def rank_params(model: ModelConfig, wl: Workload, full: list[Stage], rank: list[Stage]
                ) -> list[tuple[int, int]]:
    """(dense, routed-expert) parameters one rank of each pipeline stage holds: its layers (at
    tensor-parallel rank size: `rank` are one tensor-parallel rank's stages, `full` the whole
    model's), the embedding on the first stage, the final norm and LM head on the last (and, tied
    and pp > 1, the last stage's own copy of the table); with ep > 1, E/ep whole experts."""
    plan = layer_plan(model)
    kinds = range(len(plan.kinds))
    s = wl.pp

    def group(pred: Any) -> int:
        return sum(x.params for x in rank if pred(x))

    dense = stage_params(plan, s, [_per_layer(rank, k, False) for k in kinds],
                         group(lambda x: x.group == "embedding"),
                         group(lambda x: x.group == "head"),
                         group(lambda x: x.role == "embed"), model.tie_embeddings)
    slices = stage_sums(plan, s, [_per_layer(rank, k, True) for k in kinds])  # Dff_e/tp each
    whole = stage_sums(plan, s, [_per_layer(full, k, True) for k in kinds]) if wl.ep > 1 else slices
    experts = [ep_rank_expert_params(sl, wh, wl.ep) for sl, wh in zip(slices, whole, strict=True)]
    return list(zip(dense, experts, strict=True))


def model_state(dense: int, experts: int, precision: str, zero: int, dp: int, ep: int,
                widths: tuple[Term, ...] | None = None) -> dict[str, Any]:
    """Bytes of each model-state term on one rank holding `dense` + `experts` parameters (at
    `widths`, a framework's bytes per parameter, else the precision's)."""
    sharded = ZERO_SHARDED[zero]
    terms = []
    for t in widths or PRECISIONS[precision]:
        if t.name in sharded:
            held = ceil_div(dense, dp) + (ceil_div(experts, dp // ep) if experts else 0)
        else:
            held = dense + experts
        terms.append({"term": t.name, "what": t.what, "bytes_per_param": t.bytes_per_param,
                      "sharded": t.name in sharded, "params": held,
                      "bytes": held * t.bytes_per_param})
    return {"params": dense + experts, "terms": terms,
            "bytes": sum(t["bytes"] for t in terms)}
