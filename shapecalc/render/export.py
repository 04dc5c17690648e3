"""`--svg FILE` and `--html FILE`: made in memory and their paths checked before anything is
written (stdout, --output), then each file written whole (a temporary file in the same folder,
renamed over the target), so a failing command leaves every file as it was.

The SVG is the table as the terminal shows it, drawn at the width of its content (no empty half
canvas) with local monospace fonts only (rich's template fetches Fira Code from a CDN, which fails
offline and is a network request the user did not ask for).
"""

from __future__ import annotations

import io
import os
import stat
import tempfile
from collections.abc import Callable
from typing import Any

from ..model.config import ShapecalcError

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
    from rich.console import Console

    c = Console(file=io.StringIO(), width=SVG_WIDTH, record=True, force_terminal=True,
                color_system="truecolor", legacy_windows=False)
    draw(c)
    text = c.export_text(clear=False)
    width = max((cell_len(line.rstrip()) for line in text.splitlines()), default=1)
    c.width = max(width, len(title) + 12)  # the window's title must fit too
    return c.export_svg(title=title, code_format=svg_format(), clear=True)


def check_path(path: str, field: str) -> str:
    """Refuse what cannot be written before anything is: an empty name, a folder, a missing or
    unwritable folder, an unwritable file."""
    if not path or not path.strip():
        raise ShapecalcError(field, "needs a file name")
    folder = os.path.dirname(os.path.abspath(path))
    shown = repr(path) if any(c in path for c in "\n\r\t") else path
    if os.path.isdir(path):
        raise ShapecalcError(field, f"{shown} is a directory")
    if not os.path.isdir(folder):
        raise ShapecalcError(field, f"cannot write {shown}: no such directory")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise ShapecalcError(field, f"cannot write {shown}: permission denied")
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise ShapecalcError(field, f"cannot write {shown}: permission denied")
    return path


def write_whole(path: str, text: str, field: str) -> None:
    """Write `text` to `path` all at once: a temporary file beside it, renamed over it. A device
    or a FIFO (/dev/stdout, /dev/null) is written in place: it cannot be replaced."""
    data = text.encode("utf-8")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(path, "wb") as f:
                f.write(data)
            return
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".shapecalc-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            # the permissions a new file gets (mkstemp's are 0600), or the old file's
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, stat.S_IMODE(st.st_mode) if st else 0o666 & ~umask)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise ShapecalcError(field, f"cannot write {path}: {e.strerror or e}") from None


Pending = list[tuple[str, str, str]]  # (path, text, field)


def prepare(draw: Callable[[Any], None], svg: str | None, html: str | None,
            page: Callable[[], str] | None, output: str | None = None) -> Pending:
    """The --svg and --html files' texts, their paths checked; nothing written yet."""
    pending: Pending = []
    seen = {os.path.abspath(output): "output"} if output not in (None, "-") else {}
    for field, path in (("svg", svg), ("html", html)):
        if path is None:
            continue
        check_path(path, field)
        key = os.path.abspath(path)
        if key in seen:
            raise ShapecalcError(field, f"{path} is also the --{seen[key]} file")
        seen[key] = field
    if svg is not None:
        pending.append((svg, svg_text(draw), "svg"))
    if html is not None:
        if page is None:  # a command that draws a table has a report for it
            raise ShapecalcError("html", "this command has no HTML report")
        pending.append((html, page(), "html"))
    return pending


def write(pending: Pending) -> None:
    for path, text, field in pending:
        write_whole(path, text, field)
