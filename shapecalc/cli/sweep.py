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

REASONS = {"tp": "tp is not a valid degree for the model's heads / Dff",
           "pp": "pp exceeds the layers",
           "seq": "seq exceeds the learned position table"}


def grids(parsed: list[Any], given: dict[str, list[Any]], phases: list[str] | None,
          fixed: dict[str, Any], hw: Any, opts: Any) -> list[Any]:
    """One SweepGrid a case; axes not given take the case's [workload] value, else the default.
    Raises on a grid beyond MAX_POINTS or without a valid point."""
    from ..model.config import ShapecalcError, make_workload
    from ..plan import sweep as sweeping

    out = []
    for case in parsed:
        w0 = make_workload({**fixed, **case.workload})
        axes = sweeping.SweepAxes(
            batch=given.get("batch", [w0.batch]), seq=given.get("seq", [w0.seq]),
            tp=given.get("tp", [w0.tp]), pp=given.get("pp", [w0.pp]),
            dtype=given.get("dtype", [w0.dtype]),
            kv_dtype=given.get("kv_dtype", [w0.kv_dtype]),
            phase=phases or [w0.phase],
        )
        out.append(sweeping.SweepGrid(case, axes, fixed, hw, opts))
    points = sum(g.points for g in out)
    if points > sweeping.MAX_POINTS:
        raise ShapecalcError("grid", f"{points:,} points, more than the "
                             f"{sweeping.MAX_POINTS:,} a sweep takes: narrow an axis")
    return out


def notes(gs: list[Any]) -> list[str]:
    return [f"{g.case}: skipped {count:,} point{'s' if count > 1 else ''} where {REASONS[what]}"
            for g in gs for what, count in g.skipped.items()]


def run(parsed: list[Any], given: dict[str, list[Any]], phases: list[str] | None,
        fixed: dict[str, Any], hw: Any, opts: Any, fmt: str, output: str | None,
        svg: str | None, html: str | None) -> None:
    from ..model.config import ShapecalcError
    from ..plan.sweep import MAX_TABLE_ROWS

    gs = grids(parsed, given, phases, fixed, hw, opts)
    said = notes(gs)
    rows = sum(g.rows for g in gs)
    if not rows:
        raise ShapecalcError("grid", "no valid point (" + "; ".join(said) + ")")
    if (fmt == "table" or svg or html) and rows > MAX_TABLE_ROWS:
        raise ShapecalcError("grid", f"{rows:,} rows, more than the {MAX_TABLE_ROWS:,} a table "
                             "holds: write --format csv or jsonl (without --svg/--html)")
    for note in said:
        typer.echo(f"note: {note}", err=True)
    emit(gs, fmt, output, svg, html)


def _chunks(gs: list[Any]) -> Iterator[Any]:
    for g in gs:
        yield from g.chunks()


def emit(gs: list[Any], fmt: str, output: str | None, svg: str | None,
         html: str | None) -> None:
    """The rows of every grid in `fmt` to `output` (stdout if None); a table also to SVG/HTML."""
    from ..render import output as io_
    from ..render import sweep as pr
    from ..render.console import render_table

    def draw(console: Any) -> None:
        from ..render.plan import sweep_table

        sweep_table(list(_chunks(gs)), console)

    if fmt == "table":
        render_table(draw, output, True, svg, html)
        return
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
    finally:
        if close:
            out.close()
    if svg or html:
        render_table(draw, None, False, svg, html)


def byte_writer(out: IO[str]) -> Callable[[bytes | bytearray], Any]:
    """Write UTF-8 bytes to a text stream: straight to its buffer when it has one in UTF-8."""
    import codecs

    buf = getattr(out, "buffer", None)
    enc = getattr(out, "encoding", None)
    if buf is not None and enc and codecs.lookup(enc).name == "utf-8":
        out.flush()
        return buf.write  # type: ignore[no-any-return]
    return lambda b: out.write(b.decode("utf-8"))


def quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so that the flush at exit is quiet."""
    import os
    import sys

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
