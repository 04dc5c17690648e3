"""explain's matrices as rich tables: each step's title, its rule, and its values."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.markup import escape
from rich.table import Table

from .console import make_console


def _fmt(x: float) -> str:
    return "-∞" if np.isneginf(x) else f"{x:.3f}"


def print_explain(walk: Any) -> None:
    out = make_console()
    out.print(f"[bold]{escape(walk.heading)}[/]")
    out.print(escape("A product [m,n] × [n,p] is legal when the inner dims agree; it gives [m,p]."))
    out.print()
    for s in walk.steps:
        out.print(f"[bold cyan]{escape(s.title)}[/]   [dim]{escape(s.rule)}[/]")
        grid = Table(show_header=False, box=None, padding=(0, 1))
        for _ in range(s.value.shape[1]):
            grid.add_column(justify="right")
        for row in s.value:
            grid.add_row(*(_fmt(x) for x in row))
        out.print(grid)
        out.print()
