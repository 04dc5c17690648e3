"""The layer plan: which kind of block each of the N layers is (its attention and its FFN).

A model resolves to runs of layer specs, each with a count. Layers of one spec are alike, so the
symbolic trace records one block per *kind* (distinct spec) with its count, while the executor
runs every layer in order. Nothing downstream assumes N identical layers: trace, closed form,
planning and verify read the kinds and their counts (and parallel.py which layers each pipeline
stage holds).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from .config import ModelConfig


class LayerSpec(NamedTuple):
    """What one layer is: its attention (full, or a sliding window of W tokens), its FFN and
    its norms. Layers with equal specs have equal shapes, parameters and costs."""

    attention: str  # full | sliding
    window: int | None  # W, for sliding attention
    ffn: str  # dense | moe (the activation, gated or not, is the model's)
    norm: str  # layernorm | rmsnorm
    norm_position: str  # pre | post

    @property
    def label(self) -> str:
        """How the trace names the kind: `sliding window W=4096`, `full attention · MoE`."""
        attn = f"sliding window W={self.window}" if self.attention == "sliding" else (
            "full attention")
        return attn + (" · MoE" if self.ffn == "moe" else "")


class Run(NamedTuple):
    """`length` consecutive layers of one spec, starting at layer `first`."""

    spec: LayerSpec
    first: int
    length: int


class LayerPlan(NamedTuple):
    runs: tuple[Run, ...]
    kinds: tuple[LayerSpec, ...]  # distinct specs, in order of first appearance
    counts: tuple[int, ...]  # layers of each kind
    kind_of: tuple[int, ...]  # each layer's kind

    @property
    def uniform(self) -> bool:
        return len(self.kinds) == 1

    def first_layer(self, kind: int) -> int:
        return self.kind_of.index(kind)

    def covering(self) -> int:
        """The fewest leading layers that include every kind (what verify must run at least)."""
        return max(self.first_layer(k) for k in range(len(self.kinds))) + 1


@lru_cache(maxsize=256)
def layer_plan(model: ModelConfig) -> LayerPlan:
    types = model.layer_types or (
        ("sliding" if model.sliding_window is not None else "full",) * model.n_layers
    )
    ffns = model.ffn_types or (("moe" if model.moe else "dense",) * model.n_layers)
    specs = [
        LayerSpec(t, model.sliding_window if t == "sliding" else None, f, model.norm,
                  model.norm_position)
        for t, f in zip(types, ffns, strict=True)
    ]
    runs: list[Run] = []
    for i, spec in enumerate(specs):
        if runs and runs[-1].spec == spec:
            runs[-1] = runs[-1]._replace(length=runs[-1].length + 1)
        else:
            runs.append(Run(spec, i, 1))
    kinds = tuple(dict.fromkeys(specs))
    kind_of = tuple(kinds.index(s) for s in specs)
    counts = tuple(kind_of.count(k) for k in range(len(kinds)))
    return LayerPlan(tuple(runs), kinds, counts, kind_of)
