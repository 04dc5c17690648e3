"""JSON Schemas of what compare, sweep and fit write (`shapecalc schema compare|sweep_row|fit`).

The models mirror the dicts plan/fit.py and plan/compare.py build; tests validate real output
against them with extra keys forbidden and integers strict, so the schema and the JSON contract
cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    RootModel,
    StrictBool,
    StrictInt,
    create_model,
    field_validator,
)

from ..costs.fields import SWEEP_COLUMNS
from ..costs.schemas import ParallelOut, Totals
from ..model.config import ModelConfig, Workload
from .columns import FIT_COLUMNS, PRICE_COLUMNS

Bound = Literal["compute", "memory", "communication"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _WithWorkload(_Strict):
    @field_validator("workload", check_fields=False)
    @classmethod
    def _workload(cls, v: dict[str, Any]) -> dict[str, Any]:
        Workload.model_validate(v)
        return v


class MemoryOut(_Strict):
    """Bytes per rank (of the fullest pipeline stage)."""

    weights: StrictInt
    kv_cache: StrictInt
    state_cache: StrictInt  # the stateful mixers' conv and recurrent states of the batch
    activations: StrictInt
    reserve: StrictInt
    total: StrictInt
    capacity: StrictInt


class TimesOut(_Strict):
    """Roofline lower bounds in seconds (tokens/s: an upper bound); null where no estimate."""

    prefill_s: float
    decode_s_per_token: float | None
    ttft_s: float
    itl_s: float | None
    tokens_per_s: float | None
    prefill_tokens_per_s: float
    prefill_bound: Bound
    decode_bound: Bound | None
    prefill_compute_s: float
    prefill_memory_s: float
    prefill_comm_s: float
    decode_compute_s: float | None
    decode_memory_s: float | None
    decode_comm_s: float | None


Term = Literal["compute", "memory", "communication", "overhead"]


class StepTerms(_Strict):
    """Expected seconds of one step per rank, term by term (plan/perf.py)."""

    compute: float
    memory: float
    communication: float
    overhead: float


class EstimateOut(_Strict):
    """Times of one batch: expected (calibrated) or the roofline lower bound; null where no
    decode estimate."""

    ttft_s: float
    decode_s_per_token: float | None
    tokens_per_s_per_sequence: float | None
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    prefill_dominant: Term
    decode_dominant: Term | None
    prefill_terms_s: StepTerms | None = None  # expected only
    decode_terms_s: StepTerms | None = None


class AtBatchOut(_Strict):
    batch: StrictInt
    expected: EstimateOut
    lower_bound: EstimateOut


class PerfTermsOut(_Strict):
    gemm_efficiency: float
    gemm_half_tokens: float
    memory_efficiency: float
    attention_efficiency: float
    layer_overhead_s: float
    prefill_layer_overhead_s: float
    allreduce_latency_s: float
    link_efficiency: float


class Assumptions(_Strict):
    lower_bound: Literal[True]
    expected: str
    utilization: float
    compute_efficiency: float
    memory_efficiency: float
    link_efficiency: float
    compute_dtype: str
    widths: dict[str, str]  # weights, activations, all_reduce, kv_cache, compute → dtype
    peak_flops: float
    hbm_bandwidth: float
    link_bandwidth: float
    attention: Literal["flash", "eager"]
    max_batched_tokens: StrictInt | None
    activations: str
    kv_cache: str


class FitOut(_WithWorkload):
    model: str
    gpu: str
    workload: dict[str, Any]
    fits: StrictBool
    verdict: Literal["fits", "does not fit (memory)", "does not fit (context)"]
    memory_per_rank: MemoryOut
    pp_stage: StrictInt
    kv_heads_per_rank: StrictInt
    kv_heads_replicated: StrictBool
    kv_cache_form: str
    kv_cache_bytes_per_token_per_rank: StrictInt
    kv_tokens_fit: StrictInt
    max_batch: StrictInt
    max_seq: StrictInt
    max_seq_memory: StrictInt
    min_tp: StrictInt | None
    min_pp: StrictInt | None
    gpus: StrictInt
    times: TimesOut  # the roofline lower bound (its first name, kept): = roofline_times
    roofline_times: TimesOut  # the roofline lower bound; `expected` holds the calibrated time
    expected: EstimateOut
    lower_bound: EstimateOut
    at_max_batch: AtBatchOut | None
    perf_terms: PerfTermsOut
    cost_per_million_tokens: float | None = None  # present with a price (--price or the GPU's)
    price_per_gpu_hour: float | None = None
    price_source: str | None = None  # "--price", or "<GPU> profile default: <its page>"
    assumptions: Assumptions
    notes: list[str]


class Derived(_Strict):
    kv_heads_per_rank: StrictInt
    kv_heads_replicated: StrictBool
    kv_replication: StrictInt
    kv_cache_bytes_per_token_per_rank: StrictInt
    kv_cache_bytes_per_sequence_per_rank: StrictInt
    kv_cache_bytes_per_rank: StrictInt
    state_cache_bytes_per_rank: StrictInt
    pp_boundary_bytes_per_crossing: StrictInt
    prefill_flops: StrictInt
    prefill_flops_per_rank: StrictInt
    decode_flops: StrictInt | None
    decode_flops_per_token: float | None
    decode_bytes_read_per_rank: StrictInt | None
    decode_arithmetic_intensity: float | None
    # one GPU of the fullest pipeline stage (fit's): the rows that follow --pp
    pp_stage: StrictInt
    stage_weight_bytes_per_rank: StrictInt
    stage_kv_cache_bytes_per_rank: StrictInt
    stage_kv_cache_bytes_per_token_per_rank: StrictInt
    stage_kv_cache_bytes_per_sequence_per_rank: StrictInt
    stage_prefill_flops_per_rank: StrictInt


class CompareItem(_WithWorkload):
    """One column: the trace's totals and parallel sections at the column's workload."""

    case: str
    model: dict[str, Any]
    workload: dict[str, Any]
    widths: dict[str, str]  # weights, activations, all_reduce, kv_cache → dtype
    totals: Totals  # type: ignore[valid-type]
    parallel: ParallelOut
    derived: Derived
    fit: FitOut | None = None  # with --gpu

    @field_validator("model")
    @classmethod
    def _model(cls, v: dict[str, Any]) -> dict[str, Any]:
        ModelConfig.model_validate(v)
        return v


class CompareOut(RootModel[list[CompareItem]]):
    pass


Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


_TYPES: dict[str, Any] = {"int": StrictInt, "bool": StrictBool, "float": float, "bound": Bound,
                          "term": Literal["compute", "memory", "communication", "overhead"]}
# One line of `sweep` (JSON Lines; CSV has the same columns): the point, the trace's numbers
# (SWEEP_COLUMNS, declared in costs/fields.py), then with --gpu the fit and time keys (the cost
# with --price).
SweepRow = create_model(  # type: ignore[call-overload]
    "SweepRow", __base__=_Strict,
    case=(str, ...), model=(str, ...), batch=(StrictInt, ...), seq=(StrictInt, ...),
    phase=(Literal["prefill", "decode"], ...), tp=(StrictInt, ...), pp=(StrictInt, ...),
    dtype=(Dtype, ...), kv_dtype=(Dtype, ...), act_dtype=(Dtype, ...),
    **{k: (StrictInt, ...) for k in SWEEP_COLUMNS},
    **{k: (_TYPES[t] | None, None) for k, t in (*FIT_COLUMNS, *PRICE_COLUMNS)},
)


def schemas() -> dict[str, dict[str, Any]]:
    compare = CompareOut.model_json_schema()
    fit = FitOut.model_json_schema()
    fit["properties"]["workload"] = Workload.model_json_schema()
    return {"compare": compare, "sweep_row": SweepRow.model_json_schema(), "fit": fit}
