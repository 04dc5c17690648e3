"""The NumPy interpreter's rule for the convolutions with one form (model/short_conv.py's): no
chunked algebra to prove, so the prefill's output and the conv window it leaves in the cache are
checked against T single-token decode steps from an empty window (float64), as transformers'
causal_conv1d_update runs them: [window K_c, new token] through the kernel, the last output kept,
the window shifted by one. verify reads the difference (check/mixers.py)."""

from __future__ import annotations

import numpy as np

ONE_FORM = ("conv.conv",)  # the conv1d roles checked this way (the short conv's)


def decode_steps(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x [R,B,T,C] through the kernel w [R,C,K_c] one token at a time: (y [R,B,T,C], the last
    window [R,B,K_c,C])."""
    R, B, T, C = x.shape
    win = np.zeros((R, B, w.shape[-1], C))
    ys = []
    for t in range(T):
        seq = np.concatenate([win, x[:, :, t:t + 1]], axis=2)  # [R,B,K_c+1,C]
        win = seq[:, :, 1:]
        ys.append(np.einsum("rbkc,rck->rbc", win, w))
    return np.stack(ys, axis=2), win


def one_form_err(y: np.ndarray, state: np.ndarray, x: np.ndarray, w: np.ndarray) -> float:
    """The largest relative difference of the prefill's output y (before any bias) and its
    window `state` from the decode steps over the same x and w."""
    ys, win = decode_steps(x.astype(np.float64), w.astype(np.float64))
    return max(float(np.abs(y - ys).max() / max(np.abs(ys).max(), 1e-300)),
               float(np.abs(state - win).max() / max(np.abs(win).max(), 1e-300)))
