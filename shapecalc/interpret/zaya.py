"""The NumPy interpreter's ZAYA operations (model/zaya.py): the scaled embeddings, the scaled
residual and the router state carried from layer to layer within one step (numeric.py runs the
layers in order, so the state a layer reads is the one the layer before it left)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def affine(self: NumericBase, x: np.ndarray, role: str, name: str) -> np.ndarray:
    D = self.m.d_model
    b = self.w.get((self._layer, role, "b"), (D,))
    s = self.w.get((self._layer, role, "s"), (D,), base=1.0)
    y = (x + b) * s
    return self._rec(role, name, "affine", y, ew=2 * self._el(y), params=b.size + s.size)


def scaled_residual(self: NumericBase, x: np.ndarray, y: np.ndarray, role: str, name: str
                    ) -> np.ndarray:
    D = self.m.d_model
    # each of a layer's two residuals its own vectors: the first, the attention's; then the FFN's
    i = sum(1 for st in self.stages if st.role == role and st.extra.get("layer") == self._layer)
    key = (self._layer, role, i)
    by, sy, bx, sx = (self.w.get((*key, n), (D,), base=1.0 if n[0] == "s" else 0.0)
                      for n in ("by", "sy", "bx", "sx"))
    out = (y + by) * sy + (x + bx) * sx
    return self._rec(role, name, "add", out, ew=5 * self._el(out), params=4 * D)


def depth_carry(self: NumericBase, r: np.ndarray, role: str, name: str, add: bool
                ) -> np.ndarray:
    if add:
        s = self.w.get((self._layer, role, "s"), (r.shape[-1],), base=1.0)
        r = r + self._carry * s  # type: ignore[attr-defined]
        self._rec(role, name, "add", r, ew=2 * self._el(r), params=s.size)
    self._carry = r  # type: ignore[attr-defined]  # what the next layer's router adds
    return r
