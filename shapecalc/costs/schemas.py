"""JSON Schemas of what shapecalc reads (config, workload) and writes (trace, …).

The output models mirror the dicts that trace.py builds; tests validate real output against them
with extra keys forbidden, so the schema and the JSON contract cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, create_model, field_validator
from pydantic import Field as PydField

from ..model.config import ModelConfig, Workload
from .fields import EP_LEDGER, PP_LEDGER, TOTALS, TP_LEDGER, Field


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
    operands: list[list[int]]
    operand_dims: list[list[str]]
    mask_dims: list[str] | None = None
    factor: float | None = None  # a scale stage's factor (verify measures it)


class KindParams(_Strict):
    kind: int
    label: str
    attention: str
    window: int | None
    chunk: int | None  # C of a chunked layer (Llama 4)
    nope: bool  # a layer without RoPE in a RoPE model (Llama 4)
    ffn: str
    count: int
    attention_per_layer: int
    ffn_per_layer: int
    norms_per_layer: int
    mixer_per_layer: int  # a stateful token mixer's (Mamba-2, gated DeltaNet) parameters
    hyper_per_layer: int  # the hyper-connections' (mHC) parameters of one layer
    compressor_per_layer: int  # DeepSeek-V4's compressors and csa indexer, one layer
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
    embedding_norm: int  # BLOOM's norm after the embedding lookup (0 without one)
    hyper_head: int  # the hyper-connections' head (mHC's last collapse; 0 without one)


class LayerKind(_Strict):
    kind: int
    label: str
    attention: str
    window: int | None
    chunk: int | None
    nope: bool
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
    token_mixers: int  # the stateful token mixers' matmuls and convolutions
    hyper_connections: int  # the mHC projections and combᵀ·x (0 without hyper-connections)
    compressors: int  # DeepSeek-V4's compressors' and csa indexer's matmuls (0 without them)


class Activation(_Strict):
    name: str
    dims: list[str]
    shape: list[int]
    bytes: int


class KvGroup(_Strict):
    window: int | None
    chunk: int | None
    layers: int
    tokens: int
    bytes: int


class WeightParts(_Strict):
    data: int
    scales: int
    zeros: int
    other: int
    unquantized: int


class WeightTensor(_Strict):
    name: str
    shape: list[int]
    dtype: str
    part: str
    count: int
    bytes: int


class SelectedAttention(_Strict):
    convention: str  # eager | sparse: what `flops` counts
    flops: dict[str, int]  # the step's FLOPs under each convention
    top_k: int
    indexer_heads: int
    indexer_head_dim: int
    indexer_cache_bytes: int  # in the KV dtype (transformers), part of kv_cache_bytes
    indexer_cache_bytes_reference: int  # fp8 + an fp32 scale per 128 (DeepSeek's reference)


class SplitOut(_Strict):
    weight: str
    split: str
    params_per_rank: int


def _section(name: str, fields: tuple[Field, ...]) -> type[BaseModel]:
    """A schema made from the declarations in fields.py (their docs become descriptions)."""
    types: dict[str, Any] = {"int": int, "int|null": int | None, "bool": bool, "str": str,
                             "float": float,
                             "list[int]": list[int],
                             "list[Split]": list[SplitOut], "ParamsBreakdown": ParamsBreakdown,
                             "FlopsBreakdown": FlopsBreakdown, "Activation": Activation,
                             "list[KvGroup]": list[KvGroup], "WeightParts": WeightParts,
                             "list[WeightTensor]": list[WeightTensor],
                             "SelectedAttention|null": SelectedAttention | None}
    return create_model(  # type: ignore[call-overload, no-any-return]
        name, __base__=_Strict,
        **{f.name: (types[f.type], PydField(description=f.doc)) for f in fields})


Totals = _section("Totals", TOTALS)
TPOut = _section("TPOut", TP_LEDGER)
PPOut = _section("PPOut", PP_LEDGER)
EPOut = _section("EPOut", EP_LEDGER)


class ParallelOut(_Strict):
    tp: TPOut  # type: ignore[valid-type]
    pp: PPOut  # type: ignore[valid-type]
    ep: EPOut  # type: ignore[valid-type]


class TraceOut(_Strict):
    model: dict[str, Any]
    workload: dict[str, Any]
    widths: dict[str, str]  # weights, activations, all_reduce, kv_cache → dtype
    layers: LayerPlanOut
    stages: list[StageOut]
    totals: Totals  # type: ignore[valid-type]
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
