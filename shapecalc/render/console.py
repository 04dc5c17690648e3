"""The console tables print to, and table output: to the terminal or to --output, and the
--svg/--html exports.

--svg is the table as the terminal shows it, drawn at the width of its content (no empty half
canvas), with local monospace fonts only (rich's template fetches Fira Code from a CDN, which
fails offline and is a network request the user did not ask for). --html is the report of
html.py. Both are written by output.py's checked, atomic writer, like every output.
"""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Callable
from typing import IO, Any, cast

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


MIN_WIDTH = 20  # below this, lines are laid out for 20 columns (and may be longer than the screen)
FILE_WIDTH = 200  # --output without $COLUMNS: room for every table's widest layout


def env_width() -> int | None:
    """$COLUMNS when it is a positive integer (a terminal, a pipe and a dumb terminal alike)."""
    c = os.environ.get("COLUMNS", "").strip()
    return max(MIN_WIDTH, int(c)) if c.isdigit() and int(c) > 0 else None


class _RStrip:
    """A text stream that drops the spaces rich pads table lines with before each newline (the
    colour codes after them stay), so that piped and written tables have no trailing blanks."""

    _PAD = re.compile(r" +((?:\x1b\[[0-9;]*m)*)\n")

    def __init__(self, out: IO[str]) -> None:
        self.out, self.pending = out, ""

    def write(self, text: str) -> int:
        text = self.pending + text
        cut = text.rfind("\n") + 1
        self.pending = text[cut:]
        self.out.write(self._PAD.sub(r"\1\n", text[:cut]))
        return len(text)

    def flush(self) -> None:
        if self.pending:  # a line printed without its newline (end=""): as it is
            self.out.write(self.pending)
            self.pending = ""
        self.out.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, …
        return getattr(self.out, name)


def make_console(file: IO[str] | None = None, width: int | None = None) -> Console:
    """A console that fits the screen: $COLUMNS if set, else the terminal's width (rich asks the
    terminal of stdin/stdout/stderr, else 80). Output that is not a terminal (a pipe, a file) has
    no colours and no trailing spaces; the tables choose their layout by this width."""
    out = file if file is not None else sys.stdout
    tty = Console(file=out).is_terminal
    w = width or env_width()
    if tty:
        return Console(file=out, width=w)
    return Console(file=cast(IO[str], _RStrip(out)), width=w, color_system=None,
                   force_terminal=False)


def render_table(
    draw: Callable[[Any], None],
    output: str | None = None,
    show: bool = True,
    svg: str | None = None,
    html: str | None = None,
    page: Callable[[], str] | None = None,
) -> None:
    """Print what `draw(console)` draws (to the terminal, or plain to --output), and save it as
    an SVG picture (svg_text) and the report `page()` as HTML (html.py) when asked. With
    show=False it is drawn for the exports only. The paths were checked before (check_outputs),
    and the files are committed when the command succeeds (output.py)."""
    # the exports first: one that fails (/dev/full, a full disk) fails the command before
    # anything reaches stdout, not after the table was printed
    if svg:
        write_text(svg_text(draw), svg, "svg")
    if html:
        if page is None:  # every command that draws a table has its report
            raise ValueError("render_table: --html without a page")
        write_text(page(), html, "html")
    if show and output in (None, "-"):  # stdout: its own width
        draw(make_console())
    elif show:
        out, close = open_output(output)
        try:
            draw(make_console(out, env_width() or FILE_WIDTH))
        finally:
            if close:
                out.close()


def write_with_exports(text: str, output: str | None, draw: Callable[[Any], None],
                       svg: str | None = None, html: str | None = None,
                       page: Callable[[], str] | None = None) -> None:
    """A report as text (JSON, CSV, Markdown) to stdout or --output, after its --svg/--html
    exports (render_table's order: nothing printed before a failing export)."""
    if svg or html:
        render_table(draw, None, False, svg, html, page)
    write_text(text, output)


SVG_WIDTH = 240  # the console a picture is drawn on, then cut to its content's width
FONTS = '"Fira Code", "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace'


def svg_format() -> str:
    """rich's SVG template without its @font-face rules (their url()s point at a CDN)."""
    import re

    from rich._export_format import CONSOLE_SVG_FORMAT

    fmt = re.sub(r"\s*@font-face \{\{.*?\}\}", "", CONSOLE_SVG_FORMAT, flags=re.S)
    fmt = fmt.replace("font-family: Fira Code, monospace;", f"font-family: {FONTS};")
    fmt = fmt.replace("font-family: arial;", "font-family: Arial, Helvetica, sans-serif;")
    return fmt


def svg_text(draw: Callable[[Any], None], title: str = "shapecalc") -> str:
    """What `draw(console)` prints, as an SVG exactly as wide as its widest line: drawn once on a
    wide console, whose width is then cut to that line (only trailing blanks lie beyond it)."""
    from rich.cells import cell_len

    c = Console(file=io.StringIO(), width=SVG_WIDTH, record=True, force_terminal=True,
                color_system="truecolor", legacy_windows=False)
    draw(c)
    text = c.export_text(clear=False)
    width = max((cell_len(line.rstrip()) for line in text.splitlines()), default=1)
    c.width = max(width, len(title) + 12)  # the window's title must fit too
    return c.export_svg(title=title, code_format=svg_format(), clear=True)
