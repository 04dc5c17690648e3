"""verify's and verify --train's table of checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def print_checks(title: str, checks: list[dict[str, Any]],
                 cells: Callable[[dict[str, Any]], tuple[str, str]],
                 note: str | None = None) -> None:
    """verify's and verify --train's table: each check, its (symbolic, measured) `cells` and a
    mark; one record a check when the console is too narrow; the `note`, then the verdict."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from .console import make_console
    from .layout import show, table_or_records

    table = Table(title=Text(title, style="table.title"), title_justify="left")  # not markup
    table.add_column("check")
    table.add_column("symbolic", justify="right", no_wrap=True)
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("", justify="center", no_wrap=True)
    for c in checks:
        mark = ("[yellow]skip[/]" if c.get("skipped") else "[cyan]info[/]" if c.get("report")
                else "[green]pass[/]" if c["ok"] else "[bold red]FAIL[/]")
        name = escape(c["name"])
        if not c["ok"] and "detail" in c:
            name += f"\n[red]{escape(c['detail'])}[/]"
        table.add_row(name, *cells(c), mark)
    out = make_console()
    show(out, table_or_records(out, table))  # too narrow: one record a check, numbers whole
    bad = sum(not c["ok"] for c in checks)
    if note is not None:
        out.print(note, markup=False)
    out.print("[green]all checks pass[/]" if not bad else f"[bold red]{bad} check(s) failed[/]")
