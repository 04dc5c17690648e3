"""Memory per rank and roofline times from the closed form's totals: the one home of both.

Written once over a namespace `xp` (costs/scalar.py): plain Python numbers for one point (fit,
without NumPy) or NumPy arrays for many (sweep, grid.ARRAYS), each call for points of one tensor-
parallel degree p and pipeline depth s.

- memory per rank = weights + KV cache + mixer states + activation workspace + reserve, for the
  pipeline stage
  that needs the most; reserve = capacity − ⌊capacity × utilization⌋ (vLLM's
  --gpu-memory-utilization). The KV cache is paged: each window group's blocks × block_size token
  slots × the group's layers on the stage × bytes per token and layer; a chunked group (Llama 4)
  is sized for its fullest chunk, min(T, C) tokens, which a sequence passes on its way to T.
- prefill time = max(FLOPs/peak, bytes/bandwidth) per rank (FLOPs as a causal kernel does them:
  attention's lower triangle) + (ring all-reduce bytes per rank + PP
  boundary bytes) / link bandwidth; bytes = weights per rank (of the embedding table only the
  rows looked up) + the KV cache written. Decode per token: the same with the KV cache read.
  Each term is divided by its efficiency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..costs.closed import ClosedForm
from ..inputs.hardware import GPU
from ..model.config import DTYPE_BITS, bytes_of
from ..model.parallel import (
    distinct_experts,
    ep_rank_expert_params,
    kv_elements_per_token,
    kv_groups,
    pp_layers,
    split_elements_per_token,
    stage_group_layers,
    stage_kind_counts,
)
from ..model.plan import layer_plan
from ..model.quantization import ELEMENT_BYTES
from .options import PlanOptions


def workspace_tokens(cf: ClosedForm, opts: PlanOptions, B: Any, T: Any, xp: Any) -> Any:
    """Tokens of the prefill step the activation workspace is sized for: chunked prefill (as
    vLLM profiles it) sizes one sequence of at most --max-batched-tokens tokens."""
    assert opts.max_batched_tokens is not None
    tokens = xp.minimum(B * T, opts.max_batched_tokens)
    limit = cf.seq_limit("prefill")
    return tokens if limit is None else xp.minimum(tokens, limit)


def memory(cf: ClosedForm, gpu: GPU, opts: PlanOptions, p: int, s: int, pre: Mapping[str, Any],
           act: Any, wbits: Any, kvbits: Any, n: int, dtype: Any, xp: Any, ep: int = 1
           ) -> dict[str, Any]:
    """Bytes per rank of the fullest pipeline stage, and the KV token slots that still fit
    (`pre`: prefill totals at the n points; `act`: their activation workspace). With ep > 1 the
    routed experts are split E/ep a GPU (exactly); `pre` is one attention rank's batch (fit
    passes ⌈B/dp⌉ sequences under data-parallel attention, plan/ep.py)."""
    bs = cf.block_size
    cap = gpu.memory_bytes
    reserve = opts.reserve(cap)
    usable = cap - reserve
    # one token, one layer; each KV group's own (MiMo-V2-Flash's sliding layers: their H_sw)
    tok_layer = bytes_of(kv_elements_per_token(cf.model, p, layers=1, mla=cf.mla), kvbits)
    extra = [sum(c * (t - tok_layer) for c, t in zip(per, group_token_bytes(cf, p, kvbits),
                                                      strict=True))
             for per in stage_group_layers(layer_plan(cf.model), s)]
    best: Any = None
    weights = kv = stage = tokens_fit = None
    states = stage_state_bytes(cf, s, pre)
    entries = stage_entry_bytes(cf, s, pre)
    state: Any = None
    for i, (k, w_i, kv_i) in enumerate(stage_bytes(cf, p, s, pre, wbits, kvbits, ep)):
        st_i = states[i]
        tot = w_i + kv_i + st_i
        if best is None:
            best, weights, kv, stage = tot, w_i, kv_i, xp.zeros(n, dtype=int)
            state = st_i
        else:
            more = tot > best
            best = xp.where(more, tot, best)
            weights, kv = xp.where(more, w_i, weights), xp.where(more, kv_i, kv)
            state = xp.where(more, st_i, state)
            stage = xp.where(more, i, stage)
        # the batch's states take their fixed slots first (and the compressed entries of the
        # planned T); the KV tokens fit in the rest
        free = xp.maximum(usable - w_i - act - st_i - entries[i], 0)
        t_i = free // (bs * (k * tok_layer + extra[i])) * bs
        tokens_fit = t_i if tokens_fit is None else xp.minimum(tokens_fit, t_i)
    total = weights + kv + state + act + reserve  # type: ignore[operator]
    return {
        "fits": total <= cap,
        "mem_weights": weights,
        "mem_kv_cache": kv,
        "mem_state_cache": state,
        "mem_activations": act,
        "mem_reserve": xp.full(n, reserve, dtype=dtype),
        "mem_total": total,
        "mem_capacity": xp.full(n, cap, dtype=dtype),
        "pp_stage": stage,
        "kv_tokens_fit": tokens_fit,
    }


def stage_state_bytes(cf: ClosedForm, s: int, pre: Mapping[str, Any]) -> list[Any]:
    """The stateful mixers' state bytes of the batch on one rank of each pipeline stage: each
    of its layers' (per kind, `pre`'s state_bytes@kind) — fixed, whatever T is."""
    plan = layer_plan(cf.model)
    return [sum((c * pre[f"state_bytes@{k}"] for k, c in enumerate(counts) if c), 0)
            for counts in stage_kind_counts(plan, s)]


def stage_entry_bytes(cf: ClosedForm, s: int, pre: Mapping[str, Any]) -> list[Any]:
    """DeepSeek-V4's compressed entries of the batch on each pipeline stage (its compressed
    layers' `pre` entry_bytes@kind): they grow with T beside the paged window (0 elsewhere)."""
    plan = layer_plan(cf.model)
    return [sum((c * pre[f"entry_bytes@{k}"] for k, c in enumerate(counts)
                 if c and plan.kinds[k].compress), 0)
            for counts in stage_kind_counts(plan, s)]


def stage_bytes(cf: ClosedForm, p: int, s: int, pre: Mapping[str, Any], wbits: Any, kvbits: Any,
                ep: int = 1) -> list[tuple[int, Any, Any]]:
    """(layers, weight bytes, paged KV cache bytes) of one rank of each pipeline stage (`pre`:
    the prefill totals, whose peak blocks size the cache). The one home of a stage's bytes:
    memory() takes the fullest stage, compare its rows."""
    m = cf.model
    plan = layer_plan(m)
    toks = group_token_bytes(cf, p, kvbits)
    # paged token slots of the batch in each KV group (layers that share a window)
    slots = [pre[f"kv_cache_peak_blocks@{g}"] * cf.block_size
             for g in range(len(kv_groups(plan)))]
    # a weight format's bytes tensor by tensor (scales included), else params × bits
    weights = ([w + 0 * wbits for w in cf.stage_weight_bytes(p, s, ep)]  # shaped as wbits
               if cf.weights is not None else
               [bytes_of(params, wbits) for params in cf.stage_params(p, s, ep)])
    entries = stage_entry_bytes(cf, s, pre)
    return [(k, w, sum(slots[g] * c * toks[g] for g, c in enumerate(per_group) if c) + e)
            for k, per_group, w, e in zip(pp_layers(m.n_layers, s), stage_group_layers(plan, s),
                                          weights, entries, strict=True)]


def group_token_bytes(cf: ClosedForm, p: int, kvbits: Any) -> list[Any]:
    """One token's bytes in one layer of each KV group on one rank: each group's own widths (a
    sliding group's KV heads: MiMo-V2-Flash; Gemma 4's global layers; dots3's per-layer widths,
    its indexer keys in their own dtype)."""
    m = cf.model
    return [bytes_of(lat, kvbits) + bytes_of(apart, DTYPE_BITS[m.index_cache_dtype or "fp32"])
            for lat, apart in (split_elements_per_token(m, p, 1, cf.mla, reach)
                               for reach, _ in kv_groups(layer_plan(m)))]


def embedding_rows_read(cf: ClosedForm, tot: Mapping[str, Any], tokens: Any, xp: Any) -> Any:
    """Parameters of the embedding table a step reads on one rank: a lookup gathers the rows
    of its tokens, ⌈tokens/p⌉ of the rank's V/p (the tokens spread over the vocab shards),
    not the whole table; a tied table is read whole anyway by the LM head."""
    table = tot["embed_params_per_rank"]
    if cf.model.tie_embeddings:
        return table
    D = cf.model.d_model
    tp = tot["tp"]
    if getattr(tp, "size", 0) and tp.min() == tp.max():  # one degree (a sweep chunk's): a scalar
        tp = int(tp.flat[0])  # divisor, several times cheaper than an array of them
    rows = -(-tokens // tp)
    return xp.minimum(rows * D, table)


def step_bytes(cf: ClosedForm, tot: Mapping[str, Any], tokens: Any, wbits: Any, xp: Any,
               ep: int = 1, dp: int = 1) -> Any:
    """HBM bytes one step must move on a rank: the weights it reads (the embedding rows it
    looks up, not the table; of a MoE layer, the experts its `tokens` reach) + the KV cache
    (written in prefill, read in decode). Floats where experts are fractional. With `dp`
    data-parallel attention ranks the experts serve dp ranks' tokens (plan/ep.py)."""
    m = cf.model
    table = tot["embed_params_per_rank"]
    read = embedding_rows_read(cf, tot, tokens, xp)
    # the KV cache, and the mixers' states (read and written once a step; serve's step totals
    # carry none: it refuses stateful mixers)
    kv = tot["kv_cache_bytes_per_rank"] + tot.get("state_cache_bytes_per_rank", 0)
    if cf.weights is not None:
        return _format_bytes(cf, tot, tokens, read, xp, ep, dp) + kv
    if not m.moe:
        return bytes_of(tot["params_per_rank"] - table + read, wbits) + kv
    experts = ep_rank_expert_params(tot["expert_params_per_rank"], tot["expert_params"], ep)
    others = tot["params_per_rank"] - tot["expert_params_per_rank"] - table + read
    reached = distinct_experts(tokens * dp, m) / m.n_experts
    return xp.floats(bytes_of(others, wbits) + kv) + xp.floats(bytes_of(experts, wbits)) * reached


def _format_bytes(cf: ClosedForm, tot: Mapping[str, Any], tokens: Any, read: Any, xp: Any,
                  ep: int, dp: int = 1) -> Any:
    """step_bytes' weights under a format: the rank's tensors (scales included) less its token
    table, plus the table rows looked up (the table is never quantized: its width's bytes)."""
    assert cf.weights is not None
    rows = bytes_of(read, ELEMENT_BYTES[cf.weights.wide] * 8)
    own = tot["weight_bytes_per_rank"] - tot["embed_weight_bytes_per_rank"] + rows
    if cf.model.tie_embeddings:  # the LM head reads the whole table anyway
        own = tot["weight_bytes_per_rank"]
    if not cf.model.moe:
        return own
    experts = ep_rank_expert_params(tot["expert_weight_bytes_per_rank"],
                                    tot["expert_weight_bytes"], ep)
    reached = distinct_experts(tokens * dp, cf.model) / cf.model.n_experts
    return (xp.floats(own - tot["expert_weight_bytes_per_rank"])
            + xp.floats(experts) * reached)


def step_flops(cf: ClosedForm, tot: Mapping[str, Any], ep: int = 1, dp: int = 1) -> Any:
    """FLOPs one rank's step does, as kernels run it: attention's lower triangle only (a
    causal kernel skips the masked half, whatever --attention-flops counts); with ep > 1 each
    GPU does 1/ep of a MoE step (of dp attention ranks' steps, each with these totals)."""
    if cf.model.moe and ep > 1:
        return tot["causal_flops"] * dp // ep
    return tot["causal_flops_per_rank"]


def phase_terms(cf: ClosedForm, gpu: GPU, opts: PlanOptions, tot: Mapping[str, Any], peak: Any,
                tokens: Any, wbits: Any, xp: Any, ep: int = 1) -> tuple[Any, Any, Any]:
    """(compute, memory, communication) seconds of one step per rank, from its totals. A MoE
    step reads only the experts its `tokens` reach: each rank's routed experts × the expected
    fraction reached under uniform routing, 1 − (1 − k/E)^tokens (`parallel.distinct_experts`).
    With ep > 1 each GPU holds E/ep whole experts and does 1/ep of the step's FLOPs."""
    bw = gpu.hbm_bandwidth * opts.memory_efficiency
    flops = step_flops(cf, tot, ep)
    mem = xp.floats(step_bytes(cf, tot, tokens, wbits, xp, ep)) / bw
    compute = xp.floats(flops) / (peak * opts.compute_efficiency)
    comm = xp.floats(tot["ring_bytes_per_rank_total"] + tot["boundary_bytes_total"]) / (
        gpu.link_bandwidth * opts.link_efficiency)
    return compute, mem, comm


def times(opts: PlanOptions, B: Any, T: Any, gpus: Any, pre: tuple[Any, Any, Any],
          dec: tuple[Any, Any, Any], xp: Any) -> dict[str, Any]:
    """Roofline lower bounds from the (compute, memory, communication) terms of a prefill and
    a decode step (NaN where there is no decode estimate)."""
    pc, pm, pl = pre
    dc, dm, dl = dec
    prefill_s = xp.maximum(pc, pm) + pl
    decode_s = xp.maximum(dc, dm) + dl
    b = xp.floats(B)
    out = {
        "prefill_compute_s": pc, "prefill_memory_s": pm, "prefill_comm_s": pl,
        "decode_compute_s": dc, "decode_memory_s": dm, "decode_comm_s": dl,
        "prefill_s": prefill_s,
        "decode_s_per_token": decode_s,
        "ttft_s": prefill_s,
        "tokens_per_s": b / decode_s,
        "prefill_tokens_per_s": b * xp.floats(T) / prefill_s,
        "prefill_bound": xp.bound(pc, pm, pl),
        "decode_bound": xp.bound(dc, dm, dl),
    }
    if opts.price is not None:
        out["cost_per_million_tokens"] = opts.price * gpus / 3600.0 * decode_s / b * 1e6
    return out
