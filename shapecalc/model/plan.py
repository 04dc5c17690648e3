"""The layer plan: which kind of block each of the N layers is (its attention and its FFN).

A model resolves to runs of layer specs, each with a count. Layers of one spec are alike, so the
symbolic trace records one block per *kind* (distinct spec) with its count, while the executor
runs every layer in order. Nothing downstream assumes N identical layers: trace, closed form,
planning and verify read the kinds and their counts (and parallel.py which layers each pipeline
stage holds).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from .config import ModelConfig
from .widths import overrides


class Chunk(NamedTuple):
    """A chunked layer's cache reach: the keys of the current chunk of C positions."""

    size: int


# What a layer's KV cache keeps (and groups layers by): None all tokens, W a sliding window of
# W tokens, Chunk(C) the current chunk of C positions.
Reach = int | Chunk | None


def held(reach: Reach, n: int) -> int:
    """Tokens a layer's cache holds after n tokens: the keys its last query read. All n; the last
    min(n, W) of a window; the last chunk's ((n−1) mod C) + 1 (what vLLM keeps for chunked local
    attention; transformers' cache keeps the last min(n, C−1), a sliding window of C−1)."""
    if reach is None:
        return n
    if isinstance(reach, Chunk):
        return (n - 1) % reach.size + 1 if n else 0
    return min(n, reach)


class LayerSpec(NamedTuple):
    """What one layer is: its attention (full, a sliding window of W tokens, or chunks of C), its
    FFN and its norms. Layers with equal specs have equal shapes, parameters and costs."""

    attention: str  # full | sliding | chunked
    window: int | None  # W, for sliding attention
    ffn: str  # dense | moe (the activation, gated or not, is the model's)
    norm: str  # layernorm | rmsnorm
    norm_position: str  # pre | post
    chunk: int | None = None  # C, for chunked attention (Llama 4)
    nope: bool = False  # the layer applies no RoPE although the model has it (Llama 4)
    mixer: str = "attention"  # attention (of `attention`), mamba2, …, parallel, kda, cca, none
    shared_topk: bool = False  # DSA: reuses the previous indexer layer's selection (GLM-5)
    hash_route: bool = False  # a MoE layer routing by the token id (DeepSeek-V4's hash_moe)
    compress: int | None = None  # m′: an hca layer's compression ratio (DeepSeek-V4)
    router_eda: bool = False  # ZAYA: its router adds the previous layer's state (layers ≥ 1)
    block_sparse: bool = False  # the layer runs a block indexer (MiniMax-M3's sparse layers)
    kv_source: int | None = None  # Gemma 4: the earlier layer whose cached K/V it reads
    wide_ffn: bool = False  # Gemma 4: a KV-sharing layer's FFN of 2·Dff (use_double_wide_mlp)
    widths: tuple[tuple[str, int], ...] = ()  # the layer's own widths (dots3): (field, value)

    @property
    def attends(self) -> bool:
        """The layer's token mixer is attention (or holds one: parallel, beside a Mamba-2; cca,
        attention with CCA's q/k/v): it has a KV cache."""
        return self.mixer in ("attention", "parallel", "cca", "inkling")

    @property
    def caches(self) -> bool:
        """The layer keeps a KV cache of its own (a KV-sharing layer reads another's)."""
        return self.attends and self.kv_source is None

    @property
    def reach(self) -> Reach:
        return Chunk(self.chunk) if self.chunk is not None else self.window

    @property
    def label(self) -> str:
        """How the trace names the kind: `sliding window W=4096`, `full attention · MoE`,
        `chunked C=8192`, `full attention · NoPE`."""
        attn = f"sliding window W={self.window}" if self.attention == "sliding" else (
            f"chunked C={self.chunk}" if self.attention == "chunked" else "full attention")
        if self.compress is not None:
            attn = (f"compressed m′={self.compress}" if self.attention == "hca" else
                    f"compressed sparse m={self.compress}") + f" + window W={self.window}"
        attn = (attn + " ∥ Mamba-2" if self.mixer == "parallel"  # Falcon-H1: side by side
                else f"CCA {attn}" if self.mixer == "cca" else f"Inkling {attn}"
                if self.mixer == "inkling" else MIXER_LABELS.get(self.mixer, attn))
        ffn = {"moe": " · hash MoE" if self.hash_route else " · MoE",
               "none": " · no FFN"}.get(self.ffn, "")
        if self.mixer == "none":  # a block of its channel mixer only
            return {"moe": "MoE only", "none": "empty"}.get(self.ffn, "FFN only")
        return attn + (" · NoPE" if self.nope else "") + (
            " · shared top-k" if self.shared_topk else "") + (
            " · block-sparse" if self.block_sparse else "") + (
            f" · K/V of layer {self.kv_source}" if self.kv_source is not None else "") + (
            " · 2·Dff" if self.wide_ffn else "") + ffn + "".join(
            f" · {WIDTH_SYMBOLS[f]}={v}" for f, v in self.widths)


# how a layer's own widths print (LayerWidths' fields)
WIDTH_SYMBOLS = {"n_heads": "H", "q_lora_rank": "D_q", "kv_lora_rank": "D_c",
                 "qk_nope_head_dim": "D_n", "qk_rope_head_dim": "D_r", "v_head_dim": "D_v",
                 "d_ff": "Dff", "n_kv_heads": "H_kv", "head_dim": "Dh"}


# the token mixers other than attention, as labels print
MIXER_LABELS = {"mamba2": "Mamba-2", "gated_deltanet": "gated DeltaNet",
                "short_conv": "short conv", "mamba1": "Mamba-1", "kda": "KDA"}


class Run(NamedTuple):
    """`length` consecutive layers of one spec, starting at layer `first`."""

    spec: LayerSpec
    first: int
    length: int


class LayerPlan(NamedTuple):
    runs: tuple[Run, ...]
    kinds: tuple[LayerSpec, ...]  # distinct specs, in order of first appearance
    counts: tuple[int, ...]  # layers of each kind
    kind_of: tuple[int, ...]  # each layer's kind

    @property
    def uniform(self) -> bool:
        return len(self.kinds) == 1

    def first_layer(self, kind: int) -> int:
        return self.kind_of.index(kind)

    def covering(self) -> int:
        """The fewest leading layers that include every kind (what verify must run at least)."""
        return max(self.first_layer(k) for k in range(len(self.kinds))) + 1


@lru_cache(maxsize=256)
def layer_plan(model: ModelConfig) -> LayerPlan:
    types = model.layer_types or (
        ("sliding" if model.sliding_window is not None else
         "chunked" if model.attention_chunk_size is not None else "full",) * model.n_layers
    )
    ffns = model.ffn_types or (("moe" if model.moe else "dense",) * model.n_layers)
    nope = set(model.nope_layers or ())
    shared = set(model.index_shared_layers or ())
    blocks = set(model.block_indexer_layers)
    specs = [
        LayerSpec(t, model.sliding_window if t in ("sliding", "hca", "csa") else None, f,
                  model.norm, model.norm_position,
                  model.attention_chunk_size if t == "chunked" else None, i in nope, mx,
                  i in shared, compress={"hca": model.compress_ratio_hca,
                                         "csa": model.compress_ratio_csa}.get(t),
                  router_eda=model.router_hidden is not None and i > 0,
                  block_sparse=i in blocks)
        if mx in ("attention", "parallel", "cca", "inkling") else
        # a stateful mixer's block is pre-norm (OLMo-Hybrid: beside output-normed attention), or
        # sandwiched as LFM3 sandwiches every branch
        LayerSpec("full", None, f, model.norm,
                  "sandwich" if model.norm_position == "sandwich" else "pre", mixer=mx)
        for i, (t, f, mx) in enumerate(zip(types, ffns, model.mixers, strict=True))
    ]
    if model.hash_moe_layers:  # the first n MoE layers route by the token id
        moe = [i for i, f in enumerate(ffns) if f == "moe"][: model.hash_moe_layers]
        for i in moe:
            specs[i] = specs[i]._replace(hash_route=True)
    if model.kv_shared_layers:  # Gemma 4: the last layers read an earlier layer's K/V
        first = model.n_layers - model.kv_shared_layers
        for i in range(first, model.n_layers):
            src = max(j for j in range(first) if specs[j].attention == specs[i].attention)
            specs[i] = specs[i]._replace(kv_source=src, wide_ffn=model.shared_ffn_wide)
    if model.layer_widths is not None:  # dots3: widths of the layer's own
        specs = [s._replace(widths=overrides(model.layer_widths, model, i))
                 for i, s in enumerate(specs)]
    runs: list[Run] = []
    for i, spec in enumerate(specs):
        if runs and runs[-1].spec == spec:
            runs[-1] = runs[-1]._replace(length=runs[-1].length + 1)
        else:
            runs.append(Run(spec, i, 1))
    kinds = tuple(dict.fromkeys(specs))
    kind_of = tuple(kinds.index(s) for s in specs)
    counts = tuple(kind_of.count(k) for k in range(len(kinds)))
    return LayerPlan(tuple(runs), kinds, counts, kind_of)


def mtp_spec(model: ModelConfig) -> LayerSpec:
    """The block of each MTP module: the last layer's kind (DeepSeek-V3), or a sliding layer
    with a dense FFN (MiMo-V2-Flash's mtp_block)."""
    plan = layer_plan(model)
    if model.mtp_block == "sliding_dense":
        return LayerSpec("sliding", model.sliding_window, "dense", model.norm, model.norm_position)
    return plan.kinds[plan.kind_of[-1]]


def layer_kv_heads(model: ModelConfig, layer: int) -> int:
    """The KV heads of layer `layer`: a Gemma 4 global layer's H_kv_g (where given), a sliding
    layer's own H_sw (MiMo-V2-Flash), an MTP layer's past the last; else H_kv."""
    if model.global_layer(layer) and model.global_kv_heads is not None:
        return model.global_kv_heads
    plan = layer_plan(model)
    spec = mtp_spec(model) if layer >= model.n_layers else plan.kinds[plan.kind_of[layer]]
    return model.kv_heads_of(spec.attention)


@lru_cache(maxsize=256)
def widened(model: ModelConfig, spec: LayerSpec) -> ModelConfig:
    """The model as one layer of `spec` sees it: its own widths in place of the model's (dots3's
    per_layer_config); the model itself where the layer has none."""
    if not spec.widths:
        return model
    # attention that projects q itself keeps its head width Dh and its H_kv K/V heads where the
    # layer does not give its own (Laguna keeps both; Inkling's sliding layers give them)
    keep = {} if model.mla else {"head_dim": model.dh, "n_kv_heads": model.kv_heads}
    return model.model_copy(update={**keep, **dict(spec.widths), "layer_widths": None})
