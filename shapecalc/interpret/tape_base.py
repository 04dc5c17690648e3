"""What the tape holds, apart from how it is recorded: a tape entry, and TrainOps with the tape's
state. The rules (vjp.py, vjp_moe.py) read these; vjp_tape.py wraps each operation whose rule is
registered, so the rules' registry and the wrapping import this module, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .numeric import NumericOps


@dataclass
class Entry:
    op: str
    ins: list[int | None]  # the node of each tensor input (None: a constant)
    outs: list[int]  # the node of each tensor output
    stages: list[int]  # indices of the stages the forward recorded
    layer: int
    args: tuple
    kw: dict
    saved: dict[str, Any] = field(default_factory=dict)  # what the rule reads in the backward
    kind: int | None = None  # the layer's kind


class TrainOps(NumericOps):
    """NumericOps as a training step runs: attention reads K and V as computed (the cache stage
    is still recorded, as inference records it, but nothing is read back through its dtype)."""

    def kv_cache(self, k: np.ndarray, v: np.ndarray, layer: int, Tk: Any, Tc: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
        back = super().kv_cache(k, v, layer, Tk, Tc)
        assert back[0].shape == k.shape and back[1].shape == v.shape
        return k, v

    def mla_cache(self, x: np.ndarray, layer: int, Tk: Any, Tc: Any, what: str) -> np.ndarray:
        back = super().mla_cache(x, layer, Tk, Tc, what)
        assert back.shape == x.shape
        return x


class TapeBase(TrainOps):
    """TrainOps with a tape's state: each operation of forward() an Entry, each array a node
    (vjp_tape.TapeOps wraps each operation to record it)."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.tape: list[Entry] = []
        self.node: dict[int, int] = {}  # id(array) → its node (arrays kept alive: `alive`)
        self.shapes: list[tuple[int, ...]] = []  # each node's shape
        self.alive: list[Any] = []
        self.stages_out: list[np.ndarray] = []  # each stage's output (inner stages: copies)
        self._depth = 0
        self._pre: list[np.ndarray] = []
        self._norm_info: dict[str, Any] = {}
        self._temp: Any = None
        self._experts_a = -1

    def _rec(self, role: str, name: str, op: str, a: np.ndarray, **kw: Any) -> np.ndarray:
        self.stages_out.append(a.copy() if self._depth else a)
        if role in ("moe.experts.mul", "moe.experts.act"):
            self._experts_a = len(self.stages_out) - 1  # what the experts' down multiplies
        return super()._rec(role, name, op, a, **kw)

    def _new(self, a: Any) -> int:
        self.node[id(a)] = n = len(self.shapes)
        self.shapes.append(tuple(a.shape))
        self.alive.append(a)
        return n

    def _in(self, a: Any) -> int | None:
        return self.node.get(id(a)) if isinstance(a, np.ndarray) else None
