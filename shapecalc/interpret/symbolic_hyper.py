"""The symbolic rules of the hyper-connections (model/hyper.py): shapes, FLOPs and the
elementwise convention of the mixing weights and the Sinkhorn steps.

FlopCounterMode counts two matmuls per block half, the projection [n_hc·D → (n_hc+2)·n_hc]
(a linear stage) and combᵀ·x, 2·B·T·n_hc²·D; the rest is elementwise, per token: pre and post
7·n_hc each (× s, + b, σ 4, + ε or × 2), comb 8·n_hc² (× s, + b, softmax 5, + ε), and each of
the 2·t_max − 1 Sinkhorn normalisations 2·n_hc² + n_hc (the sums, + ε on each, the divides)."""

from __future__ import annotations

from ..model.expr import Dim, formula, sum_formula
from .symbolic_base import Sym, SymbolicBase, _total

WEIGHT_EW = 7  # pre or post: × scale, + bias, sigmoid (4), + ε (pre) or × 2 (post)
COMB_EW = 8  # comb: × scale, + bias, softmax (5), + ε


def sinkhorn_steps(iters: int) -> int:
    """Normalisations: one by columns, then t_max − 1 (rows, columns) pairs."""
    return 2 * iters - 1


def sym_hc_expand(self: SymbolicBase, x: Sym, role: str, name: str, n: Dim) -> Sym:
    return self._rec(role, name, "expand", self._act(*x.dims[:-1], n, x.dims[-1]),
                     note=f"n_hc={n.value} copies")


def sym_hc_flatten(self: SymbolicBase, x: Sym, role: str, name: str) -> Sym:
    *rows, n, D = x.dims
    return self._rec(role, name, "reshape", Sym((*rows, n * D), x.dtype), note="view")


def sym_hc_weights(self: SymbolicBase, w: Sym, role: str, name: str, n: Dim, iters: int
                   ) -> tuple[Sym, ...]:
    rows = w.dims[:-1]
    if iters == 0:  # the head: pre only, one scale
        pre = self._rec(role, f"{name} (pre: σ)", "hc_weights", Sym((*rows, n), "fp32"),
                        ew=WEIGHT_EW, params=_total(n + 1), note="b [n_hc], s [1]")
        return (pre,)
    if self.m.hc_mixing == "none":  # Hunyuan 4: pre and post only; post = m·σ(·) + ε (8)
        self._rec(role, f"{name} (pre, post: σ)", "hc_weights", Sym((*rows, n * 2), "fp32"),
                  ew_extra=formula([2 * WEIGHT_EW + 1, *rows, n]), params=_total(n * 2 + 2),
                  note="b [2·n_hc], s [2]; no comb")
        return Sym((*rows, n), "fp32"), Sym((*rows, n), "fp32")
    parts = [formula([2 * WEIGHT_EW, *rows, n]), formula([COMB_EW, *rows, n, n])]
    self._rec(role, f"{name} (pre, post: σ; comb: softmax)", "hc_weights",
              Sym((*rows, (n + 2) * n), "fp32"), ew_extra=sum_formula(parts),
              params=_total((n + 2) * n + 3), note="b [(n_hc+2)·n_hc], s [3]")
    steps = sinkhorn_steps(iters)
    sink = [formula([2 * steps, *rows, n, n]), formula([steps, *rows, n])]
    comb = self._rec(role.rsplit(".", 1)[0] + ".sinkhorn", f"Sinkhorn ({steps} normalisations)",
                     "sinkhorn", Sym((*rows, n, n), "fp32"), ew_extra=sum_formula(sink),
                     note=f"t_max={iters}: comb doubly stochastic")
    return Sym((*rows, n), "fp32"), Sym((*rows, n), "fp32"), comb


def sym_hc_collapse(self: SymbolicBase, x: Sym, pre: Sym, role: str, name: str) -> Sym:
    # each stream element × its pre weight, summed over the streams
    return self._rec(role, name, "hc_collapse", self._act(*x.dims[:-2], x.dims[-1]),
                     ew_extra=formula([2, *x.dims]), note="Σ_j pre_j·x_j")


def sym_hc_merge(self: SymbolicBase, x: Sym, y: Sym, post: Sym, comb: Sym | None, role: str,
                 name: str) -> Sym:
    *rows, n, D = x.dims
    if comb is None:  # Hunyuan 4: the streams carried on unmixed
        return self._rec(role, name, "hc_merge", x, ew_extra=formula([2, *x.dims]),
                         note="post ⊗ y + x")
    return self._rec(role, name, "hc_merge", x, flops=formula([2, *rows, n, n, D]),
                     ew_extra=formula([2, *x.dims]), note="combᵀ·x a matmul; post ⊗ y, +")
