"""The console tables print to, and table output: to the terminal or to --output, and the
--svg/--html exports (export.py)."""

from __future__ import annotations

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
    page: Callable[[], str] | None = None,
) -> None:
    """Print what `draw(console)` draws (to the terminal, or plain to --output), and save it as
    an SVG picture (export.py) and the report `page()` as HTML (html.py) when asked. With
    show=False it is drawn for the exports only. The paths were checked before (check_outputs),
    and the files are committed when the command succeeds (output.py)."""
    if show and output is None:
        draw(make_console())
    elif show:
        out, close = open_output(output)
        try:
            draw(Console(file=out, width=200, color_system=None, force_terminal=False))
        finally:
            if close:
                out.close()
    if svg:
        from .export import svg_text

        write_text(svg_text(draw), svg, "svg")
    if html:
        if page is None:  # every command that draws a table has its report
            raise ValueError("render_table: --html without a page")
        write_text(page(), html, "html")
