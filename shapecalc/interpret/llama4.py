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


def temperature_factors(pos: np.ndarray, beta: float = 0.1, floor: int = 8192,
                        shift: int = 1) -> np.ndarray:
    """1 + β·ln(1 + ⌊(pos+shift)/S⌋) of each position."""
    return np.log1p(np.floor((pos.astype(np.float64) + shift) / floor)) * beta + 1.0


def query_factors(self: NumericBase, tq: int, beta: float = 0.1, floor: int = 8192,
                  shift: int = 1) -> np.ndarray:
    """The factors of the step's queries, shaped to multiply q [.., B, H, Tq, Dh]. Llama 4
    (shift 1: transformers' Llama4TextAttention with its default floor_scale 8192 and attn_scale
    0.1) takes the step's token indices (the tokens seen before it, plus 0..Tq−1), padding or
    not; Ministral 3 (shift 0: get_llama_4_attn_scale) the positions, each sequence's from its
    first real token."""
    if shift:
        f = temperature_factors(np.arange(self.cache.total - tq, self.cache.total), beta, floor,
                                shift)
    else:
        f = temperature_factors(self.pos, beta, floor, 0)
    f = f.astype(self.dt)
    return f[:, None] if f.ndim == 1 else f[:, None, :, None]


def temperature(self: NumericBase, q: np.ndarray, role: str, name: str, beta: float = 0.1,
                floor: int = 8192, shift: int = 1) -> np.ndarray:
    """q × its position's factor (query_factors): 6 passes per position (5 without the shift),
    one per element of q."""
    tq = q.shape[-2]
    y = q * query_factors(self, tq, beta, floor, shift)
    return self._rec(role, name, "scale", y, ew=self._el(y) + (5 + bool(shift)) * tq)
