"""The NumPy interpreter's CCA operations (model/cca.py): the q/k residuals, the two causal convs
over the input padded by K_q = K_d + K_g − 2 tokens (the cache's window), the delayed value, the
per-head k scale. NumericOps takes these as its methods.

One form (no chunked algebra): the prefill's conv outputs and the window it leaves are checked
against T single-token decode steps from an empty window (float64), as ZayaCCAProjection's
cached path runs them ([window K_q, new token] through both convs, the last output kept);
verify reads the difference (check/mixers.py, as the short conv's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..model.conventions import pick
from .mamba2 import _pads
from .storage import measure
from .symbolic_cca import CCA_EW

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def cca_residual(self: NumericBase, q: np.ndarray, k: np.ndarray, role: str, name: str
                 ) -> tuple[np.ndarray, np.ndarray]:
    m = self.m
    R, B, T, _ = q.shape
    H, Hkv, dh = m.n_heads, m.kv_heads, m.dh
    kr = np.repeat(k.reshape(R, B, T, Hkv, dh), H // Hkv, axis=3)  # each head its KV head's k
    qr = (q.reshape(R, B, T, H, dh) + kr) * 0.5
    kres = qr.reshape(R, B, T, Hkv, H // Hkv, dh).mean(axis=4)
    qr = qr.reshape(q.shape)
    self._rec(role, name, "cca_residual", qr, ew=CCA_EW["residual"] * self._el(qr))
    return qr, kres.reshape(k.shape)


def convs(seq: np.ndarray, wd: np.ndarray, bd: np.ndarray, wg: np.ndarray, bg: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """seq [R,B,L,C] through the depthwise conv wd [C,K_d] (+ bd) and the grouped one wg
    [C,Dh,K_g] (+ bg), no padding: (mid [R,B,L−K_d+1,C], y [R,B,L−K_d−K_g+2,C])."""
    C, dh, Kg = wg.shape
    win = np.lib.stride_tricks.sliding_window_view(seq, wd.shape[1], axis=2)  # [R,B,o,C,K_d]
    mid = np.einsum("rbock,ck->rboc", win, wd) + bd
    R, B, L, _ = mid.shape
    g = mid.reshape(R, B, L, C // dh, dh)
    gw = np.lib.stride_tricks.sliding_window_view(g, Kg, axis=2)  # [R,B,o,G,Dh,K_g]
    y = np.einsum("rbogik,gjik->rbogj", gw, wg.reshape(C // dh, dh, dh, Kg))
    return mid, y.reshape(R, B, -1, C) + bg


def cca_conv(self: NumericBase, x: np.ndarray, layer: int, role: str, name: str, channels: Any
             ) -> np.ndarray:
    m = self.m
    Kd, Kg, dh = int(m.cca_time0 or 0), int(m.cca_time1 or 0), m.dh
    K = Kd + Kg - 2
    R, B, T, C = x.shape
    wd, bd = self.w.get((layer, role, "w"), (C, Kd)), self.w.get((layer, role, "b"), (C,))
    gk = (layer, "cca.conv_grouped")
    wg, bg = self.w.get((*gk, "w"), (C, dh, Kg)), self.w.get((*gk, "b"), (C,))
    pads = _pads(self)  # transformers zeroes the padding tokens' inputs (conv_mask)
    if pads is not None and not self.decoding:
        x = x * pads
    key = (layer, "cca.conv")
    past = self.cache.states[key] if self.decoding else np.zeros((R, B, K, C), x.dtype)
    seq = _window(past, x)  # [R,B,K_q+T,C]
    mid, y = convs(seq, wd, bd, wg, bg)
    err = None if self.decoding else one_form_err(y, seq[:, :, -K:], x, (wd, bd, wg, bg))
    dw = 2 * mid[0].size * Kd
    self._rec(role, f"{name}: depthwise", "conv1d", mid, flops=pick(self.wl, dw, dw),
              ew=self._el(mid), params=wd.size + bd.size,
              operands=((B, C, mid.shape[2]), (C, Kd)))
    gr = 2 * y[0].size * dh * Kg
    self._rec("cca.conv_grouped", f"{name}: grouped by head", "conv1d", y,
              flops=pick(self.wl, gr, gr), ew=self._el(y), params=wg.size + bg.size,
              operands=((B, C, T), (C, dh, Kg)))
    if err is not None:
        self.stages[-1].extra["conv_steps_rel_err"] = err
    self.cache.states[key] = seq[:, :, seq.shape[2] - K:].copy()
    held = self.cache.states[key].transpose(0, 1, 3, 2)  # [R,B,C,K_q], as transformers keeps it
    self._rec("state.conv", "conv state", "state_cache", held,
              nbytes=measure(held[0], self.wl.act))
    return y


def _window(past: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The convs' input: the K_q past inputs (zeros before a prefill), then the step's."""
    return np.concatenate([past, x], axis=2)


def decode_steps(x: np.ndarray, w: tuple[np.ndarray, ...], K: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """x [R,B,T,C] through both convs one token at a time from an empty window of K_q: (y
    [R,B,T,C], the last window [R,B,K_q,C])."""
    R, B, T, C = x.shape
    win = np.zeros((R, B, K, C))
    ys = []
    for t in range(T):
        seq = np.concatenate([win, x[:, :, t:t + 1]], axis=2)  # [R,B,K_q+1,C]
        ys.append(convs(seq, *w)[1][:, :, -1])
        win = seq[:, :, 1:]
    return np.stack(ys, axis=2), win


def one_form_err(y: np.ndarray, state: np.ndarray, x: np.ndarray, w: tuple[np.ndarray, ...]
                 ) -> float:
    """The largest relative difference of the prefill's outputs y and its window from the
    decode steps over the same x and weights."""
    w64 = tuple(a.astype(np.float64) for a in w)
    ys, win = decode_steps(x.astype(np.float64), w64, state.shape[2])
    return max(float(np.abs(y - ys).max() / max(np.abs(ys).max(), 1e-300)),
               float(np.abs(state - win).max() / max(np.abs(win).max(), 1e-300)))


def delay(self: NumericBase, x: np.ndarray, layer: int, role: str, name: str) -> np.ndarray:
    R, B = x.shape[:2]
    key, flops = (layer, "cca.delay"), 0
    pads = _pads(self)
    if pads is not None and not self.decoding:
        x = x * pads
    if self.decoding:
        prev = self.cache.states[key]
    else:  # transformers projects a zero token for the first one: its bias (or zeros)
        shards, b, _, _, W = self.w.linear(self._layer, "cca.v_delayed", self.p)
        W = self.w.stacked(shards[0]) if W is None else W
        prev, flops = self._mm(np.zeros((R, B, W.shape[1]), self.dt), W)
        prev = (prev if b is None else prev + b)[:, :, None]  # [R,B,1,w]
    y = np.concatenate([prev, x[:, :, :-1]], axis=2)
    self._rec(role, name, "shift", y, flops=flops)
    self.cache.states[key] = x[:, :, -1:].copy()
    held = self.cache.states[key][:, :, 0]  # [R,B,w], as transformers keeps it
    self._rec("state.delay", "delayed-value state", "state_cache", held,
              nbytes=measure(held[0], self.wl.act))
    return y


def head_scale(self: NumericBase, x: np.ndarray, role: str, name: str, heads: Any
               ) -> np.ndarray:
    s = self.w.get((self._layer, role, "s"), (self.m.kv_heads,), base=1.0)
    y = x * s[None, None, :, None, None]
    return self._rec(role, name, "scale", y, ew=self._el(y), params=s.size)
