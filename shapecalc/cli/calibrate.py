"""`shapecalc calibrate FILE`: fit the expected-time model's terms (plan/perf.py) to serving
measurements, print how well they match, and write a GPU profile (or the shipped defaults).

Loaded when invoked (lazy.py)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from .options import JsonOut, emit_json, fail
from .plan_options import HardwareDir

DEFAULTS_FILE = Path(__file__).parents[1] / "plan" / "perf_defaults.py"


def calibrate(
    file: Annotated[Path, typer.Argument(help="measurements: JSON with \"records\" (the format "
                                         "of tests/data/serving-measurements.json)")],
    hardware_dir: HardwareDir = None,
    write: Annotated[Path | None, typer.Option(
        "--write", help="write each measured GPU's profile with the fitted [perf] table into "
        "this folder (then use it with --hardware-dir)")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="no fit: report the terms the GPU profiles (or the defaults) hold")
    ] = False,
    write_defaults: Annotated[bool, typer.Option(
        "--write-defaults", help="write the fit as the shipped defaults (plan/perf_defaults.py)")
    ] = False,
    write_engines: Annotated[bool, typer.Option(
        "--write-engines", help="load-test records: write the fitted terms under load into the "
        "engine profiles (serve/engines.json)")] = False,
    as_json: JsonOut = False,
) -> None:
    from ..model.config import ShapecalcError

    try:
        from ..model.errors import plural
        from ..plan import calibrate as cal
        from ..serve import loadcal

        if loadcal.is_load_file(file):
            return _load(file, hardware_dir, write, check, write_defaults, write_engines,
                         as_json)
        if write_engines:
            raise ShapecalcError("write-engines", "writes terms fitted on load-test records "
                                 "(records with \"measured\"); this file has batch-1 records")
        from ..plan.perf import PerfParams
        from ..plan.perf_defaults import PARAMS

        if check and (write is not None or write_defaults):  # they write a fit; --check has none
            raise ShapecalcError("write" if write is not None else "write-defaults",
                                 "writes the fitted terms; --check does not fit (leave one out)")
        cases = cal.load_cases(file, hardware_dir)
        pp: PerfParams | Callable[[Any], PerfParams]
        if check:
            pp = cal.with_profile_terms(PerfParams(**PARAMS))
        else:
            pp = cal.fit_params(cases)
        rep = cal.report(cases, pp)
        if not check:
            assert isinstance(pp, PerfParams)
            rep["fitted"] = pp.as_dict()
            today = datetime.date.today().isoformat()
            data = f"{file.as_posix()} ({plural(len(cases), 'record')})"
            if write is not None:
                from ..render.output import make_folder, write_text

                make_folder(write, "write")
                for gpu in {c.gpu.name: c.gpu for c in cases}.values():
                    path = write / f"{gpu.name}.toml"
                    if path.parent != write:  # a profile named `../x`
                        raise ShapecalcError("write", f"GPU name {gpu.name!r} is not a file name")
                    write_text(cal.profile_toml(gpu, pp, f"shapecalc calibrate {today} on {data}"),
                               str(path), "write")
                    rep.setdefault("written", []).append(str(path))
            if write_defaults:
                DEFAULTS_FILE.write_text(cal.defaults_py(pp, today, data), encoding="utf-8")
                rep.setdefault("written", []).append(str(DEFAULTS_FILE))
        if as_json:
            emit_json(rep)
        else:
            typer.echo(cal.report_text(rep))
    except ShapecalcError as e:
        fail(e)


def _load(file: Path, hardware_dir: Any, write: Any, check: bool, write_defaults: bool,
          write_engines: bool, as_json: bool) -> None:
    """Load-test records (serve/loadcal.py): fit each engine version's terms under load, or
    --check the profiles' own."""
    from ..model.config import ShapecalcError
    from ..serve import engines, loadcal

    for flag, given in (("hardware-dir", hardware_dir is not None), ("write", write is not None),
                        ("write-defaults", write_defaults)):
        if given:
            raise ShapecalcError(flag, "applies to batch-1 records; load-test records fit the "
                                 "engine profiles (--write-engines)")
    if check and write_engines:
        raise ShapecalcError("write-engines", "writes the fitted terms; --check does not fit "
                             "(leave one out)")
    recs = loadcal.load(file)
    fitted = None if check else loadcal.fit(recs)
    rows = loadcal.rows(recs, fitted)
    rep: dict[str, Any] = {"records": rows, "summary": loadcal.summary(rows)}
    if fitted is not None:
        rep["fitted"] = fitted
    if write_engines:
        assert fitted is not None
        engines.DATA.write_text(engines.with_terms(engines.DATA, fitted), encoding="utf-8")
        rep["written"] = [str(engines.DATA)]
    if as_json:
        emit_json(rep)
    else:
        typer.echo(loadcal.report_text(rows, rep["summary"], fitted)
                   + "".join(f"\nwrote {w}" for w in rep.get("written", [])))


COMMANDS = {"calibrate": calibrate}
HELP = {"calibrate": (
    "Fit the expected-time model's terms (compute, memory and attention efficiencies, per-layer "
    "overheads, all-reduce latency, link efficiency) to serving measurements and print, per "
    "metric type, the median, min and max of measured ÷ expected and the rms of its log. "
    "--write DIR writes a GPU profile with the fitted [perf] table (read it with "
    "--hardware-dir); --check reports the profiles' own terms without fitting. Load-test records "
    "(each with \"measured\": serving-load-measurements.json) fit each engine version's terms "
    "under load on simulated runs; --check prints each figure's measured/predicted; "
    "--write-engines writes the fit into serve/engines.json.")}
