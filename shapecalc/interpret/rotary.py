"""NumPy for RoPE (whole or partial, halves or interleaved pairs) and for norms over the last dim
(model-wide, or LayerNorm per head with a γ per head). numeric.py's operations call these."""

from __future__ import annotations

from typing import Any

import numpy as np

EPS = 1e-5
ROPE_BASE = 10000.0


def tables(r: int, pos: np.ndarray, dt: Any, interleaved: bool, base: float = ROPE_BASE
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(angles [..,T,R/2], cos, sin [..,T,R]) for the rotated width R and base θ; the rotation's
    sign is folded into sin."""
    inv = (base ** (-np.arange(0, r, 2) / r)).astype(np.float32)
    ang = pos.astype(np.float32)[..., None] * inv  # positions ⊗ frequencies
    c, sn = np.cos(ang).astype(dt), np.sin(ang).astype(dt)
    if interleaved:  # pairs (2i, 2i+1) share frequency i (GPT-J, Cohere)
        return ang, np.repeat(c, 2, axis=-1), np.stack([-sn, sn], axis=-1).reshape(
            *sn.shape[:-1], r)
    return ang, np.concatenate([c, c], axis=-1), np.concatenate([-sn, sn], axis=-1)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool
           ) -> tuple[np.ndarray, np.ndarray]:
    """x with its first R = cos.shape[-1] dims turned (the rest pass through), and the turned
    part (whose elements × 3 are the FLOPs)."""
    r = cos.shape[-1]
    xr = x[..., :r]
    if interleaved:  # each pair (2i, 2i+1) swapped: moves data, no arithmetic
        rot = np.empty_like(xr)
        rot[..., 0::2], rot[..., 1::2] = xr[..., 1::2], xr[..., 0::2]
    else:  # the two halves swapped
        rot = np.concatenate([xr[..., r // 2:], xr[..., : r // 2]], axis=-1)
    y = xr * cos
    rot *= sin
    y += rot
    return (y if r == x.shape[-1] else np.concatenate([y, x[..., r:]], axis=-1)), y


def normalize(x: np.ndarray, kind: str) -> tuple[np.ndarray, int]:
    """x normalised over its last dim, before γ; and the elementwise FLOPs of one rank."""
    n, eps = x.size // x.shape[0], x.dtype.type(EPS)
    if kind == "layernorm":  # mean, subtract, square, mean, divide
        y = x - x.mean(axis=-1, keepdims=True)
        var = np.square(y).mean(axis=-1, keepdims=True)
        y /= np.sqrt(var + eps)
        return y, 5 * n
    ms = np.square(x).mean(axis=-1, keepdims=True)  # square, mean, divide
    return x / np.sqrt(ms + eps), 3 * n


def head_gammas(g: np.ndarray, ranks: int, heads: int) -> np.ndarray:
    """Each rank's γ rows of a per-head norm's [H_full, Dh] γ, shaped [R, 1, h, 1, Dh] against
    [R, B, h, T, Dh]."""
    full = g.shape[0]
    if ranks * heads == full:  # rank r holds heads r·h … (r+1)·h − 1
        idx = np.arange(full).reshape(ranks, heads)
    else:  # vLLM: fewer KV heads than ranks, rank r holds (a copy of) head r // (R/full)
        idx = (np.arange(ranks) // (ranks // full))[:, None]
    return g[idx][:, None, :, None, :]
