"""Load-test records for `shapecalc calibrate` (the format of
tests/data/serving-load-measurements.json): every field checked, one line naming the record
and the field for a missing key, a wrong type, a value ≤ 0, NaN, or a metric in an unknown unit.

A record: `id`, `engine` (text; `engine_profile`, e.g. `trtllm@mlperf-v5.0`, names the profile
where the text does not), `model`, `gpu`, `gpus`, `tp`, `pp`, `replicas`, `dtype`, `workload`
(`prompt`, `output`: lengths as serve reads them; `requests`; `rate` (Server: Poisson) or
`concurrency` (a closed loop), neither: all at t = 0 (Offline); `cap_tokens`, `max_num_seqs`,
`requests_per_replica`, `simulate_one_replica`), `measured` (metric keys below, each > 0),
`shapecalc` (`preset`, `gpu`, `tp`, `replicas`, `dtype`, `kv_dtype`, `max_num_seqs`) and
documentation kept, not read (`source_url`, `quote`, `notes`, `slo`, …).

Metric keys: `ttft_|tpot_|itl_|e2e_` + `p50`…`p99.9` or `mean` + `_s` or `_ms` (TPOT per
request as MLPerf defines it); `[capacity_]requests_per_s`, `[capacity_]output_tokens_per_s`,
`[capacity_]input_tokens_per_s`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..inputs.files import escape_controls
from ..inputs.numbers import bounded, bounded_int
from ..model.config import ShapecalcError
from ..model.record import INT_MAX
from .sim import MAX_REPLICAS
from .workload import MAX_REQUESTS, Lengths, parse_lengths
from .workload import RATE as RATES

LATENCY = re.compile(r"^(ttft|tpot|itl|e2e)_(p\d+(?:\.\d+)?|mean)_(s|ms)$")
RATE = re.compile(r"^(capacity_)?(requests|output_tokens|input_tokens)_per_s$")
TOP = {"id": str, "engine": str, "model": str, "gpu": str, "gpus": int, "tp": int, "pp": int,
       "replicas": int, "dtype": str, "workload": dict, "measured": dict, "shapecalc": dict}
OPTIONAL = {"engine_profile": str, "kv_dtype": str, "source_url": str, "quote": str,
            "notes": str, "slo": str}
WORKLOAD = {"prompt": str, "output": str, "requests": int}
WORKLOAD_OPT = {"rate": float, "concurrency": int, "cap_tokens": int, "max_num_seqs": int,
                "requests_per_replica": int, "simulate_one_replica": bool, "dataset": str,
                "arrival": str, "trace_note": str}
SHAPECALC = {"preset": str, "gpu": str, "tp": int, "replicas": int, "dtype": str,
             "kv_dtype": str, "max_num_seqs": int}
# a record's engine text → its profile, where no engine_profile is given (first match). The
# MLPerf harnesses' capacity policy was not read: MAX_UTILIZATION fits their records better
# than GUARANTEED_NO_EVICT (rms log 0.108 against 0.149, docs/checked/calibration.md)
ENGINE_TEXT = (("TensorRT-LLM", "v4.1", "trtllm-max-utilization@mlperf-v4.1"),
               ("TensorRT-LLM", "v5.0", "trtllm-max-utilization@mlperf-v5.0"),
               ("NIM", "1.8", "trtllm@nim-1.8"))


@dataclass(frozen=True)
class Metric:
    key: str
    kind: str  # ttft | tpot | itl | e2e | requests | output_tokens | input_tokens
    stat: str  # p50 … | mean | rate
    scale: float  # measured value × scale = seconds (latencies) or per second


@dataclass(frozen=True)
class LoadRecord:
    rec: dict[str, Any]
    id: str
    profile: str
    prompt: Lengths
    output: Lengths
    requests: int
    rate: float | None
    concurrency: int | None
    cap: int | None
    metrics: tuple[Metric, ...]


def metric(key: str, where: str) -> Metric:
    m = LATENCY.match(key)
    if m:
        q = m.group(2)
        if q != "mean" and not 0 < float(q[1:]) < 100:
            raise ShapecalcError("calibrate", f"{where}: measured.{key}: percentile {q} is not "
                                 "in (0, 100)")
        return Metric(key, m.group(1), q, 1e-3 if m.group(3) == "ms" else 1.0)
    r = RATE.match(key)
    if r:
        return Metric(key, r.group(2), "rate", 1.0)
    raise ShapecalcError("calibrate", f"{where}: measured.{escape_controls(key)!r}: unknown "
                         "metric or unit (ttft_|tpot_|itl_|e2e_ + p50…/mean + _s or _ms; "
                         "[capacity_]requests_per_s, output_tokens_per_s, input_tokens_per_s)")


def _typed(obj: dict[str, Any], spec: Mapping[str, type], where: str, required: bool) -> None:
    for k, t in spec.items():
        if k not in obj:
            if required:
                raise ShapecalcError("calibrate", f"{where}: needs {k!r}")
            continue
        v = obj[k]
        if t is float:
            bounded(v, "calibrate", 1e-300, 1e300, key=f"{where}.{k}")
        elif t is int:
            bounded_int(v, "calibrate", 1, INT_MAX, key=f"{where}.{k}")
        elif not isinstance(v, t):
            raise ShapecalcError("calibrate", f"{where}.{k} must be a {t.__name__}, got "
                                 f"{escape_controls(repr(v))[:60]}")


def _known(obj: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for k in obj:
        if k not in keys:
            raise ShapecalcError("calibrate", f"{where}: unknown key "
                                 f"{escape_controls(str(k))!r}")


def check(rec: Any, i: int) -> LoadRecord:
    if not isinstance(rec, dict):
        raise ShapecalcError("calibrate", f"record {i}: not a JSON object")
    where = f"record {escape_controls(str(rec.get('id', i)))}"
    _known(rec, (*TOP, *OPTIONAL), where)
    _typed(rec, TOP, where, True)
    _typed(rec, OPTIONAL, where, False)
    wl, sc, ms = rec["workload"], rec["shapecalc"], rec["measured"]
    _known(wl, (*WORKLOAD, *WORKLOAD_OPT), f"{where}: workload")
    _typed(wl, WORKLOAD, f"{where}: workload", True)
    _typed(wl, WORKLOAD_OPT, f"{where}: workload", False)
    _known(sc, tuple(SHAPECALC), f"{where}: shapecalc")
    _typed(sc, SHAPECALC, f"{where}: shapecalc", True)
    if "rate" in wl and "concurrency" in wl:
        raise ShapecalcError("calibrate", f"{where}: workload has rate and concurrency: give one")
    # the sizes a simulation takes (serve's own bounds), named by the record's field
    bounded_int(sc["replicas"], "calibrate", 1, MAX_REPLICAS, key=f"{where}: shapecalc.replicas")
    for k in ("requests", "requests_per_replica"):
        if k in wl:
            bounded_int(wl[k], "calibrate", 1, MAX_REQUESTS, key=f"{where}: workload.{k}")
    if "rate" in wl:  # Poisson at rate / replicas a replica: what the calibration simulates
        bounded(wl["rate"] / sc["replicas"], "calibrate", *RATES, "requests/s a replica",
                key=f"{where}: workload.rate / shapecalc.replicas")
        if str(wl.get("arrival", "poisson")).strip().lower() != "poisson":
            raise ShapecalcError("calibrate", f"{where}: workload.arrival "
                                 f"{escape_controls(str(wl['arrival']))[:40]!r} with a rate: the "
                                 "calibration simulates Poisson arrivals (give 'poisson')")
    if not ms:
        raise ShapecalcError("calibrate", f"{where}: measured is empty")
    metrics = []
    for k, v in ms.items():
        m = metric(str(k), where)
        bounded(v, "calibrate", 1e-300, 1e300, key=f"{where}: measured.{k}")
        metrics.append(m)
    if rec["gpus"] != rec["tp"] * rec["pp"] * rec["replicas"]:
        raise ShapecalcError("calibrate", f"{where}: gpus {rec['gpus']} is not tp × pp × "
                             f"replicas = {rec['tp'] * rec['pp'] * rec['replicas']}")
    prof = rec.get("engine_profile") or next(
        (p for a, b, p in ENGINE_TEXT if a in rec["engine"] and b in rec["engine"]), None)
    if prof is None:
        raise ShapecalcError("calibrate", f"{where}: engine {escape_controls(rec['engine'])[:60]!r}"
                             " names no profile: add engine_profile (e.g. trtllm@mlperf-v5.0)")
    n = wl.get("requests_per_replica", wl["requests"]) if wl.get("simulate_one_replica") \
        else wl["requests"]
    return LoadRecord(rec, str(rec["id"]), prof, parse_lengths(wl["prompt"], "calibrate"),
                      parse_lengths(wl["output"], "calibrate"), n,
                      None if "rate" not in wl else float(wl["rate"]), wl.get("concurrency"),
                      wl.get("cap_tokens"), tuple(metrics))


def measured(r: LoadRecord, m: Metric) -> float:
    v = float(r.rec["measured"][m.key]) * m.scale
    assert math.isfinite(v)
    return v
