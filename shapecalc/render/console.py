"""The console tables print to, and table output: to the terminal, to --output, or exported as
SVG/HTML."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from rich.console import Console

from ..model.config import ShapecalcError
from .output import open_output


def make_console() -> Console:
    """A terminal keeps its width; a pipe or file gets room for the whole table."""
    c = Console()
    return c if c.is_terminal else Console(width=200)


def render_table(
    draw: Callable[[Any], None],
    output: str | None = None,
    show: bool = True,
    svg: str | None = None,
    html: str | None = None,
) -> None:
    """Print what `draw(console)` draws (to the terminal, or plain to --output), and export the
    recording as SVG/HTML when asked. With show=False it is drawn for the exports only."""
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
