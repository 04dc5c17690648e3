"""serve's and train's document out: the table (terminal or --output; --svg, --html), JSON, CSV
or Markdown, one path for both commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .options import emit_json


def emit(doc: dict[str, Any], fmt: str, output: str | None, svg: str | None,
         html: str | None, title: str, printer: Callable[[dict[str, Any], Any], None]) -> None:
    """The document as the table (terminal or --output; --svg, --html), JSON, CSV or Markdown
    (flattened keys: render/flat.py), for serve and train alike."""
    if fmt == "json" and output is None and not (svg or html):
        emit_json(doc)
        return
    from ..render import output as out
    from ..render.console import render_table, write_with_exports
    from ..render.flat import flat_csv, flat_markdown

    def draw(console: Any) -> None:
        printer(doc, console)

    def page() -> str:
        from ..render.html import console_html

        return console_html(title, "shapecalc", draw, doc)

    if fmt == "table":
        render_table(draw, output, True, svg, html, page)
        return
    text = {"json": out.json_text, "csv": flat_csv, "markdown": flat_markdown}[fmt](doc)
    write_with_exports(text, output, draw, svg, html, page)
