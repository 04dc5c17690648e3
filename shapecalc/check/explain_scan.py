"""`explain --scan`: one Mamba-2 scan walked by hand, T = 3 tokens, one head of width D_s = 2, a
state of N_s = 2, through the executor's own functions (interpret/mamba2.py: `recurrent`, the
step-by-step recurrence, and `chunked`, transformers' chunked form), matrix by matrix.

The recurrence, per token t:  S_t = e^{Δ_t·A}·S_{t−1} + Δ_t·x_t·B_tᵀ,  y_t = S_t·C_t + D·x_t
(S_t is [D_s, N_s]; x_t ∈ R^{D_s}; B_t, C_t ∈ R^{N_s}; Δ_t, A, D one number each for the head).
A = −ln 2 and Δ = (1, 1, 2) make the decays e^{Δ_t·A} exactly ½, ½, ¼. The chunked form (chunks
of L = 2: T padded to T_L = 4) gives the same y: within a chunk, G = C·Bᵀ masked by the decays
L = exp(segsum(A·Δ)) mixes the Δ-scaled inputs (Y_diag = (G ⊙ L)·(Δ ⊙ x)); between chunks, the
state a chunk ends with is carried in and read by C (Y_off).
"""

from __future__ import annotations

import math

import numpy as np

from ..interpret.mamba2 import chunked, recurrent
from .explain import Matrix, Walk, _product, _shape

X = [[1, 0], [0, 1], [1, 1]]  # x_t, one row per token (D_s = 2)
B_IN = [[1, 0], [0, 1], [1, 1]]  # B_t (N_s = 2)
C_IN = [[1, 1], [1, 0], [0, 1]]  # C_t
DELTA = [1.0, 1.0, 2.0]  # Δ_t = softplus(dt_t + b_dt), taken as given
A = -math.log(2)  # −e^{A_log}: e^{Δ·A} = 2^{−Δ}
D_SKIP = 0.5
L = 2  # the chunk


def _arrays() -> tuple[np.ndarray, ...]:
    """The executor's layout: x [B,T,H,P], Δ [B,T,H], A and D [B,1,H], B and C [B,T,H,N]."""
    x = np.array(X, float)[None, :, None, :]
    dt = np.array(DELTA)[None, :, None]
    bm, cm = (np.array(m, float)[None, :, None, :] for m in (B_IN, C_IN))
    a, d = np.full((1, 1, 1), A), np.full((1, 1, 1), D_SKIP)
    return x, dt, a, bm, cm, d


def scan_example() -> Walk:
    x, dt, a, bm, cm, d = _arrays()
    T = x.shape[1]
    steps = [Matrix("X", "X: x_t, one row per token", x[0, :, 0], _shape(x[0, :, 0])),
             Matrix("B", "B: B_t, one row per token", bm[0, :, 0], _shape(bm[0, :, 0])),
             Matrix("C", "C: C_t, one row per token", cm[0, :, 0], _shape(cm[0, :, 0])),
             Matrix("delta", "Δ: each token's step", np.array(DELTA)[:, None], "[3,1]"),
             Matrix("A_D", "A = −ln 2 and the skip D", np.array([[A, D_SKIP]]), "[1,2]")]
    S = np.zeros((1, 1, 2, 2))
    ys = []
    for t in range(T):
        one = (x[:, t:t + 1], dt[:, t:t + 1], a, bm[:, t:t + 1], cm[:, t:t + 1], d)
        _, U = recurrent(*one, np.zeros_like(S))  # from a zero state: Δ_t·x_t·B_tᵀ alone
        decay = np.exp(DELTA[t] * A)
        y, S = recurrent(*one, S)  # the executor's step
        xt, bt, ct = x[0, t, 0][:, None], bm[0, t, 0][None, :], cm[0, t, 0][:, None]
        n = t + 1
        steps += [
            Matrix(f"update_{n}", f"t={n}: Δ_{n}·x_{n}·B_{n}ᵀ (x_{n} a column, B_{n}ᵀ a row)",
                   U[0, 0], _product(xt, bt, U[0, 0])),
            Matrix(f"S_{n}", f"S_{n} = e^(Δ_{n}·A)·S_{n - 1} + Δ_{n}·x_{n}·B_{n}ᵀ, "
                   f"e^(Δ_{n}·A) = {decay:g}", S[0, 0], _shape(S[0, 0])),
            Matrix(f"y_{n}", f"y_{n} = S_{n}·C_{n} + D·x_{n}", y[0, 0, 0][:, None],
                   _product(S[0, 0], ct, y[0, 0, 0][:, None])),
        ]
        ys.append(y[0, 0, 0])
    Y = np.array(ys)
    steps.append(Matrix("Y", "Y: the recurrence's outputs, one row per token", Y, _shape(Y)))
    yc, final, parts = chunked(x, dt, a, bm, cm, d, L)
    got = {role: arr for role, arr, _ in parts}
    xd = np.pad((x * dt[..., None])[0, :, 0], ((0, (-T) % L), (0, 0)))  # Δ ⊙ x, padded to T_L
    for c in range(got["ssm.scores"].shape[1]):
        n = c + 1
        rows = f"tokens {c * L + 1}–{c * L + L}" + (" (the last one padding: T_L = 4)"
                                                     if (c + 1) * L > T else "")
        G, Lm = got["ssm.scores"][0, c, :, :, 0], got["ssm.decay"][0, 0, c]
        M, Yd = got["ssm.mask"][0, c, :, :, 0], got["ssm.diag"][0, c, :, 0]
        Cc, Bc = cm[0, c * L:(c + 1) * L, 0], bm[0, c * L:(c + 1) * L, 0]
        Cc, Bc = (np.pad(m, ((0, L - len(m)), (0, 0))) for m in (Cc, Bc))
        carried = got["ssm.pass"][0, c, 0]  # the state entering chunk c
        steps += [
            Matrix(f"G_{n}", f"chunk {n}, {rows}: G = C·Bᵀ", G, _product(Cc, Bc.T, G)),
            Matrix(f"decay_{n}", f"chunk {n}: L = exp(segsum(A·Δ)): e^(A·(Δ_(j+1)+…+Δ_i)) "
                   "on and below the diagonal, 0 above", Lm, _shape(Lm)),
            Matrix(f"M_{n}", f"chunk {n}: M = G ⊙ L", M, _shape(M)),
            Matrix(f"Y_diag_{n}", f"chunk {n}: Y_diag = M·(Δ ⊙ x)", Yd,
                   _product(M, xd[c * L:(c + 1) * L], Yd)),
            Matrix(f"state_in_{n}", f"chunk {n}: the state carried in (" + (
                f"S_{c * L}, after chunk {c})" if c else "none before it: zero)"),
                   carried, _shape(carried)),
            Matrix(f"Y_off_{n}", f"chunk {n}: Y_off = (C·state_inᵀ) ⊙ e^(A·Δ summed over the "
                   "chunk up to token i)",
                   got["ssm.off.scaled"][0, c, :, 0], _shape(got["ssm.off.scaled"][0, c, :, 0])),
        ]
    Yc = yc[0, :, 0]
    steps += [Matrix("Y_chunked", "Y = Y_diag + Y_off + D·x, the padding dropped: the "
                     "recurrence's Y", Yc, _shape(Yc)),
              Matrix("S_final", "the state after the last chunk: S_3", final[0, 0],
                     _shape(final[0, 0]))]
    return Walk("Mamba-2's scan by hand: T=3 tokens, one head of width D_s=2, a state of "
                "N_s=2, chunks of L=2 (the executor's recurrence, then its chunked form)", steps)
