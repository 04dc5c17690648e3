"""Named workloads for `serve --dataset NAME` (sharegpt, openorca, sonnet, random): each one's
prompt and output lengths in workload.py's grammar, with the benchmark it follows, its sources
and quotes, and what is assumed, in presets/datasets/serving.json (read by the one safe reader).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..inputs.files import read_json
from ..inputs.sources import _builtin
from ..model.suggest import not_one_of

FILE = "serving.json"


@cache
def table() -> dict[str, dict[str, Any]]:
    data = read_json(_builtin("datasets") / FILE, "dataset")
    return dict(data["datasets"])


def dataset(name: str) -> dict[str, Any]:
    """The named dataset's entry (prompt, output, follows, sources, assumed)."""
    t = table()
    key = name.strip().lower()
    if key not in t:
        raise not_one_of("dataset", name, t)
    return t[key]
