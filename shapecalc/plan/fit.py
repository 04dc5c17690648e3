"""fit: one model on one GPU at one workload: memory per rank, the largest batch and context,
the smallest tp and pp, KV tokens that fit, and roofline times.

One workload, so one point at a time in plain Python ints (costs/scalar.py): exact at any size,
and no NumPy to import on the planners' `fit --json` path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from ..costs.closed import ClosedForm
from ..costs.scalar import SCALARS
from ..inputs.hardware import GPU
from ..model.config import DTYPE_BITS, ModelConfig, Workload, check
from ..model.deploy import widths
from ..model.parallel import (
    kv_bytes_per_token,
    kv_cache_form,
    kv_heads_per_rank,
    kv_replicated,
    pp_layers,
)
from .cases import closed_form_for, valid
from .ep import attention_ranks
from .gallop import largest_ok
from .memory import memory, phase_terms, times, workspace_tokens
from .options import ACTIVATIONS, PlanOptions, require_peak
from .perf import (
    DECODE_COLUMNS,
    PerfParams,
    expected_decode,
    expected_prefill,
    expected_times,
    perf_params,
)
from .perf_defaults import DATA as DEFAULTS_DATA
from .perf_defaults import DATE as DEFAULTS_DATE
from .topology import layout_fills_nodes, topology

SEARCH_MAX = 2**48


def point(cf: ClosedForm, gpu: GPU, opts: PlanOptions, wl: Workload, peak: float,
          with_times: bool = False, **at: int) -> dict[str, Any]:
    """Memory (and with_times, the roofline times) at the workload, with `at` changing its
    batch, seq, tp or pp."""
    B, T = at.get("batch", wl.batch), at.get("seq", wl.seq)
    p, s = at.get("tp", wl.tp), at.get("pp", wl.pp)
    dts = (wl.dtype, wl.kv, wl.act)
    pre = cf.at(B, T, "prefill", p, s, *dts, causal=with_times)  # memory alone: no FLOPs
    # EP with data-parallel attention (plan/ep.py): each of the dp = ep/tp attention ranks
    # holds its own ⌈B/dp⌉ sequences' cache and workspace
    Bm = -(-B // attention_ranks(wl, p))
    mem = pre if Bm == B else cf.at(Bm, T, "prefill", p, s, *dts, causal=False)
    key = f"workspace_{opts.attention}_bytes_per_rank"
    if opts.max_batched_tokens is None:
        ws = mem[key]
    else:
        # one chunk's workspace: the same step for every batch past the chunk (memoised: the
        # bisections of fit probe it ~100 times)
        memo = cf.__dict__.setdefault("_workspace_memo", {})
        probe = (workspace_tokens(cf, opts, Bm, T, SCALARS), p, s, dts, key)
        if probe not in memo:
            memo[probe] = cf.at(1, probe[0], "prefill", p, s, *dts, causal=False)[key]
        ws = memo[probe]
    wbits = DTYPE_BITS[wl.dtype]
    out = memory(cf, gpu, opts, p, s, mem, 2 * ws, wbits, DTYPE_BITS[wl.kv], 1, None, SCALARS,
                 wl.ep)
    if with_times:
        limit = cf.seq_limit("decode")
        dec = (math.nan,) * 3
        dec_tot = None
        if limit is None or T <= limit:
            dec_tot = cf.at(B, T, "decode", p, s, *dts)
            dec = phase_terms(cf, gpu, opts, dec_tot, peak, B, wbits, SCALARS, wl.ep)
        out.update(times(opts, B, T, float(p) * float(s),
                         phase_terms(cf, gpu, opts, pre, peak, B * T, wbits, SCALARS, wl.ep),
                         dec, SCALARS))
        # the calibrated expectation (plan/perf.py), as sweep's columns
        pp = perf_params(gpu, opts.perf)
        out.update(expected_prefill(cf, gpu, pp, pre, peak, B * T, wbits, SCALARS, wl.ep, s))
        out.update(dict.fromkeys(DECODE_COLUMNS, math.nan), expected_decode_dominant=None)
        if dec_tot is not None:
            out.update(expected_decode(cf, gpu, pp, dec_tot, peak, B,
                                       float(max(p, wl.ep)) * float(s), wbits, SCALARS, wl.ep,
                                       s))
    return out


def _none(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def estimates(cf: ClosedForm, gpu: GPU, opts: PlanOptions, pp: PerfParams, wl: Workload,
              peak: float, B: int) -> dict[str, Any]:
    """The expected times (perf.py) and the roofline lower bounds at batch B, context wl.seq:
    TTFT, decode per token, tokens/s per sequence, for the batch and per GPU, the largest term."""
    T, p, s = wl.seq, wl.tp, wl.pp
    gpus = max(p, wl.ep) * s
    r = point(cf, gpu, opts, wl, peak, True, batch=B)
    d = _none(r["decode_s_per_token"])
    bound = {
        "ttft_s": _none(r["ttft_s"]), "decode_s_per_token": d,
        "tokens_per_s_per_sequence": None if d is None else 1.0 / d,
        "tokens_per_s": None if d is None else B / d,
        "tokens_per_s_per_gpu": None if d is None else B / d / gpus,
        "prefill_dominant": r["prefill_bound"], "decode_dominant": r["decode_bound"],
    }
    dts = (wl.dtype, wl.kv, wl.act)
    limit = cf.seq_limit("decode")
    dec = cf.at(B, T, "decode", p, s, *dts) if limit is None or T <= limit else None
    exp = expected_times(cf, gpu, pp, cf.at(B, T, "prefill", p, s, *dts), dec, peak, B, T,
                         gpus, DTYPE_BITS[wl.dtype], SCALARS, wl.ep, s)
    return {"batch": B, "expected": exp, "lower_bound": bound}


def _smallest(cands: Iterable[int], ok: Callable[[int], bool]) -> int | None:
    """The first candidate that is ok (candidates are made lazily: each costs a check)."""
    return next((c for c in cands if ok(c)), None)


def fit(model: ModelConfig, wl: Workload, gpu: GPU, opts: PlanOptions) -> dict[str, Any]:
    """The `fit --json` document (a contract: see plan_schemas.FitOut)."""
    check(model, wl)
    layout_fills_nodes(gpu, wl)
    cf = closed_form_for(model, wl)
    cdt, peak = require_peak(gpu, wl.compute, opts)
    terms = perf_params(gpu, opts.perf)
    r = point(cf, gpu, opts, wl, peak, with_times=True)

    def one(key: str) -> Any:
        return _none(r[key])

    def fits(**at: int) -> bool:
        return bool(point(cf, gpu, opts, wl, peak, False, **at)["fits"])

    max_batch = largest_ok(lambda b: fits(batch=b), 1, SEARCH_MAX)
    limit = cf.seq_limit("prefill")
    cap_pos = model.max_positions
    hi = min(x for x in (limit, cap_pos, SEARCH_MAX) if x is not None)
    max_seq = largest_ok(lambda t: fits(seq=t), 1, hi)
    # memory alone, beyond the model's positions (rope models can be stretched)
    max_seq_memory = max_seq
    if cap_pos is not None and max_seq == hi and limit is None:
        max_seq_memory = largest_ok(lambda t: fits(seq=t), hi, SEARCH_MAX)
    # the weights alone (scales included) bound the degrees from below: a stage of one GPU
    # holds at least 1/(max(p, ep)·s) of them (ep is a multiple of p)
    weights = cf.at(1, 1, "prefill", 1, 1, wl.dtype, causal=False)["weight_bytes"]
    usable = gpu.memory_bytes - opts.reserve(gpu.memory_bytes)
    min_tp = _smallest(
        (p for p in range(1, model.n_heads + 1)
         if weights <= usable * max(p, wl.ep) * wl.pp and valid(model, wl, tp=p)),
        lambda p: fits(tp=p),
    )
    min_pp = _smallest(
        (s for s in range(1, model.n_layers + 1)
         if weights <= usable * max(wl.tp, wl.ep) * s and valid(model, wl, pp=s)),
        lambda s: fits(pp=s),
    )
    times = {
        "prefill_s": one("prefill_s"),
        "decode_s_per_token": one("decode_s_per_token"),
        "ttft_s": one("ttft_s"),
        "itl_s": one("decode_s_per_token"),
        "tokens_per_s": one("tokens_per_s"),
        "prefill_tokens_per_s": one("prefill_tokens_per_s"),
        "prefill_bound": one("prefill_bound"),
        "decode_bound": one("decode_bound"),
        "prefill_compute_s": one("prefill_compute_s"),
        "prefill_memory_s": one("prefill_memory_s"),
        "prefill_comm_s": one("prefill_comm_s"),
        "decode_compute_s": one("decode_compute_s"),
        "decode_memory_s": one("decode_memory_s"),
        "decode_comm_s": one("decode_comm_s"),
    }
    # a context the model has no positions for does not fit, whatever the memory
    context_ok = cap_pos is None or wl.seq <= cap_pos
    fits_all = bool(one("fits")) and context_ok
    verdict = "fits" if fits_all else (
        "does not fit (context)" if not context_ok else "does not fit (memory)")
    at = estimates(cf, gpu, opts, terms, wl, peak, wl.batch)
    notes = []
    if not context_ok:
        notes.append(f"context {wl.seq:,} is beyond the model's max_positions={cap_pos:,}")
    if times["decode_s_per_token"] is None:
        notes.append(f"no decode estimate: a step with {wl.seq} cached tokens needs position "
                     f"{wl.seq + 1} > max_positions={model.max_positions}")
    topo = topology(gpu)
    if wl.tp > topo.domain:
        notes.append(f"tp={wl.tp} spans {wl.tp // topo.domain} scale-up domains of "
                     f"{topo.domain} GPUs: its all-reduces are priced hierarchically, across "
                     f"them at {gpu.scale_out_bandwidth / 1e9:g} GB/s a GPU (topology.py)")
    if cap_pos is not None and max_seq_memory > max_seq:
        notes.append(f"max_seq is capped at the model's max_positions={cap_pos}; "
                     f"memory alone would allow {max_seq_memory:,}")
    doc: dict[str, Any] = {
        "model": model.name,
        "gpu": gpu.name,
        "workload": wl.model_dump(),
        "fits": fits_all,
        "verdict": verdict,
        "memory_per_rank": {
            "weights": one("mem_weights"),
            "kv_cache": one("mem_kv_cache"),
            "state_cache": one("mem_state_cache"),
            "activations": one("mem_activations"),
            "reserve": one("mem_reserve"),
            "total": one("mem_total"),
            "capacity": one("mem_capacity"),
        },
        "pp_stage": one("pp_stage"),
        "kv_heads_per_rank": kv_heads_per_rank(model, wl.tp),
        "kv_heads_replicated": kv_replicated(model, wl.tp),
        "kv_cache_form": kv_cache_form(model, wl.mla),
        "kv_cache_bytes_per_token_per_rank": kv_bytes_per_token(
            model, wl.kv, wl.tp, layers=max(pp_layers(model.n_layers, wl.pp)), mla=wl.mla),
        "kv_tokens_fit": one("kv_tokens_fit"),
        "max_batch": max_batch,
        "max_seq": max_seq,
        "max_seq_memory": max_seq_memory,
        "min_tp": min_tp,
        "min_pp": min_pp,
        # with expert parallelism the ep GPUs (a multiple of tp) each hold a replica's share
        "gpus": max(wl.tp, wl.ep) * wl.pp,
        "times": times,  # the roofline bound, by its first name (kept: the contract)
        "roofline_times": times,  # the same bound, by a name that says so (expected: calibrated)
        # the calibrated estimate (plan/perf.py) beside the bound, at B and at the largest batch
        "expected": at["expected"],
        "lower_bound": at["lower_bound"],
        "at_max_batch": estimates(cf, gpu, opts, terms, wl, peak, max_batch)
        if max_batch >= 1 else None,
        "perf_terms": terms.as_dict(),
    }
    if opts.price is not None:
        doc["cost_per_million_tokens"] = one("cost_per_million_tokens")
        doc["price_per_gpu_hour"] = opts.price
        doc["price_source"] = opts.price_source or "--price"
    doc["assumptions"] = {
        "lower_bound": True,
        "expected": "max(compute, memory) + communication + overhead with the perf_terms "
                    f"(plan/perf.py); defaults calibrated {DEFAULTS_DATE} on {DEFAULTS_DATA}",
        "utilization": opts.utilization,
        "compute_efficiency": opts.compute_efficiency,
        "memory_efficiency": opts.memory_efficiency,
        "link_efficiency": opts.link_efficiency,
        "compute_dtype": cdt,
        "widths": widths(wl, cdt),
        "peak_flops": peak,
        "hbm_bandwidth": gpu.hbm_bandwidth,
        "link_bandwidth": gpu.link_bandwidth,
        "attention": opts.attention,
        "max_batched_tokens": opts.max_batched_tokens,
        "activations": ACTIVATIONS,
        "kv_cache": f"paged: B × ⌈T/{wl.block_size}⌉ blocks of {wl.block_size} tokens",
    }
    doc["notes"] = notes
    return doc


