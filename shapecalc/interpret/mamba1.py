"""The NumPy interpreter's Mamba-1 scan (model/mamba1.py; its convolution is Mamba-2's,
mamba2.py). NumericOps takes it as a method.

Mamba-1's scan has one form, the recurrence. Prefill runs it as transformers 5.24's
mamba_selective_scan does (Δ, e^{Δ·A} and Δ·B·x for the whole prompt first, then one step per
token); decode runs one step as mamba_selective_state_update does (from the raw Δ, B, C and x of
the token). Beside the prefill, in float64, the prompt is run again as T single-token decode
steps from a zero state: the stage carries how far the two differ (verify checks it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .symbolic_mamba1 import MAMBA1_EW

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def _discretize(delta: np.ndarray, A: np.ndarray, Bm: np.ndarray, x: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """The whole prompt's e^{Δ·A} and Δ·B·x: Δ and x [B,T,D_i], A [D_i,N_s], B [B,T,N_s] →
    two [B,T,D_i,N_s]."""
    return np.exp(delta[..., None] * A), delta[..., None] * Bm[:, :, None, :] * x[..., None]


def prefill(delta: np.ndarray, A: np.ndarray, Bm: np.ndarray, Cm: np.ndarray, x: np.ndarray,
            D: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The scan over a prompt from a zero state: (y [B,T,D_i] with the skip, final state
    [B,D_i,N_s], e^{Δ·A}, the states of every step [B,T,D_i,N_s])."""
    dA, dBx = _discretize(delta, A, Bm, x)
    S = np.zeros(dA[:, 0].shape, dA.dtype)
    states = np.empty_like(dA)
    for t in range(dA.shape[1]):
        S = dA[:, t] * S + dBx[:, t]
        states[:, t] = S
    y = np.einsum("btin,btn->bti", states, Cm) + x * D
    return y, S, dA, states


def step(S: np.ndarray, delta: np.ndarray, A: np.ndarray, Bm: np.ndarray, Cm: np.ndarray,
         x: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One token from state S [B,D_i,N_s] (Δ and x [B,D_i], B and C [B,N_s]): (y, new S)."""
    S = S * np.exp(delta[..., None] * A) + (delta[..., None] * Bm[:, None, :]) * x[..., None]
    return np.einsum("bin,bn->bi", S, Cm) + x * D, S


def selective_scan(self: NumericBase, x: np.ndarray, dt: np.ndarray, b: np.ndarray,
                   c: np.ndarray, layer: int) -> np.ndarray:
    m = self.m
    f = np.float64 if self.dt == np.float64 else np.float32  # transformers' scan: fp32
    _, B, T, Di = x.shape  # one rank (config.check refuses p > 1)
    N = m.ssm_state or 0
    bias = self.w.get((layer, "mamba.dt", "b"), (Di,))
    A_log = self.w.get((layer, "mamba.A"), (Di, N))
    D = self.w.get((layer, "mamba.D"), (Di,), base=1.0).astype(f)
    xs, Bm, Cm = x[0].astype(f), b[0].astype(f), c[0].astype(f)
    delta: np.ndarray = np.logaddexp(0, dt[0].astype(f) + bias)  # softplus
    self._rec("mamba.dt", "Δ = softplus(dt + b_dt)", "softplus", delta[None],
              ew=MAMBA1_EW["dt"] * delta.size, params=Di, dtype="fp32")
    A = -np.exp(A_log.astype(f))
    key = (layer, "ssm")
    if self.decoding:
        yv, S = step(self.cache.states[key], delta[:, 0], A, Bm[:, 0], Cm[:, 0], xs[:, 0], D)
        y, dA, states = yv[:, None], np.exp(delta[..., None] * A), S[:, None]
    else:
        y, S, dA, states = prefill(delta, A, Bm, Cm, xs, D)
    self._rec("mamba.discretize", "e^{Δ·A}, Δ·B·x", "exp", dA[None],
              ew=MAMBA1_EW["discretize"] * dA.size, params=A.size + Di, dtype="fp32")
    self._rec("mamba.scan", "S_t = e^{Δ_t·A}⊙S_{t−1} + Δ_t·x_t·B_tᵀ", "mul", states[None],
              ew=MAMBA1_EW["update"] * states.size, dtype="fp32")
    ro = (y - xs * D).astype(self.dt)
    self._rec("mamba.readout", "y_t = S_t·C_t", "matmul", ro[None], flops=2 * ro.size * N,
              operands=((B, Di, N), (B, N, 1)))
    out = y.astype(self.dt)[None]
    self._rec("mamba.skip", "y = y + D⊙x", "add", out, ew=MAMBA1_EW["skip"] * y.size)
    if not self.decoding:  # the same prompt as T decode steps, in float64
        a64 = [a.astype(np.float64) for a in (delta, A, Bm, Cm, xs, D)]
        yp, Sp, _, _ = prefill(*a64)
        Ss, ys = np.zeros_like(Sp), []
        for t in range(T):
            yt, Ss = step(Ss, a64[0][:, t], a64[1], a64[2][:, t], a64[3][:, t], a64[4][:, t],
                          a64[5])
            ys.append(yt)
        yr = np.stack(ys, axis=1)
        err = max(float(np.abs(yp - yr).max() / max(np.abs(yr).max(), 1e-300)),
                  float(np.abs(Sp - Ss).max() / max(np.abs(Ss).max(), 1e-300)))
        self.stages[-1].extra["scan_steps_rel_err"] = err
    self.cache.states[key] = S
    self._rec("state.ssm", "recurrent state", "state_cache", S[None], nbytes=S.size * 4,
              dtype="fp32")
    return out
