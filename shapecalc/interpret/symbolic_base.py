"""The symbolic interpreter's core: Sym (a tensor as its dims), the elementwise constants, and
how an operation records its Stage. SymbolicOps (symbolic.py) adds the operations; the variants'
modules (MLA, the mixers) take a SymbolicBase, so they import this module and symbolic.py imports
them, never the reverse."""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

from ..model.config import ModelConfig, Workload, nbytes
from ..model.expr import Dim, Expr, expr_of, formula, product, sum_formula
from ..model.ops import Ops
from ..model.sizes import Sizes
from ..model.stage import Group, Stage

# FLOPs per output element of each elementwise operation (a documented convention; FlopCounterMode
# counts none of them). Norms: mean/variance or mean-square, normalise, then γ (and β).
ELEMENTWISE: dict[str, int] = {
    "add": 1,  # residual, position add, bias
    "scale": 1,
    "mask": 1,
    "softmax": 5,  # row max, subtract, exp, row sum, divide
    "rope": 3,  # x·cos + rotate(x)·sin
    "mul": 1,  # gate ⊙ up
    "gelu": 8,
    "silu": 4,
    "relu": 1,
    "relu2": 2,  # squared ReLU: max(x, 0), then its square
    # xIELU as transformers' Python form runs it: x > 0, α_p·x·x + β·x (4), (expm1(min(x, ε)) −
    # x)·α_n + β·x (6), the select
    "xielu": 12,
    "layernorm": 5,  # + 1 for γ, + 1 for β
    "rmsnorm": 3,  # + 1 for γ, + 1 for β
    "sigmoid": 4,  # negate, exp, add 1, divide
    "softplus": 3,  # log(1 + eˣ): exp, add 1, log (Laguna's output gate)
    "topk": 1,  # one comparison per score
    "combine": 2,  # each expert output × its weight, summed
    "temperature": 6,  # per position: +1, ÷8192, floor, log1p, ×0.1, +1 (Llama 4)
    "softcap": 3,  # divide by c, tanh, multiply by c
    "sqrtsoftplus": 4,  # √softplus: exp, add 1, log, sqrt (DeepSeek-V4's router)
    "clamp": 1,  # one comparison (clamped SwiGLU)
}



class Sym(NamedTuple):
    dims: tuple[Dim, ...]
    dtype: str


def _total(d: Dim) -> tuple[int, str]:
    """A sum of sizes, like terms merged: γ and β of a norm give `2·D`."""
    return d.value, str(d.expr)


def _half(d: Dim) -> Dim:
    return Dim(d.value // 2, d.expr * Expr.const(Fraction(1, 2)))


class SymbolicBase(Ops):
    def __init__(self, model: ModelConfig, wl: Workload, z: Sizes):
        self.m, self.wl, self.z = model, wl, z
        self.base = model  # self.m is a layer's own widths (dots3) inside that layer
        self.stages: list[Stage] = []
        self._group: Group = "embedding"
        self._repeat = 1
        self._kind: int | None = None

    # -- recording ---------------------------------------------------------------------------
    def _rec(
        self,
        role: str,
        name: str,
        op: str,
        out: Sym,
        flops: tuple[int, str] = (0, "0"),
        ew: int = 0,
        params: tuple[int, str] = (0, "0"),
        note: str = "",
        ew_extra: tuple[int, str] = (0, "0"),
        split: str = "",
        operands: tuple[tuple[Dim, ...], ...] = (),
    ) -> Sym:
        ewf = formula([ew, *out.dims]) if ew else (0, "0")
        ewf = sum_formula([ewf, ew_extra])
        elements = 1
        for d in out.dims:
            elements *= d.value
        # the closed form reads numbers only: a poly-mode pass prints no shapes (a fifth of it)
        shown = not self.z.poly
        stage = Stage(
            name=name,
            op=op,
            group=self._group,
            dims=[d.symbol for d in out.dims] if shown else [],
            shape=[d.value for d in out.dims],
            flops=flops[0],
            flops_formula=flops[1],
            elementwise_flops=ewf[0],
            elementwise_formula=ewf[1],
            params=params[0],
            params_formula=params[1],
            bytes=elements * 8 if out.dtype == "int64" else nbytes(elements, out.dtype),
            dtype=out.dtype,
            repeat=self._repeat,
            note=note,
            split=split,
            role=role,
            kind=self._kind,
            operands=[[d.value for d in x] for x in operands],
            operand_dims=[[d.symbol for d in x] for x in operands] if shown else [],
        )
        if self.z.poly:  # the closed form reads each number as a polynomial in B and T
            stage.poly = (expr_of(flops[1]), expr_of(ewf[1]), product(out.dims).expr)
        self.stages.append(stage)
        return out

    def _act(self, *dims: Dim) -> Sym:
        return Sym(tuple(dims), self.wl.act)

    def cache_stages(self, lead: tuple[Dim, ...], width: Dim, Tk: Dim, Tc: Dim, note: str,
                     dtype: str | None = None) -> None:
        """One layer's cache entry [*lead, tokens, width] in the KV dtype (or `dtype`): written
        in prefill (Tc tokens), appended (the step's tokens) and read whole (Tk) in decode."""
        z, kv = self.z, dtype or self.wl.kv
        if self.wl.phase == "prefill":
            self._rec("kv.write", "KV cache write", "kv_cache", Sym((*lead, Tc, width), kv),
                      note=note)
            return
        self._rec("kv.append", "KV cache append", "kv_append", Sym((*lead, z.Tq, width), kv),
                  note=note)
        self._rec("kv.read", "KV cache read", "kv_cache", Sym((*lead, Tk, width), kv), note=note)
