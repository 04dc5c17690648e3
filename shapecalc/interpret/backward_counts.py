"""What a token mixer's backward rule hands the train planner for one forward stage: its matmul
FLOPs as autograd runs them (dX and dW apart, with formulas in the seeds' symbols), built from the
stage's dims as the forward recorded them. A base of its own: the mixers' rule files
(vjp_mamba2.py, vjp_deltanet.py) build these, the registry (mixer_rules.py) reads them."""

from __future__ import annotations

from typing import NamedTuple

from ..model.expr import Dim, Expr, Formula, expr_of, expr_of_symbol


class Counts(NamedTuple):
    dx_flops: int
    dx_formula: str
    dw_flops: int
    dw_formula: str
    note: str
    convention_only: int = 0  # of these FLOPs, those FlopCounterMode counts and no kernel runs


def dim(sym: str, value: int) -> Dim:
    """A stage's dimension, from its printed symbol and its value."""
    return Dim(value, Expr.const(value) if sym.isdigit() else expr_of_symbol(sym))


def combine(*parts: tuple[int, int, str]) -> tuple[int, str]:
    """Σ coefficient × (value, formula), as one value and one polynomial."""
    value, e = 0, Expr([])
    for c, v, f in parts:
        value += c * v
        e = e + expr_of(f) * Expr.const(c)
    return value, "0" if e.is_zero() else Formula(str(e), e)


def times(d: Dim, value: int, f: str) -> tuple[int, str]:
    """A dimension × (value, formula)."""
    e = expr_of(f) * d.expr
    return d.value * value, Formula(str(e), e)
