"""`shapecalc calibrate-train FILE`: fit train/efficiency.py's per-GPU terms to the training
records and print measured/predicted step time, tokens/s per GPU and peak memory
(shapecalc/train/calibrate_train.py).

Loaded when invoked (lazy.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .options import JsonOut, emit_json, fail


def calibrate_train(
    file: Annotated[Path, typer.Argument(help="training records: JSON with \"records\" (the "
                                         "format of tests/data/training-measurements.json)")],
    check: Annotated[bool, typer.Option(
        "--check", help="no fit: measured/predicted with the shipped terms")] = False,
    as_json: JsonOut = False,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..train import calibrate_train as ct

        recs = ct.load_records(file)
        table, shape = (None, None) if check else ct.fit(recs)
        results = [ct.run_record(r, table, shape) for r in recs]
        summ = ct.summary(results)
        if as_json:
            emit_json({"records": results, "summary": summ,
                       "fitted": None if check else {"per_chip": table, "shape": shape}})
            return
        text = ct.report_text(results, summ)
        if not check:
            text += "\nfitted: " + ", ".join(f"{c} e_gemm {g:.2f} e_attn {a:.2f}"
                                             for c, (g, a) in (table or {}).items())
            text += "; " + ", ".join(f"{k} {v:g}" for k, v in (shape or {}).items())
        typer.echo(text)
    except ShapecalcError as e:
        fail(e)


COMMANDS = {"calibrate-train": calibrate_train}
HELP = {"calibrate-train": (
    "Fit the training step-time model's per-GPU terms (train --framework: e_gemm, e_attn per "
    "chip; the GEMM-size and sequence half points shared) to published training records, and "
    "print measured/predicted step time, tokens/s per GPU and peak memory, with the rms log "
    "ratio and any record reported as not fitting. --check: no fit, the shipped terms.")}
