"""The Python API: the same calls the command line makes, with typed results.

Each result is the pydantic model of the CLI's `--json` for the same inputs (the schemas of
`shapecalc schema`): `result.model_dump(mode="json", exclude_unset=True)` is that JSON document
(`exclude_unset` leaves out the optional keys the CLI does not write either). Workload fields
(`batch`, `seq`, `phase`, `dtype`, `kv_dtype`, `act_dtype`, `logits`, `tp`, `pp`, `block_size`,
`attention_flops`, `padding_mask`) are keyword arguments named as in the JSON's `workload`;
`None` means not given. Every bad input raises `ShapecalcError(field, reason)`.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from itertools import islice, repeat
from operator import is_
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import TypeAdapter

from .costs.schemas import TraceOut
from .costs.trace import build_trace
from .inputs import hardware as _hardware
from .inputs.hardware import GPU
from .inputs.model import load_model as _load_model
from .model.config import ModelConfig, ShapecalcError, Workload, make_workload
from .model.defaults import default_seq
from .plan import cases as plan_cases
from .plan import compare as plan_compare
from .plan import fit as plan_fit
from .plan import options as plan_options
from .plan import sweep as sweeping
from .plan.price import with_default_price
from .plan.schemas import CompareItem, FitOut, SweepRow

TraceResult = TraceOut  # `trace --json`
FitResult = FitOut  # `fit --json`
CompareResult = CompareItem  # one item of `compare --json`
# SweepRow: one line of `sweep --format jsonl`

PathLike = str | Path
PLAN_OPTIONS = tuple(f.name for f in dataclasses.fields(plan_options.PlanOptions))

__all__ = [
    "GPU", "CompareResult", "FitResult", "Model", "ModelConfig", "ShapecalcError", "SweepRow",
    "TraceResult", "Workload", "compare", "fit", "load_gpu", "load_model", "sweep", "trace",
    "workload",
]


@dataclasses.dataclass(frozen=True)
class Model:
    """A model and the workload fields its source fixes: a config file's `[workload]` table, or
    B=2, T=4 for the default seed-tiny. `label` names it in compare and sweep results (`case`)."""

    config: ModelConfig
    workload: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    label: str = ""


def load_model(
    preset: str | None = None,
    *,
    config: PathLike | None = None,
    hf_config: PathLike | None = None,
    set: Mapping[str, Any] | Sequence[str] | None = None,  # the CLI's --set
    presets_dir: PathLike | Sequence[PathLike] | None = None,
) -> Model:
    """A model from one source, as `--preset`, `--config` or `--hf-config` (none: seed-tiny at
    B=2, T=4, as `shapecalc trace`), with `set` overrides as `--set`: `{"n_kv_heads": 2}` or
    `["n_kv_heads=2"]`. `presets_dir` adds preset folders, as `--presets-dir`."""
    given = [x for x in (preset, config, hf_config) if x is not None]
    sets = _items(set, json_values=True)
    model, wl = _load_model(preset, config, hf_config, sets, _paths(presets_dir),
                            ("preset", "config", "hf_config"))
    label = str(given[0]) if given else "seed-tiny"
    return Model(model, wl, label + ("@" + ",".join(sets) if sets else ""))


def load_gpu(
    name: PathLike,
    *,
    hardware_dir: PathLike | Sequence[PathLike] | None = None,
    set: Mapping[str, Any] | Sequence[str] | None = None,  # the CLI's --set-gpu
) -> GPU:
    """A GPU profile by name (`shapecalc hardware`) or .toml path, with overrides as
    `--set-gpu`: `{"memory_bytes": "96GiB"}` or `["hbm_bandwidth=3.0e12"]`."""
    return _hardware.load_gpu(str(name), _paths(hardware_dir), _items(set, json_values=False))


def workload(**fields: Any) -> Workload:
    """A validated Workload; fields not given take their defaults (`shapecalc schema workload`)."""
    return make_workload(fields)


def trace(
    model: Model | ModelConfig | str,
    workload: Workload | None = None,
    *,
    per_rank: bool = False,
    presets_dir: PathLike | Sequence[PathLike] | None = None,
    **fields: Any,
) -> TraceResult:
    """`shapecalc trace --json`. `model`: a Model, a ModelConfig, or a case string as compare
    takes (`"llama2-70b"`, `"llama2-70b@tp=4"`). The workload: `workload` if given, else the
    model's own fields; keyword fields override either, as flags do. `per_rank`: `--per-rank`."""
    m = _model(model, presets_dir)
    wl = _workload(m, workload, fields)
    return TraceResult.model_validate(build_trace(m.config, wl, per_rank=per_rank))


def fit(
    model: Model | ModelConfig | str,
    gpu: GPU | str,
    workload: Workload | None = None,
    *,
    presets_dir: PathLike | Sequence[PathLike] | None = None,
    **fields: Any,
) -> FitResult:
    """`shapecalc fit --json`: workload fields as in `trace` (logits default to "last", as `fit`
    serves, unless a `workload` is given, which is used as it is), and the plan options
    `utilization`, `compute_efficiency`, `memory_efficiency`, `link_efficiency`, `price`,
    `compute_dtype`, `attention`, `max_batched_tokens` (the flags, `_` for `-`)."""
    wfields, opts = _options(fields)
    hw = _gpu(gpu)
    if hw is None:
        raise ShapecalcError("gpu", "fit needs a GPU (a name from `shapecalc hardware`)")
    m = _model(model, presets_dir)
    wl = _workload(m, workload, wfields, {"logits": "last"}, decode=True)
    return FitResult.model_validate(plan_fit.fit(m.config, wl, hw, with_default_price(opts, hw)))


def compare(
    cases: Model | ModelConfig | str | Sequence[Model | ModelConfig | str],
    gpu: GPU | str | None = None,
    *,
    presets_dir: PathLike | Sequence[PathLike] | None = None,
    **fields: Any,
) -> list[CompareResult]:
    """`shapecalc compare --json`: one result per column. `batch`, `seq`, `tp`, `pp`, `dtype`,
    `kv_dtype` take one value, a list, or a CLI grid (`"1,2,4,8"`, `"1..256x2"`) and expand
    each case into columns (a field after a case's @ wins over them; its file's [workload] does
    not); other workload fields apply to all. With a
    `gpu`, each column has its `fit` (logits "last" unless given), and takes fit's plan options."""
    wfields, opts = _options(fields)
    hw = _gpu(gpu)
    parsed = [_case(c, presets_dir) for c in _many(cases)]
    axes = _axes(wfields)
    base = {k: v for k, v in wfields.items() if v is not None}
    columns = plan_compare.expand_cases(parsed, base, axes)
    items = plan_compare.compare(columns, hw, with_default_price(opts, hw),
                                 logits_set="logits" in base)
    return [CompareResult.model_validate(item) for item in items]


def sweep(
    cases: Model | ModelConfig | str | Sequence[Model | ModelConfig | str],
    gpu: GPU | str | None = None,
    *,
    presets_dir: PathLike | Sequence[PathLike] | None = None,
    **fields: Any,
) -> Iterator[SweepRow]:
    """The rows of `shapecalc sweep --format jsonl`, evaluated chunk by chunk as you iterate
    (memory does not grow with the grid). The axes `batch`, `seq`, `tp`, `pp`, `dtype`,
    `kv_dtype` and `phase` take one value, a list or a CLI grid (`"1..256x2"`); an axis not given
    takes the case's value, else the default. Points a model cannot run (tp not dividing its
    heads, pp > N, seq beyond a learned position table) are skipped, as the CLI skips them; a
    grid without a valid point, or beyond the CLI's limit of points, raises here. With a `gpu`,
    the fit and time columns, and fit's plan options."""
    wfields, opts = _options(fields)
    hw = _gpu(gpu)
    parsed = [_case(c, presets_dir) for c in _many(cases)]
    given = _axes(wfields)
    phase = wfields.pop("phase", None)
    phases = (plan_cases.parse_str_grid(_text(phase), "phase", ("prefill", "decode"))
              if phase is not None else None)
    fixed = {k: v for k, v in wfields.items() if v is not None}
    grids = sweeping.sweep_grids(parsed, given, phases, fixed, hw, opts)
    return (row for g in grids for chunk in g.chunks() for row in _rows(chunk))


# -- helpers --------------------------------------------------------------------------------------


def _paths(dirs: PathLike | Sequence[PathLike] | None) -> list[Path] | None:
    if dirs is None:
        return None
    return [Path(dirs)] if isinstance(dirs, (str, Path)) else [Path(d) for d in dirs]


def _items(given: Mapping[str, Any] | Sequence[str] | str | None, json_values: bool) -> list[str]:
    """`field=value` strings from a mapping or a list of them (what --set and --set-gpu take)."""
    if given is None:
        return []
    if isinstance(given, str):
        return [given]
    if isinstance(given, Mapping):
        return [f"{k}={v if isinstance(v, str) or not json_values else json.dumps(v)}"
                for k, v in given.items()]
    return list(given)


def _model(model: Model | ModelConfig | str,
           presets_dir: PathLike | Sequence[PathLike] | None) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, ModelConfig):
        return Model(model, {}, model.name)
    if isinstance(model, str):
        c = plan_cases.parse_case(model, _paths(presets_dir))
        return Model(c.model, c.workload, c.label)
    raise TypeError(f"expected a Model, a ModelConfig or a case string, not "
                    f"{type(model).__name__}")


def _case(model: Model | ModelConfig | str,
          presets_dir: PathLike | Sequence[PathLike] | None) -> plan_cases.Case:
    if isinstance(model, str):  # keeps which fields came after the @ (plan/cases.case_fields)
        return plan_cases.parse_case(model, _paths(presets_dir))
    m = _model(model, presets_dir)
    return plan_cases.Case(m.label or m.config.name, m.config, dict(m.workload))


def _many(cases: Any) -> list[Any]:
    return [cases] if isinstance(cases, (Model, ModelConfig, str)) else list(cases)


def _workload(m: Model, wl: Workload | None, fields: dict[str, Any],
              defaults: Mapping[str, Any] | None = None, decode: bool = False) -> Workload:
    base = wl.model_dump() if wl is not None else {**(defaults or {}), **m.workload}
    merged = {**base, **fields}
    if merged.get("seq") is None:  # a T the model fits, as the CLI's (model/defaults.py)
        phases = [str(merged.get("phase") or "prefill")] + (["decode"] if decode else [])
        merged["seq"] = default_seq(m.config, phases)
    return make_workload(merged)


def _options(fields: dict[str, Any]) -> tuple[dict[str, Any], plan_options.PlanOptions]:
    """Split keyword arguments into workload fields and PlanOptions."""
    opts = {k: v for k, v in fields.items() if k in PLAN_OPTIONS}
    return ({k: v for k, v in fields.items() if k not in PLAN_OPTIONS},
            plan_options.PlanOptions(**opts))


def _gpu(gpu: GPU | str | None) -> GPU | None:
    return load_gpu(gpu) if isinstance(gpu, (str, Path)) else gpu


def _text(v: Any) -> str:
    """One value or a list as the CLI's text (`"1,2,4"`), so it is parsed as the CLI parses it."""
    if isinstance(v, str):
        return v
    return ",".join(map(str, v)) if isinstance(v, Iterable) else str(v)


def _axes(fields: dict[str, Any]) -> dict[str, list[Any]]:
    """Take the axis fields out of `fields`, parsed as the CLI's grids."""
    return plan_cases.parse_axes({name: _text(fields.pop(name)) for name in
                                  (*plan_cases.INT_AXES, *plan_cases.STR_AXES)
                                  if fields.get(name) is not None})


def _rows(chunk: Any) -> Iterator[SweepRow]:
    """A SweepChunk's rows, with the CLI's keys and values, each what `SweepRow.model_validate`
    of its dict gives. pydantic checks each column at once, as the SweepRow field it fills (a
    row validated by itself costs more than the closed form's evaluation of it); a column with
    one value at every row is checked and stored once, in a template row that each row copies
    before its own values go in; the rows are then made as `model_construct` makes them. The
    chunk's first row, validated by itself, must agree in every field, type and given key."""
    n = len(chunk)
    if not n:
        return
    cols = {"case": [chunk.case], "model": [chunk.model]}
    for k, v in chunk.columns.items():
        if v.dtype.kind == "O":  # one object at every row (a label): checked once
            vals = v.tolist()
            cols[k] = vals[:1] if all(map(is_, vals, repeat(vals[0]))) else vals
        else:  # ints or bools equal at every row (floats apart: NaN is None, -0.0 is not 0.0)
            cols[k] = _values(v[:1] if v.dtype.kind != "f" and (v == v[0]).all() else v)
    if not set(cols) <= set(_ROW_FIELDS):  # not a SweepRow's key: model_validate says so
        yield from _validated(cols)
        return
    checked = {k: _column_check(k).validate_python(v) for k, v in cols.items()}
    template = {k: checked[k][0] if k in cols else f.get_default(call_default_factory=True)
                for k, f in _ROW_FIELDS.items()}
    names = tuple(k for k, v in checked.items() if len(v) > 1)
    points = zip(*(checked[k] for k in names), strict=True) if names else repeat((), n)
    given = set(cols)
    first = SweepRow.model_validate({k: v[0] for k, v in cols.items()})
    row = template.copy()
    row.update(zip(names, next(points), strict=True))
    if (first.__pydantic_extra__ is not None or first.__pydantic_private__ is not None
            or first.__pydantic_fields_set__ != given or list(first.__dict__) != list(row)
            or any(type(a) is not type(b) or a != b
                   for a, b in zip(row.values(), first.__dict__.values(), strict=True))):
        yield from _validated(cols)  # a pydantic whose models are made otherwise: one by one
        return
    yield first
    # the rest a batch at a time, by C-level loops (map): a Python loop costs as much again
    new, put = SweepRow.__new__, object.__setattr__
    while batch := list(islice(points, ROWS_BATCH)):
        m = len(batch)
        rows = list(map(dict.copy, repeat(template, m)))
        deque(map(dict.update, rows, map(zip, repeat(names), batch)), maxlen=0)
        out = list(map(new, repeat(SweepRow, m)))
        for attr, values in (("__dict__", rows),
                             # each row its own set, as validated
                             ("__pydantic_fields_set__", map(set, repeat(given, m))),
                             ("__pydantic_extra__", repeat(None, m)),
                             ("__pydantic_private__", repeat(None, m))):
            deque(map(put, out, repeat(attr), values), maxlen=0)
        yield from out


_ROW_FIELDS = SweepRow.model_fields
ROWS_BATCH = 1024  # sweep rows made together (_rows)


@cache
def _column_check(key: str) -> TypeAdapter[list[Any]]:
    """pydantic's check of SweepRow's field `key`, over a column of values."""
    f = _ROW_FIELDS[key]
    item: Any = Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation
    return TypeAdapter(list[item])  # type: ignore[valid-type]


def _validated(cols: dict[str, list[Any]]) -> Iterator[SweepRow]:
    """The rows one by one through model_validate (a column of one value: at every row)."""
    n = max(len(v) for v in cols.values())
    for i in range(n):
        yield SweepRow.model_validate({k: v[i if len(v) > 1 else 0] for k, v in cols.items()})


def _values(col: Any) -> list[Any]:
    """A column as Python values: exact ints, floats with NaN as None (JSON's null)."""
    out = col.tolist()
    if getattr(col, "dtype", None) is not None and col.dtype.kind == "f" and np.isnan(col).any():
        return [None if x != x else x for x in out]
    return list(out)
