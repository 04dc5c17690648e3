"""compare's and fit's output: the JSON document, or the table (terminal, --output, --svg,
--html), CSV or Markdown; called by cli/plan.py once the command has its answer."""

from __future__ import annotations

from typing import Any


def emit_compare(items: list[dict[str, Any]], fmt: str, output: str | None,
                  svg: str | None, html: str | None, ratio: bool,
                  seq_note: str | None = None) -> None:
    from ..render import output as io_

    if fmt == "json" and not (svg or html):  # the scripts' path: no rich
        io_.write_text(io_.json_text(items), output)
        return
    from ..render import plan as pr
    from ..render.console import render_table, write_with_exports

    def draw(console: Any) -> None:
        pr.print_compare(items, console, ratio, seq_note)

    def page() -> str:
        from ..render.html import compare_html

        return compare_html(items, ratio)

    if fmt == "table":
        render_table(draw, output, True, svg, html, page)
        return
    text = {"json": lambda: io_.json_text(items), "csv": lambda: pr.compare_csv(items),
            "markdown": lambda: pr.compare_markdown(items, ratio)}[fmt]()
    write_with_exports(text, output, draw, svg, html, page)


def emit_fit(doc: dict[str, Any], fmt: str, output: str | None, svg: str | None,
              html: str | None, model: Any, wl: Any, note: str | None = None) -> None:
    from ..render import output as io_

    if fmt == "json" and not (svg or html):  # the scripts' path: no rich
        io_.write_text(io_.json_text(doc), output)
        return
    from ..render import plan as pr
    from ..render.console import render_table, write_with_exports

    def draw(console: Any) -> None:
        from ..costs.trace import build_trace
        from ..render.layout import show
        from ..render.trace import breakdown_chart

        pr.print_fit(doc, console, note)
        # where the FLOPs (of a prefill) and the parameters go; the memory bar is above
        show(console, breakdown_chart(build_trace(model, wl), memory=False, console=console))

    def page() -> str:
        from ..costs.trace import build_trace
        from ..render.html import fit_html

        return fit_html(doc, build_trace(model, wl))

    if fmt == "table":
        render_table(draw, output, True, svg, html, page)
        return
    text = {"json": lambda: io_.json_text(doc), "csv": lambda: pr.fit_csv(doc),
            "markdown": lambda: pr.fit_markdown(doc)}[fmt]()
    write_with_exports(text, output, draw, svg, html, page)
