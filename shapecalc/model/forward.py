"""The forward pass of a decoder-only Transformer, written once.

`forward()` is plain code over a small vocabulary of operations (`Ops`). The symbolic interpreter
(symbolic.py) answers each operation with shapes, formulas and exact counts; the NumPy interpreter
(numeric.py) answers it with real arrays. Neither can drift from the other: there is one model.

With tensor parallelism the forward describes ONE rank: heads, KV heads, Dff and the vocabulary
are that rank's share, and the row-parallel outputs meet in an all-reduce (Megatron/vLLM layout).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, NamedTuple

from .config import ModelConfig, Workload, ceil_div
from .expr import Dim, Expr

Group = Literal["embedding", "block", "head"]

# The stage name each weight's linear() prints (the forward names weights q, k, v, o, …).
LINEAR_LABEL = {
    "q": "q projection",
    "k": "k projection",
    "v": "v projection",
    "qkv": "qkv projection (fused)",
    "o": "output projection WO",
    "gate": "FFN gate",
    "up": "FFN up",
    "down": "FFN down",
}
Split = Literal["column", "row", "vocab", "replicated"]


class Stage:
    """One step of the forward: what it produces and what it costs (per occurrence).

    A plain class with slots rather than a dataclass: building a dataclass at import time costs
    more than a whole `trace --json` may spend on start-up.
    """

    FIELDS = (
        "name",
        "op",
        "group",
        "dims",
        "shape",
        "flops",
        "flops_formula",
        "elementwise_flops",
        "elementwise_formula",
        "params",
        "params_formula",
        "bytes",
        "dtype",
        "repeat",
        "note",
        "split",
    )
    __slots__ = (*FIELDS, "extra")

    def __init__(
        self,
        name: str,
        op: str,
        group: str,
        dims: list[str],
        shape: list[int],
        flops: int = 0,
        flops_formula: str = "0",
        elementwise_flops: int = 0,
        elementwise_formula: str = "0",
        params: int = 0,
        params_formula: str = "0",
        bytes: int = 0,
        dtype: str = "",
        repeat: int = 1,
        note: str = "",
        split: str = "",  # how tensor parallelism shards this stage's weight: column, row, vocab
        extra: dict[str, Any] | None = None,
    ):
        self.name, self.op, self.group, self.dims, self.shape = name, op, group, dims, shape
        self.flops, self.flops_formula = flops, flops_formula
        self.elementwise_flops, self.elementwise_formula = elementwise_flops, elementwise_formula
        self.params, self.params_formula = params, params_formula
        self.bytes, self.dtype, self.repeat, self.note, self.split = (
            bytes,
            dtype,
            repeat,
            note,
            split,
        )
        self.extra = extra if extra is not None else {}

    def as_dict(self) -> dict[str, Any]:
        """The stage's JSON form: its fields in order, then any extra keys (a mask's dims)."""
        d = {f: getattr(self, f) for f in self.FIELDS}
        d.update(self.extra)
        return d

    def __repr__(self) -> str:
        return f"Stage({self.name!r}, {self.op!r}, {self.dims}, flops={self.flops})"



class Sizes(NamedTuple):
    """The dims one rank works with, each carrying its symbol (`H/p`, `T′`, …)."""

    B: Dim
    Tq: Dim  # query tokens of this step: T in prefill, 1 in decode
    Tk: Dim  # keys each query may read: T in prefill, T′ in decode
    Tc: Dim  # tokens held by the KV cache after this step
    D: Dim
    H: Dim
    Hkv: Dim
    Dh: Dim
    Dff: Dim
    V: Dim
    N: Dim
    p: int
    kv_replicated: bool

    @staticmethod
    def of(model: ModelConfig, wl: Workload, p: int | None = None) -> Sizes:
        p = wl.tp if p is None else p
        T = wl.seq
        W = model.sliding_window

        def shard(sym: str, value: int) -> Dim:
            if p == 1:
                return Dim.of(sym, value)
            return Dim(ceil_div(value, p), Expr.sym(sym) * Expr([((("p", -1),), 1)]))

        hkv = model.kv_heads
        replicated = p > hkv
        if wl.phase == "prefill":
            tq = tk = Dim.of("T", T)
            tc = Dim.of("W", W) if W is not None and W < T else tk
        else:
            tq = Dim.const(1)
            tk = Dim.of("T′", T + 1 if W is None else min(T + 1, W))
            tc = tk
        return Sizes(
            B=Dim.of("B", wl.batch),
            Tq=tq,
            Tk=tk,
            Tc=tc,
            D=Dim.of("D", model.d_model),
            H=shard("H", model.n_heads),
            # vLLM: with fewer KV heads than ranks, every rank holds one (replicated) KV head.
            # MHA prints its KV heads as H, as the seeds do (2·N·B·H·T·Dh)
            Hkv=Dim.const(1) if replicated else shard("H" if hkv == model.n_heads else "H_kv", hkv),
            Dh=Dim.of("Dh", model.dh),
            Dff=shard("Dff", model.d_ff),
            V=shard("N_vocab", model.vocab_size),
            N=Dim.of("N", model.n_layers),
            p=p,
            kv_replicated=replicated,
        )


class Ops:
    """The operations forward() is written in. Each returns the tensor it produces.

    Tensors are opaque to forward(): symbolic ones are shapes, numeric ones are arrays.
    `name` is the stage's name; weights are identified by (layer, name).
    """

    def layers(self, n: int) -> Iterable[int]:
        raise NotImplementedError

    def group(self, g: Group) -> None:
        raise NotImplementedError

    def token_ids(self, B: Dim, T: Dim) -> Any:
        raise NotImplementedError

    def embed(self, ids: Any, V: Dim, D: Dim, split: Split) -> Any:
        raise NotImplementedError

    def positions(self, x: Any, kind: str, rows: int | None) -> Any:
        raise NotImplementedError

    def rope_angles(self, T: Dim, Dh: Dim) -> Any:
        raise NotImplementedError

    def scale(self, x: Any, name: str, factor: float, label: str) -> Any:
        raise NotImplementedError

    def norm(self, x: Any, name: str) -> Any:
        raise NotImplementedError

    def linear(self, x: Any, name: str, d_in: Dim, d_out: Dim, bias: bool, split: Split) -> Any:
        raise NotImplementedError

    def split(self, x: Any, parts: list[Dim]) -> list[Any]:
        raise NotImplementedError

    def split_heads(self, x: Any, name: str, heads: Dim, Dh: Dim) -> Any:
        raise NotImplementedError

    def rope(self, x: Any, name: str, angles: Any) -> Any:
        raise NotImplementedError

    def kv_cache(self, k: Any, v: Any, layer: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def repeat_kv(self, x: Any, name: str, groups: int, heads: Dim) -> Any:
        raise NotImplementedError

    def transpose_last(self, x: Any, name: str) -> Any:
        raise NotImplementedError

    def matmul(self, a: Any, b: Any, name: str, causal: bool) -> Any:
        raise NotImplementedError

    def mask(self, s: Any, name: str, kind: Literal["causal", "padding", "window"]) -> Any:
        raise NotImplementedError

    def softmax(self, s: Any, name: str) -> Any:
        raise NotImplementedError

    def merge_heads(self, x: Any, name: str) -> Any:
        raise NotImplementedError

    def add(self, a: Any, b: Any, name: str) -> Any:
        raise NotImplementedError

    def activation(self, x: Any, name: str, kind: str) -> Any:
        raise NotImplementedError

    def mul(self, a: Any, b: Any, name: str) -> Any:
        raise NotImplementedError

    def allreduce(self, x: Any, name: str) -> Any:
        raise NotImplementedError

    def allgather(self, x: Any, name: str, full: Dim) -> Any:
        raise NotImplementedError

    def last_position(self, x: Any, name: str) -> Any:
        raise NotImplementedError


_ACT = {"gelu": "gelu", "geglu": "gelu", "relu": "relu", "swiglu": "silu"}


def forward(ops: Ops, model: ModelConfig, wl: Workload, z: Sizes) -> Any:
    """One forward step (prefill of T tokens, or decode of one token) on one rank."""
    m = model
    tp = z.p > 1
    ops.group("embedding")
    ids = ops.token_ids(z.B, z.Tq)
    x = ops.embed(ids, z.V, z.D, "vocab" if tp else "replicated")
    if tp:  # each rank looked up only its slice of the vocabulary
        x = ops.allreduce(x, "embedding all-reduce")
    if m.embedding_scale:
        x = ops.scale(x, "embedding scale", m.d_model**0.5, "√D")
    if m.positions in ("learned", "sinusoidal"):
        x = ops.positions(x, m.positions, m.max_positions)
    angles = ops.rope_angles(z.Tq, z.Dh) if m.positions == "rope" else None

    for layer in ops.layers(m.n_layers):
        ops.group("block")
        x = _block(ops, m, wl, z, x, layer, angles)

    ops.group("head")
    if m.norm_position == "pre":
        x = ops.norm(x, "final norm")
    if wl.logits == "last":
        x = ops.last_position(x, "last position")
    logits = ops.linear(x, "lm head", z.D, z.V, m.lm_head_bias, "vocab" if tp else "replicated")
    if tp:
        logits = ops.allgather(logits, "logits all-gather", Dim.of("N_vocab", m.vocab_size))
    if wl.logits == "all":
        logits = ops.last_position(logits, "last position")
    return logits


def _block(
    ops: Ops, m: ModelConfig, wl: Workload, z: Sizes, x: Any, layer: int, angles: Any
) -> Any:
    if m.norm_position == "pre":
        h = ops.norm(x, "attention norm")
        a = _attention(ops, m, wl, z, h, layer, angles)
        if m.parallel_block:  # Falcon: x + attn(h) + ffn(h), one norm, one all-reduce
            f = _ffn(ops, m, z, h, reduce=False)
            s = ops.add(a, f, "attention + FFN")
            if z.p > 1:
                s = ops.allreduce(s, "all-reduce")
            return ops.add(x, s, "residual")
        if z.p > 1:
            a = ops.allreduce(a, "attention all-reduce")
        x = ops.add(x, a, "residual")
        h = ops.norm(x, "FFN norm")
        return ops.add(x, _ffn(ops, m, z, h, reduce=z.p > 1), "residual")
    # post-norm (original Transformer): U = Norm(X + MHA(X)); Y = Norm(U + FFN(U))
    a = _attention(ops, m, wl, z, x, layer, angles)
    if z.p > 1:
        a = ops.allreduce(a, "attention all-reduce")
    x = ops.norm(ops.add(x, a, "residual"), "attention norm")
    return ops.norm(ops.add(x, _ffn(ops, m, z, x, reduce=z.p > 1), "residual"), "FFN norm")


def _attention(
    ops: Ops, m: ModelConfig, wl: Workload, z: Sizes, h: Any, layer: int, angles: Any
) -> Any:
    qw, kvw = z.H * z.Dh, z.Hkv * z.Dh
    if m.fused_qkv:
        qkv = ops.linear(h, "qkv", z.D, qw + kvw * 2, m.qkv_bias, "column")
        q, k, v = ops.split(qkv, [qw, kvw, kvw])
    else:
        q = ops.linear(h, "q", z.D, qw, m.qkv_bias, "column")
        k = ops.linear(h, "k", z.D, kvw, m.qkv_bias, "column")
        v = ops.linear(h, "v", z.D, kvw, m.qkv_bias, "column")
    q = ops.split_heads(q, "q", z.H, z.Dh)
    k = ops.split_heads(k, "k", z.Hkv, z.Dh)
    v = ops.split_heads(v, "v", z.Hkv, z.Dh)
    if angles is not None:
        q = ops.rope(q, "RoPE q", angles)
        k = ops.rope(k, "RoPE k", angles)
    k, v = ops.kv_cache(k, v, layer)
    groups = z.H.value // z.Hkv.value
    if groups > 1:  # GQA/MQA: each KV head serves `groups` query heads
        k = ops.repeat_kv(k, "repeat k", groups, z.H)
        v = ops.repeat_kv(v, "repeat v", groups, z.H)
    s = ops.matmul(q, ops.transpose_last(k, "kᵀ"), "QKᵀ", causal=True)
    s = ops.scale(s, "scale", m.dh**-0.5, "1/√Dh")
    if wl.phase == "prefill":
        s = ops.mask(s, "causal mask", "causal")
    if wl.phase == "prefill" and m.sliding_window is not None and m.sliding_window < wl.seq:
        s = ops.mask(s, "sliding-window mask", "window")  # decode's cache already holds only W
    if wl.padding_mask:
        s = ops.mask(s, "padding mask", "padding")
    a = ops.softmax(s, "softmax")
    o = ops.matmul(a, v, "A·V", causal=True)
    o = ops.merge_heads(o, "merge heads")
    return ops.linear(o, "o", qw, z.D, m.attn_out_bias, "row")


def _ffn(ops: Ops, m: ModelConfig, z: Sizes, h: Any, reduce: bool) -> Any:
    if m.gated:
        g = ops.linear(h, "gate", z.D, z.Dff, m.ffn_bias, "column")
        u = ops.linear(h, "up", z.D, z.Dff, m.ffn_bias, "column")
        u = ops.mul(ops.activation(g, "activation", _ACT[m.ffn]), u, "gate ⊙ up")
    else:
        u = ops.activation(
            ops.linear(h, "up", z.D, z.Dff, m.ffn_bias, "column"), "activation", _ACT[m.ffn]
        )
    y = ops.linear(u, "down", z.Dff, z.D, m.ffn_bias, "row")
    return ops.allreduce(y, "FFN all-reduce") if reduce else y
