"""What a token mixer's backward rule hands the train planner for one forward stage: its matmul
FLOPs as autograd runs them (dX and dW apart, with formulas in the seeds' symbols), and the
tensors autograd saves for it, built from the stage's dims as the forward recorded them. A base
of its own: the mixers' rule files (vjp_mamba2.py, vjp_deltanet.py) build these, the registry
(mixer_rules.py) reads them."""

from __future__ import annotations

from typing import NamedTuple

from ..model.expr import Dim, Expr, Formula, expr_of, expr_of_symbol
from ..model.stage import Stage


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


Dims = tuple[tuple[str, int], ...]


class Keep(NamedTuple):
    """One tensor autograd saves at a mixer's stage: `store` names the storage it is a view of
    within the layer (None: its own; a linear layer's role: that projection's output), made at
    `dims` and `dtype` where first met."""

    name: str
    store: str | None
    dims: Dims
    dtype: str


class Saves(NamedTuple):
    keeps: list[Keep]
    out: Keep | None  # the storage of the stage's output, saved or not (None: not followed)


def dims_of(s: Stage, which: int | None = None) -> Dims:
    """A stage's output dims (or its operand `which`'s) as (symbol, value) pairs."""
    if which is None:
        return tuple(zip(s.dims, s.shape, strict=True))
    return tuple(zip(s.operand_dims[which], s.operands[which], strict=True))
