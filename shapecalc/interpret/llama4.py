"""The NumPy interpreter's Llama 4 operations: the chunk mask and the attention temperature.
NumericOps (numeric.py) calls these with itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def chunk_mask(self: NumericBase, C: int | None, one_row: bool = False) -> np.ndarray:
    """[T,T] (or [B,1,T,T] with per-sequence positions, unless `one_row`: the first's): query
    and key in one chunk of C positions (as transformers counts them from a sequence's first
    real token)."""
    if C is None:
        return np.ones_like(self.causal)
    pos = self.pos[0] if one_row and self.pos.ndim == 2 else self.pos
    c = pos // C
    same = c[..., :, None] == c[..., None, :]
    return same[:, None] if same.ndim == 3 else same


def temperature(self: NumericBase, q: np.ndarray, role: str, name: str) -> np.ndarray:
    """q × (1 + 0.1·ln(1 + ⌊(pos+1)/8192⌋)): transformers' Llama4TextAttention with its default
    floor_scale 8192 and attn_scale 0.1, at the step's token indices (the tokens seen before it,
    plus 0..Tq−1), padding or not."""
    tq = q.shape[-2]
    pos = np.arange(self.cache.total - tq, self.cache.total, dtype=np.float64)
    f = (np.log1p(np.floor((pos + 1.0) / 8192)) * 0.1 + 1.0).astype(self.dt)
    y = q * f[:, None]
    return self._rec(role, name, "scale", y, ew=self._el(y) + 6 * pos.size)
