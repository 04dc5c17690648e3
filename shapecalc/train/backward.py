"""The backward of one training step, derived from the forward's stages (never written twice).

A matmul stage [m,k]×[k,n] of the forward costs, in the backward, matmuls of the same size:
  - a weight (linear): dX = dY·Wᵀ and dW = Xᵀ·dY, each 2·m·k·n;
  - two activations (attention's QKᵀ and A·V): dA = dY·Bᵀ and dB = Aᵀ·dY, each 2·m·k·n.
An input gradient is computed only where the input requires one: autograd marks every tensor
computed from a parameter, and the embedding's table is one, so from the embedding on every
input does (FlopCounterMode agrees: a whole step's backward is exactly twice its forward). The
embedding lookup itself has no matmul: its weight gradient adds the B·T rows of dY into the
table. Elementwise backward is listed apart, by a convention (EW_BACKWARD × the forward's count).

Recompute, each a forward of the block stages again inside the backward:
  - full (Megatron's activation checkpointing per layer): every stage of every layer;
  - selective (Korthikanti et al. 2022): the attention core, QKᵀ, its scale/mask/softmax, A·V;
  - torch: `torch.utils.checkpoint` (non-reentrant, what transformers' gradient checkpointing
    runs) stops re-running a layer once the last tensor its backward saved is back: the layer's
    trailing stages whose outputs only flow into ops that save nothing (the residual add, an
    all-reduce, a constant scale) are not re-run; for a Llama or GPT-2 block, the FFN's down
    projection.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, TypeVar

from ..interpret.mixer_rules import mixer_counts
from ..model.errors import ShapecalcError
from ..model.expr import Dim, Expr, Formula, expr_of, formula
from ..model.stage import Stage

# The elementwise backward of a stage, per FLOP of its forward (a convention, like the forward's
# per-element constants in interpret/symbolic.py; FlopCounterMode counts neither): a local
# derivative, then its product with the incoming gradient.
EW_BACKWARD = 2

class _InLayer(Protocol):
    @property
    def group(self) -> str: ...
    @property
    def kind(self) -> int | None: ...


T = TypeVar("T", bound=_InLayer)

# roles of the attention core that selective recompute re-runs (Korthikanti et al. 2022, §4.2)
SELECTIVE_ROLES = ("attn.scores", "attn.scale", "attn.softcap", "attn.alibi", "attn.mask",
                   "attn.softmax", "attn.values")
# ops that save nothing for their backward (their gradient is the incoming one, copied, reduced
# or × a constant): a layer output reached only through them is not re-run by torch's checkpoint
PASS_OPS = ("add", "allreduce", "scale", "reshape", "transpose")

RECOMPUTE = ("none", "selective", "full", "torch")


def check_recompute(how: str) -> None:
    if how not in RECOMPUTE:
        raise ShapecalcError("recompute", f"unknown {how!r}; known: {', '.join(RECOMPUTE)}")
# stages computed from no parameter (token ids, RoPE's angles from positions): no backward
NO_GRAD_ROLES = ("input.ids", "rope.angles")


class BackwardStage(NamedTuple):
    """One forward stage's backward (per occurrence, × repeat in totals)."""

    name: str
    role: str
    group: str
    kind: int | None
    repeat: int
    forward_flops: int
    dx_flops: int  # input gradients (an activation operand each)
    dx_formula: str
    dw_flops: int  # the weight gradient
    dw_formula: str
    elementwise_flops: int
    elementwise_formula: str
    note: str
    dims: list[str]  # the forward stage's output
    forward_formula: str
    forward_elementwise_flops: int
    convention_only_flops: int = 0  # counted as FlopCounterMode does, run by no kernel

    @property
    def flops(self) -> int:
        return self.dx_flops + self.dw_flops

    def as_dict(self) -> dict[str, Any]:
        return {**self._asdict(), "flops": self.flops}


def _times(n: int, f: str) -> str:
    """n × a formula, printed as one polynomial (`2·(2·B·T·D²)` reads `4·B·T·D²`)."""
    if n == 1 or f == "0":
        return f if n else "0"
    e = expr_of(f) * Expr.const(n)
    return Formula(str(e), e)


def _elements(s: Stage) -> tuple[int, str]:
    return formula([Dim.of(sym, v) for sym, v in zip(s.dims, s.shape, strict=True)])


def backward_stages(st: list[Stage]) -> list[BackwardStage]:
    """The backward of each forward stage that has one (matmul or elementwise work)."""
    out = []
    grad = False  # does this stage's input require a gradient: after the first parameter, yes
    for i, s in enumerate(st):
        if s.role in NO_GRAD_ROLES:
            continue
        needs_dx = grad
        grad = grad or s.params > 0 or s.op == "embed"
        ew, ewf = s.elementwise_flops * EW_BACKWARD, _times(EW_BACKWARD, s.elementwise_formula)
        if s.op == "embed":  # the lookup's weight gradient: dY's rows added into the table
            n, f = _elements(s)
            out.append(BackwardStage(s.name, s.role, s.group, s.kind, s.repeat, 0, 0, "0", 0,
                                     "0", n, f, "dW: B·T rows of dY added into the table",
                                     s.dims, "0", 0))
            continue
        if not s.flops and not ew:
            continue
        f = s.flops_formula
        extra = 0
        if (mixer := mixer_counts(s, st, i)) is not None:  # a token mixer's own rule
            dx, dxf, dw, dwf, note, extra = mixer
        elif s.op == "matmul":  # two activations: both operands take a gradient
            dx, dxf, dw, dwf = 2 * s.flops, _times(2, f), 0, "0"
            note = "dA = dY·Bᵀ and dB = Aᵀ·dY"
        elif s.flops:  # a weight: dX (if the input needs one) and dW
            dx, dxf = (s.flops, f) if needs_dx else (0, "0")
            dw, dwf = s.flops, f
            note = "dX = dY·Wᵀ, dW = Xᵀ·dY" if needs_dx else "dW = Xᵀ·dY (input needs none)"
        else:
            dx, dxf, dw, dwf, note = 0, "0", 0, "0", "elementwise"
        out.append(BackwardStage(s.name, s.role, s.group, s.kind, s.repeat, s.flops, dx, dxf,
                                 dw, dwf, ew, ewf, note, s.dims, s.flops_formula,
                                 s.elementwise_flops, extra))
    return out


def by_kind(items: list[T]) -> dict[int, list[T]]:
    """A layer's items (stages, saved tensors: anything with a group and a kind) by layer kind."""
    kinds: dict[int, list[T]] = {}
    for s in items:
        if s.group == "block" and s.kind is not None:
            kinds.setdefault(s.kind, []).append(s)
    return kinds


def torch_skipped(layer: list[Stage]) -> set[int]:
    """Indices (into one layer's stages) that torch's non-reentrant checkpoint does not re-run:
    the trailing pass-through stages, and the stages whose outputs flow only into them."""
    skipped: set[int] = set()
    i = len(layer) - 1
    while i >= 0 and layer[i].op in PASS_OPS:
        skipped.add(i)
        if layer[i].role == "block.sum":  # a parallel block: the attention output feeds it too
            skipped.update(j for j, s in enumerate(layer) if s.role == "attn.out")
        i -= 1
    if i >= 0:
        skipped.add(i)  # the producer: its output is saved by none of what follows
    return skipped


def recompute_stages(st: list[Stage], how: str) -> list[Stage]:
    """The forward stages re-run in the backward under `how` (see the module's doc)."""
    if how == "none":
        return []
    if how == "selective":
        return [s for s in st if s.group == "block" and s.role in SELECTIVE_ROLES]
    out = []
    for layer in by_kind(st).values():
        skip = torch_skipped(layer) if how == "torch" else set()
        out += [s for j, s in enumerate(layer) if j not in skip]
    return out


def _sum(items: list[Any], key: str) -> int:
    return sum(getattr(x, key) * x.repeat for x in items)


def _total_expr(items: list[Any], keys: tuple[str, ...], n_layers: int) -> Expr:
    """Σ repeat × formula, as one polynomial in the seeds' symbols: a block stage repeated by
    every layer reads ×N."""
    expr = Expr([])
    for x in items:
        times = Expr.sym("N") if x.group == "block" and x.repeat == n_layers else Expr.const(
            x.repeat)
        for key in keys:
            if (f := getattr(x, key)) != "0":
                expr = expr + expr_of(f) * times
    return expr


def _text(e: Expr) -> str:
    return "0" if e.is_zero() else str(e)


def step_flops(st: list[Stage], n_layers: int, recompute: str = "none") -> dict[str, Any]:
    """Matmul and elementwise FLOPs of one step (forward, backward, recompute) with formulas."""
    bw = backward_stages(st)
    rc = recompute_stages(st, recompute)
    fw, bwf, rcf = _sum(st, "flops"), _sum(bw, "dx_flops") + _sum(bw, "dw_flops"), _sum(rc, "flops")
    return {
        "forward_flops": fw,
        "forward_formula": _text(_total_expr(st, ("flops_formula",), n_layers)),
        "backward_flops": bwf,
        "backward_dx_flops": _sum(bw, "dx_flops"),
        "backward_dw_flops": _sum(bw, "dw_flops"),
        # of the backward, what FlopCounterMode counts and no kernel runs (a depthwise conv's dW)
        "backward_convention_only_flops": _sum(bw, "convention_only_flops"),
        "backward_formula": _text(_total_expr(bw, ("dx_formula", "dw_formula"), n_layers)),
        "recompute": recompute,
        "recompute_flops": rcf,
        "recompute_formula": _text(_total_expr(rc, ("flops_formula",), n_layers)),
        "forward_elementwise_flops": _sum(st, "elementwise_flops"),
        "backward_elementwise_flops": _sum(bw, "elementwise_flops"),
        "recompute_elementwise_flops": _sum(rc, "elementwise_flops"),
        "step_flops": fw + bwf + rcf,
    }
