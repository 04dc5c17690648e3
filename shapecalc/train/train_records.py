"""A training record (calibrate-train FILE, the format of tests/data/training-measurements.json)
checked whole before any of it runs: every field calibrate_train.run_record reads, with its type
and range, so a hostile or mistyped file ends as one line naming the record and the key (a
missing key was a KeyError, `"tp": true` ran as tp 1, `"step_ms"` was silently not compared)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic_core import ValidationError

from ..inputs.numbers import bounded, bounded_int
from ..model.config import ShapecalcError, first_error
from ..model.record import INT_MAX

FIELD = "file"
LAYOUT = ("tp", "pp", "dp", "cp", "ep", "virtual_stages")
COUNTS = ("micro_batch", "global_batch", "seq")
# every figure a record may hold: the compared (calibrate_train.KEYS) and the shown
MEASURED = ("step_s", "tokens_per_s_per_gpu", "memory_gib", "mfu", "hfu", "tflops_per_gpu")
TEXTS = ("id", "source", "gpu", "recompute", "precision")
OPTIONAL_TEXTS = ("quote_context", "gpu_profile")


def _fail(where: str, key: str, why: str) -> ShapecalcError:
    return ShapecalcError(FIELD, f"{where}: {key}: {why}")


def _table(rec: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    v = rec.get(key)
    if not isinstance(v, dict):
        raise _fail(where, key, "missing" if key not in rec else f"{v!r} is not a JSON object")
    return v


def _text(table: dict[str, Any], key: str, where: str, required: bool = True) -> None:
    if key not in table and not required:
        return
    v = table.get(key)
    if not isinstance(v, str) or not v.strip():
        raise _fail(where, key, "missing" if key not in table else
                    f"{v!r} is not a non-empty string")


def check_record(rec: Any, i: int) -> None:
    """Refuse record `i` (0-based) unless every field run_record reads is there and sane."""
    if not isinstance(rec, dict):
        raise ShapecalcError(FIELD, f"record {i}: {rec!r} is not a JSON object")
    where = f"record {rec['id']!r}" if isinstance(rec.get("id"), str) else f"record {i}"
    for k in TEXTS:
        _text(rec, k, where)
    for k in OPTIONAL_TEXTS:
        _text(rec, k, where, required=False)
    model = _table(rec, "model", where)
    if "preset" in model:
        _text(model, "preset", f"{where}: model")
    else:
        _text(model, "base_preset", f"{where}: model")
        _table(model, "set", f"{where}: model")
    lay = _table(rec, "layout", where)
    for k in (*LAYOUT, "zero"):
        if k not in lay:
            raise _fail(where, f"layout.{k}", "missing")
        lo, hi = (0, 3) if k == "zero" else (1, INT_MAX)
        bounded_int(lay[k], FIELD, lo, hi, key=f"{where}: layout.{k}")
    for k in COUNTS:
        if k not in rec:
            raise _fail(where, k, "missing")
        bounded_int(rec[k], FIELD, 1, INT_MAX, key=f"{where}: {k}")
    if "grad_accum" in rec:
        bounded_int(rec["grad_accum"], FIELD, 1, INT_MAX, key=f"{where}: grad_accum")
    meas = _table(rec, "measured", where)
    for k, v in meas.items():
        if k not in MEASURED:  # `step_ms`: a unit the reader would ignore
            raise _fail(where, f"measured.{k}", f"unknown figure; known: {', '.join(MEASURED)}")
        bounded(v, FIELD, 1e-300, 1e300, key=f"{where}: measured.{k}")
    cmp = rec.get("compare")
    if not isinstance(cmp, list) or not cmp:
        raise _fail(where, "compare", "missing" if "compare" not in rec else
                    f"{cmp!r} is not a non-empty list of figures")
    for k in cmp:
        if k not in meas:
            raise _fail(where, "compare", f"{k!r} is not one of the record's measured figures "
                        f"({', '.join(meas) or 'none'})")
    sc = _table(rec, "shapecalc", where)
    for k in ("attention", "attention_flops"):
        _text(sc, k, f"{where}: shapecalc")
    if "net_bandwidth" not in sc:
        raise _fail(where, "shapecalc.net_bandwidth", "missing")
    bounded(sc["net_bandwidth"], FIELD, 1.0, 1e18, "bytes/s",
            key=f"{where}: shapecalc.net_bandwidth")
    sets = sc.get("set_gpu", [])
    if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
        raise _fail(where, "shapecalc.set_gpu", f"{sets!r} is not a list of KEY=VALUE strings")


def check_records(recs: list[Any]) -> None:
    """Every record checked before any runs; ids given once (a repeat would be fitted twice)."""
    seen: set[str] = set()
    for i, rec in enumerate(recs):
        check_record(rec, i)
        if rec["id"] in seen:
            raise ShapecalcError(FIELD, f"record {rec['id']!r}: id is given twice")
        seen.add(rec["id"])


@contextmanager
def within(rec: dict[str, Any]) -> Iterator[None]:
    """A refusal while record `rec` runs (a model field pydantic refuses, a layout trace
    refuses) as one line naming the record: `file: record 'x': model.set.d_model: …`."""
    try:
        yield
    except ValidationError as e:
        err = first_error(e)
        raise ShapecalcError(FIELD, f"record {rec['id']!r}: {err.field}: "
                             f"{err.reason}") from None
    except ShapecalcError as e:
        if e.field == FIELD:
            raise
        raise ShapecalcError(FIELD, f"record {rec['id']!r}: {e.field}: {e.reason}") from None
