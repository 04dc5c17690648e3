"""JSON Schemas of what shapecalc reads (config, workload) and writes (trace, …).

The output models mirror the dicts that trace.py builds; tests validate real output against them
with extra keys forbidden, so the schema and the JSON contract cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from ..model.config import ModelConfig, Workload


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StageOut(_Strict):
    name: str
    op: str
    group: str
    dims: list[str]
    shape: list[int]
    flops: int
    flops_formula: str
    elementwise_flops: int
    elementwise_formula: str
    params: int
    params_formula: str
    bytes: int
    dtype: str
    repeat: int
    note: str
    split: str
    role: str
    kind: int | None
    mask_dims: list[str] | None = None


class KindParams(_Strict):
    kind: int
    label: str
    attention: str
    window: int | None
    ffn: str
    count: int
    attention_per_layer: int
    ffn_per_layer: int
    norms_per_layer: int
    per_layer: int
    layers: int


class ParamsBreakdown(_Strict):
    embedding: int
    positions: int
    attention_per_layer: int | None  # None when the layers are not all alike: see per_kind
    ffn_per_layer: int | None
    norms_per_layer: int | None
    per_layer: int | None
    layers: int
    final_norm: int
    lm_head: int
    total: int
    per_kind: list[KindParams]


class LayerKind(_Strict):
    kind: int
    label: str
    attention: str
    window: int | None
    ffn: str
    norm: str
    norm_position: str
    count: int


class LayerRun(_Strict):
    kind: int
    first: int
    count: int


class LayerPlanOut(_Strict):
    kinds: list[LayerKind]
    runs: list[LayerRun]


class FlopsBreakdown(_Strict):
    attention_projections: int
    attention_scores: int
    ffn: int
    lm_head: int


class Activation(_Strict):
    name: str
    dims: list[str]
    shape: list[int]
    bytes: int


class Totals(_Strict):
    params: int
    params_breakdown: ParamsBreakdown
    flops: int
    flops_breakdown: FlopsBreakdown
    elementwise_flops: int
    weight_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    kv_cache_bytes_per_token: int
    kv_cache_blocks: int
    kv_cache_paged_bytes: int
    largest_activation: Activation


class SplitOut(_Strict):
    weight: str
    split: str
    params_per_rank: int


class TPOut(_Strict):
    degree: int
    heads_per_rank: int
    kv_heads_per_rank: int
    kv_heads_replicated: bool
    d_ff_per_rank: int
    vocab_per_rank: int
    splits: list[SplitOut]
    allreduce_per_layer: int
    allreduce_bytes: int
    allreduce_bytes_per_layer: int
    allreduce_bytes_total: int
    ring_bytes_per_rank: int
    ring_bytes_per_rank_total: int
    embedding_allreduce_bytes: int
    logits_allgather_bytes: int
    params_per_rank: int
    weight_bytes_per_rank: int
    kv_cache_bytes_per_rank: int
    flops_per_rank: int
    largest_activation_bytes_per_rank: int


class PPOut(_Strict):
    stages: int
    layers_per_stage: list[int]
    boundaries: int
    boundary_bytes: int
    boundary_bytes_total: int
    params_per_stage: list[int]
    weight_bytes_per_stage: list[int]
    kv_cache_bytes_per_stage: list[int]


class ParallelOut(_Strict):
    tp: TPOut
    pp: PPOut


class TraceOut(_Strict):
    model: dict[str, Any]
    workload: dict[str, Any]
    layers: LayerPlanOut
    stages: list[StageOut]
    totals: Totals
    parallel: ParallelOut
    rank_stages: list[StageOut] | None = None  # with --per-rank and p > 1

    @field_validator("model")
    @classmethod
    def _model(cls, v: dict[str, Any]) -> dict[str, Any]:
        ModelConfig.model_validate(v)
        return v

    @field_validator("workload")
    @classmethod
    def _workload(cls, v: dict[str, Any]) -> dict[str, Any]:
        Workload.model_validate(v)
        return v


def trace_schema() -> dict[str, Any]:
    schema = TraceOut.model_json_schema()
    schema["properties"]["model"] = ModelConfig.model_json_schema()
    schema["properties"]["workload"] = Workload.model_json_schema()
    return schema
