"""What a family of reference cases is: data the one harness (harness.py) measures.

A case is (name, model_type, config kwargs). Everything else a family says: where its JSON goes,
how its models are built (experts implementation, routers redrawn), which extra measurements it
takes (`probes`), and its record layout (`record`: the keys of each case, in order, each either
a measured quantity's name or (key, quantity) or (key, function of the measurement)). The harness
measures every quantity the same way for every family; the layouts keep each JSON file's keys
(the tests read them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Record = list[str | tuple[str, str] | tuple[str, Callable[[dict[str, Any]], Any]]]


@dataclass
class Family:
    name: str
    out: str  # the JSON, relative to the repository root
    cases: list[tuple[str, str, dict[str, Any]]]
    record: Record
    how: str
    show: Callable[[dict[str, Any]], str]
    batch: int = 5
    seq: int | dict[str, int] = 7  # T, or T per case name
    vocab: int = 1000
    notes: dict[str, str] = field(default_factory=dict)
    build: dict[str, Any] = field(default_factory=dict)  # from_config kwargs beyond eager/fp32
    probes: tuple[str, ...] = ()  # see harness.PROBES
    # published: stem of tests/data/hf/<stem>.json → its publisher's figures, and the layout of
    # each entry (keys as `record`, over harness.published_counts' quantities)
    published: dict[str, dict[str, Any]] | None = None
    published_record: Record = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # top-level keys after `how`
    threads: int = 2
    # variants: measure each case again after `prepare(model)`, its flops and modules keyed
    # '<tag>_<quantity>' (Llama 4: transformers' MoE, then the routed one)
    variants: tuple[tuple[str, Callable[[Any], Any] | None], ...] = ()

    def seq_of(self, name: str) -> int:
        return self.seq[name] if isinstance(self.seq, dict) else self.seq
