"""The symbolic interpreter's ZAYA operations (model/zaya.py): the scaled embeddings, the scaled
residual and the router state carried down the layers. SymbolicOps takes these as its methods;
zaya.py (interpret/) is the executor's side. FlopCounterMode counts none of them (elementwise)."""

from __future__ import annotations

from .symbolic_base import ELEMENTWISE, Sym, SymbolicBase, _total


def sym_affine(self: SymbolicBase, x: Sym, role: str, name: str) -> Sym:
    return self._rec(role, name, "affine", x, ew=ELEMENTWISE["add"] + ELEMENTWISE["mul"],
                     params=_total(self.z.D * 2), note="(x + b)·s")


def sym_scaled_residual(self: SymbolicBase, x: Sym, y: Sym, role: str, name: str) -> Sym:
    # two biases, two scales, the sum
    return self._rec(role, name, "add", x, ew=2 * (ELEMENTWISE["add"] + ELEMENTWISE["mul"])
                     + ELEMENTWISE["add"], params=_total(self.z.D * 4),
                     note="(y + b_y)·s_y + (x + b_x)·s_x")


def sym_depth_carry(self: SymbolicBase, r: Sym, role: str, name: str, add: bool) -> Sym:
    if not add:  # the first layer only hands its state on
        return r
    return self._rec(role, name, "add", r, ew=ELEMENTWISE["add"] + ELEMENTWISE["mul"],
                     params=_total(r.dims[-1]), note="+ the previous layer's router state × s")
