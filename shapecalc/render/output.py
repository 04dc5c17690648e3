"""Where output goes: --format checks, --output files, SVG/HTML exports, CSV and Markdown text.

Shared by trace and the planning commands; it formats nothing itself.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable
from typing import IO, Any

FORMATS = ("table", "json", "csv", "markdown")



def check_format(fmt: str, allowed: Iterable[str] = FORMATS) -> str:
    from ..model.config import ShapecalcError

    allowed = tuple(allowed)
    if fmt not in allowed:
        raise ShapecalcError("format", f"{fmt!r} is not one of {', '.join(allowed)}")
    return fmt


def open_output(path: str | None) -> tuple[IO[str], bool]:
    """stdout, or the file (which the caller closes when the flag says so)."""
    import sys

    if path is None or path == "-":
        return sys.stdout, False
    from ..model.config import ShapecalcError

    try:
        return open(path, "w", encoding="utf-8", newline=""), True
    except OSError as e:
        raise ShapecalcError("output", f"cannot write {path}: {e.strerror or e}") from None


def write_text(text: str, path: str | None) -> None:
    out, close = open_output(path)
    try:
        out.write(text if text.endswith("\n") else text + "\n")
    finally:
        if close:
            out.close()


def json_text(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, indent=2, allow_nan=False)


def render_table(
    draw: Callable[[Any], None],
    output: str | None = None,
    show: bool = True,
    svg: str | None = None,
    html: str | None = None,
) -> None:
    """Print what `draw(console)` draws (to the terminal, or plain to --output), and export the
    recording as SVG/HTML when asked. With show=False it is drawn for the exports only."""
    from rich.console import Console

    from ..model.config import ShapecalcError
    from .units import make_console

    record = bool(svg or html)
    if show and output is None:
        console = make_console()
        if record:
            console = Console(record=True, width=console.width)
        draw(console)
    elif show:
        out, close = open_output(output)
        try:
            console = Console(file=out, width=200, record=record, color_system=None,
                              force_terminal=False)
            draw(console)
        finally:
            if close:
                out.close()
    else:
        console = Console(file=io.StringIO(), width=160, record=True)
        draw(console)
    try:
        if svg:
            console.save_svg(svg, title="shapecalc", clear=False)
        if html:
            console.save_html(html, clear=False)
    except OSError as e:
        raise ShapecalcError("svg" if svg else "html", f"cannot write: {e.strerror or e}") from None


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    return buf.getvalue()


