"""--chart and --plot of sweep and compare (render/chart.py): the checks made before any output,
and the bars and the file after the rows."""

from __future__ import annotations

from typing import Any


def prepare(chart: bool, chart_y: str | None, plot: str | None, fmt: str, output: str | None,
            gpu: bool) -> str | None:
    """The charted quantity when --chart or --plot asks for one (else None), refusing, before
    any work or output, a chart that would land in machine-readable stdout, a quantity that is
    not one (or needs --gpu), or a --plot file that cannot be written."""
    if not (chart or plot):
        return None
    from ..model.config import ShapecalcError
    from ..render.chart import check_plot, quantity

    if chart and fmt != "table" and output in (None, "-"):
        raise ShapecalcError("chart", f"would mix bars into the {fmt} on stdout: use --format "
                             "table, or --output FILE for the rows")
    if plot:
        check_plot(plot)
    return quantity(chart_y, gpu)


def emit(drawn: Any, chart: bool, plot: str | None, output: str | None) -> None:
    """The bars on stdout (after a table; with the rows in --output, alone), then the file."""
    if drawn is None:
        return
    from ..render.chart import print_chart, save_plot

    if chart:
        from ..render.console import make_console

        console = make_console()
        if output in (None, "-"):
            console.print()
        print_chart(drawn, console)
    if plot:
        save_plot(drawn, plot)
