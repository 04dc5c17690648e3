"""The commands' day-0 path (reference/day0.py): a config.json whose model_type is not in the
reader's table, measured by transformers when the reference extra is installed. Only the flags a
measurement can take are accepted; any other is refused in one line, never ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..inputs.unsupported import Unsupported
from ..model.config import ShapecalcError

TAKES = "--batch, --seq, --dtype, --logits (and trace's and compare's --phase)"


def available(err: Unsupported) -> None:
    """Go on with the day-0 path when torch and transformers are installed; else the refusal
    stays, saying what to install."""
    from .. import reference

    try:
        reference.require("model_type")
    except ShapecalcError:
        raise err from None


def refuse_others(given: dict[str, Any]) -> None:
    """A flag the measurement cannot take (a layout, a cache dtype, --set …) is refused."""
    for flag, value in given.items():
        if value not in (None, False, [], ()):
            raise ShapecalcError(flag, f"does not apply to a day-0 measurement (a model_type not "
                                 f"in shapecalc's table, measured by transformers): it takes "
                                 f"{TAKES} only")


def workload(raw: dict[str, Any], batch: int | None, seq: int | None, dtype: str | None,
             logits: str | None, default_logits: str = "all") -> tuple[int, int, str, str]:
    """B (1), T (2048, or the model's positions when fewer), the dtype (bf16), the logits."""
    from ..model.defaults import DEFAULT_SEQ
    from ..model.suggest import canonical_dtype
    from ..reference.day0 import DTYPES, default_seq

    T = seq or default_seq(raw, DEFAULT_SEQ)
    return (batch or 1, T, canonical_dtype(dtype, DTYPES) if dtype else "bf16",
            logits or default_logits)


def name_of(path: Path) -> str:
    from ..inputs import files

    stem = path.stem if path.stem != "config" else path.resolve().parent.name
    return files.escape_controls(stem) or "custom"


def measured(err: Unsupported, batch: int, seq: int, dtype: str, logits: str,
             phase: str = "prefill") -> dict[str, Any]:
    from ..inputs import files
    from ..reference.day0 import measure

    if phase not in ("prefill", "decode"):
        raise ShapecalcError("phase", f"{phase!r} is not one of prefill, decode")
    doc = measure(err.raw, name_of(err.path), files.shown(err.path), batch, seq, dtype, logits)
    doc["workload"]["phase"] = phase
    doc["totals"]["flops"] = doc["totals"][f"{phase}_flops"]  # trace's key: the phase's step
    return doc


def emit(doc: Any, draw: Any, fmt: str, output: str | None, svg: str | None) -> None:
    """JSON, or the table (to the terminal or --output, and --svg)."""
    from ..render import output as out
    from ..render.console import render_table, write_with_exports

    if fmt == "json":
        write_with_exports(out.json_text(doc), output, draw, svg)
        return
    if fmt != "table":
        raise ShapecalcError("format", f"{fmt!r}: a day-0 measurement prints a table or JSON")
    render_table(draw, output, True, svg)


def shapecalc_doc(label: str, model: Any, wl: Any) -> dict[str, Any]:
    """A table model's totals in the day-0 document's shape, for compare's columns."""
    from ..costs.trace import build_trace

    pre = build_trace(model, wl.model_copy(update={"phase": "prefill"}))["totals"]
    dec = build_trace(model, wl.model_copy(update={"phase": "decode"}))["totals"]
    return {"model": {"name": label, "model_type": None, "model_class": None, "source": label},
            "measured_by": {"label": "shapecalc's stage formulas"},
            "workload": {"batch": wl.batch, "seq": wl.seq, "dtype": wl.dtype,
                         "logits": wl.logits, "phase": wl.phase},
            "totals": {"params": pre["params"], "prefill_flops": pre["flops"],
                       "decode_flops": dec["flops"], "weight_bytes": pre["weight_bytes"],
                       "kv_cache_bytes": pre["kv_cache_bytes"],
                       "state_cache_bytes": pre["state_cache_bytes"],
                       "flops": pre["flops"] if wl.phase == "prefill" else dec["flops"]}}


def trace(err: Unsupported, flags: dict[str, Any], others: dict[str, Any], fmt: str,
          output: str | None, svg: str | None) -> None:
    """`trace --hf-config` on a model_type not in the table: the measured totals."""
    from ..render import day0 as r
    from ..render.output import check_format, check_outputs

    available(err)
    refuse_others(others)
    fmt = check_format(fmt)
    check_outputs(output=output, svg=svg)
    batch, seq, dtype, logits = workload(err.raw, flags["batch"], flags["seq"],
                                         flags["dtype"], flags["logits"])
    doc = measured(err, batch, seq, dtype, logits, flags["phase"] or "prefill")
    emit(doc, lambda console: r.print_trace(doc, console), fmt, output, svg)


def fit(err: Unsupported, flags: dict[str, Any], others: dict[str, Any], hw: Any,
        utilization: float, fmt: str, output: str | None, svg: str | None) -> bool:
    """`fit --hf-config` on a model_type not in the table: the measured workload on one GPU.
    Returns whether it fits (the command's exit code says it)."""
    from ..reference.day0 import fit as day0_fit
    from ..render import day0 as r
    from ..render.output import check_outputs

    available(err)
    refuse_others(others)
    check_outputs(output=output, svg=svg)
    batch, seq, dtype, logits = workload(err.raw, flags["batch"], flags["seq"],
                                         flags["dtype"], flags["logits"], "last")
    doc = measured(err, batch, seq, dtype, logits)
    doc["gpu"] = hw.name
    doc["fit"] = day0_fit(doc, hw.memory_bytes, utilization, hw.peak(dtype), hw.hbm_bandwidth)
    emit(doc, lambda console: r.print_fit(doc, console), fmt, output, svg)
    return bool(doc["fit"]["fits"])


def no_case_fields(case: str | None) -> None:
    """A CASE's @fields would be the table's model or workload fields: refused, not dropped."""
    if case is not None and "@" in case and not Path(case).exists():
        raise ShapecalcError("case", f"{case!r}: @fields do not apply to a day-0 measurement; "
                             f"give {TAKES}")


def changed(opts: Any) -> dict[str, Any]:
    """The planning options other than --utilization that differ from their defaults: a day-0
    fit is weights and caches against memory and two roofline bounds, so none of them applies."""
    from dataclasses import fields

    flags = {"compute_efficiency": "--compute-efficiency", "memory_efficiency":
             "--memory-efficiency", "link_efficiency": "--link-efficiency", "price": "--price",
             "compute_dtype": "--compute-dtype", "attention": "--attention",
             "max_batched_tokens": "--max-batched-tokens", "perf": "--perf"}
    default = type(opts)()
    return {flags[f.name]: getattr(opts, f.name) for f in fields(opts)
            if f.name in flags and getattr(opts, f.name) != getattr(default, f.name)}


def compare(cases: list[str], presets_dir: Any, flags: dict[str, Any], others: dict[str, Any],
            fmt: str, output: str | None, svg: str | None) -> None:
    """`compare` with a config.json whose model_type is not in the table: every case's totals
    side by side, the day-0 ones measured by transformers, the others from shapecalc's formulas,
    each column saying which. --batch, --seq and --dtype may be lists, as in compare."""
    import itertools

    from ..inputs.unsupported import Unsupported as Unknown
    from ..model.config import make_workload
    from ..model.defaults import DEFAULT_SEQ, default_seq
    from ..plan.cases import parse_axes, parse_case
    from ..render import day0 as r
    from ..render.output import check_format, check_outputs

    refuse_others(others)
    fmt = check_format(fmt)
    check_outputs(output=output, svg=svg)
    axes = parse_axes({"batch": flags["batch"], "seq": flags["seq"], "dtype": flags["dtype"]})
    phase = flags["phase"] or "prefill"
    docs = []
    for text in cases:
        try:
            case = parse_case(text, presets_dir)
        except Unknown as e:
            available(e)
            no_case_fields(text)
            case = None
            err = e
        for B, T, dt in itertools.product(axes.get("batch", [None]), axes.get("seq", [None]),
                                          axes.get("dtype", [None])):
            if case is None:
                docs.append(measured(err, *workload(err.raw, B, T, dt, flags["logits"]),
                                     phase))
                continue
            seq = T or default_seq(case.model, [phase, "decode"], DEFAULT_SEQ)
            wl = make_workload({**case.workload, "batch": B or 1, "seq": seq,
                                "dtype": dt or "bf16", "logits": flags["logits"] or "all",
                                "phase": phase})
            docs.append(shapecalc_doc(case.label, case.model, wl))
    emit(docs, lambda console: r.print_compare(docs, console), fmt, output, svg)
