"""A trace: the stage list of one forward step, its totals, and the TP/PP ledger (plain data).

Every total is a sum over stages (value × repeat), so a printed total can always be traced back to
the stages that make it. Stages are grouped by role, never by printed name. The dict returned by
`build_trace` is the `--json` contract.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, Workload, ceil_div, check, nbytes
from ..model.conventions import has_convention, mixer_flops
from ..model.deploy import widths
from ..model.parallel import (
    active_params,
    alltoall_bytes,
    ep_rank_expert_params,
    kv_bytes_per_token,
    kv_cache_form,
    kv_cache_replicated,
    kv_group_bytes,
    kv_heads_per_rank,
    kv_replicated,
    paged_kv,
    pp_layers,
    residual_width,
    ring_allreduce_bytes,
    stage_params,
    stage_sums,
)
from ..model.plan import Chunk, LayerPlan, layer_plan
from ..model.quant import weight_format
from ..model.stage import (
    ATTN_PROJ_ROLES,
    ATTN_SCORE_ROLES,
    COMPRESSOR_PREFIXES,
    EXPERT_ROLES,
    FFN_ROLES,
    NORM_ROLES,
    Stage,
    is_mixer,
)
from .fields import EP_LEDGER, PP_LEDGER, TOTALS, TP_LEDGER, section
from .selected import selected_attention

if TYPE_CHECKING:
    from ..model.quant_tensors import WeightSums

Pred = Callable[[Stage], bool]


def _sum(st: list[Stage], key: str, pred: Pred | None = None) -> int:
    return sum(getattr(s, key) * s.repeat for s in st if pred is None or pred(s))


def _per_layer(st: list[Stage], kind: int, key: str, pred: Pred | None = None) -> int:
    """One layer of `kind`: the sum over its block's stages (each recorded once)."""
    return sum(getattr(s, key) for s in st if s.kind == kind and (pred is None or pred(s)))


def _is_cache(s: Stage) -> bool:
    return s.op == "kv_cache"


def _activations(st: list[Stage]) -> list[Stage]:
    """Stages that write an activation (the KV cache and mixer states are counted apart)."""
    return [s for s in st if s.op not in ("kv_cache", "kv_append", "state_cache")]


def _role_in(roles: tuple[str, ...]) -> Pred:
    return lambda s: s.role in roles


def kind_breakdown(st: list[Stage], plan: LayerPlan) -> list[dict[str, Any]]:
    """Per layer kind: its spec, its count, and one layer's parameters by part."""
    out = []
    for k, (spec, count) in enumerate(zip(plan.kinds, plan.counts, strict=True)):
        per = _per_layer(st, k, "params")
        out.append({
            "kind": k,
            "label": spec.label,
            "attention": spec.attention,
            "window": spec.window,
            "chunk": spec.chunk,
            "nope": spec.nope,
            "ffn": spec.ffn,
            "count": count,
            "attention_per_layer": _per_layer(st, k, "params", _role_in(ATTN_PROJ_ROLES)),
            "ffn_per_layer": _per_layer(st, k, "params", _role_in(FFN_ROLES)),
            "norms_per_layer": _per_layer(st, k, "params", _role_in(NORM_ROLES)),
            "mixer_per_layer": _per_layer(st, k, "params", lambda s: is_mixer(s.role)),
            "hyper_per_layer": _per_layer(st, k, "params", _is_hyper),
            "compressor_per_layer": _per_layer(st, k, "params", _is_compressor),
            "per_layer": per,
            "layers": per * count,
        })
    return out


def params_breakdown(st: list[Stage], plan: LayerPlan) -> dict[str, Any]:
    """Parameters by part. The per-layer parts hold when every layer is alike (else None, and
    `per_kind` has them per kind); `layers` is for all N."""
    kinds = kind_breakdown(st, plan)
    alike = len(kinds) == 1

    def per(key: str) -> int | None:
        return kinds[0][key] if alike else None

    return {
        "embedding": _sum(st, "params", lambda s: s.role == "embed"),
        "positions": _sum(st, "params", lambda s: s.role == "pos.add"),
        "attention_per_layer": per("attention_per_layer"),
        "ffn_per_layer": per("ffn_per_layer"),
        "norms_per_layer": per("norms_per_layer"),
        "per_layer": per("per_layer"),
        "layers": sum(k["layers"] for k in kinds),
        "final_norm": _sum(st, "params", lambda s: s.role == "head.norm"),
        "lm_head": _sum(st, "params", lambda s: s.role == "head.lm"),
        "total": _sum(st, "params"),
        "per_kind": kinds,
        "embedding_norm": _sum(st, "params", lambda s: s.role == "embed.norm"),
        "hyper_head": _sum(st, "params", lambda s: s.group == "head" and _is_hyper(s)),
    }


def flops_breakdown(st: list[Stage]) -> dict[str, int]:
    """Matmul FLOPs of the whole step by where they go."""
    return {
        "attention_projections": _sum(st, "flops", _role_in(ATTN_PROJ_ROLES)),
        "attention_scores": _sum(st, "flops", _role_in(ATTN_SCORE_ROLES)),
        "ffn": _sum(st, "flops", _role_in(FFN_ROLES)),
        "lm_head": _sum(st, "flops", lambda s: s.role == "head.lm"),
        "token_mixers": _sum(st, "flops", lambda s: is_mixer(s.role)),
        "hyper_connections": _sum(st, "flops", _is_hyper),
        "compressors": _sum(st, "flops", _is_compressor),
    }


def _sparse_kernel(model: ModelConfig, wl: Workload, st: list[Stage]) -> int | None:
    """flops with DeepSeek-V4's attention matmuls as a sparse kernel runs them."""
    if not model.shared_kv:
        return None
    from ..model.compressed import sparse_kernel_flops  # DeepSeek-V4's mechanism module

    eager = _sum(st, "flops", _role_in(ATTN_SCORE_ROLES))
    return _sum(st, "flops") - eager + sparse_kernel_flops(model, wl.batch, wl.seq, wl.phase)


def _is_compressor(s: Stage) -> bool:
    """DeepSeek-V4's compressors and csa indexer."""
    return s.role.startswith(COMPRESSOR_PREFIXES)


def _is_hyper(s: Stage) -> bool:
    """A hyper-connection stage (mHC: the streams' projections, weights, collapse and merge)."""
    return s.role.startswith("hc.")


def layer_plan_doc(plan: LayerPlan) -> dict[str, Any]:
    """The layer plan as JSON: the kinds, and the runs of consecutive layers of one kind."""
    return {
        "kinds": [{"kind": k, "label": spec.label, "attention": spec.attention,
                   "window": spec.window, "chunk": spec.chunk, "nope": spec.nope,
                   "ffn": spec.ffn, "norm": spec.norm,
                   "norm_position": spec.norm_position, "count": count}
                  for k, (spec, count) in enumerate(zip(plan.kinds, plan.counts, strict=True))],
        "runs": [{"kind": plan.kinds.index(r.spec), "first": r.first, "count": r.length}
                 for r in plan.runs],
    }


def build_trace(model: ModelConfig, wl: Workload, per_rank: bool = False) -> dict[str, Any]:
    """The trace; with `per_rank` (and p > 1) also `rank_stages`, one rank's stage list."""
    check(model, wl)
    plan = layer_plan(model)
    every = symbolic_stages(model, wl, 1)
    st = [s for s in every if s.group != "mtp"]  # the model's own step: every total below
    # the MTP modules, counted apart (traced with the workload's --mtp, else only counted)
    counted = wl.model_copy(update={"mtp": True, "seq": 1, "pp": 1, "ep": 1})
    mtp = [s for s in every if s.group == "mtp"] if wl.mtp else [
        s for s in symbolic_stages(model, counted, 1) if s.group == "mtp"
    ] if model.mtp_layers else []
    rank = [s for s in symbolic_stages(model, wl, wl.tp) if s.group != "mtp"] \
        if wl.tp > 1 else st
    params = _sum(st, "params")
    # the longest cache of any layer kind (the tokens of a full-attention layer)
    kv_tokens = max((s.shape[-2] for s in st if _is_cache(s)
                     and not s.role.startswith("kv.entries")), default=0)  # windows' tokens
    blocks, paged = paged_kv(model, wl.batch, wl.seq, wl.phase, wl.block_size, wl.kv,
                             mla=wl.mla)
    largest = max(_activations(st), key=lambda s: s.bytes)
    expert_params = _sum(st, "params", _role_in(EXPERT_ROLES))
    ws = weights(model, wl)
    wbytes = nbytes(params, wl.dtype) if ws is None else ws[0].total
    totals = section(TOTALS, {
        "params": params,
        "active_params": active_params(params, expert_params, model),
        "params_breakdown": params_breakdown(st, plan),
        "flops": _sum(st, "flops"),
        "flops_breakdown": flops_breakdown(st),
        "elementwise_flops": _sum(st, "elementwise_flops"),
        "weight_bytes": wbytes,
        "kv_cache_bytes": _sum(st, "bytes", _is_cache),
        "kv_cache_tokens": kv_tokens,
        "kv_cache_bytes_per_token": kv_bytes_per_token(model, wl.kv, mla=wl.mla),
        "state_cache_bytes": _sum(st, "bytes", lambda s: s.op == "state_cache"),
        "mixer_flops_convention": mixer_flops(wl) if has_convention(model.mixers) else "none",
        "state_cache_convention": (wl.state_cache or "transformers") if has_convention(
            model.mixers) else "none",
        "kv_cache_form": kv_cache_form(model, wl.mla),
        "kv_cache_blocks": blocks,
        "kv_cache_paged_bytes": paged,
        "largest_activation": {
            "name": largest.name,
            "dims": largest.dims,
            "shape": largest.shape,
            "bytes": largest.bytes,
        },
        "kv_cache_groups": [
            {"window": w if isinstance(w, int) else None,
             "chunk": w.size if isinstance(w, Chunk) else None,
             "layers": n, "tokens": tokens, "bytes": wl.batch * b}
            for w, n, tokens, b in kv_group_bytes(model, wl.kv, wl.seq, wl.phase, mla=wl.mla)
        ],
        "mtp_params": _sum(mtp, "params"),
        "flops_sparse_kernel": _sparse_kernel(model, wl, st),
        "mtp_flops": _sum(mtp, "flops") if wl.mtp else None,
        "mtp_kv_cache_bytes": _sum(mtp, "bytes", _is_cache) if wl.mtp else None,
        "weight_format": wl.dtype if ws is None else ws[0].label,
        "weight_bytes_breakdown": ({"data": wbytes, "scales": 0, "zeros": 0, "other": 0,
                                    "unquantized": 0} if ws is None else ws[0].parts()),
        "weight_tensors": [] if ws is None else [t.as_dict() for t in ws[0].tensors],
        "selected_attention": selected_attention(model, wl, _sum(st, "flops"), kv_tokens),
    })
    doc = {
        "model": model.model_dump(),
        "workload": wl.model_dump(),
        "layers": layer_plan_doc(plan),
        "stages": [s.as_dict() for s in every],
        "totals": totals,
        "parallel": {"tp": tp_ledger(model, wl, rank, ws), "pp": pp_ledger(model, wl, st, ws),
                     "ep": ep_ledger(model, wl, st, rank, ws)},
        "widths": widths(wl),  # which bytes are at which width (model/deploy.py)
    }
    if per_rank and wl.tp > 1:
        doc["rank_stages"] = [s.as_dict() for s in rank]
    return doc


def weights(model: ModelConfig, wl: Workload) -> tuple[WeightSums, WeightSums] | None:
    """The weight bytes of the whole model and of one rank under the weights' format (from a
    prefill's stages: the weights as stored, MLA's kv_b whole), or None for params × bits."""
    fmt = weight_format(model, wl.dtype)
    if fmt is None:
        return None
    from ..model.quant_tensors import weight_sums  # loaded for a weight format only

    one = wl.model_copy(update={"phase": "prefill", "batch": 1, "seq": 1})
    full = weight_sums(model, symbolic_stages(model, one, 1), fmt)
    return full, (weight_sums(model, symbolic_stages(model, one, wl.tp), fmt, wl.tp)
                  if wl.tp > 1 else full)


Weights: TypeAlias = "tuple[WeightSums, WeightSums] | None"


def tp_ledger(model: ModelConfig, wl: Workload, rank: list[Stage], w: Weights = None
              ) -> dict[str, Any]:
    """Tensor parallelism from one rank's stages (the whole model's when p = 1)."""
    p = wl.tp

    def block_ar(s: Stage) -> bool:
        return s.role == "comm.allreduce" and s.group == "block"

    # one layer's all-reduces (kind 0's); the totals count every layer's
    one_layer = [s for s in rank if block_ar(s) and s.kind == 0]
    one = one_layer[0].bytes if one_layer else 0
    count = len(one_layer)
    splits = [
        {
            "weight": s.name,
            "split": s.split,
            "params_per_rank": s.params,
        }
        for s in rank
        if s.op in ("linear", "embed")
    ]
    params_rank = _sum(rank, "params")
    return section(TP_LEDGER, {
        "degree": p,
        "heads_per_rank": model.n_heads // p,
        "kv_heads_per_rank": kv_heads_per_rank(model, p),
        "kv_heads_replicated": kv_replicated(model, p),
        "kv_cache_replicated": kv_cache_replicated(model, p, wl.mla),
        "d_ff_per_rank": model.d_ff // p,
        "vocab_per_rank": ceil_div(model.vocab_size, p),
        "splits": splits,
        "allreduce_per_layer": count,
        "allreduce_bytes": one,
        "allreduce_bytes_per_layer": sum(s.bytes for s in one_layer),
        "allreduce_bytes_total": _sum(rank, "bytes", block_ar),
        "ring_bytes_per_rank": ring_allreduce_bytes(one, p),
        "ring_bytes_per_rank_total": ring_allreduce_bytes(one, p) * sum(
            s.repeat for s in rank if block_ar(s)),
        "embedding_allreduce_bytes": _sum(
            rank, "bytes", lambda s: s.role == "comm.allreduce" and s.group == "embedding"),
        "logits_allgather_bytes": _sum(rank, "bytes", lambda s: s.role == "comm.allgather"),
        "params_per_rank": params_rank,
        "weight_bytes_per_rank": nbytes(params_rank, wl.dtype) if w is None else w[1].total,
        "kv_cache_bytes_per_rank": _sum(rank, "bytes", _is_cache),
        "state_cache_bytes_per_rank": _sum(rank, "bytes", lambda s: s.op == "state_cache"),
        "flops_per_rank": _sum(rank, "flops"),
        "largest_activation_bytes_per_rank": max(s.bytes for s in _activations(rank)),
    })


def _stage_weight_bytes(model: ModelConfig, w: tuple[WeightSums, WeightSums], s: int
                        ) -> list[int]:
    from ..model.quant_tensors import stage_weight_bytes  # a weight format's tensors only

    return stage_weight_bytes(model, w[0], w[0], s)


def pp_ledger(model: ModelConfig, wl: Workload, st: list[Stage], w: Weights = None
              ) -> dict[str, Any]:
    s = wl.pp
    plan = layer_plan(model)
    # the activation handed from one stage to the next: the residual stream [B,T,D] (n_hc·D wide
    # with hyper-connections)
    boundary = nbytes(wl.batch * (wl.seq if wl.phase == "prefill" else 1)
                      * residual_width(model), wl.act)
    kinds = range(len(plan.kinds))
    params = stage_params(
        plan, s, [_per_layer(st, k, "params") for k in kinds],
        embedding=_sum(st, "params", lambda x: x.group == "embedding"),
        head=_sum(st, "params", lambda x: x.group == "head"),
        table=_sum(st, "params", lambda x: x.role == "embed"),
        tied=model.tie_embeddings,
    )
    return section(PP_LEDGER, {
        "stages": s,
        "layers_per_stage": pp_layers(model.n_layers, s),
        "boundaries": s - 1,
        "boundary_bytes": boundary if s > 1 else 0,
        "boundary_bytes_total": boundary * (s - 1),
        "params_per_stage": params,
        "weight_bytes_per_stage": [nbytes(x, wl.dtype) for x in params] if w is None else
        _stage_weight_bytes(model, w, s),
        "kv_cache_bytes_per_stage": stage_sums(
            plan, s, [_per_layer(st, k, "bytes", _is_cache) for k in kinds]),
    })


def ep_ledger(model: ModelConfig, wl: Workload, st: list[Stage], rank: list[Stage],
              w: Weights = None) -> dict[str, Any]:
    """Expert parallelism, as vLLM runs it: the routed experts split over ep ranks (E/ep whole
    experts each); attention stays tensor-parallel over tp, in ep/tp data-parallel replicas; each
    MoE layer dispatches its tokens to their experts' ranks and combines them back (all-to-all)."""
    ep, tp = wl.ep, wl.tp
    experts = _sum(st, "params", _role_in(EXPERT_ROLES))
    rank_experts = _sum(rank, "params", _role_in(EXPERT_ROLES))
    held = ep_rank_expert_params(rank_experts, experts, ep)
    per_rank = _sum(rank, "params") - rank_experts + held
    held_b, per_rank_b = nbytes(held, wl.dtype), nbytes(per_rank, wl.dtype)
    if w is not None:  # the format's bytes: E/ep whole experts' tensors, scales included
        held_b = ep_rank_expert_params(w[1].expert_total, w[0].expert_total, ep)
        per_rank_b = w[1].total - w[1].expert_total + held_b
    plan = layer_plan(model)
    moe_layers = sum(c for k, c in zip(plan.kinds, plan.counts, strict=True) if k.ffn == "moe")
    tq = wl.seq if wl.phase == "prefill" else 1
    a2a = alltoall_bytes(wl.batch, tq, model, wl.act) if ep > 1 else 0
    if not model.moe:
        composition = "a dense model: no experts to split"
    elif ep == 1:
        composition = f"no expert parallelism: each expert's Dff_e is split over the tp={tp} ranks"
    else:
        composition = (f"{ep} GPUs: attention tensor-parallel over tp={tp} in {ep // tp} "
                       f"data-parallel replica{'s' if ep // tp > 1 else ''}; the routed experts "
                       f"split over all {ep} (whole experts, {(model.n_experts or 0) // ep} each)")
    return section(EP_LEDGER, {
        "degree": ep,
        "composition": composition,
        "moe_layers": moe_layers,
        "experts_per_rank": (model.n_experts or 0) // ep,  # check(): ep divides E
        "expert_params": experts,
        "expert_params_per_rank": held,
        "expert_weight_bytes_per_rank": held_b,
        "params_per_rank": per_rank,
        "weight_bytes_per_rank": per_rank_b,
        "alltoall_bytes_per_layer": a2a,
        "alltoall_bytes_per_layer_expected": a2a * (ep - 1) / ep,
        "alltoall_bytes_total": a2a * moe_layers,
    })
