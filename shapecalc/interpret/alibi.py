"""ALiBi in the NumPy executor: the real per-head slopes, added to the scores of each rank's heads
at the distances between the step's queries and the keys the layer reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def alibi_slopes(H: int, max_bias: float = 8.0) -> np.ndarray:
    """ALiBi's per-head slopes (Press et al.; BLOOM's and MPT's code): with c = 2^⌊log2 H⌋,
    m_h = 2^(−8·h/c) for h = 1..c, then for the H − c heads beyond a power of two the odd
    steps of the next power's sequence, 2^(−8·(2j−1)/(2c)) for j = 1..H − c."""
    c = 1 << (H.bit_length() - 1)
    first = 2.0 ** (-max_bias * np.arange(1, c + 1) / c)
    extra = 2.0 ** (-max_bias * np.arange(1, 2 * (H - c), 2) / (2 * c))
    return np.concatenate([first, extra])


def add_bias(ops: NumericBase, s: np.ndarray, role: str, name: str) -> np.ndarray:
    """Scores [R,B,H/p,Tq,Tk] − m_h·(i − j), in place; one add per score."""
    # query and key positions: this step's tokens; in decode the keys are the tokens the
    # layer's cache holds (left padding: counted from each sequence's first real token)
    q = np.asarray(ops.pos)
    if ops.decoding:
        cache = ops.cache
        held = cache.held_at(ops._layer)
        k = (np.cumsum(cache.seen, axis=1) - 1)[:, cache.total - held:]
        if (k == k[0]).all():
            k = k[0]
    else:
        k = q
    dist = (q[..., :, None] - k[..., None, :]).astype(ops.dt)  # i − j: [Tq,Tk] or [B,Tq,Tk]
    if dist.ndim == 3:
        dist = dist[:, None]
    # each rank adds its own heads' slopes: rank r holds heads r·H/p …
    m = alibi_slopes(ops.m.n_heads).astype(ops.dt).reshape(-1, s.shape[2])[: s.shape[0]]
    s -= m[:, None, :, None, None] * dist
    return ops._rec(role, name, "alibi", s, ew=ops._el(s))
