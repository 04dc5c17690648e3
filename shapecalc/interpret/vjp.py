"""Vector-Jacobian rules for the NumPy executor's operations, in numeric.py's reading order (as
autodidax pairs a transpose rule with each primitive; MoE's in vjp_moe.py). vjp_tape.py records
them on a tape and runs the backward from the loss to every parameter.

`TapeOps` is NumericOps with each operation wrapped: the forward runs unchanged (same stages,
same arrays), and a tape entry keeps what the operation's rule needs: copies of the inputs or the
output it reads in the backward (the forward's scores, masks and activations are updated in place,
so the tape keeps its own copies). Composite operations (MoE's experts) run their inner operations
untaped; their rule reads the inner outputs from the stages recorded (`_rec`).

Every array carries numeric.py's leading rank axis ([p, …] or [1, …]): a rule's input gradient is
summed back over an axis its input was broadcast along (the rank axis: tensor parallelism's
backward all-reduce). Matmul FLOPs are counted per rank as the forward counts them (2·m·k·n), each
booked to the forward stage whose backward it is, as dX (activation operands) or dW (weights).

Not here: `head_linear` (MLA's absorbed form runs in decode only, and a training step is a
prefill) and the cache reads of decode; `train/verify.py` refuses decode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .rotary import EPS, head_gammas
from .tape_base import Entry, TapeBase
from .vjp_rules import INPUTS, RULES, Rule, rule  # noqa: F401  (the registry, re-exported)
from .weights import Shard, Weights


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """g summed over the axes its input of `shape` was broadcast along (the rank axis)."""
    if g.shape == tuple(shape):
        return g
    axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, shape, strict=True)) if b == 1 != a)
    return g.sum(axis=axes, keepdims=True)


# -- the parameter gradients, the FLOP book (a tape entry: tape_base.py) ----------------------
class Grads:
    """Parameter gradients by weight key, each the full (unsharded) parameter's shape."""

    def __init__(self, w: Weights):
        self.w = w
        self.g: dict[tuple, np.ndarray] = {}
        self.bad: list[str] = []  # weight gradients of the wrong shape

    def of(self, key: tuple) -> np.ndarray:
        if key not in self.g:
            self.g[key] = np.zeros_like(self.w.given.get(key, self.w.full.get(key)))
        return self.g[key]

    def add(self, key: tuple, value: np.ndarray, expect: tuple[int, ...]) -> None:
        """Add a gradient of the operand shape `expect` (what the forward multiplied by)."""
        if tuple(value.shape) != tuple(expect):
            self.bad.append(f"{key}: gradient {value.shape}, operand {expect}")

    def shard(self, sh: Shard, dW: np.ndarray) -> None:
        """Scatter ranks' [R, d_in, width] operand gradients into the full matrix (weights.py's
        split, reversed)."""
        G, R = self.of(sh.key), dW.shape[0]
        self.add(sh.key, dW[0], (sh.d_in, sh.width))
        if sh.how == "vocab":
            if sh.p == 1:
                G[: self.w.m.vocab_size] += dW[0].T
            else:
                G.reshape(sh.p, sh.width, -1)[...] += dW.transpose(0, 2, 1)
        elif sh.how == "row":
            G.reshape(sh.p, sh.d_in, -1)[...] += dW if R == sh.p else dW.sum(0)
        elif sh.how == "replicated":
            G += dW.sum(0)
        elif sh.how == "kvrep":
            heads = np.arange(sh.p) // sh.groups
            np.add.at(G.reshape(G.shape[0], -1, sh.dh).transpose(1, 0, 2), heads, dW)
        else:  # column
            G.reshape(G.shape[0], sh.p, sh.width)[...] += dW.transpose(1, 0, 2)

    def bias(self, key: tuple, sh: Shard, db: np.ndarray, row: bool) -> None:
        """A bias's gradient [R, width] from its layout (weights._linear)."""
        G = self.of(key)
        if row:  # added once, on rank 0
            G += db[0]
        elif sh.how == "vocab":
            if sh.p == 1:
                G[: self.w.m.vocab_size] += db[0]
            else:
                G.reshape(sh.p, -1)[...] += db
        elif sh.how == "replicated":
            G += db.sum(0)
        elif sh.how == "kvrep":
            np.add.at(G.reshape(-1, sh.dh), np.arange(sh.p) // sh.groups, db)
        else:
            G.reshape(sh.p, -1)[...] += db


class Ctx:
    """What a rule runs with: its entry, the forward's settings, the parameter gradients, and
    the FLOP book."""

    def __init__(self, ops: TapeBase, grads: Grads):
        self.ops, self.grads, self.m, self.w, self.p = ops, grads, ops.m, ops.w, ops.p
        self.dx = [0] * len(ops.stages)  # backward matmul FLOPs per forward stage: input grads
        self.dw = [0] * len(ops.stages)  # … weight grads
        self.ew = [0] * len(ops.stages)  # elements the embedding's table gradient adds
        self.layers_run: set[int] = set()  # layers whose recompute has run
        self.e: Entry

    @property
    def s(self) -> dict[str, Any]:
        return self.e.saved

    def stage(self, role: str | None = None) -> int:
        """The entry's stage of `role` (default its last)."""
        if role is None:
            return self.e.stages[-1]
        return next(i for i in self.e.stages if self.ops.stages[i].role == role)

    def mm(self, a: np.ndarray, b: np.ndarray, part: str, role: str | None = None) -> np.ndarray:
        """a @ b, booked as dX or dW FLOPs of the stage: 2·m·k·n per rank."""
        out = np.matmul(a, b)
        n = 2 * (out.size // out.shape[0]) * a.shape[-1]
        (self.dx if part == "dx" else self.dw)[self.stage(role)] += n
        return out


# -- the rules, in numeric.py's order -------------------------------------------------------------
@rule("embed")
def embed(c: Ctx, dys: list[Any]) -> list[Any]:
    dy, ids = dys[0], c.s["ids"]
    G = c.grads.of(("embedding",))
    c.grads.add(("embedding",), dy[0], (*ids.shape, G.shape[1]))
    if dy.shape[0] == 1:
        np.add.at(G, ids, dy[0])
    else:  # each id's row came from the rank owning it
        owner = ids // (c.w.vocab_rows // c.p)
        b, t = np.indices(ids.shape)
        np.add.at(G, ids, dy[owner, b, t])
    c.ew[c.stage()] += dy[0].size  # B·T rows of D added into the table
    return [None]


@rule("positions")
def positions(c: Ctx, dys: list[Any]) -> list[Any]:
    dy = dys[0]
    if c.e.args[1] == "learned":
        pos = c.s["pos"]
        G = c.grads.of(("positions",))
        if np.ndim(pos) == 1:
            np.add.at(G, pos, dy.sum(axis=(0, 1)))
        else:
            np.add.at(G, pos, dy.sum(axis=0))
    return [dy]


@rule("scale")
def scale(c: Ctx, dys: list[Any]) -> list[Any]:
    return [dys[0] * c.ops.dt(c.e.args[3])]


@rule("temperature")
def temperature(c: Ctx, dys: list[Any]) -> list[Any]:
    return [dys[0] * c.s["f"]]  # the factors, shaped like q


@rule("softcap")
def softcap(c: Ctx, dys: list[Any]) -> list[Any]:
    t = c.s["y"] / c.e.args[3]  # tanh(x/c)
    return [dys[0] * (1 - t * t)]


def _normalized_grad(dyh: np.ndarray, yh: np.ndarray, x: np.ndarray, kind: str) -> np.ndarray:
    """Through ŷ = (x − μ)·r (layernorm) or x·r (rmsnorm, l2norm), r = 1/√(var + ε)."""
    if kind == "layernorm":
        xc = x - x.mean(axis=-1, keepdims=True)
        r = 1 / np.sqrt(np.square(xc).mean(axis=-1, keepdims=True) + x.dtype.type(EPS))
        return r * (dyh - dyh.mean(axis=-1, keepdims=True)
                    - yh * (dyh * yh).mean(axis=-1, keepdims=True))
    r = 1 / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + x.dtype.type(EPS))
    return r * (dyh - yh * (dyh * yh).mean(axis=-1, keepdims=True))


def _normalize(x: np.ndarray, kind: str) -> np.ndarray:
    from .rotary import normalize
    return normalize(x.copy(), kind)[0]


@rule("norm")
def norm(c: Ctx, dys: list[Any]) -> list[Any]:
    dy, x = dys[0], c.s["x"]
    key, kind, beta, plus_one = c.s["key"], c.s["kind"], c.s["beta"], c.s["plus_one"]
    yh = _normalize(x, kind)
    if kind == "l2norm":
        return [_normalized_grad(dy, yh, x, kind)]
    g = c.s["g"]
    axes = tuple(range(dy.ndim - 1))
    c.grads.of((*key, "γ"))[...] += (dy * yh).sum(axis=axes)
    if beta:
        c.grads.of((*key, "β"))[...] += dy.sum(axis=axes)
    return [_normalized_grad(dy * ((1 + g) if plus_one else g), yh, x, kind)]


def _linear_grad(c: Ctx, x: np.ndarray, dy: np.ndarray, layer: int, role: str) -> np.ndarray:
    shards, b, _, row_bias, _ = c.w.linear(layer, role, c.p)
    W = [c.w.stacked(sh) for sh in shards]  # streamed or not: the operands the forward made
    Wc = W[0] if len(W) == 1 else np.concatenate(W, axis=-1)
    x2 = x.reshape(x.shape[0], -1, x.shape[-1])
    d2 = dy.reshape(dy.shape[0], -1, dy.shape[-1])
    dx = c.mm(d2, Wc.transpose(0, 2, 1), "dx")
    dW = c.mm(x2.transpose(0, 2, 1), d2, "dw")
    cuts = np.cumsum([sh.width for sh in shards])[:-1]
    for sh, part, db in zip(shards, np.split(dW, cuts, axis=-1),
                            np.split(d2.sum(axis=1), cuts, axis=-1), strict=True):
        c.grads.shard(sh, part)
        if b is not None:
            key = ("lm head", "bias") if sh.how == "vocab" else (*sh.key, "bias")
            c.grads.bias(key, sh, db, row_bias)
    return unbroadcast(dx, x2.shape).reshape(x.shape)


@rule("linear")
def linear(c: Ctx, dys: list[Any]) -> list[Any]:
    return [_linear_grad(c, c.s["x"], dys[0], c.e.layer, c.e.args[1])]


@rule("split")
def split(c: Ctx, dys: list[Any]) -> list[Any]:
    parts = [np.zeros(s) if d is None else d for d, s in zip(dys, c.s["shapes"], strict=True)]
    return [np.concatenate(parts, axis=-1)]


@rule("split_heads")
def split_heads(c: Ctx, dys: list[Any]) -> list[Any]:
    return [dys[0].transpose(0, 1, 3, 2, 4).reshape(c.s["shape"])]


def _unrotate(dy: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """y = x·cos + rot(x)·sin, rot a swap (of halves, or of each pair): its own inverse, so the
    transpose reads dx = dy·cos + rot(dy·sin) with the sign folded into sin moved over."""
    r = cos.shape[-1]
    g = dy[..., :r] * sin
    if interleaved:
        back = np.empty_like(g)
        back[..., 0::2], back[..., 1::2] = g[..., 1::2], g[..., 0::2]
    else:
        back = np.concatenate([g[..., r // 2:], g[..., : r // 2]], axis=-1)
    dx = dy.copy()
    dx[..., :r] = dy[..., :r] * cos + back
    return dx


@rule("rope")
def rope(c: Ctx, dys: list[Any]) -> list[Any]:
    return [_unrotate(dys[0], c.s["cos"], c.s["sin"], c.m.rope_interleaved)]


@rule("head_norm")
def head_norm(c: Ctx, dys: list[Any]) -> list[Any]:
    dy, x, g = dys[0], c.s["x"], c.s["g"]
    yh = _normalize(x, "layernorm")
    gr = head_gammas(g, x.shape[0], x.shape[2])
    full, ranks, heads = g.shape[0], x.shape[0], x.shape[2]
    idx = (np.arange(full).reshape(ranks, heads) if ranks * heads == full
           else (np.arange(ranks) // (ranks // full))[:, None])
    np.add.at(c.grads.of(c.s["key"]), idx, (dy * yh).sum(axis=(1, 3)))
    return [_normalized_grad(dy * gr, yh, x, "layernorm")]


@rule("kv_cache")
def kv_cache(c: Ctx, dys: list[Any]) -> list[Any]:
    return dys  # training reads the step's K and V as computed (no cache)


@rule("mla_cache")
def mla_cache(c: Ctx, dys: list[Any]) -> list[Any]:
    return dys


@rule("concat")
def concat(c: Ctx, dys: list[Any]) -> list[Any]:
    shapes = c.s["shapes"]
    cuts = np.cumsum([s[-1] for s in shapes])[:-1]
    return [unbroadcast(d, s) for d, s in zip(np.split(dys[0], cuts, axis=-1), shapes,
                                                  strict=True)]


@rule("repeat_kv")
def repeat_kv(c: Ctx, dys: list[Any]) -> list[Any]:
    _, B, h, T, d = c.s["shape"]
    dy = dys[0]
    return [dy.reshape(dy.shape[0], B, h, dy.shape[2] // h, T, d).sum(axis=3)]


@rule("transpose_last")
def transpose_last(c: Ctx, dys: list[Any]) -> list[Any]:
    return [dys[0].swapaxes(-1, -2)]


@rule("matmul")
def matmul(c: Ctx, dys: list[Any]) -> list[Any]:
    a, b, dy = c.s["a"], c.s["b"], dys[0]
    da = c.mm(dy, b.swapaxes(-1, -2), "dx")  # dA = dY·Bᵀ
    db = c.mm(a.swapaxes(-1, -2), dy, "dx")  # dB = Aᵀ·dY
    return [unbroadcast(da, a.shape), unbroadcast(db, b.shape)]


@rule("mask")
def mask(c: Ctx, dys: list[Any]) -> list[Any]:
    return [np.where(c.s["kept"], dys[0], 0)]  # a masked score is a constant


@rule("alibi")
def alibi(c: Ctx, dys: list[Any]) -> list[Any]:
    return dys  # a constant bias


@rule("softmax")
def softmax(c: Ctx, dys: list[Any]) -> list[Any]:
    y, dy = c.s["y"], dys[0]
    dot = (dy * y).sum(axis=-1, keepdims=True)
    if c.s.get("sinks") is not None:  # the sink's probability is 1 − Σ y; its dy is 0
        d_sink = -(1 - y.sum(axis=-1, keepdims=True)) * dot  # [R,B,h,T,1]
        h = y.shape[2]
        G = c.grads.of((c.e.layer, "attn.sinks")).reshape(-1, h)
        G[: y.shape[0]] += d_sink[..., 0].sum(axis=(1, 3))
    return [y * (dy - dot)]




def _act(x: np.ndarray, kind: str) -> np.ndarray:
    from .elementwise import activation
    return activation(x.copy(), kind, x.dtype.type)[0]


def _act_grad(x: np.ndarray, kind: str, dy: np.ndarray) -> np.ndarray:
    """dy × the activation's derivative at x."""
    if kind == "relu":
        return dy * (x > 0)
    if kind == "relu2":  # max(x, 0)²: 2·max(x, 0)
        return dy * 2 * np.maximum(x, 0)
    sg = 1 / (1 + np.exp(-x))
    if kind == "sigmoid":
        return dy * sg * (1 - sg)
    if kind == "silu":  # x·σ(x): σ(x)·(1 + x·(1 − σ(x)))
        return dy * sg * (1 + x * (1 - sg))
    # gelu, tanh form: ½(1 + th) + ½·x·(1 − th²)·c·(1 + 3·0.044715·x²)
    c = np.sqrt(2 / np.pi)
    th = np.tanh(c * (x + 0.044715 * x**3))
    return dy * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * c * (1 + 3 * 0.044715 * x * x))


@rule("merge_heads")
def merge_heads(c: Ctx, dys: list[Any]) -> list[Any]:
    _, B, H, T, dh = c.s["shape"]
    return [dys[0].reshape(dys[0].shape[0], B, T, H, dh).transpose(0, 1, 3, 2, 4)]


@rule("add")
def add(c: Ctx, dys: list[Any]) -> list[Any]:
    return [unbroadcast(dys[0], c.s["a"]), unbroadcast(dys[0], c.s["b"])]


@rule("activation")
def activation(c: Ctx, dys: list[Any]) -> list[Any]:
    return [_act_grad(c.s["x"], c.e.args[3], dys[0])]


@rule("mul")
def mul(c: Ctx, dys: list[Any]) -> list[Any]:
    a, b = c.s["a"], c.s["b"]
    return [unbroadcast(dys[0] * b, a.shape), unbroadcast(dys[0] * a, b.shape)]


@rule("allreduce")
def allreduce(c: Ctx, dys: list[Any]) -> list[Any]:
    return [np.broadcast_to(dys[0], c.s["shape"]).copy()]  # each rank's partial sum: dY


@rule("allgather")
def allgather(c: Ctx, dys: list[Any]) -> list[Any]:
    p, *_, vp = c.s["shape"]
    dy = dys[0][0]
    pad = np.zeros((*dy.shape[:-1], p * vp))
    pad[..., : dy.shape[-1]] = dy
    return [np.moveaxis(pad.reshape(*dy.shape[:-1], p, vp), -2, 0)]


@rule("last_position")
def last_position(c: Ctx, dys: list[Any]) -> list[Any]:
    dx = np.zeros(c.s["shape"])
    dx[:, :, -1] = dys[0]
    return [dx]

