"""Calibration: fit the expected-time model's terms (perf.py) to published or your own serving
measurements (the JSON format of tests/data/serving-measurements.json), report how well they
match, and write the result (a GPU profile with a [perf] table, or the shipped defaults).

Each record names a model (→ a preset), a GPU (→ a profile), tp, pp, a dtype, batch or
unlimited concurrency, input and output lengths, and a metric of one of four types:
- ttft: prefill of input_len tokens at batch 1;
- tpot: batch-1 decode, as an inter-token latency (ms: one step at the middle of the output) or
  as tokens/s (generated tokens / total time, prefill included), which is compared as its
  inverse, seconds per token, so that every tpot ratio is a ratio of times;
- throughput_fixed_batch: a static batch, B·output_len / (prefill of B·input_len +
  (output_len − 1) decode steps at the middle context) / GPUs;
- throughput_max_concurrency: the same at B = fit's largest batch at context input + output
  (chunked prefill of 8192 tokens).
The fit: Nelder–Mead on log parameters, restarted until it settles, minimising the squared log
ratios plus a weak pull towards typical values (START); deterministic.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..costs.closed import ClosedForm
from ..inputs import files
from ..inputs.hardware import GPU, LIMITS, load_gpu
from ..inputs.numbers import bounded, bounded_int
from ..inputs.sources import list_hardware, list_presets, load_preset
from ..model.config import DTYPE_BITS, ShapecalcError, Workload
from ..model.record import INT_MAX
from ..model.suggest import did_you_mean
from .cases import closed_form_for
from .memory import phase_terms
from .options import PlanOptions
from .perf import NAMES, PerfParams, step_seconds, step_terms

# assumed where a record leaves the lengths out (ExLlamaV2's quick tests: see its notes)
DEFAULT_INPUT, DEFAULT_OUTPUT = 16, 128
TYPES = ("ttft", "tpot", "throughput_fixed_batch", "throughput_max_concurrency")

# Where every fit starts (fixed, so that a re-run reproduces the shipped defaults exactly) and
# what it is weakly pulled towards: typical values (cuBLAS reaches ~70% of the dense peak on
# large GEMMs; streaming reads ~80% of HBM; NCCL's small all-reduce on NVLink ~10 µs; tens of
# µs of kernels a layer). 15 records cannot pin 8 terms alone: without the pull, terms the data
# does not constrain drift to 0 (no all-reduce latency, no skinny-GEMM falloff), which other
# GPUs and workloads would pay for.
START = PerfParams(gemm_efficiency=0.7, gemm_half_tokens=64.0, memory_efficiency=0.8,
                   attention_efficiency=0.5, layer_overhead_s=2e-5,
                   prefill_layer_overhead_s=3e-5, allreduce_latency_s=1e-5,
                   link_efficiency=0.7)
PRIOR_WEIGHT = 0.003  # per term: weight of (log(term / START's))² in the loss


@dataclass
class Case:
    """One record, resolved: the steps its metric adds up, at fixed shapes."""

    rec: dict[str, Any]
    cf: ClosedForm
    gpu: GPU
    peak: float
    wbits: int
    # (multiplier, totals of the step, tokens of the step, decode?): time = Σ multiplier × step
    steps: list[tuple[float, Mapping[str, Any], int, bool]]
    # value = numerator / time (a rate) or time × scale (a latency)
    rate: float | None
    scale: float = 1.0
    invert: bool = False  # the record's value is a rate, compared as its inverse (a time)

    def value(self, seconds: Callable[[Mapping[str, Any], int, bool], float]) -> float:
        t = sum(k * seconds(tot, n, d) for k, tot, n, d in self.steps)
        return self.rate / t if self.rate is not None else t * self.scale

    def expected(self, pp: PerfParams) -> float:
        return self.value(lambda tot, n, d: step_seconds(
            step_terms(self.cf, self.gpu, pp, tot, self.peak, n, self.wbits, _XP, decode=d), _XP))

    def bound(self) -> float:
        opts = PlanOptions()

        def seconds(tot: Mapping[str, Any], n: int, d: bool) -> float:
            c, m, link = phase_terms(self.cf, self.gpu, opts, tot, self.peak, n, self.wbits, _XP)
            return max(c, m) + link

        return self.value(seconds)

    @property
    def measured(self) -> float:
        v = float(self.rec["value"])
        return 1.0 / v if self.invert else v

    @property
    def unit(self) -> str:
        return "s/token" if self.invert else str(self.rec.get("unit", ""))


def _xp() -> Any:
    from ..costs.scalar import SCALARS
    return SCALARS


_XP = _xp()


def preset_for(model: str) -> str:
    """'Llama-2-70B' → llama2-70b, 'Llama-3.3-70B-Instruct' → llama3.3-70b, 'Mistral-7B-v0.1'
    → mistral-7b: lower case, without (…), -instruct, -vX.Y; 'llama-N' → 'llamaN'."""
    name = re.sub(r"\(.*?\)", "", model).strip().lower()
    name = re.sub(r"-(instruct|chat|hf)\b", "", name)
    name = re.sub(r"-v\d+(\.\d+)*$", "", name)
    name = re.sub(r"^llama-(\d)", r"llama\1", name)
    if name not in list_presets():
        raise ShapecalcError("calibrate", f"model {model!r}: no preset {name!r} (add \"preset\" "
                             "to the record)")
    return name


def gpu_for(text: str, extra: list[Path] | None) -> str:
    """The profile whose name's parts all appear in the record's GPU ('H100 SXM 80GB' →
    H100-SXM, 'A100 SXM 80GB' → A100-80GB); a chip named without a form factor (e.g. 'H100
    80GB') is its SXM module."""
    words = re.split(r"[\s_-]+", text.lower())

    def has(part: str) -> bool:  # a word, or a word and its revision ('sxm' in 'SXM5'; 'H20'
        # is not in 'H200')
        return any(w == part or (w.startswith(part) and part[-1].isalpha()
                                 and w[len(part):].isdigit()) for w in words)

    names = sorted(list_hardware(extra))
    hits = [n for n in names if all(has(part) for part in n.lower().split("-"))]
    if not hits:
        hits = [n for n in names if has(n.lower().split("-")[0]) and "sxm" in n.lower()]
    if len(hits) != 1:
        raise ShapecalcError("calibrate", f"GPU {text!r} matches {hits or 'no profile'} (add "
                             "\"gpu_profile\" to the record)")
    return hits[0]


def dtypes_for(text: str) -> tuple[str, str, str, str]:
    """(weights, activations, KV cache, compute) as the engines run a record's dtype: fp8 is
    W8A8 at fp8 peak with 16-bit activations and an fp8 KV cache (the records' notes); int8 and
    int4 are weight-only with fp16 compute."""
    t = text.lower()
    for low in ("int4", "int8"):
        if t.startswith(low):
            return low, "fp16", "fp16", "fp16"
    if t.startswith("fp8"):
        return "fp8", "bf16", "fp8", "fp8"
    base = t.split()[0]
    if base not in DTYPE_BITS:
        raise ShapecalcError("calibrate", f"dtype {text!r} is not one of bf16, fp16, fp8, int8, "
                             "int4")
    return base, base, base, base


# a record's keys: read by the fit, or documentation (kept, not read; a concurrency count is checked
# against the batch its metric is modelled at: _check_concurrency)
COUNTS = ("tp", "pp", "batch", "input_len", "output_len", "n_gpus")
TEXTS = ("id", "model", "gpu", "preset", "gpu_profile", "dtype", "unit", "metric_type")
NOTES = ("source", "date", "quote", "notes", "metric", "concurrency")
# the units a metric is in: a latency in s/ms/us; a tpot also as tokens/s (its inverse); the
# throughputs are per GPU (tokens/s/GPU: the rate is divided by tp × pp)
UNITS = {"ttft": ("ms", "s", "us"), "tpot": ("ms", "s", "us", "tokens/s"),
         "throughput_fixed_batch": ("tokens/s/GPU",),
         "throughput_max_concurrency": ("tokens/s/GPU",)}


def check_record(rec: Any, i: int) -> None:
    """Every key a record holds, as one line naming the record and the key: no KeyError or
    TypeError, no tp 0 read as 1, `true` as 1 or 2.7 as 2, no NaN fitted, no unit ignored."""
    if not isinstance(rec, dict):
        raise ShapecalcError("calibrate", f"record {i}: not a JSON object")
    rid = rec.get("id", i)
    where = f"record {files.escape_controls(str(rid))}"
    for k in rec:
        if k not in (*COUNTS, *TEXTS, *NOTES, "value"):
            raise ShapecalcError("calibrate", f"{where}: unknown key {files.escape_controls(k)!r}"
                                 f"{did_you_mean(k, (*COUNTS, *TEXTS, *NOTES, 'value'))}")
    for k in TEXTS:
        if rec.get(k) is not None and not isinstance(rec[k], str):
            raise ShapecalcError("calibrate", f"{where}: {k} must be a string, got {rec[k]!r}")
    for k in COUNTS:
        if rec.get(k) is not None:
            bounded_int(rec[k], "calibrate", 1, INT_MAX, key=f"{where}: {k}")
    kind = rec.get("metric_type")
    if kind not in TYPES:
        raise ShapecalcError("calibrate", f"{where}: metric_type {kind!r} is not one of "
                             f"{', '.join(TYPES)}")
    for k, alt in (("model", "preset"), ("gpu", "gpu_profile")):
        if not rec.get(k) and not rec.get(alt):
            raise ShapecalcError("calibrate", f"{where}: needs {k!r} (or {alt!r})")
    if "value" not in rec:
        raise ShapecalcError("calibrate", f"{where}: needs 'value'")
    bounded(rec["value"], "calibrate", 1e-300, 1e300, key=f"{where}: value")
    if rec.get("unit") not in UNITS[kind]:
        raise ShapecalcError("calibrate", f"{where}: unit {rec.get('unit')!r} is not one of "
                             f"{kind}'s: {', '.join(UNITS[kind])}")
    _check_concurrency(rec, kind, where)
    gpus = (rec.get("tp") or 1) * (rec.get("pp") or 1)
    if rec.get("n_gpus") is not None and rec["n_gpus"] != gpus:
        raise ShapecalcError("calibrate", f"{where}: n_gpus {rec['n_gpus']} is not tp × pp = "
                             f"{gpus}")


def _check_concurrency(rec: dict[str, Any], kind: str, where: str) -> None:
    """A record's concurrency is a note (text, e.g. "unlimited (max load)"), or a count that
    must be the one the metric is modelled at: 1 for a ttft or tpot (batch 1), the batch for a
    fixed batch; a throughput at max concurrency is modelled at fit's largest batch, so a
    measured limit would be silently replaced."""
    c = rec.get("concurrency")
    if c is None or isinstance(c, str):
        return
    n = bounded_int(c, "calibrate", 1, INT_MAX, key=f"{where}: concurrency")
    want = {"ttft": 1, "tpot": 1, "throughput_fixed_batch": rec.get("batch") or 1}.get(kind)
    if want is None:
        raise ShapecalcError("calibrate", f"{where}: concurrency {n}: {kind} is modelled at "
                             "fit's largest batch, not at a given concurrency (leave it null)")
    if n != want:
        of = "its batch" if kind.startswith("throughput") else "a batch-1 metric"
        raise ShapecalcError("calibrate", f"{where}: concurrency {n}: {kind} is modelled at "
                             f"batch {want} ({of})")


def resolve(rec: dict[str, Any], extra: list[Path] | None = None) -> Case:
    rid = rec.get("id", "?")
    kind = rec["metric_type"]
    model = load_preset(rec.get("preset") or preset_for(rec["model"]))
    gpu = load_gpu(rec.get("gpu_profile") or gpu_for(rec["gpu"], extra), extra)
    w, act, kv, comp = dtypes_for(rec.get("dtype") or "bf16")
    peak = gpu.peak(comp)
    if peak is None:
        raise ShapecalcError("calibrate", f"record {rid}: {gpu.name} has no {comp} peak")
    isl = rec.get("input_len") or DEFAULT_INPUT
    osl = rec.get("output_len") or DEFAULT_OUTPUT
    tp, pp = int(rec.get("tp") or 1), int(rec.get("pp") or 1)
    wl = Workload(seq=isl, tp=tp, pp=pp, dtype=w, act_dtype=act, kv_dtype=kv,  # type: ignore[arg-type]
                  logits="last")
    cf = closed_form_for(model, wl)
    B = int(rec.get("batch") or 1)
    if kind == "throughput_max_concurrency":
        from .fit import fit
        opts = PlanOptions(compute_dtype=comp, max_batched_tokens=8192)
        B = fit(model, wl.model_copy(update={"seq": isl + osl}), gpu, opts)["max_batch"]
        if B < 1:
            raise ShapecalcError("calibrate", f"record {rid}: the model does not fit")
    dts = (w, kv, act)

    def pre(b: int) -> tuple[Mapping[str, Any], int, bool]:
        return cf.at(b, isl, "prefill", tp, pp, *dts), b * isl, False

    def dec(b: int) -> tuple[Mapping[str, Any], int, bool]:
        return cf.at(b, isl + osl // 2, "decode", tp, pp, *dts), b, True

    unit = rec.get("unit", "")
    rate: float | None = None
    scale = 1.0
    if kind == "ttft":
        steps = [(1.0, *pre(1))]
    elif kind == "tpot" and unit != "tokens/s":
        steps = [(1.0, *dec(1))]
    else:  # a whole generation: prefill, then output_len − 1 decode steps
        steps = [(1.0, *pre(B)), (float(osl - 1), *dec(B))]
        rate = B * osl / (tp * pp if kind.startswith("throughput") else 1)
    if kind == "tpot" and rate is not None:
        # a tpot given as tokens/s is compared as seconds per token, so that every tpot ratio
        # points one way (> 1: slower than expected)
        return Case(rec, cf, gpu, peak, DTYPE_BITS[w], steps, None, 1.0 / rate, invert=True)
    if rate is None:
        scale = {"ms": 1e3, "s": 1.0, "us": 1e6}.get(unit, math.nan)
        if scale != scale:
            raise ShapecalcError("calibrate", f"record {rid}: unit {unit!r} is not ms, s or us")
    return Case(rec, cf, gpu, peak, DTYPE_BITS[w], steps, rate, scale)


def load_cases(path: Path, extra: list[Path] | None = None) -> list[Case]:
    doc = files.read_json(path, "calibrate")
    recs = doc.get("records") if isinstance(doc, dict) else None
    if not recs or not isinstance(recs, list):
        raise ShapecalcError("calibrate", f"{files.shown(path)} has no \"records\" (a list)")
    ids = [r.get("id") for r in recs if isinstance(r, dict) and r.get("id") is not None]
    for i, r in enumerate(recs):
        check_record(r, i)
    dup = next((x for x in ids if ids.count(x) > 1), None)
    if dup is not None:
        raise ShapecalcError("calibrate", f"record id {files.escape_controls(str(dup))!r} "
                             "appears twice")
    return [resolve(r, extra) for r in recs]


def _to_x(p: PerfParams) -> list[float]:
    return [math.log(max(getattr(p, n), 1e-12)) for n in NAMES]


def _from_x(x: list[float]) -> PerfParams:
    vals = {n: math.exp(v) for n, v in zip(NAMES, x, strict=True)}
    for n in NAMES:  # within each term's range (efficiencies ≤ 1, hardware.LIMITS)
        vals[n] = min(vals[n], 1.0 if n.endswith("efficiency") else LIMITS[n][1])
    return PerfParams(**vals)


def loss(cases: list[Case], pp: PerfParams) -> float:
    """Σ over metric types of (the mean squared log ratio + 2 × the squared mean log ratio):
    each type weighs the same, and a type's bias counts three times (its median is what a
    planner sees, and types with 2 records would otherwise give it up to the others);
    plus the weak pull towards START."""
    by: dict[str, list[float]] = {}
    for c in cases:
        by.setdefault(c.rec["metric_type"], []).append(math.log(c.measured / c.expected(pp)))
    fit = sum(sum(x * x for x in v) / len(v) + 2 * (sum(v) / len(v)) ** 2 for v in by.values())
    return fit + PRIOR_WEIGHT * sum(math.log(getattr(pp, n) / getattr(START, n)) ** 2
                                    for n in NAMES)


def fit_params(cases: list[Case], start: PerfParams = START, rounds: int = 30) -> PerfParams:
    """Nelder–Mead from `start`, restarted from its best point until a round gains < 1e-7."""
    best, value = start, math.inf
    for _ in range(rounds):
        best = _nelder_mead(cases, best)
        gain, value = value - (v := loss(cases, best)), v
        if gain < 1e-7:
            break
    return best


def _nelder_mead(cases: list[Case], start: PerfParams, iters: int = 600) -> PerfParams:
    """Nelder–Mead over the logs of the terms (efficiencies capped at 1), from `start`."""
    x0 = _to_x(start)
    pts = [x0] + [[v + (0.5 if i == j else 0.0) for j, v in enumerate(x0)]
                  for i in range(len(x0))]
    vals = [loss(cases, _from_x(p)) for p in pts]
    for _ in range(iters):
        order = sorted(range(len(pts)), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        n = len(x0)
        mid = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]

        def at(t: float, mid: list[float] = mid, worst: list[float] = pts[-1]) -> list[float]:
            return [m + t * (m - w) for m, w in zip(mid, worst, strict=True)]

        xr = at(1.0)
        fr = loss(cases, _from_x(xr))
        if fr < vals[0]:
            xe = at(2.0)
            fe = loss(cases, _from_x(xe))
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = at(-0.5)
            fc = loss(cases, _from_x(xc))
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:  # shrink towards the best
                pts = [pts[0]] + [[b + 0.5 * (v - b) for b, v in zip(pts[0], p, strict=True)]
                                  for p in pts[1:]]
                vals = [vals[0]] + [loss(cases, _from_x(p)) for p in pts[1:]]
    best = min(range(len(pts)), key=vals.__getitem__)
    return _rounded(_from_x(pts[best]))


def _rounded(p: PerfParams) -> PerfParams:
    """Four significant digits: what is written, and what a re-run reproduces."""
    return PerfParams(**{n: float(f"{v:.4g}") for n, v in p.as_dict().items()})


def report(cases: list[Case], pp: PerfParams | Callable[[Case], PerfParams]) -> dict[str, Any]:
    """Per record measured, expected, lower bound; per metric type the median, min and max of
    measured ÷ expected and the rms of its log; the same over all."""
    rows = []
    for c in cases:
        params = pp(c) if callable(pp) else pp
        exp, bnd = c.expected(params), c.bound()
        rate = c.rate is not None
        rows.append({
            "id": c.rec.get("id"), "metric_type": c.rec["metric_type"], "unit": c.unit,
            "measured": c.measured, "expected": exp, "lower_bound": bnd,
            "ratio": c.measured / exp, "rate": rate,
            # the bound is on time: a rate's bound is an upper limit
            "bound_holds": (bnd >= c.measured) if rate else (bnd <= c.measured),
        })
    summary = {}
    for kind in (*TYPES, "all"):
        rs = [r["ratio"] for r in rows if kind in ("all", r["metric_type"])]
        if rs:
            summary[kind] = {"n": len(rs), "median": _median(rs), "min": min(rs), "max": max(rs),
                             "rms_log": math.sqrt(sum(math.log(r) ** 2 for r in rs) / len(rs))}
    return {"records": rows, "summary": summary}


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def profile_toml(gpu: GPU, pp: PerfParams, note: str) -> str:
    """A GPU profile (the datasheet values of `gpu`) with the fitted [perf] table."""
    lines = [f"# {note}"]
    for k in ("name", "vendor", "source", "memory", "memory_bytes", "hbm_bandwidth", "link",
              "link_bandwidth"):
        v = getattr(gpu, k)
        lines.append(f"{k} = {json.dumps(v) if isinstance(v, str) else repr(v)}")
    lines.append("\n[peak_flops]")
    lines += [f"{k} = {v!r}" for k, v in gpu.peak_flops.model_dump().items() if v is not None]
    lines.append("\n[perf]")
    lines += [f"{k} = {v!r}" for k, v in pp.as_dict().items()]
    return "\n".join(lines) + "\n"


def defaults_py(pp: PerfParams, date: str, data: str) -> str:
    body = "".join(f"    {k!r}: {v!r},\n" for k, v in pp.as_dict().items())
    return ('"""Written by `shapecalc calibrate --write-defaults` (plan/calibrate.py): do not edit '
            'by hand\n(tests/test_perf.py re-runs the fit and asserts these values)."""\n\n'
            f"DATE = {date!r}\nDATA = {data!r}\nPARAMS = {{\n{body}}}\n").replace("'", '"')


def with_profile_terms(pp: PerfParams) -> Callable[[Case], PerfParams]:
    """Each record's GPU profile's [perf] table over `pp` (for a check of written profiles)."""
    def one(c: Case) -> PerfParams:
        table: Any = c.gpu.perf
        if table is None:
            return pp
        table = table if isinstance(table, dict) else table.model_dump()
        return replace(pp, **{k: v for k, v in table.items() if v is not None})
    return one


def report_text(rep: dict[str, Any]) -> str:
    """The report as lines: per record, then per metric type, then what was fitted/written."""
    out = [f"{'record':48} {'measured':>10} {'expected':>10} {'bound':>10} {'meas/exp':>8}"]
    for r in rep["records"]:
        out.append(f"{str(r['id'])[:48]:48} {r['measured']:>10.4g} {r['expected']:>10.4g} "
                   f"{r['lower_bound']:>10.4g} {r['ratio']:>8.3f}"
                   + ("" if r["bound_holds"] else "  (the bound does not hold)"))
    out.append("")
    out.append(f"{'metric type':28} {'n':>3} {'median':>8} {'min':>8} {'max':>8} {'rms log':>8}")
    for k, s in rep["summary"].items():
        out.append(f"{k:28} {s['n']:>3} {s['median']:>8.3f} {s['min']:>8.3f} {s['max']:>8.3f} "
                   f"{s['rms_log']:>8.3f}")
    if "fitted" in rep:
        out.append("")
        out += [f"{k} = {v:g}" for k, v in rep["fitted"].items()]
    out += [f"wrote {w}" for w in rep.get("written", [])]
    return "\n".join(out)
