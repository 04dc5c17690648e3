"""sweep's run: one grid per case, the notes, then the rows written chunk by chunk.

`plan.sweep` (the typer command) parses the options and calls `run`. JSON Lines, CSV and
Markdown are streamed: a chunk of points is evaluated, written and dropped, so memory does not
grow with the grid; the grid is bounded by `plan.sweep.MAX_POINTS` (a rich table, and an SVG or
HTML export, by MAX_TABLE_ROWS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO, Any

import typer


def run(parsed: list[Any], given: dict[str, list[Any]], phases: list[str] | None,
        fixed: dict[str, Any], hw: Any, opts: Any, fmt: str, output: str | None,
        svg: str | None, html: str | None,
        y: str | None = None) -> Any:
    """Write the rows; with a charted quantity `y`, return the chart (render/chart.py) of it over
    them, made before anything is written (so that a bad chart writes nothing)."""
    from ..model.config import ShapecalcError
    from ..plan.sweep import MAX_TABLE_ROWS, skipped_notes, sweep_grids

    gs = sweep_grids(parsed, given, phases, fixed, hw, opts)
    _keep_freed_memory()
    said = skipped_notes(gs)
    rows = sum(g.rows for g in gs)
    if (fmt == "table" or svg or html or y) and rows > MAX_TABLE_ROWS:
        raise ShapecalcError("grid", f"{rows:,} rows, more than the {MAX_TABLE_ROWS:,} a table "
                             "or chart holds: write --format csv or jsonl (without --svg/--html/"
                             "--chart/--plot)")
    if "seq" not in given and "seq" not in fixed:  # say where the default T was capped
        said += [f"{g.case}: T={g.axes_seq} (default: min(2048, max_positions))"
                 for c, g in zip(parsed, gs, strict=True)
                 if "seq" not in c.workload and g.axes_seq != 2048]
    drawn = None
    if y is not None:
        from ..render.chart import make_chart, sweep_points

        drawn = make_chart(sweep_points(list(_chunks(gs)), y), y)
    for note in said:
        typer.echo(f"note: {note}", err=True)
    FITS.clear()
    emit(gs, fmt, output, svg, html)
    return drawn


def _keep_freed_memory() -> None:
    """glibc: keep freed memory for the next chunk's arrays. A chunk's ~256 KiB temporaries are
    freed and made again thousands of times; by default glibc maps the large ones afresh and
    trims its heap as they go, so each is faulted in page by page again (~20% of a large
    sweep's page faults, ~3% of its CPU). Elsewhere (no glibc) nothing changes."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: map only blocks past 32 MiB
        libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: return the heap's top past 64 MiB
    except (OSError, AttributeError, TypeError):  # no C library to load, or no mallopt
        pass


# with --gpu, whether any row written fits (the command exits 1 when none does: Exit status)
FITS: list[bool] = []


def _chunks(gs: list[Any]) -> Iterator[Any]:
    for g in gs:
        for chunk in g.chunks():
            if "fits" in chunk.columns:
                FITS.append(bool(chunk.columns["fits"].any()))
            yield chunk


def nothing_fits() -> bool:
    """With --gpu: every row written is 'does not fit' (a negative verdict)."""
    return bool(FITS) and not any(FITS)


def emit(gs: list[Any], fmt: str, output: str | None, svg: str | None,
         html: str | None) -> None:
    """The rows of every grid in `fmt` to `output` (stdout if None); a table also to SVG/HTML."""
    from ..render import output as io_
    from ..render import sweep as pr
    from ..render.output import quiet_stdout

    def draw(console: Any) -> None:
        from ..render.plan import sweep_table

        sweep_table(list(_chunks(gs)), console)

    def page() -> str:
        from ..render.html import sweep_html

        return sweep_html(list(_chunks(gs)))

    if fmt == "table" or svg or html:
        from ..render.console import render_table  # rich: not for CSV or JSON Lines alone

        if fmt == "table":
            render_table(draw, output, True, svg, html, page)
            return
        # the exports first: one that fails leaves stdout empty (render_table)
        render_table(draw, None, False, svg, html, page)
    out, close = io_.open_output(output)
    try:
        if fmt == "markdown":
            for text in pr.sweep_markdown_lines(_chunks(gs), gs[0].gpu is not None):
                out.write(text + "\n")
        else:
            pr.write_sweep(_chunks(gs), fmt, gs[0].keys, byte_writer(out))
        out.flush()
    except BrokenPipeError:  # `| head` closed the pipe: stop, quietly
        if not close:
            quiet_stdout()
        return
    except OSError as e:  # byte_writer writes past OutputFile.write: name the file here
        if isinstance(out, io_.OutputFile):
            raise out.error(e) from None
        raise
    finally:
        if close:
            out.close()


def byte_writer(out: IO[str]) -> Callable[[bytes | bytearray], Any]:
    """Write UTF-8 bytes to a text stream: straight to its buffer when it has one in UTF-8."""
    import codecs

    buf = getattr(out, "buffer", None)
    enc = getattr(out, "encoding", None)
    if buf is not None and enc and codecs.lookup(enc).name == "utf-8":
        out.flush()
        return buf.write  # type: ignore[no-any-return]
    return lambda b: out.write(b.decode("utf-8"))

