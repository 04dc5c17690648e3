"""NumPy for the executor's elementwise operations: the activations, softcapping, and the factor
a scale stage applied as measured on the arrays. numeric.py's operations call these."""

from __future__ import annotations

from typing import Any

import numpy as np


def activation(x: np.ndarray, kind: str, dt: Any) -> tuple[np.ndarray, int]:
    """The activation `kind` of x (in place where it can), and the passes it made per element."""
    if kind == "relu":
        return np.maximum(x, 0, out=x), 1
    if kind == "relu2":  # squared ReLU (Nemotron-H): max(x, 0), then its square
        y = np.maximum(x, 0, out=x)
        return np.multiply(y, y, out=y), 2
    if kind == "softplus":  # log(1 + eˣ): exp, add 1, log (Laguna's output gate)
        return np.logaddexp(0, x, out=x), 3
    if kind in ("silu", "sigmoid"):  # x / (1 + e^−x), 1 / (1 + e^−x): negate, exp, add, divide
        u = np.negative(x)
        np.exp(u, out=u)
        u += 1
        return (np.divide(x, u, out=u) if kind == "silu" else np.reciprocal(u, out=u)), 4
    # gelu (tanh form): ½·x·(1 + tanh(c·(x + 0.044715·x³))), 8 passes
    c = np.sqrt(2 / np.pi)
    u = x * x
    u *= dt(c * 0.044715)
    u += dt(c)
    u *= x
    np.tanh(u, out=u)
    u += 1
    u *= x
    u *= dt(0.5)
    return u, 8


def xielu(x: np.ndarray, alpha: np.ndarray, dt: Any) -> tuple[np.ndarray, int]:
    """xIELU (Apertus; transformers' XIELUActivation, β 0.5, ε −1e-6): α_p = softplus(a₀),
    α_n = β + softplus(a₁); x > 0: α_p·x² + β·x, else (expm1(min(x, ε)) − x)·α_n + β·x.
    12 passes per element, as its Python form runs them."""
    beta, eps = dt(0.5), dt(-1e-6)
    ap, an = np.logaddexp(0, alpha[0]).astype(dt), beta + np.logaddexp(0, alpha[1]).astype(dt)
    pos = ap * x * x + beta * x
    neg = (np.expm1(np.minimum(x, eps)) - x) * an + beta * x
    return np.where(x > 0, pos, neg).astype(dt, copy=False), 12


def softcap(x: np.ndarray, cap: float, dt: Any) -> np.ndarray:
    """c·tanh(x/c) in place (the scores or logits are fresh and used once): 3 passes."""
    np.tanh(np.divide(x, dt(cap), out=x), out=x)
    x *= dt(cap)
    return x


def measured_factor(before: np.ndarray, after: np.ndarray) -> float | None:
    """The factor a scale applied: after / before over the first elements (`before`, taken
    before the scale, in float64), where they are not zero."""
    nz = before != 0
    if not nz.any():
        return None
    return float(np.median(after.reshape(-1)[: before.size][nz] / before[nz]))
