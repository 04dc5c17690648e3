"""The console tables print to, and table output: to the terminal, to --output, or exported as
SVG/HTML."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from rich import console as _rich
from rich.errors import MarkupError

from .output import open_output, quiet_stdout, write_text


class Console(_rich.Console):
    """rich's Console, where a string that is not valid markup (a model named `x [/b]`) prints
    as it is instead of raising MarkupError, and a closed pipe (`| head -1`) sends the rest to
    /dev/null, so that the command ends with its own exit code (rich would exit 1)."""

    def on_broken_pipe(self) -> None:
        quiet_stdout()

    def render_str(self, text: str, **kw: Any) -> Any:
        try:
            return super().render_str(text, **kw)
        except MarkupError:
            return super().render_str(text, **{**kw, "markup": False})


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
    if svg:
        write_text(console.export_svg(title="shapecalc", clear=False), svg, "svg")
    if html:
        write_text(console.export_html(clear=False), html, "html")
