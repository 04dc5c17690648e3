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
        cells = [[_fmt(x) for x in row] for row in s.value]
        n = s.value.shape[1]
        cell = max((len(c) for row in cells for c in row), default=1) + 2
        per = max(1, min(n, out.width // cell))  # columns side by side; more: in parts
        for lo in range(0, n, per):
            hi = min(n, lo + per)
            if per < n:
                out.print(f"[dim]columns {lo + 1}–{hi} of {n}[/]")
            grid = Table(show_header=False, box=None, padding=(0, 1))
            for _ in range(lo, hi):
                grid.add_column(justify="right", no_wrap=True)
            for row in cells:
                grid.add_row(*row[lo:hi])
            out.print(grid, crop=False)
        out.print()
