"""The expected time of a step: a calibrated model of how GPUs run one, next to the roofline
lower bound (memory.phase_terms). The one home of its terms:

- compute = FLOPs / (peak × gemm_efficiency × M/(M + gemm_half_tokens)): large GEMMs reach a
  fraction of peak; skinny ones (M = the step's tokens, B in decode) reach less. FLOPs are a
  causal kernel's (memory.step_flops: attention's lower triangle).
- memory = the bound's bytes / HBM bandwidth, the weights (only the looked-up embedding rows)
  at memory_efficiency, the KV cache (written in prefill, read once in decode: FlashAttention-
  style, no [T,T] scores to memory) at attention_efficiency.
- communication = per all-reduce a latency α (allreduce_latency_s) + ring bytes / (link ×
  link_efficiency); pipeline boundary bytes at the same link.
- overhead = per layer per step, layer_overhead_s in decode (CUDA graphs replay it) and
  prefill_layer_overhead_s in prefill (kernel launches, synchronisation, host work).
- step = max(compute, memory) + communication + overhead. With efficiencies ≤ 1 and costs ≥ 0
  each term is ≥ the bound's, so expected ≥ lower bound.

Defaults: perf_defaults.py, written by `shapecalc calibrate` (plan/calibrate.py) from published
measurements; a GPU profile's [perf] table, `--set-gpu perf.NAME=V` and `--perf NAME=V` override.
Plain Python or NumPy (`xp`, as memory.py): no imports beyond the planners'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from ..costs.closed import ClosedForm
from ..inputs.hardware import GPU, check_term
from ..inputs.numbers import named_numbers
from ..lean import dataclass
from .memory import step_bytes, step_flops
from .perf_defaults import PARAMS
from .topology import link_rates, topology

TERMS = ("compute", "memory", "communication", "overhead")


@dataclass(frozen=True)
class PerfParams:
    gemm_efficiency: float  # fraction of peak FLOP/s a large GEMM reaches
    gemm_half_tokens: float  # tokens per step (GEMM rows M) at which it reaches half of that
    memory_efficiency: float  # fraction of HBM bandwidth weight reads reach
    attention_efficiency: float  # fraction of HBM bandwidth the KV-cache reads/writes reach
    layer_overhead_s: float  # fixed seconds per layer per decode step (launches, sync)
    prefill_layer_overhead_s: float  # the same per layer of a prefill step
    allreduce_latency_s: float  # α: seconds per all-reduce, whatever its size
    link_efficiency: float  # fraction of the link bandwidth a ring all-reduce reaches

    def __post_init__(self) -> None:
        for f in fields(self):
            check_term(f.name, getattr(self, f.name))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


NAMES = tuple(f.name for f in fields(PerfParams))
def perf_overrides(sets: list[str] | None) -> tuple[str, ...]:
    """`NAME=VALUE` items, checked (a known name, a number in its range); kept as given."""
    for key, value, _ in named_numbers(sets, "perf", NAMES):
        check_term(key, value)
    return tuple(sets or ())


def perf_params(gpu: GPU, sets: list[str] | tuple[str, ...] | None = None) -> PerfParams:
    """The calibrated defaults, then the GPU profile's [perf] table, then `NAME=VALUE` sets."""
    out = PerfParams(**PARAMS)
    table: Any = gpu.perf  # a PerfTerms record (or a dict, as a caller may build one)
    if table is not None:
        table = table if isinstance(table, dict) else table.model_dump()
        out = replace(out, **{k: v for k, v in table.items() if v is not None})
    for item in perf_overrides(list(sets or ())):
        key, _, text = item.partition("=")
        out = replace(out, **{key.strip(): float(text)})
    return out


def step_terms(cf: ClosedForm, gpu: GPU, pp: PerfParams, tot: Mapping[str, Any], peak: Any,
               tokens: Any, wbits: Any, xp: Any, ep: int = 1, decode: bool = False,
               stages: Any = 1, dp: int = 1, rates: Any = None) -> tuple[Any, Any, Any, Any]:
    """(compute, memory, communication, overhead) expected seconds of one step per rank.
    Collectives by where their ranks sit (topology.py: a tp group across scale-up domains is
    hierarchical; a pipeline boundary that ends a domain crosses the network); `dp`: attention
    ranks whose tokens each GPU's experts serve (plan/ep.py); `rates`: link_rates of this
    gpu, tp and stages, where a caller (serve's step) has them already."""
    m = cf.model
    flops = step_flops(cf, tot, ep, dp)
    rows = xp.floats(tokens)
    eff = pp.gemm_efficiency * rows / (rows + pp.gemm_half_tokens)
    compute = xp.floats(flops) / (peak * eff)
    kv = xp.floats(tot["kv_cache_bytes_per_rank"])
    weights = xp.floats(step_bytes(cf, tot, tokens, wbits, xp, ep, dp)) - kv
    memory = (weights / pp.memory_efficiency + kv / pp.attention_efficiency) / gpu.hbm_bandwidth
    n_ar = tot["allreduce_per_layer"] * m.n_layers * (tot["tp"] > 1)
    ring_bw, ring_lat, bound_bw, inside = rates or link_rates(
        topology(gpu, pp.link_efficiency), tot["tp"], stages)
    # inside one domain: the formula before the topology (the same floats)
    link = xp.floats(tot["ring_bytes_per_rank_total"] + tot["boundary_bytes_total"]) / (
        gpu.link_bandwidth * pp.link_efficiency)
    if inside is not True:
        spans = (xp.floats(tot["ring_bytes_per_rank_total"]) / ring_bw
                 + xp.floats(tot["boundary_bytes_total"]) / bound_bw)
        link = spans if inside is False else _where(inside, link, spans)
    comm = xp.floats(n_ar) * (pp.allreduce_latency_s + ring_lat) + link
    per_layer = pp.layer_overhead_s if decode else pp.prefill_layer_overhead_s
    overhead = xp.floats(tot["tp"]) * 0.0 + m.n_layers * per_layer
    return compute, memory, comm, overhead


def _where(inside: Any, a: Any, b: Any) -> Any:
    import numpy as np  # arrays only: a sweep has NumPy loaded already

    return np.where(inside, a, b)


def step_seconds(terms: tuple[Any, Any, Any, Any], xp: Any) -> Any:
    c, mem, comm, over = terms
    return xp.maximum(c, mem) + comm + over


def dominant(terms: tuple[Any, Any, Any, Any]) -> Any:
    """The largest term of one step: a name (plain numbers) or an array of names (None where
    there is no estimate)."""
    if isinstance(terms[0], float):
        return None if any(t != t for t in terms) else TERMS[terms.index(max(terms))]
    from ..costs.grid import largest_of  # arrays only: a sweep has NumPy loaded already

    return largest_of(terms, TERMS)


def expected_prefill(cf: ClosedForm, gpu: GPU, pp: PerfParams, pre: Mapping[str, Any], peak: Any,
                     tokens: Any, wbits: Any, xp: Any, ep: int = 1, stages: Any = 1
                     ) -> dict[str, Any]:
    """The expected_* prefill columns of sweep and of fit's point."""
    pt = step_terms(cf, gpu, pp, pre, peak, tokens, wbits, xp, ep, stages=stages)
    return {"expected_ttft_s": step_seconds(pt, xp), "expected_prefill_dominant": dominant(pt)}


def expected_decode(cf: ClosedForm, gpu: GPU, pp: PerfParams, dec: Mapping[str, Any], peak: Any,
                    B: Any, serving: Any, wbits: Any, xp: Any, ep: int = 1, stages: Any = 1
                    ) -> dict[str, Any]:
    """The expected_* decode columns (`serving`: the GPUs that serve the batch)."""
    dt = step_terms(cf, gpu, pp, dec, peak, B, wbits, xp, ep, decode=True, stages=stages)
    d = step_seconds(dt, xp)
    return {
        "expected_decode_s_per_token": d,
        "expected_tokens_per_s": xp.floats(B) / d,
        "expected_tokens_per_s_per_gpu": xp.floats(B) / d / serving,
        "expected_decode_dominant": dominant(dt),
    }


DECODE_COLUMNS = ("expected_decode_s_per_token", "expected_tokens_per_s",
                  "expected_tokens_per_s_per_gpu", "expected_decode_dominant")


def expected_times(cf: ClosedForm, gpu: GPU, pp: PerfParams, pre: Mapping[str, Any],
                   dec: Mapping[str, Any] | None, peak: float, B: int, T: int, gpus: int,
                   wbits: int, xp: Any, ep: int = 1, stages: Any = 1) -> dict[str, Any]:
    """The `expected` block of fit: TTFT (prefill of B×T), decode per token at T cached tokens,
    tokens/s per sequence, for the batch and per GPU, and the dominating terms."""
    pt = step_terms(cf, gpu, pp, pre, peak, B * T, wbits, xp, ep, stages=stages)
    ttft = step_seconds(pt, xp)
    out: dict[str, Any] = {
        "ttft_s": ttft,
        "prefill_terms_s": dict(zip(TERMS, pt, strict=True)),
        "prefill_dominant": dominant(pt),
        "decode_s_per_token": None, "tokens_per_s_per_sequence": None,
        "tokens_per_s": None, "tokens_per_s_per_gpu": None,
        "decode_terms_s": None, "decode_dominant": None,
    }
    if dec is not None:
        dt = step_terms(cf, gpu, pp, dec, peak, B, wbits, xp, ep, decode=True, stages=stages)
        d = step_seconds(dt, xp)
        out.update({
            "decode_s_per_token": d,
            "tokens_per_s_per_sequence": 1.0 / d,
            "tokens_per_s": B / d,
            "tokens_per_s_per_gpu": B / d / gpus,
            "decode_terms_s": dict(zip(TERMS, dt, strict=True)),
            "decode_dominant": dominant(dt),
        })
    return out
