"""verify's and verify --train's table of checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def print_checks(title: str, checks: list[dict[str, Any]],
                 cells: Callable[[dict[str, Any]], tuple[str, str]],
                 note: str | None = None,
                 columns: tuple[str, str] = ("symbolic", "measured")) -> None:
    """verify's, verify --train's and verify --against's table: each check, its two `cells`
    (under `columns`) and a mark; one record a check when the console is too narrow; the
    `note`, then the verdict."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from .console import make_console
    from .layout import show, table_or_records

    table = Table(title=Text(title, style="table.title"), title_justify="left")  # not markup
    table.add_column("check")
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
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


def print_against(doc: dict[str, Any]) -> None:
    """verify --against transformers: shapecalc's totals beside transformers' counts, the
    conventions converted, the versions."""
    wl, how, v = doc["workload"], doc["how"], doc["versions"]
    title = (f"verify {doc['model']} --against transformers {v['transformers']} "
             f"(torch {v['torch']}): {doc['source']}, B={wl['batch']} T={wl['seq']} "
             f"{wl['dtype']}, {how['model_class']} on the {how['device']} device")
    notes = [f"Converted to shapecalc's conventions: {c}." for c in doc["conventions"]]
    off = [f"{k} {v[k]}" for k in doc["pinned"] if not v[k].startswith(doc["pinned"][k])]
    if off:
        pins = ", ".join(f"{k} {p}" for k, p in doc["pinned"].items())
        notes.append(f"Measured with {', '.join(off)}; shapecalc's conventions were checked "
                     f"against the pinned {pins}.")

    def cells(c: dict[str, Any]) -> tuple[str, str]:
        return f"{c['shapecalc']:,}", f"{c['transformers']:,}"

    print_checks(title, doc["checks"], cells, " ".join(notes) or None,
                 columns=("shapecalc", "transformers"))
