"""The NumPy interpreter's Inkling operations (model/inkling.py): the residual short convs with
their fp32 windows, the relative position bias, the router with its shared sink, the shared
experts' weights and the MLP's learned scale. NumericOps takes these as its methods.

The convs have one form (no chunked algebra): each prefill's output and the window it leaves are
checked against T single-token decode steps from an empty window (float64), as transformers'
causal_conv1d_update runs them; verify reads the difference (check/mixers.py, as the short
conv's). The bias follows InklingRelativeLogits: the distance of query and key by their places
in the step and the cache (left padding shifts both alike)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .mamba2 import _pads, _prefill_span
from .moe import Routing
from .short_conv import one_form_err
from .storage import measure
from .symbolic_inkling import ROUTE_EW

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def res_conv(self: NumericBase, x: np.ndarray, layer: int, role: str, name: str, channels: Any
             ) -> np.ndarray:
    K = int(self.m.conv_kernel or 0)
    _, B, T, C = x.shape
    w = self.w.get((layer, role, "w"), (C, K))[None]  # [1, C, K]: one rank (tp > 1 refused)
    pads = _pads(self)
    xin = x * pads if pads is not None and not self.decoding else x
    key = (layer, role)
    if self.decoding:  # the window of K_c past inputs, then the new one: 2 outputs, the last kept
        seq = span = np.concatenate([self.cache.states[key], xin], axis=2)
    else:
        seq, span = _prefill_span(xin, K)
    win = np.lib.stride_tricks.sliding_window_view(span, K, axis=2)  # [R,B,outs,C,K]
    out = np.einsum("rbock,rck->rboc", win, w)
    y = out[:, :, : seq.shape[2] if not self.decoding else None][:, :, -T:]
    err = None if self.decoding else one_form_err(y, seq[:, :, -K:], xin, w)
    self.cache.states[key] = seq[:, :, -K:].copy()
    y = np.ascontiguousarray(x + y, dtype=self.dt)
    self._rec(role, name, "conv1d", y, flops=2 * out[0].size * K, ew=self._el(y),
              params=w[0].size, operands=((B, C, win.shape[2]), (C, K)))
    if err is not None:
        self.stages[-1].extra["conv_steps_rel_err"] = err
    held = self.cache.states[key].transpose(0, 1, 3, 2)  # [R,B,C,K], as transformers keeps it
    self._rec("state.conv", "conv state", "state_cache", held, dtype="fp32",
              nbytes=measure(held[0], "fp32"))
    return y


def rel_bias(self: NumericBase, s: np.ndarray, r: np.ndarray, role: str, name: str,
             extent: Any) -> np.ndarray:
    R, B, H, Tq, Tk = s.shape
    X, d = int(extent.value), int(self.m.rel_dim or 0)
    P = self.w.get((self._layer, role, "P"), (d, X))
    logits, flops = self._mm(r.reshape(R, B, Tq, H, d), P)  # [R,B,Tq,H,X]
    self._rec(f"{role}.profiles", "relative logits r·P", "linear", logits, flops=flops,
              params=P.size, operands=((B, Tq, H, d), (d, X)))
    # distance of each query to each key: prefill's T to T, decode's last token to the cache's
    qi = np.arange(Tq)[:, None] + (Tk - Tq)
    dist = qi - np.arange(Tk)[None, :]  # [Tq, Tk]
    inside = (dist >= 0) & (dist < X)
    lg = logits.transpose(0, 1, 3, 2, 4)  # [R,B,H,Tq,X]
    idx = np.broadcast_to(np.clip(dist, 0, X - 1), (R, B, H, Tq, Tk))
    bias = np.where(inside, np.take_along_axis(lg, idx, axis=-1), 0)
    s += bias.astype(s.dtype)
    return self._rec(role, name, "add", s, ew=self._el(s))


def sink_route(self: NumericBase, logits: np.ndarray, role: str, name: str, k: Any, shared: Any
               ) -> tuple[Routing, np.ndarray]:
    m = self.m
    E, kk = m.n_experts or 0, m.experts_per_token or 0
    z = logits[0].astype(np.float64)  # fp32 routing in transformers; replicated logits
    scores = 1 / (1 + np.exp(-z[..., :E]))  # + the correction bias: a buffer, zero here
    ids = np.argsort(-scores, axis=-1, kind="stable")[..., :kk]
    kept = np.concatenate([np.take_along_axis(z[..., :E], ids, axis=-1), z[..., E:]], axis=-1)
    ls = -np.logaddexp(0, -kept)  # log-sigmoid
    w = np.exp(ls - ls.max(axis=-1, keepdims=True))
    scale = self.w.get((self._layer, role, "scale"), (1,), base=1.0)
    w = w / w.sum(axis=-1, keepdims=True) * (m.routed_scaling_factor or 1.0) * scale[0]
    ew = ROUTE_EW["routed"] * z[..., :E].size + ROUTE_EW["kept"] * w.size
    self._rec(role, name, "route", w[None, ..., :kk], ew=ew, dtype="fp32", params=1)
    self.routed.append(ids)
    return Routing(w[..., :kk], ids), w[None, ..., kk:].astype(self.dt)


def bank_scale(self: NumericBase, u: np.ndarray, g: np.ndarray, role: str, name: str, n: Any
               ) -> np.ndarray:
    ns = g.shape[-1]
    y = (u.reshape(*u.shape[:-1], ns, -1) * g[..., None]).reshape(u.shape)
    return self._rec(role, name, "mul", y, ew=self._el(y))


def learned_scale(self: NumericBase, x: np.ndarray, role: str, name: str) -> np.ndarray:
    s = self.w.get((self._layer, role, "s"), (1,), base=1.0)
    y = x * s[0]
    return self._rec(role, name, "scale", y, ew=self._el(y), params=1)


def log_scale(self: NumericBase, x: np.ndarray, role: str, name: str, alpha: float, floor: int
              ) -> np.ndarray:
    Tq, Tk = x.shape[-2:]
    pos = np.arange(Tq) + (Tk - Tq)  # as InklingAttention: the query's place in the cache
    tau = 1 + alpha * np.log(np.maximum((pos + 1) / floor, 1.0))
    x *= tau.astype(x.dtype)[:, None]  # the scores, fresh and used once: in place
    return self._rec(role, name, "scale", x, ew=self._el(x))
