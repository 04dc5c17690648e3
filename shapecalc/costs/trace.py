"""A trace: the stage list of one forward step, its totals, and the TP/PP ledger (plain data).

Every total is a sum over stages (value × repeat), so a printed total can always be traced back to
the stages that make it. The dict returned by `build_trace` is the `--json` contract.
"""

from __future__ import annotations

from typing import Any

from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, Workload, ceil_div, check, nbytes
from ..model.forward import LINEAR_LABEL, Stage
from ..model.parallel import pp_layers, ring_allreduce_bytes

ATTN_PROJ = tuple(LINEAR_LABEL[k] for k in ("q", "k", "v", "qkv", "o"))
FFN_MATS = tuple(LINEAR_LABEL[k] for k in ("gate", "up", "down"))


def _sum(st: list[Stage], key: str, pred: Any = None) -> int:
    return sum(getattr(s, key) * s.repeat for s in st if pred is None or pred(s))


def _activations(st: list[Stage]) -> list[Stage]:
    """Stages that write an activation (the KV cache is counted apart, as a cache)."""
    return [s for s in st if s.op not in ("kv_cache", "kv_append")]



def params_breakdown(st: list[Stage]) -> dict[str, int]:
    """Parameters by part; per-layer parts are for one layer, `layers` for all N."""
    block = [s for s in st if s.group == "block"]
    n = block[0].repeat if block else 0
    per_layer = sum(s.params for s in block)
    return {
        "embedding": _sum(st, "params", lambda s: s.op == "embed"),
        "positions": _sum(st, "params", lambda s: s.name == "position add"),
        "attention_per_layer": sum(s.params for s in block if s.name in ATTN_PROJ),
        "ffn_per_layer": sum(s.params for s in block if s.name in FFN_MATS),
        "norms_per_layer": sum(s.params for s in block if s.op in ("layernorm", "rmsnorm")),
        "per_layer": per_layer,
        "layers": per_layer * n,
        "final_norm": _sum(st, "params", lambda s: s.name == "final norm"),
        "lm_head": _sum(st, "params", lambda s: s.name == "lm head"),
        "total": _sum(st, "params"),
    }


def flops_breakdown(st: list[Stage]) -> dict[str, int]:
    """Matmul FLOPs of the whole step by where they go."""
    return {
        "attention_projections": _sum(st, "flops", lambda s: s.name in ATTN_PROJ),
        "attention_scores": _sum(st, "flops", lambda s: s.name in ("QKᵀ", "A·V")),
        "ffn": _sum(st, "flops", lambda s: s.name in FFN_MATS),
        "lm_head": _sum(st, "flops", lambda s: s.name == "lm head"),
    }


def build_trace(model: ModelConfig, wl: Workload, per_rank: bool = False) -> dict[str, Any]:
    """The trace; with `per_rank` (and p > 1) also `rank_stages`, one rank's stage list."""
    check(model, wl)
    st = symbolic_stages(model, wl, 1)
    rank = symbolic_stages(model, wl, wl.tp) if wl.tp > 1 else st
    params = _sum(st, "params")
    kv_per_layer = [s for s in st if s.op == "kv_cache"]
    kv_tokens = kv_per_layer[0].shape[3] if kv_per_layer else 0
    kv_bytes = _sum(st, "bytes", lambda s: s.op == "kv_cache")
    per_token = nbytes(2 * model.n_layers * model.kv_heads * model.dh, wl.kv)
    blocks = wl.batch * ceil_div(kv_tokens, wl.block_size)
    largest = max(_activations(st), key=lambda s: s.bytes)
    totals: dict[str, Any] = {
        "params": params,
        "params_breakdown": params_breakdown(st),
        "flops": _sum(st, "flops"),
        "flops_breakdown": flops_breakdown(st),
        "elementwise_flops": _sum(st, "elementwise_flops"),
        "weight_bytes": nbytes(params, wl.dtype),
        "kv_cache_bytes": kv_bytes,
        "kv_cache_tokens": kv_tokens,
        "kv_cache_bytes_per_token": per_token,
        "kv_cache_blocks": blocks,
        "kv_cache_paged_bytes": blocks * wl.block_size * per_token,
        "largest_activation": {
            "name": largest.name,
            "dims": largest.dims,
            "shape": largest.shape,
            "bytes": largest.bytes,
        },
    }
    doc = {
        "model": model.model_dump(),
        "workload": wl.model_dump(),
        "stages": [s.as_dict() for s in st],
        "totals": totals,
        "parallel": {"tp": tp_ledger(model, wl, rank), "pp": pp_ledger(model, wl, st)},
    }
    if per_rank and wl.tp > 1:
        doc["rank_stages"] = [s.as_dict() for s in rank]
    return doc


def tp_ledger(model: ModelConfig, wl: Workload, rank: list[Stage]) -> dict[str, Any]:
    """Tensor parallelism from one rank's stages (the whole model's when p = 1)."""
    p = wl.tp
    n = model.n_layers
    block_ar = [s for s in rank if s.op == "allreduce" and s.group == "block"]
    one = block_ar[0].bytes if block_ar else 0
    per_layer = sum(s.bytes for s in block_ar)
    total = per_layer * n
    count = len(block_ar)

    def ring(b: int) -> int:
        return ring_allreduce_bytes(b, p)

    emb_ar = _sum(rank, "bytes", lambda s: s.op == "allreduce" and s.group == "embedding")
    gather = _sum(rank, "bytes", lambda s: s.op == "allgather")
    params_rank = _sum(rank, "params")
    hkv = model.kv_heads
    splits = [
        {
            "weight": s.name,
            "split": s.split,
            "params_per_rank": s.params,
        }
        for s in rank
        if s.op in ("linear", "embed")
    ]
    return {
        "degree": p,
        "heads_per_rank": model.n_heads // p,
        "kv_heads_per_rank": max(1, hkv // p),
        "kv_heads_replicated": p > hkv,
        "d_ff_per_rank": model.d_ff // p,
        "vocab_per_rank": ceil_div(model.vocab_size, p),
        "splits": splits,
        "allreduce_per_layer": count,
        "allreduce_bytes": one,
        "allreduce_bytes_per_layer": per_layer,
        "allreduce_bytes_total": total,
        "ring_bytes_per_rank": ring(one) if p > 1 else 0,
        "ring_bytes_per_rank_total": ring(one) * count * n if p > 1 else 0,
        "embedding_allreduce_bytes": emb_ar,
        "logits_allgather_bytes": gather,
        "params_per_rank": params_rank,
        "weight_bytes_per_rank": nbytes(params_rank, wl.dtype),
        "kv_cache_bytes_per_rank": _sum(rank, "bytes", lambda s: s.op == "kv_cache"),
        "flops_per_rank": _sum(rank, "flops"),
        "largest_activation_bytes_per_rank": max(s.bytes for s in _activations(rank)),
    }


def pp_ledger(model: ModelConfig, wl: Workload, st: list[Stage]) -> dict[str, Any]:
    s = wl.pp
    layers = pp_layers(model.n_layers, s)
    # the activation handed from one stage to the next: the residual stream [B,T,D]
    boundary = nbytes(wl.batch * (wl.seq if wl.phase == "prefill" else 1) * model.d_model, wl.act)
    block = [x for x in st if x.group == "block"]
    per_layer_params = sum(x.params for x in block)
    per_layer_kv = sum(x.bytes for x in block if x.op == "kv_cache")
    first = _sum(st, "params", lambda x: x.group == "embedding")
    last = _sum(st, "params", lambda x: x.group == "head")
    tied_copy = model.tie_embeddings and s > 1  # the last stage needs its own copy of the table
    emb = _sum(st, "params", lambda x: x.op == "embed")
    stage_params = []
    for i, k in enumerate(layers):
        ps = k * per_layer_params
        ps += first if i == 0 else 0
        ps += last + (emb if tied_copy else 0) if i == s - 1 else 0
        stage_params.append(ps)
    return {
        "stages": s,
        "layers_per_stage": layers,
        "boundaries": s - 1,
        "boundary_bytes": boundary if s > 1 else 0,
        "boundary_bytes_total": boundary * (s - 1),
        "params_per_stage": stage_params,
        "weight_bytes_per_stage": [nbytes(x, wl.dtype) for x in stage_params],
        "kv_cache_bytes_per_stage": [k * per_layer_kv for k in layers],
    }
