"""Exact polynomials in the batch B and the sequence T, read off the stage pipeline.

For one model and fixed structure — phase, tensor-parallel degree p, the logits, attention-FLOPs
and padding-mask switches, and which side of each layer kind's window T lies on — every number a
stage records is at most linear in B and quadratic in T (elements of a tensor: a product of dims;
FLOPs: 2·m·k·n; the causal half: T(T+1)/2 …). So the stage list at B ∈ {1, 2} and
T ∈ {lo, lo+1, lo+2} fixes each number exactly, by Newton's forward differences:

    v(B, T) = a₀ + b₀·t + c₀·t(t−1)/2 + B·(a₁ + b₁·t + c₁·t(t−1)/2),  t = T − lo

Every coefficient is an integer difference of integers: nothing is solved, nothing is a fraction,
and nothing about the model is typed twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.forward import FLASH_SKIP_ROLES, Stage
from ..model.plan import LayerPlan

# the monomials B^i·T^j (i ≤ 1, j ≤ 2) of the ordinary form (`Poly.num`)
MONOMIALS: tuple[tuple[int, int], ...] = ((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2))


@dataclass(frozen=True)
class Poly:
    """v = c[0] + c[1]·t + c[2]·t(t−1)/2 + B·(c[3] + c[4]·t + c[5]·t(t−1)/2), t = T − lo."""

    c: tuple[int, ...]
    lo: int = 0

    def at(self, b: int, T: int) -> int:
        t = T - self.lo
        t2 = t * (t - 1) // 2
        c = self.c
        return c[0] + c[1] * t + c[2] * t2 + b * (c[3] + c[4] * t + c[5] * t2)

    def eval(self, basis: tuple[Any, Any, Any], n: int, dtype: Any) -> np.ndarray:
        """Over arrays: basis = (B, t, t(t−1)/2) with t = T − lo."""
        B, t, t2 = basis
        c = self.c
        out = np.full(n, c[0], dtype=dtype)
        for coef, x in ((c[1], t), (c[2], t2)):
            if coef:
                out += coef * x
        if any(c[3:]):
            inner = np.full(n, c[3], dtype=dtype)
            for coef, x in ((c[4], t), (c[5], t2)):
                if coef:
                    inner += coef * x
            out += B * inner
        return out

    @property
    def is_const(self) -> bool:
        return not any(self.c[1:])

    def majorant(self) -> Poly:
        """Every coefficient made positive: bounds |v| where B ≥ 1 and T ≥ lo."""
        return Poly(tuple(abs(x) for x in self.c), self.lo)

    @property
    def den(self) -> int:
        return 1 if all(x % 2 == 0 for x in self._twice()) else 2

    @property
    def num(self) -> tuple[int, ...]:
        """Coefficients of MONOMIALS (B^i·T^j) over `den`: the ordinary form."""
        twice = self._twice()
        return tuple(x // (2 // self.den) for x in twice)

    def _twice(self) -> tuple[int, ...]:
        # a + b(T−lo) + c/2·(T−lo)(T−lo−1) = (2a − 2b·lo + c·lo(lo+1) + (2b − c(2lo+1))T + cT²)/2
        lo, c = self.lo, self.c
        out = []
        for a, b, q in ((c[0], c[1], c[2]), (c[3], c[4], c[5])):
            out += [2 * a - 2 * b * lo + q * lo * (lo + 1), 2 * b - q * (2 * lo + 1), q]
        return tuple(out)


def newton(samples: dict[tuple[int, int], int], lo: int) -> Poly:
    """The polynomial through samples {(B, T): value} at B ∈ {1, 2} and T = lo, lo+1, … (up
    to three values of T; fewer where the regime is that short)."""
    ts = sorted({t for _, t in samples})
    assert ts[0] == lo, "newton: samples start at lo"
    c = []
    for part in (0, 1):  # f₀ = 2·v(1,·) − v(2,·), f₁ = v(2,·) − v(1,·)
        f = [2 * samples[(1, t)] - samples[(2, t)] if part == 0
             else samples[(2, t)] - samples[(1, t)] for t in ts]
        d1 = f[1] - f[0] if len(f) > 1 else 0
        d2 = f[2] - 2 * f[1] + f[0] if len(f) > 2 else 0
        c += [f[0], d1, d2]
    return Poly(tuple(c), lo)


def fit_poly(samples: dict[tuple[int, int], int]) -> Poly:
    """The polynomial through samples on a 2 × k grid (k ≤ 3 consecutive values of T)."""
    return newton(samples, min(t for _, t in samples))


# ── what the totals are made of ──────────────────────────────────────────────────────────────────

# The fitting workload gives weights, activations and KV cache three distinct dtypes, so a stage's
# dtype tells which of them its bytes follow ("w", "act", "kv"); any other dtype (token ids int64,
# RoPE angles fp32) is fixed and kept by name.
FIT_DTYPES = {"dtype": "bf16", "act_dtype": "fp16", "kv_dtype": "int8"}
_CLASS_OF = {"bf16": "w", "fp16": "act", "int8": "kv"}


def _cls(dtype: str) -> str:
    return _CLASS_OF.get(dtype, dtype)


def _elements(shape: list[int]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


def measure(st: list[Stage], plan: LayerPlan) -> tuple[dict[str, int], dict[str, Any]]:
    """The numbers of one stage list that the totals are made of, and their (constant) tags."""
    num: dict[str, int] = {}
    tag: dict[str, Any] = {}

    def tot(key: str, pred: Any) -> int:
        return sum(getattr(s, key) * s.repeat for s in st if pred(s))

    num["params"] = tot("params", lambda s: True)
    num["flops"] = tot("flops", lambda s: True)
    num["ew"] = tot("elementwise_flops", lambda s: True)
    num["tq"] = next(s.shape[1] for s in st if s.role == "input.ids")
    kv = [s for s in st if s.op == "kv_cache"]
    num["kv_tokens"] = max((s.shape[3] for s in kv), default=0)
    for k, s in enumerate(kv):
        num[f"kv.{k}"] = _elements(s.shape)
        tag[f"kv.{k}"] = (_cls(s.dtype), s.repeat)
    # tokens each KV group (layers sharing a window) holds, from one cache stage of the group
    windows = list(dict.fromkeys(spec.window for spec in plan.kinds))
    for s in kv:
        g = windows.index(plan.kinds[s.kind].window)  # type: ignore[index]
        num[f"group_tokens.{g}"] = s.shape[3]
    ar = [s for s in st if s.role == "comm.allreduce" and s.group == "block" and s.kind == 0]
    num["ar_count"] = len(ar)
    num["ar"] = _elements(ar[0].shape) if ar else 0
    tag["ar"] = _cls(ar[0].dtype) if ar else "act"
    for name, pred in (
        ("emb_ar", lambda s: s.role == "comm.allreduce" and s.group == "embedding"),
        ("gather", lambda s: s.role == "comm.allgather"),
    ):
        for k, s in enumerate(x for x in st if pred(x)):
            num[f"{name}.{k}"] = _elements(s.shape)
            tag[f"{name}.{k}"] = (_cls(s.dtype), s.repeat)
    for kind in range(len(plan.kinds)):
        num[f"kind_params.{kind}"] = sum(s.params for s in st if s.kind == kind)
    num["emb_params"] = tot("params", lambda s: s.group == "embedding")
    num["head_params"] = tot("params", lambda s: s.group == "head")
    num["embed_params"] = tot("params", lambda s: s.role == "embed")
    for k, s in enumerate(st):
        num[f"act.{k}"] = _elements(s.shape)
        what = "cache" if s.op in ("kv_cache", "kv_append") else (
            "flash_skip" if s.role in FLASH_SKIP_ROLES else "")
        tag[f"act.{k}"] = (_cls(s.dtype), what)
    return num, tag
