"""JSON Schemas of what compare, sweep and fit write (`shapecalc schema compare|sweep_row|fit`).

The models mirror the dicts plan/fit.py and plan/compare.py build; tests validate real output
against them with extra keys forbidden and integers strict, so the schema and the JSON contract
cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    RootModel,
    StrictBool,
    StrictInt,
    create_model,
)

from ..costs.described import RecordsChecked, WorkloadChecked, d, inline
from ..costs.described import Strict as _Strict
from ..costs.fields import EP_LEDGER, PP_LEDGER, SWEEP_COLUMNS, TOTALS, TP_LEDGER
from ..costs.schemas import ParallelOut, Totals
from ..model.config import ModelConfig, Workload
from .columns import FIT_COLUMNS, PRICE_COLUMNS

Bound = Literal["compute", "memory", "communication"]


# the head of every cost document (serve's `cost`, train's `time.cost`: plan/price.py)
PRICE_ROWS = (
    ("price_per_gpu_hour", float, "dollars per GPU-hour: --price, or the profile's default"),
    ("price_source", str, "\"--price\", or \"<GPU> profile default: <its page>\""),
    ("gpus", StrictInt, "GPUs the price is paid for"),
    ("per_hour", float, "dollars an hour: gpus × price_per_gpu_hour"))

class MemoryOut(_Strict):
    """Bytes per rank (of the fullest pipeline stage)."""

    weights: StrictInt = d("the stage's weights on one rank (quantization scales included)")
    kv_cache: StrictInt = d("the batch's paged KV cache on one rank (whole blocks)")
    state_cache: StrictInt = d("the stateful mixers' conv and recurrent states of the batch on "
                               "one rank")
    activations: StrictInt = d("peak activations of the prefill step (assumptions.activations)")
    reserve: StrictInt = d("memory held back: (1 − utilization) of the capacity")
    total: StrictInt = d("weights + kv_cache + state_cache + activations + reserve")
    capacity: StrictInt = d("the GPU's memory")


class TimesOut(_Strict):
    """Roofline lower bounds in seconds (tokens/s: an upper bound); null where no estimate."""

    prefill_s: float = d("seconds of the prefill step: max(compute, memory) + communication")
    decode_s_per_token: float | None = d("seconds of one decode step at T cached tokens")
    ttft_s: float = d("time to first token: the prefill step")
    itl_s: float | None = d("inter-token latency: one decode step (= decode_s_per_token)")
    tokens_per_s: float | None = d("output tokens per second of the batch: B / decode step")
    prefill_tokens_per_s: float = d("prompt tokens per second: B·T / prefill_s")
    prefill_bound: Bound = d("the prefill's largest term: compute, memory or communication")
    decode_bound: Bound | None = d("the decode step's largest term")
    prefill_compute_s: float = d("prefill FLOPs per rank / (peak × compute_efficiency)")
    prefill_memory_s: float = d("prefill bytes moved per rank / (HBM × memory_efficiency)")
    prefill_comm_s: float = d("prefill ring and pipeline bytes / (link × link_efficiency)")
    decode_compute_s: float | None = d("decode FLOPs per rank / (peak × compute_efficiency)")
    decode_memory_s: float | None = d("decode bytes read per rank (weights, KV, states) / "
                                      "(HBM × memory_efficiency)")
    decode_comm_s: float | None = d("decode ring and pipeline bytes / (link × link_efficiency)")


Term = Literal["compute", "memory", "communication", "overhead"]


class StepTerms(_Strict):
    """Expected seconds of one step per rank, term by term (plan/perf.py)."""

    compute: float = d("GEMMs and attention at their calibrated efficiency, s")
    memory: float = d("weights and KV reads at their calibrated efficiency, s")
    communication: float = d("all-reduces (latency + ring bytes) and pipeline boundaries, s")
    overhead: float = d("per-layer fixed time (launches, synchronisation), s")


class EstimateOut(_Strict):
    """Times of one batch: expected (calibrated) or the roofline lower bound; null where no
    decode estimate."""

    ttft_s: float = d("time to first token: the prefill step, s")
    decode_s_per_token: float | None = d("seconds of one decode step (one token per sequence)")
    tokens_per_s_per_sequence: float | None = d("output tokens per second of one sequence")
    tokens_per_s: float | None = d("output tokens per second of the batch")
    tokens_per_s_per_gpu: float | None = d("tokens_per_s over the GPUs of the deployment")
    prefill_dominant: Term = d("the prefill's largest term")
    decode_dominant: Term | None = d("the decode step's largest term")
    prefill_terms_s: StepTerms | None = d("the prefill's terms (expected only)", None)
    decode_terms_s: StepTerms | None = d("the decode step's terms (expected only)", None)


class AtBatchOut(_Strict):
    """The estimates at the largest batch that fits."""

    batch: StrictInt = d("the batch: max_batch")
    expected: EstimateOut = d("the calibrated expectation at that batch")
    lower_bound: EstimateOut = d("the roofline lower bound at that batch")


class PerfTermsOut(_Strict):
    """The performance model's terms (plan/perf.py; --perf key=value sets one)."""

    gemm_efficiency: float = d("fraction of peak FLOP/s a large GEMM reaches")
    gemm_half_tokens: float = d("tokens per step (GEMM rows) at which a GEMM reaches half of it")
    memory_efficiency: float = d("fraction of HBM bandwidth weight reads reach")
    attention_efficiency: float = d("fraction of HBM bandwidth the KV-cache reads and writes "
                                    "reach")
    layer_overhead_s: float = d("fixed seconds per layer per decode step (launches, sync)")
    prefill_layer_overhead_s: float = d("fixed seconds per layer of a prefill step")
    allreduce_latency_s: float = d("α: seconds per all-reduce, whatever its size")
    link_efficiency: float = d("fraction of the link bandwidth a ring all-reduce reaches")


class Assumptions(_Strict):
    """What the estimates assume."""

    lower_bound: Literal[True] = d("times, roofline_times and lower_bound are lower bounds")
    expected: str = d("how `expected` is computed, and where its defaults were calibrated")
    utilization: float = d("fraction of the GPU's memory the plan may use (--utilization)")
    compute_efficiency: float = d("the roofline's fraction of peak FLOP/s")
    memory_efficiency: float = d("the roofline's fraction of HBM bandwidth")
    link_efficiency: float = d("the roofline's fraction of link bandwidth")
    compute_dtype: str = d("the dtype the GEMMs run at (the peak read)")
    widths: dict[str, str] = d("weights, activations, all_reduce, kv_cache, compute → dtype")
    peak_flops: float = d("the GPU's peak FLOP/s at compute_dtype")
    hbm_bandwidth: float = d("the GPU's HBM bandwidth, bytes/s")
    link_bandwidth: float = d("the GPU's link bandwidth per GPU, bytes/s")
    attention: Literal["flash", "eager"] = d("flash: no [B,H,T,T] scores in memory; eager: "
                                             "scores materialised")
    max_batched_tokens: StrictInt | None = d("most tokens one prefill step takes (chunked "
                                             "prefill); null: the whole prompt")
    activations: str = d("how activation memory is counted")
    kv_cache: str = d("how KV-cache memory is counted (paged blocks)")


class FitOut(WorkloadChecked):
    """`fit --json`: does the workload fit on the GPU, and how fast."""

    model: str = d("the model's name")
    gpu: str = d("the GPU profile")
    workload: dict[str, Any] = d("the workload (shapecalc schema workload)")
    fits: StrictBool = d("the workload fits in memory and in the model's context")
    verdict: Literal["fits", "does not fit (memory)", "does not fit (context)"] = d(
        "fits, or why not")
    memory_per_rank: MemoryOut = d("bytes on one GPU of the fullest pipeline stage")
    pp_stage: StrictInt = d("the fullest pipeline stage (0-based): the one sized")
    kv_heads_per_rank: StrictInt = d("KV heads one rank holds: max(1, H_kv/p)")
    kv_heads_replicated: StrictBool = d("p > H_kv: KV heads are copied across ranks")
    kv_cache_form: str = d("what a token's cache entry is (totals.kv_cache_form)")
    kv_cache_bytes_per_token_per_rank: StrictInt = d("KV bytes of one token on one rank, the "
                                                     "fullest stage's layers")
    kv_tokens_fit: StrictInt = d("tokens the KV cache can hold in the free memory, all "
                                 "sequences")
    max_batch: StrictInt = d("the largest batch B that fits at this T")
    max_seq: StrictInt = d("the largest T that fits at this B (at most max_positions)")
    max_seq_memory: StrictInt = d("the largest T memory alone allows (beyond max_positions)")
    min_tp: StrictInt | None = d("the smallest tp that fits (null: none)")
    min_pp: StrictInt | None = d("the smallest pp that fits (null: none)")
    gpus: StrictInt = d("GPUs of the deployment: max(tp, ep) × pp")
    times: TimesOut = d("the roofline lower bound (its first name, kept): = roofline_times")
    roofline_times: TimesOut = d("the roofline lower bound; `expected` holds the calibrated "
                                 "time")
    expected: EstimateOut = d("the calibrated expectation at B (plan/perf.py)")
    lower_bound: EstimateOut = d("the roofline lower bound at B, in expected's form")
    at_max_batch: AtBatchOut | None = d("both estimates at max_batch (null: nothing fits)")
    perf_terms: PerfTermsOut = d("the performance model's terms")
    cost_per_million_tokens: float | None = d("dollars per million output tokens at the "
                                              "roofline decode rate (with a price: --price or "
                                              "the GPU profile's)", None)
    price_per_gpu_hour: float | None = d("dollars per GPU-hour: --price, or the profile's", None)
    price_source: str | None = d("where the price comes from: \"--price\", or \"<GPU> "
                                 "profile default: <its page>\"", None)
    assumptions: Assumptions = d("what the estimates assume")
    notes: list[str] = d("caveats: context, decode, multi-node links, capped max_seq")


class Derived(_Strict):
    """Rows compare derives from a prefill and a decode trace."""

    kv_heads_per_rank: StrictInt = d("KV heads one rank holds")
    kv_heads_replicated: StrictBool = d("p > H_kv: KV heads are copied across ranks")
    kv_replication: StrictInt = d("copies of each KV head: max(1, p/H_kv)")
    kv_cache_bytes_per_token_per_rank: StrictInt = d("KV bytes of one token on one rank, all "
                                                     "layers")
    kv_cache_bytes_per_sequence_per_rank: StrictInt = d("KV bytes of one sequence of T tokens "
                                                        "on one rank")
    kv_cache_bytes_per_rank: StrictInt = d("KV bytes of the batch on one rank")
    state_cache_bytes_per_rank: StrictInt = d("mixer-state bytes of the batch on one rank")
    pp_boundary_bytes_per_crossing: StrictInt = d("bytes of the residual stream [B,T,D] that "
                                                  "crosses one pipeline boundary")
    prefill_flops: StrictInt = d("matmul FLOPs of the prefill step")
    prefill_flops_per_rank: StrictInt = d("those FLOPs on one tensor-parallel rank")
    decode_flops: StrictInt | None = d("matmul FLOPs of one decode step (null: no decode step)")
    decode_flops_per_token: float | None = d("decode_flops / B")
    decode_bytes_read_per_rank: StrictInt | None = d("bytes one decode step reads per rank: "
                                                     "weights, KV cache, states")
    decode_arithmetic_intensity: float | None = d("decode FLOPs per rank / bytes read per rank")
    # one GPU of the fullest pipeline stage (fit's): the rows that follow --pp
    pp_stage: StrictInt = d("the fullest pipeline stage (0-based), fit's")
    stage_weight_bytes_per_rank: StrictInt = d("that stage's weight bytes on one rank")
    stage_kv_cache_bytes_per_rank: StrictInt = d("that stage's paged KV bytes on one rank")
    stage_kv_cache_bytes_per_token_per_rank: StrictInt = d("that stage's KV bytes of one token "
                                                           "on one rank")
    stage_kv_cache_bytes_per_sequence_per_rank: StrictInt = d("that stage's KV bytes of one "
                                                              "sequence on one rank")
    stage_prefill_flops_per_rank: StrictInt = d("that stage's prefill FLOPs on one rank")


class CompareItem(RecordsChecked):
    """One column: the trace's totals and parallel sections at the column's workload."""

    case: str = d("the column's label: the case as given")
    model: dict[str, Any] = d("the model's fields (shapecalc schema config)")
    workload: dict[str, Any] = d("the column's workload (shapecalc schema workload)")
    widths: dict[str, str] = d("weights, activations, all_reduce, kv_cache → dtype")
    totals: Totals = d("the trace's totals")  # type: ignore[valid-type]
    parallel: ParallelOut = d("the trace's TP, PP and EP ledgers")
    derived: Derived = d("rows derived from a prefill and a decode trace")
    fit: FitOut | None = d("fit at the column's workload (with --gpu)", None)


class CompareOut(RootModel[list[CompareItem]]):
    pass


Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


_TYPES: dict[str, Any] = {"int": StrictInt, "bool": StrictBool, "float": float, "bound": Bound,
                          "term": Literal["compute", "memory", "communication", "overhead"]}
# One line of `sweep` (JSON Lines; CSV has the same columns): the point, the trace's numbers
# (SWEEP_COLUMNS, declared in costs/fields.py), then with --gpu the fit and time keys (the cost
# with --price).
def _fit_docs() -> dict[str, str]:
    """The fit and time columns' descriptions, read off the fit schema's keys they flatten."""
    def of(model: Any, key: str) -> str:
        return str(model.model_fields[key].description)

    out = {"fits": of(FitOut, "fits"), "kv_tokens_fit": of(FitOut, "kv_tokens_fit"),
           "cost_per_million_tokens": of(FitOut, "cost_per_million_tokens")}
    for k in MemoryOut.model_fields:
        out[f"mem_{k}"] = f"memory_per_rank.{k}: {of(MemoryOut, k)}"
    for k in TimesOut.model_fields:
        out[k] = f"the roofline lower bound: {of(TimesOut, k)}"
    for k in EstimateOut.model_fields:
        out[f"expected_{k}"] = f"the calibrated expectation: {of(EstimateOut, k)}"
    return out


_COLUMN_DOCS = {f.column: f.doc for f in (*TOTALS, *TP_LEDGER, *PP_LEDGER, *EP_LEDGER)
                if f.column is not None}
_FIT_DOCS = _fit_docs()
# One line of `sweep` (JSON Lines; CSV has the same columns): the point, the trace's numbers
# (SWEEP_COLUMNS, declared in costs/fields.py), then with --gpu the fit and time keys (the cost
# with --price).
SweepRow = create_model(  # type: ignore[call-overload]
    "SweepRow", __base__=_Strict,
    case=(str, d("the case as given")), model=(str, d("the model's name")),
    batch=(StrictInt, d("B: sequences in the batch")),
    seq=(StrictInt, d("T: prompt tokens (prefill) or tokens already cached (decode)")),
    phase=(Literal["prefill", "decode"], d("prefill or decode")),
    tp=(StrictInt, d("tensor-parallel degree p")), pp=(StrictInt, d("pipeline stages s")),
    dtype=(Dtype, d("weight dtype")), kv_dtype=(Dtype, d("KV-cache dtype")),
    act_dtype=(Dtype, d("activation dtype")),
    **{k: (StrictInt, d(_COLUMN_DOCS[k])) for k in SWEEP_COLUMNS},
    **{k: (_TYPES[t] | None, d(f"{_FIT_DOCS[k]} (with --gpu)", None))
       for k, t in (*FIT_COLUMNS, *PRICE_COLUMNS)},
)


def schemas() -> dict[str, dict[str, Any]]:
    compare = CompareOut.model_json_schema()
    inline(compare, "model", ModelConfig, "CompareItem")
    for holder in ("CompareItem", "FitOut"):
        inline(compare, "workload", Workload, holder)
    fit = FitOut.model_json_schema()
    inline(fit, "workload", Workload)
    return {"compare": compare, "sweep_row": SweepRow.model_json_schema(), "fit": fit}
