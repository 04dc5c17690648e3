"""The latency definitions an SLO reads, and the bounds `--slo` holds them to: the one home of
TTFT, TPOT, ITL and end-to-end latency for serve, its searches, goodput and calibration.

Per request (a `Seq` that finished; times in seconds):
- `ttft(s)`: arrival → first token (the prefill emits it);
- `tpot(s)`: MLPerf's time per output token, (e2e − TTFT) / (output − 1), the mean gap between
  a request's tokens after the first. mlcommons/inference loadgen/logging.cc computes it per
  sample, `time_per_output_token_[i] = (latency - token_latencies_[i]) / (n_tokens - 1)`, and
  refuses a one-token answer ("Number of tokens need to be greater than 1"): a request with one
  output token has no TPOT and is left out of the TPOT distribution (counted in `excluded`);
- `e2e(s)`: arrival → last token.
Per gap: ITL, every gap between two consecutive tokens of a request, pooled over all requests
(vLLM's benchmark_serving `itls`): an iteration's seconds once for each decode token it emits,
and the gap across a preemption (percentiles.itl_summary). A prefill chunk that shares a step
with decodes lengthens every gap in that step; it moves a request's TPOT by 1/(output − 1) of it.

A `Bound` is a metric, a percentile and a time: `tpot_p99=200ms` holds the nearest-rank 99th
percentile of the TPOT distribution to 200 ms. `ttft=`, `itl=`, `tpot=` and `e2e=` without a
percentile are p99 (today's `ttft=` and `itl=`). Named sets: MLPERF (loadgen's mlperf.conf).
An SLO is met when every bound is. Goodput counts the requests that meet every bound on their
own values: TTFT, TPOT and e2e as above; an ITL bound holds the request's mean gap, its TPOT
(its own gaps are not kept; DistServe's goodput reads TPOT, as `itl=` always did here).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..inputs.numbers import parse_number
from ..lean import dataclass
from ..model.config import ShapecalcError
from ..model.suggest import did_you_mean
from .decoders import Seq
from .percentiles import PERCENTILES, itl_summary, summary
from .scheduler import Replica

METRICS = ("ttft", "tpot", "itl", "e2e")
READS = {
    "ttft": "time to first token of each request: arrival to first token",
    "tpot": "time per output token of each request, MLPerf's: (e2e − TTFT) / (output − 1); "
            "requests with one output token excluded",
    "itl": "inter-token latency: every gap between two tokens of a request, all requests pooled",
    "e2e": "end-to-end latency of each request: arrival to last token",
}
LABEL = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "e2e"}
REPORTED = (50, 90, 95, 99)  # each definition's percentiles in --json, with any a bound asks
# MLPerf Inference's Server constraints for Llama-2-70B, mlcommons/inference loadgen/mlperf.conf
# (commit b66003e1): "llama2-70b.Server.ttft_latency = 2000", "llama2-70b.Server.tpot_latency =
# 200", "llama2-70b-interactive.Server.ttft_latency = 450", "...tpot_latency = 40" (ms), each at
# "*.Server.target_latency_percentile = 99"; loadgen checks the p99 of its per-sample TTFT and TPOT.
MLPERF = {"mlperf-server": "ttft_p99=2s,tpot_p99=200ms",
          "mlperf-interactive": "ttft_p99=450ms,tpot_p99=40ms"}
UNITS = (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("s", 1.0))
FORM = "ttft=TIME,itl=TIME or METRIC_pQ=TIME (METRIC: ttft, tpot, itl, e2e; e.g. tpot_p99=200ms)"


@dataclass(frozen=True)
class Bound:
    metric: str  # ttft | tpot | itl | e2e
    q: float  # the percentile, 0 < q ≤ 100
    seconds: float

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.q:g}"

    @property
    def pkey(self) -> str:
        return f"p{self.q:g}"


@dataclass(frozen=True)
class SLO:
    bounds: tuple[Bound, ...] = ()
    name: str | None = None  # a named set (mlperf-server), as given

    def _p99(self, metric: str) -> float | None:
        return next((b.seconds for b in self.bounds if b.metric == metric and b.q == 99), None)

    @property
    def ttft_s(self) -> float | None:
        """The p99 TTFT bound (today's `ttft=`)."""
        return self._p99("ttft")

    @property
    def itl_s(self) -> float | None:
        """The p99 ITL bound (today's `itl=`)."""
        return self._p99("itl")

    percentile = 99  # the percentile ttft_s and itl_s read

    def tightest(self, *metrics: str) -> float | None:
        """The smallest time any bound on these metrics allows (a request's own value)."""
        return min((b.seconds for b in self.bounds if b.metric in metrics), default=None)

    def head(self) -> dict[str, Any]:
        """The `slo` of --json's head: today's keys and every bound."""
        return {"ttft_s": self.ttft_s, "itl_s": self.itl_s, "percentile": self.percentile,
                "name": self.name,
                "bounds": [{"metric": b.metric, "percentile": b.q, "target_s": b.seconds,
                            "reads": READS[b.metric]} for b in self.bounds]}


def _time(item: str, key: str, v: str) -> float:
    v = v.strip().lower()
    scale = None
    for unit, k in UNITS:
        if v.endswith(unit):
            v, scale = v[: -len(unit)], k
            break
    try:  # the number first: `nan`, `1h` and `` are not times with a unit left out
        x = parse_number(v, "slo")
    except ShapecalcError:
        raise ShapecalcError("slo", f"{item!r}: {v.strip()!r} is not a time: give a number "
                             f"and a unit (s, ms or us), e.g. {key}=1s") from None
    if scale is None and math.isfinite(x):
        raise ShapecalcError("slo", f"{item!r} has no unit: add s, ms or us (e.g. "
                             f"{key}={v.strip()}ms or {key}={v.strip()}s)")
    x *= scale or 1.0
    if not (x > 0 and math.isfinite(x)):
        raise ShapecalcError("slo", f"{item!r}: the time must be a finite number > 0")
    return x


def _key(item: str, key: str) -> tuple[str, float]:
    metric, _, q = key.partition("_p")
    if metric not in METRICS or (q == "" and "_p" in key):
        raise ShapecalcError("slo", f"expected {FORM}, got {item!r}")
    if not q:
        return metric, 99.0
    try:
        p = parse_number(q, "slo")
    except ShapecalcError:
        p = math.nan
    if not 0 < p <= 100:
        raise ShapecalcError("slo", f"{item!r}: the percentile must be in (0, 100], e.g. "
                             f"{metric}_p99")
    return metric, p


def parse_slo(text: str | None) -> SLO:
    """`ttft=1s,itl=50ms`, `ttft_p99=2s,tpot_p99=200ms,e2e_p50=10s,itl_p95=80ms` or a name
    (`mlperf-server`, `mlperf-interactive`, with more bounds after it if wanted): each time with
    its unit (s, ms or us). A bare number is refused: `itl=50` could be 50 s or 50 ms, and a
    planner reading `slo_met` would not know which."""
    if text is None:
        return SLO()
    if not text.strip():  # given, but empty: not the same as no --slo
        raise ShapecalcError("slo", "is empty; give ttft=TIME,itl=TIME (e.g. ttft=1s,itl=50ms) "
                             f"or a name ({', '.join(MLPERF)})")
    bounds: dict[tuple[str, float], Bound] = {}
    name = None
    items = [x.strip() for x in text.split(",")]
    for item in items:
        low = item.lower()
        if low in MLPERF:
            if name is not None:
                raise ShapecalcError("slo", f"give one named set, not {name} and {low}")
            name = low
            continue
        key, eq, v = item.partition("=")
        key = key.strip().lower()
        if not eq:
            raise ShapecalcError("slo", f"expected {FORM}, or a name ({', '.join(MLPERF)}), "
                                 f"got {item!r}{did_you_mean(low, MLPERF)}")
        metric, q = _key(item, key)
        if (metric, q) in bounds:
            raise ShapecalcError("slo", f"{metric} at p{q:g} is given twice ({text!r}): give "
                                 "each once")
        bounds[(metric, q)] = Bound(metric, q, _time(item, key, v))
    if name is not None:
        for b in parse_slo(MLPERF[name]).bounds:
            if (b.metric, b.q) in bounds:
                raise ShapecalcError("slo", f"{name} sets {b.key}; leave out {b.key}=")
            bounds[(b.metric, b.q)] = b
    order = sorted(bounds.values(), key=lambda b: (METRICS.index(b.metric), b.q))
    return SLO(tuple(order), name)


# -- the definitions ------------------------------------------------------------------------------


def ttft(s: Seq) -> float:
    return s.first - s.req.arrival


def tpot(s: Seq) -> float | None:
    """MLPerf's TPOT; None for a one-token answer (it has none)."""
    return None if s.req.output < 2 else (s.finish - s.first) / (s.req.output - 1)


def e2e(s: Seq) -> float:
    return s.finish - s.req.arrival


def per_request(seqs: Iterable[Seq]) -> dict[str, list[float]]:
    """Each request's TTFT, TPOT (one-token answers left out) and e2e, in the run's order."""
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": []}
    for s in seqs:
        out["ttft"].append(s.first - s.req.arrival)
        out["e2e"].append(s.finish - s.req.arrival)
        if s.req.output > 1:
            out["tpot"].append((s.finish - s.first) / (s.req.output - 1))
    return out


def percentiles_for(slo: SLO) -> tuple[float, ...]:
    return tuple(sorted({*PERCENTILES, *REPORTED, *(b.q for b in slo.bounds)}))


def distributions(seqs: list[Seq], reps: list[Replica], qs: tuple[float, ...] = PERCENTILES
                  ) -> dict[str, dict[str, float | None]]:
    """Each definition's nearest-rank percentiles at qs (keys p50, p99.9, …), mean and max."""
    per = per_request(seqs)
    return {"ttft": summary(per["ttft"], qs), "tpot": summary(per["tpot"], qs),
            "itl": itl_summary(reps, qs), "e2e": summary(per["e2e"], qs)}


def evaluate(slo: SLO, dists: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    """Each bound with the run's value at its percentile and whether it is met (a definition
    with no sample, a run of one-token answers' TPOT, meets it)."""
    rows = []
    for b in slo.bounds:
        v = dists[b.metric][b.pkey]
        rows.append({"metric": b.metric, "percentile": b.q, "target_s": b.seconds, "value_s": v,
                     "met": v is None or v <= b.seconds})
    return rows


def good(slo: SLO, s: Seq) -> bool:
    """The request meets every bound on its own values (an ITL bound: its mean gap, TPOT)."""
    for b in slo.bounds:
        if b.metric == "ttft":
            v: float | None = s.first - s.req.arrival
        elif b.metric == "e2e":
            v = s.finish - s.req.arrival
        else:
            v = tpot(s)
        if v is not None and v > b.seconds:
            return False
    return True


def latency_doc(dists: dict[str, dict[str, float | None]], seqs: list[Seq]) -> dict[str, Any]:
    """--json's `latency`: each definition, what it reads, the requests in it, the requests
    left out (one-token answers have no TPOT and no gap) and its summary."""
    one = sum(1 for s in seqs if s.req.output < 2)
    return {m: {"reads": READS[m], "requests": len(seqs) - (one if m in ("tpot", "itl") else 0),
                "excluded": one if m in ("tpot", "itl") else 0, "summary": dists[m]}
            for m in METRICS}


def alone_miss(slo: SLO, ttft_s: float, step_s: float, e2e_s: float) -> str | None:
    """Which bound one request alone on an idle replica already misses (no number of replicas
    beats it): its TTFT, its every gap and its TPOT a decode step, its e2e."""
    vals = {"ttft": ttft_s, "tpot": step_s, "itl": step_s, "e2e": e2e_s}
    for b in slo.bounds:
        if vals[b.metric] > b.seconds:
            return f"{LABEL[b.metric]} {vals[b.metric]:.4g} s > {b.seconds:.4g} s"
    return None
