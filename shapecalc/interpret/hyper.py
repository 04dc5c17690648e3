"""The NumPy rules of the hyper-connections (model/hyper.py), as transformers 5.24's
DeepseekV4HyperConnection and DeepseekV4HyperHead compute them: the mixing weights from their
logits, the Sinkhorn steps, the collapse and the merge, each stage measured from its arrays
(elementwise: elements × the passes made, the convention in symbolic_hyper.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .numeric_base import NumericBase
from .symbolic_hyper import COMB_EW, WEIGHT_EW

EPS = 1e-6  # hc_eps: no count depends on it


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def hc_expand(self: NumericBase, x: np.ndarray, role: str, name: str, n: Any) -> np.ndarray:
    y = np.repeat(x[..., None, :], int(self.m.hc_streams or 1), axis=-2)
    return self._rec(role, name, "expand", y)


def hc_flatten(self: NumericBase, x: np.ndarray, role: str, name: str) -> np.ndarray:
    return self._rec(role, name, "reshape", x.reshape(*x.shape[:-2], -1))


def hc_weights(self: NumericBase, w: np.ndarray, role: str, name: str, n: Any, iters: int
               ) -> tuple[np.ndarray, ...]:
    hc = int(self.m.hc_streams or 1)
    key = (self._layer, role)
    logits = w.astype(np.float64) if self.dt == np.float64 else w.astype(np.float32)
    if iters == 0:  # the head: pre only
        b = self.w.get((*key, "b"), (hc,))
        s = self.w.get((*key, "s"), (1,), base=1.0)
        pre = _sigmoid(logits * s[0] + b) + EPS
        self._rec(role, f"{name} (pre: σ)", "hc_weights", pre, ew=WEIGHT_EW * self._el(pre),
                  params=b.size + s.size, dtype="fp32")
        return (pre,)
    if self.m.hc_mixing == "none":  # Hunyuan 4: pre, post = 2σ(·) + ε; no comb
        b = self.w.get((*key, "b"), (2 * hc,))
        s = self.w.get((*key, "s"), (2,), base=1.0)
        pre = _sigmoid(logits[..., :hc] * s[0] + b[:hc]) + EPS
        post = 2 * _sigmoid(logits[..., hc:] * s[1] + b[hc:]) + EPS
        self._rec(role, f"{name} (pre, post: σ)", "hc_weights",
                  np.concatenate([pre, post], axis=-1),
                  ew=WEIGHT_EW * self._el(pre) + (WEIGHT_EW + 1) * self._el(post),
                  params=b.size + s.size, dtype="fp32")
        return pre, post
    b = self.w.get((*key, "b"), ((hc + 2) * hc,))
    s = self.w.get((*key, "s"), (3,), base=1.0)
    pre = _sigmoid(logits[..., :hc] * s[0] + b[:hc]) + EPS
    post = 2 * _sigmoid(logits[..., hc:2 * hc] * s[1] + b[hc:2 * hc])
    c = logits[..., 2 * hc:].reshape(*logits.shape[:-1], hc, hc) * s[2] + b[2 * hc:].reshape(hc, hc)
    c = np.exp(c - c.max(axis=-1, keepdims=True))
    comb = c / c.sum(axis=-1, keepdims=True) + EPS
    ew = WEIGHT_EW * (self._el(pre) + self._el(post)) + COMB_EW * self._el(comb)
    self._rec(role, f"{name} (pre, post: σ; comb: softmax)", "hc_weights",
              np.concatenate([pre, post, comb.reshape(*comb.shape[:-2], -1)], axis=-1), ew=ew,
              params=b.size + s.size, dtype="fp32")
    ew, steps = 0, 0

    def normalise(c: np.ndarray, axis: int) -> tuple[np.ndarray, int]:
        sums = c.sum(axis=axis, keepdims=True) + EPS  # the sums, + ε on each
        return c / sums, 2 * self._el(c) + self._el(sums)  # (sums), then the divides

    comb, e = normalise(comb, -2)
    ew, steps = ew + e, steps + 1
    for _ in range(iters - 1):
        for axis in (-1, -2):
            comb, e = normalise(comb, axis)
            ew, steps = ew + e, steps + 1
    comb = self._rec(role.rsplit(".", 1)[0] + ".sinkhorn", f"Sinkhorn ({steps} normalisations)",
                     "sinkhorn", comb, ew=ew, dtype="fp32")
    return pre, post, comb


def hc_collapse(self: NumericBase, x: np.ndarray, pre: np.ndarray, role: str, name: str
                ) -> np.ndarray:
    y = (pre.astype(self.dt)[..., None] * x).sum(axis=-2)  # one multiply, one add per element
    return self._rec(role, name, "hc_collapse", y, ew=2 * self._el(x))


def hc_merge(self: NumericBase, x: np.ndarray, y: np.ndarray, post: np.ndarray,
             comb: np.ndarray | None, role: str, name: str) -> np.ndarray:
    add = post.astype(self.dt)[..., None] * y[..., None, :]  # post ⊗ y
    if comb is None:  # Hunyuan 4: post ⊗ y + x, the streams unmixed (broadcast over the
        mixed, flops = x + add, 0  # ranks' axis: x may hold one replica where post holds p)
    else:
        mixed, flops = self._mm(np.swapaxes(comb, -1, -2).astype(self.dt), x)  # combᵀ·x
        mixed += add
    return self._rec(role, name, "hc_merge", mixed, flops=flops, ew=2 * self._el(mixed))
