"""Symbolic sizes: a `Dim` is an exact integer value together with the formula that made it.

A formula is a small polynomial over the seeds' symbols (B, T, D, H, H_kv, Dh, Dff, N_vocab, N,
p, s …). Products keep the order in which symbols first appear, so a matmul [B·H·T, Dh]×[Dh, T]
prints as `2·B·H·T²·Dh`, exactly as the seeds write it, and nobody types a formula by hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction

# Coefficients are ints, or Fractions where a size is halved (Dh/2)
Coef = int | Fraction

# A monomial: ((symbol, exponent), ...) in order of first appearance.
Mono = tuple[tuple[str, int], ...]

_SUP = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _mono_mul(a: Mono, b: Mono) -> Mono:
    if not b or not a:  # a constant factor (most of a poly-mode pass's dims)
        return a or b
    out = dict(a)  # dicts keep insertion order: symbols stay in order of first appearance
    for sym, e in b:
        out[sym] = out.get(sym, 0) + e
    return tuple((s, e) for s, e in out.items() if e != 0)


def _key(m: Mono) -> frozenset[tuple[str, int]]:
    return frozenset(m)


class Expr:
    """A polynomial with rational coefficients; terms keep their order of appearance."""

    __slots__ = ("terms",)

    def __init__(self, terms: Iterable[tuple[Mono, Coef]]):
        merged: dict[frozenset[tuple[str, int]], tuple[Mono, Coef]] = {}
        for mono, c in terms:
            k = _key(mono)
            if k in merged:
                m0, c0 = merged[k]
                merged[k] = (m0, c0 + c)
            else:
                merged[k] = (mono, c)
        self.terms: tuple[tuple[Mono, Coef], ...] = tuple(
            (m, c) for m, c in merged.values() if c != 0
        )

    @staticmethod
    def _of(terms: tuple[tuple[Mono, Coef], ...]) -> Expr:
        """Terms already merged, none zero (what __init__ would make of them)."""
        e = Expr.__new__(Expr)
        e.terms = terms
        return e

    @staticmethod
    def sym(name: str) -> Expr:
        return Expr._of(((((name, 1),), 1),))

    @staticmethod
    def const(c: Coef) -> Expr:
        return Expr._of((((), c),) if c != 0 else ())

    def __mul__(self, other: Expr) -> Expr:
        a, b = self.terms, other.terms
        if len(a) == 1 and len(b) == 1:  # two products (most dims): one term, nothing to merge
            return Expr._of(((_mono_mul(a[0][0], b[0][0]), a[0][1] * b[0][1]),))
        return Expr((_mono_mul(m1, m2), c1 * c2) for m1, c1 in a for m2, c2 in b)

    def __add__(self, other: Expr) -> Expr:
        return Expr(self.terms + other.terms)

    def is_zero(self) -> bool:
        return not self.terms

    def is_product(self) -> bool:
        return len(self.terms) <= 1

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        out = ""
        for i, (m, c) in enumerate(self.terms):
            t = _term_str(m, c)
            if i == 0:
                out = t
            elif t.startswith("-"):
                out += " - " + t[1:]
            else:
                out += " + " + t
        return out

    def __repr__(self) -> str:
        return f"Expr({self})"


def _mono_str(m: Mono) -> str:
    num = [s + (str(e).translate(_SUP) if e > 1 else "") for s, e in m if e > 0]
    den = [s + (str(-e).translate(_SUP) if e < -1 else "") for s, e in m if e < 0]
    text = "·".join(num)
    if den:
        text = (text or "1") + "/" + "/".join(den)
    return text


def _term_str(m: Mono, c: Coef) -> str:
    body = _mono_str(m)
    num, den = c.numerator, c.denominator
    if not body:
        return str(num) if den == 1 else f"{num}/{den}"
    head = "" if num == 1 else ("-" if num == -1 else f"{num}·")
    return head + body + (f"/{den}" if den != 1 else "")


class Dim:
    """One tensor dimension (or any size): an exact `value` and the `expr` that names it."""

    __slots__ = ("expr", "value")

    def __init__(self, value: int, expr: Expr):
        self.value = value
        self.expr = expr

    @staticmethod
    def of(symbol: str, value: int) -> Dim:
        return Dim(value, Expr.sym(symbol))

    @staticmethod
    def const(value: int) -> Dim:
        return Dim(value, Expr.const(value))

    def __mul__(self, other: Dim | int) -> Dim:
        o = other if isinstance(other, Dim) else Dim.const(other)
        return Dim(self.value * o.value, self.expr * o.expr)

    __rmul__ = __mul__

    def __add__(self, other: Dim | int) -> Dim:
        o = other if isinstance(other, Dim) else Dim.const(other)
        return Dim(self.value + o.value, self.expr + o.expr)

    __radd__ = __add__

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dim) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    @property
    def symbol(self) -> str:
        """How the dimension prints in a shape: `H·Dh`, `(H+2·H_kv)·Dh`, `1`."""
        return _factor_str(self.expr, in_product=False)

    def __repr__(self) -> str:
        return f"{self.symbol}={self.value}"


def _factor_str(e: Expr, in_product: bool) -> str:
    s = str(e).replace(" + ", "+").replace(" - ", "-")
    return f"({s})" if in_product and not e.is_product() else s


def product(dims: Iterable[Dim | int]) -> Dim:
    out = Dim.const(1)
    for d in dims:
        out = out * d
    return out


class Formula(str):
    """A formula's text that also carries the Expr it prints (what the closed form reads)."""

    expr: Expr

    def __new__(cls, text: str, expr: Expr) -> Formula:
        out = super().__new__(cls, text)
        out.expr = expr
        return out


def expr_of(text: str) -> Expr:
    """The Expr behind a formula's text ("0" and other plain text: none, so zero)."""
    return text.expr if isinstance(text, Formula) else Expr([])


def formula(factors: Iterable[Dim | int]) -> tuple[int, str]:
    """Exact value and formula of a product of factors.

    Monomial factors merge into one product (`2·B·H·T²·Dh`); a factor that is a sum stays in
    parentheses (`2·B·T·D·(H+2·H_kv)·Dh`) rather than being expanded. The text is a `Formula`
    carrying the product as an Expr.
    """
    value = 1
    mono = Expr.const(1)
    sums: list[Expr] = []
    for f in factors:
        d = f if isinstance(f, Dim) else Dim.const(f)
        value *= d.value
        if d.expr.is_product():
            mono = mono * d.expr
        else:
            sums.append(d.expr)
    if not sums:
        return value, Formula(str(mono), mono)
    head = "" if str(mono) == "1" else str(mono) + "·"
    expr = mono
    for part in sums:
        expr = expr * part
    return value, Formula(head + "·".join(_factor_str(s, True) for s in sums), expr)


def sum_formula(parts: Iterable[tuple[int, str]]) -> tuple[int, str]:
    """Add (value, formula) pairs, dropping zero terms: `D·H·Dh + H·Dh`."""
    items = [(v, f) for v, f in parts if f != "0"]
    if not items:
        return 0, "0"
    if len(items) == 1:
        return items[0]
    expr = Expr([])
    for _, f in items:
        expr = expr + expr_of(f)
    return sum(v for v, _ in items), Formula(" + ".join(f for _, f in items), expr)


_UNSUP = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


def expr_of_symbol(text: str) -> Expr:
    """The Expr a dimension's printed symbol names (`Dim.symbol`: `H_s·D_s+2·G·N_s`, `H/p`):
    each monomial's symbols and exponents as printed, so what it prints is the text read (a
    shape's dims are kept as text in a Stage)."""
    out = Expr([])
    for sign, term in re.findall(r"([+-]?)([^+-]+)", text.strip("()")):
        num, *den = term.split("/")
        coef: Coef = -1 if sign == "-" else 1
        mono: list[tuple[str, int]] = []
        for part, e in [(num, 1)] + [(d, -1) for d in den]:
            for f in part.split("·"):
                m = re.fullmatch(r"(.*?)([⁰¹²³⁴⁵⁶⁷⁸⁹]*)", f)
                assert m is not None
                base, exp = m.group(1), int(m.group(2).translate(_UNSUP) or 1) * e
                if base.isdigit():
                    coef = coef * int(base) if e > 0 else Fraction(coef, int(base))
                elif base:
                    mono.append((base, exp))
        out = out + Expr([(tuple(mono), coef)])
    return out
