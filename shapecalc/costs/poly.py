"""Exact polynomials in the batch B and the sequence T, read off the stage pipeline.

For one model and fixed structure — phase, tensor-parallel degree p, the logits, attention-FLOPs
and padding-mask switches, and which side of each layer kind's window T lies on — every number a
stage records is a polynomial in B and T of degree ≤ 1 in B and ≤ 2 in T (elements of a tensor: a
product of dims; FLOPs: 2·m·k·n; the causal half: B·H·T(T+1)/2·Dh …). The symbolic interpreter in
poly mode (`symbolic.stages(poly=True)`: only B and T are symbols) hands each stage's formulas over
as such polynomials, so one run of the pipeline gives every total exactly: nothing is fitted,
solved or typed twice.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from ..model.expr import Expr
from ..model.plan import LayerPlan
from ..model.stage import EXPERT_ROLES, FLASH_SKIP_ROLES, Stage

# the matmuls whose cost grows with the context: QKᵀ and A·V
ATTENTION_ROLES = ("attn.scores", "attn.values")

# B^i·T^j, i ≤ 1, j ≤ 2
MONOMIALS: tuple[tuple[int, int], ...] = ((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2))
_INDEX = {m: i for i, m in enumerate(MONOMIALS)}


class Poly:
    """Σ num[k]·B^i·T^j / den over MONOMIALS; the value is an integer wherever it is used.
    Never changed once made. (A plain class: a symbolic pass makes hundreds of them.)"""

    __slots__ = ("_terms", "den", "num")

    def __init__(self, num: tuple[int, ...], den: int = 1):
        self.num, self.den = num, den
        self._terms: tuple[tuple[int, tuple[int, int]], ...] | None = None

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Poly:
            return NotImplemented
        return (self.num, self.den) == (other.num, other.den)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.num, self.den))

    def __repr__(self) -> str:
        return f"Poly(num={self.num!r}, den={self.den!r})"

    @staticmethod
    def of(e: Expr) -> Poly:
        """An Expr in the symbols B and T (a poly-mode formula) as a Poly."""
        num: list[Any] = [0] * len(MONOMIALS)  # ints, or Fractions
        fractional = False  # a halved size (Dh/2): Fractions, over a common denominator
        for mono, c in e.terms:
            b = t = 0
            for sym, k in mono:
                if sym == "B":
                    b = k
                elif sym == "T":
                    t = k
                else:
                    b = -1
            i = _INDEX.get((b, t))
            if i is None:
                raise AssertionError(f"closed form: {e} is not a polynomial of degree ≤ (1, 2) "
                                     "in B, T")
            num[i] += c
            fractional = fractional or not isinstance(c, int)
        if not fractional:  # (every formula but a few): no Fraction made
            return Poly(tuple(num))
        coef = [Fraction(x) for x in num]
        den = math.lcm(*(x.denominator for x in coef))
        return Poly(tuple(int(x * den) for x in coef), den)

    def at(self, b: int, t: int) -> int:
        s = sum(c * b**i * t**j for c, (i, j) in zip(self.num, MONOMIALS, strict=True) if c)
        q, r = divmod(s, self.den)
        assert r == 0, "closed form: a count is not an integer"
        return q

    def eval(self, mono: dict[tuple[int, int], Any], n: int, dtype: Any, xp: Any) -> Any:
        """Over arrays (or at one point, with xp = SCALARS): mono maps each non-constant
        monomial to its values (B, T, T², …)."""
        out = xp.full(n, self.num[0], dtype=dtype)
        for c, m in self.terms:
            out += c * mono[m]
        return out // self.den if self.den != 1 else out

    @property
    def terms(self) -> tuple[tuple[int, tuple[int, int]], ...]:
        """(coefficient, monomial) of the non-constant terms that are not zero (eval's, once:
        fit evaluates the same few polynomials ~100 times)."""
        if self._terms is None:
            self._terms = tuple((c, m) for c, m in zip(self.num[1:], MONOMIALS[1:], strict=True)
                                if c)
        return self._terms

    def __add__(self, other: Poly) -> Poly:
        if self.den == other.den == 1:  # (most sums)
            return Poly(tuple(a + b for a, b in zip(self.num, other.num, strict=True)))
        den = math.lcm(self.den, other.den)
        return Poly(tuple(a * (den // self.den) + b * (den // other.den)
                          for a, b in zip(self.num, other.num, strict=True)), den)

    def __mul__(self, k: int) -> Poly:
        return Poly(tuple(a * k for a in self.num), self.den)

    def per_batch(self) -> Poly:
        """This polynomial, a multiple of B, divided by B."""
        assert not any(self.num[:3]), "closed form: not a multiple of B"
        return Poly((*self.num[3:], 0, 0, 0), self.den)

    def divided(self, k: int) -> Poly:
        """Divided by the integer k (exact where it is used)."""
        g = math.gcd(*self.num, self.den * k)
        return Poly(tuple(x // g for x in self.num), self.den * k // g)

    def covers(self, other: Poly) -> bool:
        """self ≥ other wherever B, T ≥ 1: coefficient by coefficient (every monomial is
        positive there)."""
        return all(a * other.den >= b * self.den for a, b in zip(self.num, other.num,
                                                                 strict=True))

    @property
    def is_const(self) -> bool:
        return not any(self.num[1:])

    def majorant(self) -> Poly:
        """Every coefficient made positive: bounds |v| where B, T ≥ 1."""
        return Poly(tuple(abs(x) for x in self.num), 1)


ZERO = Poly((0,) * len(MONOMIALS))


def const(value: int) -> Poly:
    return Poly((value, 0, 0, 0, 0, 0))


def fit_poly(samples: dict[tuple[int, int], int]) -> Poly:
    """The polynomial through samples {(B, T): value} at B ∈ {1, 2} and up to three consecutive
    values of T, by forward differences: an independent way to the same polynomials, which the
    tests hold the poly-mode pipeline against."""
    ts = sorted({t for _, t in samples})
    lo = ts[0]
    out = ZERO
    for i, part in enumerate(((2, -1), (-1, 1))):  # f₀ = 2·v(1,·) − v(2,·), f₁ = v(2,·) − v(1,·)
        f = [part[0] * samples[(1, t)] + part[1] * samples[(2, t)] for t in ts]
        a, b = f[0], (f[1] - f[0] if len(f) > 1 else 0)
        c = f[2] - 2 * f[1] + f[0] if len(f) > 2 else 0
        # a + b(T−lo) + c/2·(T−lo)(T−lo−1), in powers of T, over 2
        twice = (2 * a - 2 * b * lo + c * lo * (lo + 1), 2 * b - c * (2 * lo + 1), c)
        num = [0] * 6
        num[3 * i : 3 * i + 3] = twice
        out = out + Poly(tuple(num), 2)
    g = math.gcd(*out.num, out.den)
    return Poly(tuple(x // g for x in out.num), out.den // g)


# ── what the totals are made of ──────────────────────────────────────────────────────────────────

# The poly-mode workload gives weights, activations and KV cache three distinct dtypes, so a stage's
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


def attention_flops(st: list[Stage], causal: bool = False) -> Poly:
    """QKᵀ's and A·V's FLOPs of one poly-mode stage list (their repeats included); `causal`:
    as a causal kernel does them (the lower triangle), whatever the counting convention."""
    out = ZERO
    for s in st:
        if s.role in ATTENTION_ROLES:
            e = s.poly_causal if causal and s.poly_causal is not None else s.poly[0]  # type: ignore[index]
            out = out + Poly.of(e) * s.repeat
    return out


def measure(st: list[Stage], plan: LayerPlan) -> tuple[dict[str, Poly], dict[str, Any]]:
    """The polynomials of one poly-mode stage list that the totals are made of, and their
    (constant) tags."""
    num: dict[str, Poly] = {}
    tag: dict[str, Any] = {}
    flops = [Poly.of(s.poly[0]) for s in st]  # type: ignore[index]
    ew = [Poly.of(s.poly[1]) for s in st]  # type: ignore[index]
    elems = [Poly.of(s.poly[2]) for s in st]  # type: ignore[index]

    def total(values: list[Poly], pred: Any = None) -> Poly:
        out = ZERO
        for s, v in zip(st, values, strict=True):
            if pred is None or pred(s):
                out = out + v * s.repeat
        return out

    num["params"] = const(sum(s.params * s.repeat for s in st))
    num["expert_params"] = const(sum(s.params * s.repeat for s in st if s.role in EXPERT_ROLES))
    num["flops"] = total(flops)
    num["attn"] = attention_flops(st)
    num["attn_causal"] = attention_flops(st, causal=True)
    num["ew"] = total(ew)
    ids = next(i for i, s in enumerate(st) if s.role == "input.ids")
    num["tq"] = elems[ids].per_batch()  # ids are [B, Tq]
    kv = [i for i, s in enumerate(st) if s.op == "kv_cache"]
    for k, i in enumerate(kv):
        num[f"kv.{k}"] = elems[i]
        tag[f"kv.{k}"] = (_cls(st[i].dtype), st[i].repeat)
    for k, i in enumerate(i for i, s in enumerate(st) if s.op == "state_cache"):
        num[f"state.{k}"] = elems[i]
        tag[f"state.{k}"] = (_cls(st[i].dtype), st[i].repeat)
        # one layer of its kind (the pipeline stages hold layers, not kinds)
        num[f"kind_state.{st[i].kind}.{k}"] = elems[i]
        tag[f"kind_state.{st[i].kind}.{k}"] = (_cls(st[i].dtype), 1)
    # tokens each KV group (layers sharing a window) holds, from one cache stage of the group:
    # tokens sit on the second-last axis ([2, B, H_kv, tokens, Dh]; MLA's [B, tokens, D_c+D_r]),
    # so tokens = elements / (B · the other axes)
    windows = list(dict.fromkeys(spec.reach for spec in plan.kinds))
    batch = st[ids].shape[0]
    for i in kv:
        if st[i].role.startswith("kv.entries"):  # compressed entries: not a window's tokens
            continue
        other = math.prod(st[i].shape) // (batch * st[i].shape[-2])
        g = windows.index(plan.kinds[st[i].kind].reach)  # type: ignore[index]
        num[f"group_tokens.{g}"] = elems[i].per_batch().divided(other)
    # the longest cache (within a regime, the same kind's at every point)
    longest = max((i for i in kv if not st[i].role.startswith("kv.entries")),
                  key=lambda i: st[i].shape[-2], default=None)
    num["kv_tokens"] = ZERO if longest is None else num[
        f"group_tokens.{windows.index(plan.kinds[st[longest].kind].reach)}"]  # type: ignore[index]
    ar = [i for i, s in enumerate(st)
          if s.role == "comm.allreduce" and s.group == "block" and s.kind == 0]
    num["ar_count"] = const(len(ar))
    # every layer's all-reduces (kinds may differ: a block with one mixer and no FFN has one)
    num["ar_layers"] = const(sum(s.repeat for s in st
                                 if s.role == "comm.allreduce" and s.group == "block"))
    num["ar"] = elems[ar[0]] if ar else ZERO
    tag["ar"] = _cls(st[ar[0]].dtype) if ar else "act"
    for name, pred in (
        ("emb_ar", lambda s: s.role == "comm.allreduce" and s.group == "embedding"),
        ("gather", lambda s: s.role == "comm.allgather"),
    ):
        for k, i in enumerate(i for i, x in enumerate(st) if pred(x)):
            num[f"{name}.{k}"] = elems[i]
            tag[f"{name}.{k}"] = (_cls(st[i].dtype), st[i].repeat)
    for kind in range(len(plan.kinds)):
        num[f"kind_params.{kind}"] = const(sum(s.params for s in st if s.kind == kind))
        num[f"kind_expert_params.{kind}"] = const(sum(
            s.params for s in st if s.kind == kind and s.role in EXPERT_ROLES))
    num["emb_params"] = const(sum(s.params * s.repeat for s in st if s.group == "embedding"))
    num["head_params"] = const(sum(s.params * s.repeat for s in st if s.group == "head"))
    num["embed_params"] = const(sum(s.params * s.repeat for s in st if s.role == "embed"))
    for k, s in enumerate(st):
        num[f"act.{k}"] = elems[k]
        what = "cache" if s.op in ("kv_cache", "kv_append", "state_cache") else (
            "flash_skip" if s.role in FLASH_SKIP_ROLES else "")
        tag[f"act.{k}"] = (_cls(s.dtype), what)
    return num, tag
