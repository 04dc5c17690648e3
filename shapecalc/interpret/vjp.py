"""Vector-Jacobian rules for the NumPy executor's operations, in numeric.py's reading order (as
autodidax pairs a transpose rule with each primitive), a tape that records them, and the backward
that runs the tape in reverse from the loss to every parameter.

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
prefill) and the cache reads of decode; `check/train_verify.py` refuses decode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.forward import ACT
from .moe import Routing
from .numeric import NumericOps
from .rotary import EPS, head_gammas
from .weights import Shard, Weights

Rule = Callable[["Ctx", list[Any]], list[Any]]
RULES: dict[str, Rule] = {}


def rule(op: str) -> Callable[[Rule], Rule]:
    def register(f: Rule) -> Rule:
        RULES[op] = f
        return f
    return register


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """g summed over the axes its input of `shape` was broadcast along (the rank axis)."""
    if g.shape == tuple(shape):
        return g
    axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, shape, strict=True)) if b == 1 != a)
    return g.sum(axis=axes, keepdims=True)


# -- the tape -------------------------------------------------------------------------------------
@dataclass
class Entry:
    op: str
    ins: list[int | None]  # the node of each tensor input (None: a constant)
    outs: list[int]  # the node of each tensor output
    stages: list[int]  # indices of the stages the forward recorded
    layer: int
    args: tuple
    kw: dict
    saved: dict[str, Any] = field(default_factory=dict)  # what the rule reads in the backward


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

    def __init__(self, ops: TapeOps, grads: Grads):
        self.ops, self.grads, self.m, self.w, self.p = ops, grads, ops.m, ops.w, ops.p
        self.dx = [0] * len(ops.stages)  # backward matmul FLOPs per forward stage: input grads
        self.dw = [0] * len(ops.stages)  # … weight grads
        self.ew = [0] * len(ops.stages)  # elements the embedding's table gradient adds
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
    return [dys[0] * c.s["f"][:, None]]


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


@rule("route")
def route(c: Ctx, dys: list[Any]) -> list[Any]:
    m, dw = c.m, dys[0]
    z, ids = c.s["z"], c.s["ids"]  # [B,T,E] logits, [B,T,k] chosen
    dz = np.zeros_like(z)
    if m.router_scoring == "topk_sigmoid":
        w = 1 / (1 + np.exp(-np.take_along_axis(z, ids, axis=-1)))
        np.put_along_axis(dz, ids, dw * w * (1 - w), axis=-1)
        return [dz[None]]
    if m.router_scoring == "softmax":
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        s = e / e.sum(axis=-1, keepdims=True)
    else:
        s = 1 / (1 + np.exp(-z))
    w = np.take_along_axis(s, ids, axis=-1)
    if m.norm_topk_prob:  # w / Σ w
        tot = w.sum(axis=-1, keepdims=True)
        dw = (dw - (dw * w / tot).sum(axis=-1, keepdims=True)) / tot
    ds = np.zeros_like(z)
    np.put_along_axis(ds, ids, dw, axis=-1)
    if m.router_scoring == "softmax":
        dz = s * (ds - (ds * s).sum(axis=-1, keepdims=True))
    else:
        dz = ds * s * (1 - s)
    return [dz[None]]


@rule("experts")
def experts(c: Ctx, dys: list[Any]) -> list[Any]:
    """The routed FFNs: combine, down, activation (and gate ⊙ up), gate and up, per expert on
    the pairs routed to it; the routing weights' gradient goes back to the router."""
    m, s, dout = c.m, c.s, dys[0]
    x, ids, w = s["x"], s["ids"], s["w"]  # [B,T,D], [B,T,k], [B,T,k]
    out = c.ops.stages_out
    layer, p = c.e.layer, c.p
    B, T, kk = ids.shape
    D, F = m.d_model, m.dff_expert
    y = out[c.stage("moe.experts.down")]  # [p,B,T,k,D]
    dw = np.zeros_like(w)
    if m.routing_on_input:  # a plain sum: every slot's output takes dout
        dY = np.broadcast_to(dout[:, :, :, None, :], y.shape)
    else:
        dY = dout[:, :, :, None, :] * w[..., None]
        dw += np.einsum("rbtd,rbtkd->btk", dout, y)
    gated = m.gated
    act = ACT[m.ffn]
    u_in = out[c.stage("moe.experts.up")]  # pre-activation (plain) or up (gated)
    g_in = out[c.stage("moe.experts.gate")] if gated else None
    scaled = out[c.stage("moe.experts.in")][0] if m.routing_on_input else None  # [B,T,k,D]
    dxin = np.zeros((B, T, kk, D))  # the input of each pair (x, or x × weight)
    dU = np.zeros((p, B, T, kk, F // p))
    for e in range(m.n_experts or 0):
        b, t, slot = np.nonzero(ids == e)
        if not b.size:
            continue
        sh = Shard((layer, "moe.experts.down", e), (F, D), "row", p, F // p, D)
        Wd = c.w.stacked(sh)
        a = s["a"][:, b, t, slot]  # what down multiplied: act(g)·u, or act(u)
        dyp = np.ascontiguousarray(dY[:, b, t, slot])
        dU[:, b, t, slot] = c.mm(dyp, Wd.transpose(0, 2, 1), "dx", "moe.experts.down")
        c.grads.shard(sh, c.mm(a.transpose(0, 2, 1), dyp, "dw", "moe.experts.down"))
        if m.expert_bias:
            c.grads.bias((layer, "moe.experts.down", e, "bias"), sh, dyp.sum(axis=1), True)
    # through the activation (and gate ⊙ up)
    if gated:
        assert g_in is not None
        ga = _act(g_in, act)
        dG = _act_grad(g_in, act, dU * u_in)
        dUp = dU * ga
        grads = [("moe.experts.gate", dG), ("moe.experts.up", dUp)]
    else:
        grads = [("moe.experts.up", _act_grad(u_in, act, dU))]
    for e in range(m.n_experts or 0):
        b, t, slot = np.nonzero(ids == e)
        if not b.size:
            continue
        xin = (x[b, t] if scaled is None else scaled[b, t, slot])[None]  # [1,n,D]
        for role, dZ in grads:
            sh = Shard((layer, role, e), (D, F), "column", p, D, F // p)
            Wz = c.w.stacked(sh)
            dz = np.ascontiguousarray(dZ[:, b, t, slot])
            dxin[b, t, slot] += c.mm(dz, Wz.transpose(0, 2, 1), "dx", role).sum(axis=0)
            c.grads.shard(sh, c.mm(xin.transpose(0, 2, 1), dz, "dw", role))
            if m.expert_bias:
                c.grads.bias((layer, role, e, "bias"), sh, dz.sum(axis=1), False)
    if scaled is not None:  # x × w per pair
        dw += np.einsum("btkd,btd->btk", dxin, x)
        dx = np.einsum("btkd,btk->btd", dxin, w)
    else:
        dx = dxin.sum(axis=2)
    return [dx[None], dw]


def _act(x: np.ndarray, kind: str) -> np.ndarray:
    from .elementwise import activation
    return activation(x.copy(), kind, x.dtype.type)[0]


def _act_grad(x: np.ndarray, kind: str, dy: np.ndarray) -> np.ndarray:
    """dy × the activation's derivative at x."""
    if kind == "relu":
        return dy * (x > 0)
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


# -- what each rule keeps: taken around the forward operation -------------------------------------
def _keep(ops: TapeOps, op: str, args: tuple, kw: dict, out: Any) -> dict[str, Any]:
    """The residuals of `op` (copies: the forward updates scores and activations in place)."""
    a0 = args[0]
    if op == "embed":
        return {"ids": ops.ids}
    if op == "positions":
        return {"pos": ops.pos}
    if op == "temperature":
        return {"f": ops._temp}
    if op == "softcap":
        return {"y": out.copy()}
    if op == "norm":
        return ops._norm_info | {"x": ops._pre[0]}
    if op == "linear":
        return {"x": ops._pre[0]}
    if op in ("split", "concat"):
        parts = out if op == "split" else a0
        return {"shapes": [p.shape for p in parts]}
    if op in ("split_heads", "repeat_kv", "merge_heads", "allreduce", "allgather",
              "last_position"):
        return {"shape": a0.shape}
    if op == "rope":
        cos, sin = args[3]
        if a0.ndim == 4 and cos.ndim == 4:
            cos, sin = cos[:, 0], sin[:, 0]
        return {"cos": cos, "sin": sin}
    if op == "head_norm":
        full = ops.m.n_heads if args[1] == "attn.q_norm" else ops.m.kv_heads
        key = (ops._layer, args[1], "γ")
        return {"x": ops._pre[0], "key": key, "g": ops.w.get(key, (full, a0.shape[-1]))}
    if op == "matmul":
        return {"a": ops._pre[0], "b": ops._pre[1]}
    if op == "mask":
        return {"kept": out != ops.neg}
    if op == "softmax":
        return {"y": out.copy(), "sinks": args[3] if len(args) > 3 else kw.get("sinks")}
    if op == "route":
        return {"z": a0[0].copy(), "ids": out.ids}
    if op == "experts":
        r = args[1]
        a = ops.stages_out[ops._experts_a]
        return {"x": a0[0].copy(), "ids": r.ids, "w": r.weights.astype(ops.dt), "a": a}
    if op == "mul":
        return {"a": ops._pre[0], "b": ops._pre[1]}
    if op == "add":
        return {"a": args[0].shape, "b": args[1].shape}
    if op == "activation":
        return {"x": ops._pre[0]}
    return {}


# ops whose inputs are read in the backward: copied before the forward runs (in place updates)
PRE_COPY = ("norm", "linear", "head_norm", "matmul", "mul", "activation")


class TrainOps(NumericOps):
    """NumericOps as a training step runs: attention reads K and V as computed (the cache stage
    is still recorded, as inference records it, but nothing is read back through its dtype)."""

    def kv_cache(self, k: np.ndarray, v: np.ndarray, layer: int, Tk: Any, Tc: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
        back = super().kv_cache(k, v, layer, Tk, Tc)
        assert back[0].shape == k.shape and back[1].shape == v.shape
        return k, v

    def mla_cache(self, x: np.ndarray, layer: int, Tk: Any, Tc: Any, what: str) -> np.ndarray:
        back = super().mla_cache(x, layer, Tk, Tc, what)
        assert back.shape == x.shape
        return x


class TapeOps(TrainOps):
    """TrainOps recording a tape: each operation of forward() an Entry, each array a node."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.tape: list[Entry] = []
        self.node: dict[int, int] = {}  # id(array) → its node (arrays kept alive: `alive`)
        self.shapes: list[tuple[int, ...]] = []  # each node's shape
        self.alive: list[Any] = []
        self.stages_out: list[np.ndarray] = []  # each stage's output (inner stages: copies)
        self._depth = 0
        self._pre: list[np.ndarray] = []
        self._norm_info: dict[str, Any] = {}
        self._temp: Any = None
        self._experts_a = -1

    def _rec(self, role: str, name: str, op: str, a: np.ndarray, **kw: Any) -> np.ndarray:
        self.stages_out.append(a.copy() if self._depth else a)
        if role in ("moe.experts.mul", "moe.experts.act"):
            self._experts_a = len(self.stages_out) - 1  # what the experts' down multiplies
        return super()._rec(role, name, op, a, **kw)

    def _new(self, a: Any) -> int:
        self.node[id(a)] = n = len(self.shapes)
        self.shapes.append(tuple(a.shape))
        self.alive.append(a)
        return n

    def _in(self, a: Any) -> int | None:
        return self.node.get(id(a)) if isinstance(a, np.ndarray) else None



def _tensors(op: str, args: tuple) -> list[Any]:
    """The tensor inputs of an operation (gradients flow to these, in this order)."""
    if op == "concat":
        return list(args[0])
    if op == "experts":
        return [args[0], args[1].weights]
    if op in ("matmul", "add", "mul", "kv_cache"):
        return [args[0], args[1]]
    return [args[0]]


def _wrap(op: str) -> Callable[..., Any]:
    base = getattr(TapeOps, op)

    def method(self: TapeOps, *args: Any, **kw: Any) -> Any:
        if self._depth:
            return base(self, *args, **kw)
        ins = [self._in(a) for a in _tensors(op, args)]
        self._pre = [a.copy() for a in _tensors(op, args)] if op in PRE_COPY else []
        if op == "norm":
            self._norm_info = _norm_info(self, *args, **kw)
        if op == "temperature":
            self._temp = _temperature(self, args[0])
        first = len(self.stages)
        self._depth += 1
        try:
            out = base(self, *args, **kw)
        finally:
            self._depth -= 1
        outs = (list(out) if isinstance(out, (list, tuple)) and not isinstance(out, Routing)
                else [out.weights] if isinstance(out, Routing) else [out])
        saved = _keep(self, op, args, kw, out)
        self.tape.append(Entry(op, ins, [self._new(o) for o in outs],
                               list(range(first, len(self.stages))), self._layer, args, kw,
                               saved))
        self._pre = []
        return out

    method.__name__ = op
    return method


def _norm_info(ops: TapeOps, x: np.ndarray, role: str, name: str, width: Any = None,
               kind: str | None = None) -> dict[str, Any]:
    m = ops.m
    beta = m.has_norm_bias if kind is None else False
    kind = kind or m.norm
    plus_one = m.norm_plus_one and kind == "rmsnorm"
    key = (ops._layer, role)
    g = (ops.w.get((*key, "γ"), (x.shape[-1],), base=0.0 if plus_one else 1.0)
         if kind != "l2norm" else None)
    return {"key": key, "kind": kind, "beta": beta, "plus_one": plus_one, "g": g}


def _temperature(ops: TapeOps, q: np.ndarray) -> np.ndarray:
    tq = q.shape[-2]  # llama4.temperature's factor per query position
    pos = np.arange(ops.cache.total - tq, ops.cache.total, dtype=np.float64)
    return (np.log1p(np.floor((pos + 1.0) / 8192)) * 0.1 + 1.0).astype(ops.dt)


for _op in RULES:
    setattr(TapeOps, _op, _wrap(_op))


# -- the loss and the backward --------------------------------------------------------------------
def cross_entropy(logits: np.ndarray, ids: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of positions 0..T−2 predicting ids 1..T−1 (transformers' labels=ids),
    and its gradient with respect to `logits` [B,T,V]."""
    z = logits[:, :-1].astype(np.float64)
    tgt = ids[:, 1:]
    zmax = z.max(axis=-1, keepdims=True)
    e = np.exp(z - zmax)
    tot = e.sum(axis=-1, keepdims=True)
    lse = (np.log(tot) + zmax)[..., 0]
    n = tgt.size
    loss = float((lse - np.take_along_axis(z, tgt[..., None], axis=-1)[..., 0]).sum() / n)
    d = e / tot
    np.put_along_axis(d, tgt[..., None], np.take_along_axis(d, tgt[..., None], axis=-1) - 1,
                      axis=-1)
    grad = np.zeros(logits.shape)
    grad[:, :-1] = d / n
    return loss, grad


@dataclass
class Backward:
    grads: Grads
    ctx: Ctx
    act_shapes_ok: int  # activation gradients of their activation's shape
    act_shapes: int
    act_bad: list[str]


def backward(ops: TapeOps, logits: np.ndarray, dlogits: np.ndarray) -> Backward:
    """Run the tape in reverse from d loss/d logits (`logits`: the array the loss read)."""
    grads = Grads(ops.w)
    ctx = Ctx(ops, grads)
    g: dict[int, np.ndarray] = {ops.node[id(logits)]: dlogits.reshape(logits.shape)}
    ok = n = 0
    bad: list[str] = []
    for e in reversed(ops.tape):
        dys = [g.pop(o, None) for o in e.outs]
        if all(d is None for d in dys):
            continue  # nothing downstream of the loss reads it
        ctx.e = e
        if e.op != "split":  # split's rule fills its parts that no gradient reached
            dys = [np.zeros(ops.shapes[o]) if d is None else d
                   for d, o in zip(dys, e.outs, strict=True)]
        dxs = RULES[e.op](ctx, dys)
        for node, dx in zip(e.ins, dxs, strict=False):
            if node is None or dx is None:
                continue
            n += 1
            if tuple(dx.shape) == ops.shapes[node]:
                ok += 1
            elif len(bad) < 3:
                bad.append(f"{e.op} (layer {e.layer}): gradient {dx.shape}, "
                           f"activation {ops.shapes[node]}")
            g[node] = g[node] + dx if node in g else dx
    return Backward(grads, ctx, ok, n, bad)
