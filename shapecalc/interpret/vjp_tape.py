"""The tape: NumericOps with each operation wrapped (the forward runs unchanged: same stages,
same arrays), each entry keeping what its rule (vjp.py, vjp_moe.py) reads in the backward; the
loss (mean cross-entropy, transformers' labels=ids) and the backward that runs the tape in reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.plan import layer_plan
from . import mixer_rules, vjp_moe  # noqa: F401  (register MoE's and the mixers' rules)
from .llama4 import query_factors
from .moe import Routing
from .tape_base import Entry, TapeBase
from .vjp import INPUTS, RULES, Ctx, Grads


# -- what each rule keeps: taken around the forward operation -------------------------------------
def _keep(ops: TapeOps, op: str, args: tuple, kw: dict, out: Any) -> dict[str, Any]:
    """The residuals of `op` (copies: the forward updates scores and activations in place)."""
    a0 = args[0]
    if op in INPUTS:
        return {"ins": ops._pre}
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


class TapeOps(TapeBase):
    """TapeBase recording: each operation whose rule is registered is wrapped (below)."""


def _tensors(op: str, args: tuple) -> list[Any]:
    """The tensor inputs of an operation (gradients flow to these, in this order)."""
    if op == "concat":
        return list(args[0])
    if op in INPUTS:
        return list(args[: INPUTS[op]])
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
        copy = op in PRE_COPY or op in INPUTS
        self._pre = [a.copy() for a in _tensors(op, args)] if copy else []
        if op == "norm":
            self._norm_info = _norm_info(self, *args, **kw)
        if op == "temperature":
            self._temp = _temperature(self, *args, **kw)
        first = len(self.stages)
        self._depth += 1
        try:
            out = base(self, *args, **kw)
        finally:
            self._depth -= 1
        outs = _outs(out)
        saved = _keep(self, op, args, kw, out)
        self.tape.append(Entry(op, ins, [self._new(o) for o in outs],
                               list(range(first, len(self.stages))), self._layer, args, kw,
                               saved, self._kind))
        self._pre = []
        return out

    method.__name__ = op
    return method


def _norm_info(ops: TapeOps, x: np.ndarray, role: str, name: str, width: Any = None,
               kind: str | None = None) -> dict[str, Any]:
    m = ops.m
    beta = m.has_norm_bias if kind is None else False
    kind = m.norm_kind(kind)
    plus_one = m.norm_plus_one and kind == "rmsnorm"
    key = (ops._layer, role)
    g = (ops.w.get((*key, "γ"), (x.shape[-1],), base=0.0 if plus_one else 1.0)
         if kind != "l2norm" else None)
    return {"key": key, "kind": kind, "beta": beta, "plus_one": plus_one, "g": g}


def _temperature(ops: TapeOps, q: np.ndarray, role: str, name: str, *factor: Any) -> np.ndarray:
    return query_factors(ops, q.shape[-2], *factor)  # llama4.temperature's, shaped like q


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
    recomputed: dict[int, int]  # FLOPs re-run in the backward, by forward stage


def _outs(out: Any) -> list[Any]:
    if isinstance(out, Routing):
        return [out.weights]
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _inputs(e: Entry, new: dict[int, Any]) -> tuple:
    """The entry's arguments with each tensor input recomputed where it was."""
    def sub(a: Any, node: int | None) -> Any:
        return new.get(node, a) if node is not None else a

    a, ins = list(e.args), e.ins
    if e.op == "concat":
        a[0] = [sub(x, n) for x, n in zip(a[0], ins, strict=True)]
    elif e.op == "experts":
        a[0] = sub(a[0], ins[0])
        a[1] = Routing(sub(a[1].weights, ins[1]), a[1].ids)
    else:
        for i, n in enumerate(ins):
            a[i] = sub(a[i], n)
    return tuple(a)


def recompute(ops: TapeOps, entries: list[Entry]) -> dict[int, int]:
    """Re-run `entries` (one layer's, in forward order) from their inputs, as a checkpointed
    layer's backward does: each entry's residuals and stage outputs become the recomputed ones.
    Returns the FLOPs measured on the re-run, by the original stage."""
    new: dict[int, Any] = {}
    flops: dict[int, int] = {}
    kinds = layer_plan(ops.m).kinds
    for e in entries:
        ops._layer, ops._kind, ops._group = e.layer, e.kind, "block"
        ops._mixer = kinds[e.kind].mixer if e.kind is not None else "attention"  # its split
        n0 = len(ops.stages)
        out = getattr(ops, e.op)(*_inputs(e, new), **e.kw)
        again = ops.tape.pop()
        for old, i in zip(e.stages, range(n0, len(ops.stages)), strict=True):
            flops[old] = ops.stages[i].flops
            ops.stages_out[old] = ops.stages_out[i]
        del ops.stages[n0:], ops.stages_out[n0:]
        e.saved = again.saved
        new.update(zip(e.outs, _outs(out), strict=True))
    return flops


def backward(ops: TapeOps, logits: np.ndarray, dlogits: np.ndarray,
             rerun: Callable[[list[Entry]], list[Entry]] | None = None) -> Backward:
    """Run the tape in reverse from d loss/d logits (`logits`: the array the loss read). With
    `rerun` (a layer's entries → those to recompute), each layer's backward first re-runs them:
    `Backward.recomputed` holds their FLOPs by stage."""
    grads = Grads(ops.w)
    ctx = Ctx(ops, grads)
    g: dict[int, np.ndarray] = {ops.node[id(logits)]: dlogits.reshape(logits.shape)}
    ok = n = 0
    bad: list[str] = []
    tape = list(ops.tape)
    done: dict[int, int] = {}
    for e in reversed(tape):
        if rerun is not None and e.layer >= 0 and e.layer not in ctx.layers_run:
            ctx.layers_run.add(e.layer)
            done.update(recompute(ops, rerun([x for x in tape if x.layer == e.layer])))
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
            if tuple(dx.shape) != ops.shapes[node]:  # counted, and not passed on
                if len(bad) < 3:
                    bad.append(f"{e.op} (layer {e.layer}): gradient {dx.shape}, "
                               f"activation {ops.shapes[node]}")
                continue
            ok += 1
            g[node] = g[node] + dx if node in g else dx
    return Backward(grads, ctx, ok, n, bad, done)
