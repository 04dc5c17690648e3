"""JSON Schemas of what shapecalc reads (config, workload) and writes (trace, …).

The output models mirror the dicts that trace.py builds; tests validate real output against them
with extra keys forbidden, so the schema and the JSON contract cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, create_model
from pydantic import Field as PydField

from ..model.config import ModelConfig, Workload
from .described import RecordsChecked, d, inline
from .described import Strict as _Strict
from .fields import EP_LEDGER, PP_LEDGER, TOTALS, TP_LEDGER, Field


class StageOut(_Strict):
    """One step of the forward pass: what it produces and what it costs, per occurrence."""

    name: str = d("the stage's printed name (display text; `role` says what it is)")
    op: str = d("the operation: linear, matmul, rmsnorm, softmax, rope, ...")
    group: str = d("where it runs: embedding, block (a layer), head or mtp")
    dims: list[str] = d("the output's dimensions in symbols (B, T, D, H/p, ...)")
    shape: list[int] = d("the output's dimensions in numbers")
    flops: int = d("matmul FLOPs of one occurrence (1 multiply-add = 2 FLOPs)")
    flops_formula: str = d("flops in symbols, derived from the operand dims")
    elementwise_flops: int = d("elementwise FLOPs of one occurrence, counted apart")
    elementwise_formula: str = d("elementwise_flops in symbols")
    params: int = d("parameters the stage owns")
    params_formula: str = d("params in symbols")
    bytes: int = d("bytes of the output it writes")
    dtype: str = d("the output's dtype")
    repeat: int = d("occurrences: the layers of its kind that run it (1 outside the blocks)")
    note: str = d("a short remark: its split, a weight's name, what it skips")
    split: str = d("how tensor parallelism shards its weight: column, row, vocab (empty: none)")
    role: str = d("what the stage is (attn.qkv, attn.scores, ffn.up, moe.experts.up, ...)")
    kind: int | None = d("a block stage's layer kind (an index into layers.kinds); null "
                         "outside the blocks")
    operands: list[list[int]] = d("a matmul's [m,k] and [k,n] (with batch dims); empty "
                                  "otherwise")
    operand_dims: list[list[str]] = d("the operands in symbols")
    mask_dims: list[str] | None = d("a mask stage's dims (what it masks)", None)
    factor: float | None = d("a scale stage's factor (verify measures it)", None)


class KindParams(_Strict):
    """The parameters of one layer kind."""

    kind: int = d("the kind's index into layers.kinds")
    label: str = d("the kind in words: its token mixer and channel mixer")
    attention: str = d("the attention's reach: full, sliding or chunked (label names "
                     "the token mixer)")
    window: int | None = d("W of a sliding-window kind; null otherwise")
    chunk: int | None = d("C of a chunked kind (Llama 4); null otherwise")
    nope: bool = d("a layer without RoPE in a RoPE model (Llama 4)")
    ffn: str = d("its channel mixer: dense, moe or none")
    count: int = d("layers of this kind")
    attention_per_layer: int = d("attention parameters of one layer")
    ffn_per_layer: int = d("FFN (or MoE) parameters of one layer")
    norms_per_layer: int = d("norm parameters of one layer")
    mixer_per_layer: int = d("a stateful token mixer's (Mamba-2, gated DeltaNet) parameters, "
                             "one layer")
    hyper_per_layer: int = d("the hyper-connections' (mHC) parameters of one layer")
    compressor_per_layer: int = d("DeepSeek-V4's compressors and csa indexer, one layer")
    per_layer: int = d("all parameters of one layer")
    layers: int = d("per_layer × count")


class ParamsBreakdown(_Strict):
    """Parameters by part and by layer kind."""

    embedding: int = d("the token embedding")
    positions: int = d("learned position embeddings (0 without)")
    attention_per_layer: int | None = d("attention parameters of a layer; null when the layers "
                                        "are not all alike: see per_kind")
    ffn_per_layer: int | None = d("FFN parameters of a layer (null: see per_kind)")
    norms_per_layer: int | None = d("norm parameters of a layer (null: see per_kind)")
    per_layer: int | None = d("all parameters of a layer (null: see per_kind)")
    layers: int = d("all layers' parameters")
    final_norm: int = d("the norm before the LM head")
    lm_head: int = d("the LM head (0 when tied to the embedding)")
    total: int = d("all parameters: totals.params")
    per_kind: list[KindParams] = d("the parameters of each layer kind")
    embedding_norm: int = d("BLOOM's norm after the embedding lookup (0 without one)")
    hyper_head: int = d("the hyper-connections' head (mHC's last collapse; 0 without one)")


class LayerKind(_Strict):
    """One kind of layer of the plan."""

    kind: int = d("its index, which stages' `kind` names")
    label: str = d("the kind in words: its token mixer and channel mixer")
    attention: str = d("the attention's reach: full, sliding or chunked (label names "
                     "the token mixer)")
    window: int | None = d("W of a sliding-window kind; null otherwise")
    chunk: int | None = d("C of a chunked kind (Llama 4); null otherwise")
    nope: bool = d("a layer without RoPE in a RoPE model (Llama 4)")
    ffn: str = d("its channel mixer: dense, moe or none")
    norm: str = d("its norm: rmsnorm or layernorm")
    norm_position: str = d("where its norms sit: pre, post, sandwich or output")
    count: int = d("layers of this kind")


class LayerRun(_Strict):
    """Consecutive layers of one kind."""

    kind: int = d("the kind (an index into kinds)")
    first: int = d("the run's first layer (0-based)")
    count: int = d("layers in the run")


class LayerPlanOut(_Strict):
    """Which layer has which kind."""

    kinds: list[LayerKind] = d("the distinct kinds of layer")
    runs: list[LayerRun] = d("the layers in order, as runs of one kind")


class FlopsBreakdown(_Strict):
    """Matmul FLOPs by where they go."""

    attention_projections: int = d("Q, K, V, output (and gate) projections")
    attention_scores: int = d("QKᵀ and A·V")
    ffn: int = d("the FFN or MoE matmuls (router included)")
    lm_head: int = d("the LM head")
    token_mixers: int = d("the stateful token mixers' matmuls and convolutions")
    hyper_connections: int = d("the mHC projections and combᵀ·x (0 without hyper-connections)")
    compressors: int = d("DeepSeek-V4's compressors' and csa indexer's matmuls (0 without them)")


class Activation(_Strict):
    """A tensor the step writes."""

    name: str = d("the stage that writes it")
    dims: list[str] = d("its dimensions in symbols")
    shape: list[int] = d("its dimensions in numbers")
    bytes: int = d("its bytes")


class KvGroup(_Strict):
    """The KV cache of the layers that share a reach."""

    window: int | None = d("W of sliding-window layers; null otherwise")
    chunk: int | None = d("C of chunked layers; null otherwise")
    layers: int = d("layers in the group")
    tokens: int = d("tokens per sequence each layer of the group keeps")
    bytes: int = d("the group's KV bytes, all sequences")


class WeightParts(_Strict):
    """Weight bytes by what they are."""

    data: int = d("the quantized weights' own bytes")
    scales: int = d("their block scales")
    zeros: int = d("their zero points")
    other: int = d("other bytes a quantized checkpoint stores")
    unquantized: int = d("the weights kept at full width (norms, embedding, ...)")


class WeightTensor(_Strict):
    """One stored tensor of a quantized checkpoint."""

    name: str = d("the tensor's name")
    shape: list[int] = d("its shape")
    dtype: str = d("its dtype")
    part: str = d("which of weight_parts it counts in")
    count: int = d("tensors of this name and shape")
    bytes: int = d("their bytes")


class SelectedAttention(_Strict):
    """DeepSeek Sparse Attention's selection (the indexer picks top_k keys a query)."""

    convention: str = d("eager | sparse: what `flops` counts")
    flops: dict[str, int] = d("the step's FLOPs under each convention")
    top_k: int = d("keys each query attends to")
    indexer_heads: int = d("the indexer's heads")
    indexer_head_dim: int = d("the indexer's head width")
    indexer_cache_bytes: int = d("the indexer's key cache in the KV dtype (transformers), part "
                                 "of kv_cache_bytes")
    indexer_cache_bytes_reference: int | None = d("that cache as DeepSeek's reference stores "
                                                  "it: fp8 + an fp32 scale per 128 (null: "
                                                  "block-sparse, kept in the KV dtype)")
    top_blocks: int | None = d("block-sparse attention: K_blk, the key blocks each query "
                               "attends to (top_k = K_blk·S_blk keys at most); null: DSA", None)
    block_size: int | None = d("block-sparse attention: S_blk, keys per block; null: DSA", None)


class SplitOut(_Strict):
    """How one weight is split across tensor-parallel ranks."""

    weight: str = d("the weight")
    split: str = d("column, row, vocab or replicated")
    params_per_rank: int = d("its parameters on one rank")


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
    """The parallel ledgers."""

    tp: TPOut = d("tensor parallelism: per-rank shares and all-reduces")  # type: ignore[valid-type]
    pp: PPOut = d("pipeline parallelism: stages and boundaries")  # type: ignore[valid-type]
    ep: EPOut = d("expert parallelism: experts per rank and all-to-alls")  # type: ignore[valid-type]


class TraceOut(RecordsChecked):
    model: dict[str, Any] = d("the model's fields (shapecalc schema config)")
    workload: dict[str, Any] = d("the workload (shapecalc schema workload)")
    widths: dict[str, str] = d("weights, activations, all_reduce, kv_cache → dtype")
    layers: LayerPlanOut = d("the layer plan: kinds and runs")
    stages: list[StageOut] = d("the forward pass, stage by stage (one layer of each kind)")
    totals: Totals = d("the step's totals")  # type: ignore[valid-type]
    parallel: ParallelOut = d("the TP, PP and EP ledgers")
    rank_stages: list[StageOut] | None = d("the stages of one rank (with --per-rank and p > 1)",
                                           None)
    notes: list[str] | None = d("how the config was read: keys of its config.json no reader "
                                "reads (present only when there are any)", None)


def trace_schema() -> dict[str, Any]:
    schema = TraceOut.model_json_schema()
    inline(schema, "model", ModelConfig)
    inline(schema, "workload", Workload)
    return schema
