"""ModelConfig and Workload: validated once, at the edge; every rule has its message here.

Field names follow the seeds (`d_model` prints as D, `n_kv_heads` as H_kv, …) so that config files
stay portable. After `check()` passes, everything downstream trusts its input.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

# Bits per element. int4 packs two values per byte, so bytes are rounded up per tensor.
DTYPE_BITS: dict[str, int] = {
    "fp32": 32,
    "bf16": 16,
    "fp16": 16,
    "fp8": 8,
    "int8": 8,
    "int4": 4,
}
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


def nbytes(elements: int, dtype: str) -> int:
    """Exact bytes of `elements` values stored in `dtype` (int4: two per byte, rounded up)."""
    return (elements * DTYPE_BITS[dtype] + 7) // 8


class ShapecalcError(Exception):
    """A bad input: `field` names what the user gave, `reason` says why it cannot be used."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class ModelConfig(BaseModel):
    """A decoder-only Transformer. Symbols in brackets are what the trace prints."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    vocab_size: PositiveInt = Field(description="N_vocab: vocabulary size")
    d_model: PositiveInt = Field(description="D: model width")
    n_layers: PositiveInt = Field(description="N: number of Transformer blocks")
    n_heads: PositiveInt = Field(description="H: query heads")
    n_kv_heads: PositiveInt | None = Field(
        None, description="H_kv: key/value heads (default H; 1 = MQA; between = GQA)"
    )
    head_dim: PositiveInt | None = Field(None, description="Dh: head width (default D/H)")
    d_ff: PositiveInt = Field(description="Dff: FFN hidden width")
    ffn: Literal["gelu", "relu", "swiglu", "geglu"] = Field(
        "gelu", description="gelu/relu: up, down; swiglu/geglu: gate, up, down"
    )
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    norm_position: Literal["pre", "post"] = "pre"
    positions: Literal["learned", "sinusoidal", "rope", "none"] = "learned"
    max_positions: PositiveInt | None = Field(
        None, description="rows of a learned position table; the longest context otherwise"
    )
    tie_embeddings: bool = Field(False, description="LM head shares the embedding table")
    qkv_bias: bool = Field(False, description="biases on the q, k, v projections")
    attn_out_bias: bool = Field(False, description="bias on the attention output WO")
    ffn_bias: bool = Field(False, description="biases on the FFN matrices")
    norm_bias: bool | None = Field(
        None, description="β in the norms (default: yes for layernorm, no for rmsnorm)"
    )
    lm_head_bias: bool = False
    fused_qkv: bool = Field(
        False, description="one [D,(H+2·H_kv)·Dh] matrix; changes the listing, not the numbers"
    )
    parallel_block: bool = Field(
        False, description="attention and FFN read the same norm and add in parallel (Falcon)"
    )
    sliding_window: PositiveInt | None = Field(
        None, description="W: the KV cache keeps, and decode reads, at most W tokens"
    )
    embedding_scale: bool = Field(False, description="multiply embeddings by √D (Gemma)")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def dh(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    @property
    def gated(self) -> bool:
        return self.ffn in ("swiglu", "geglu")

    @property
    def has_norm_bias(self) -> bool:
        return self.norm_bias if self.norm_bias is not None else self.norm == "layernorm"

    @model_validator(mode="after")
    def _shapes(self) -> ModelConfig:
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads: D={self.d_model} is not divisible by H={self.n_heads}; "
                "set head_dim to use heads narrower or wider than D/H"
            )
        if self.n_heads % self.kv_heads:
            raise ValueError(
                f"n_kv_heads: H={self.n_heads} is not divisible by H_kv={self.kv_heads}; "
                "each KV head must serve a whole group of query heads"
            )
        if self.positions == "rope" and self.dh % 2:
            raise ValueError(f"head_dim: RoPE rotates pairs, so Dh={self.dh} must be even")
        if self.positions == "learned" and self.max_positions is None:
            raise ValueError("max_positions: a learned position table needs its number of rows")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"d_model: sinusoidal positions need an even D, got {self.d_model}")
        return self


class Workload(BaseModel):
    """What the model is asked to do: B sequences of T tokens, in one phase, on p×s devices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch: PositiveInt = Field(1, description="B: sequences in the batch")
    seq: PositiveInt = Field(
        2048,
        description="T: prefill: prompt tokens; decode: tokens already in the KV cache "
        "(the new token reads T′ = T+1 keys)",
    )
    phase: Literal["prefill", "decode"] = "prefill"
    dtype: Dtype = Field("bf16", description="weights (and activations unless act_dtype)")
    act_dtype: Dtype | None = Field(
        None, description="activations and all-reduce buffers (default dtype)"
    )
    kv_dtype: Dtype | None = Field(None, description="KV cache (default dtype)")
    logits: Literal["all", "last"] = Field(
        "all", description="all: every position, as a forward does; last: generation only"
    )
    tp: PositiveInt = Field(1, description="p: tensor-parallel degree")
    pp: PositiveInt = Field(1, description="s: pipeline stages")
    block_size: PositiveInt = Field(16, description="tokens per block of a paged KV cache")
    attention_flops: Literal["full", "causal"] = Field(
        "full", description="full: the whole [T,T] as the seeds count; causal: lower triangle"
    )
    padding_mask: bool = Field(False, description="list the [B,1,1,T] padding mask stage")

    @property
    def act(self) -> str:
        return self.act_dtype or self.dtype

    @property
    def kv(self) -> str:
        return self.kv_dtype or self.dtype


def check(model: ModelConfig, wl: Workload) -> None:
    """Rules that need both the model and the workload."""
    p = wl.tp
    if model.n_heads % p:
        raise ShapecalcError("tp", f"p={p} does not divide H={model.n_heads} query heads")
    if model.d_ff % p:
        raise ShapecalcError("tp", f"p={p} does not divide Dff={model.d_ff}")
    hkv = model.kv_heads
    # vLLM: with fewer KV heads than ranks each rank holds one replicated KV head.
    if hkv >= p and hkv % p:
        raise ShapecalcError("tp", f"p={p} does not divide H_kv={hkv} key/value heads")
    if hkv < p and p % hkv:
        raise ShapecalcError(
            "tp", f"p={p} is not a multiple of H_kv={hkv}, so KV heads cannot be replicated evenly"
        )
    if wl.pp > model.n_layers:
        raise ShapecalcError("pp", f"s={wl.pp} pipeline stages exceed N={model.n_layers} layers")
    if model.positions == "learned" and model.max_positions is not None:
        last = wl.seq + (1 if wl.phase == "decode" else 0)
        if last > model.max_positions:
            raise ShapecalcError(
                "seq",
                f"{last} positions exceed the learned position table of "
                f"max_positions={model.max_positions}",
            )


def first_error(err: ValidationError, prefix: str = "") -> ShapecalcError:
    """One clear line from pydantic's report: the field, then the reason."""
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        msg = "unknown field"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
        # our model validators name the field themselves: "n_heads: …"
        head, sep, rest = msg.partition(": ")
        if sep and not loc and " " not in head:
            loc, msg = head, rest
    if e["type"] == "literal_error":
        msg = f"{e['input']!r} is not one of {msg.split('Input should be ')[-1]}"
    field = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "config")
    return ShapecalcError(field, msg)
