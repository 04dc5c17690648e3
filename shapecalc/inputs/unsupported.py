"""The refusal of a model_type no reader knows, apart from the readers: the commands catch it on
every start (`--preset` too), and importing the readers to name it would cost each start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..model.config import ShapecalcError


class Unsupported(ShapecalcError):
    """A model_type not in the table: trace, fit and compare measure it with transformers instead
    (day-0, cli/day0.py) when the reference extra is installed."""

    def __init__(self, path: Path, where: str, known: str, raw: dict[str, Any]):
        super().__init__("model_type", f"{where} is not supported; supported: "
                         f"{known}. trace, fit and compare measure it with transformers (day-0, "
                         "no stage formulas) once `pip install 'shapecalc[reference]'` is done")
        self.path, self.raw = path, raw  # the config.json read, for the day-0 path
