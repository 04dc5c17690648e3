"""The requests a simulation serves: arrival times and prompt/output lengths, seeded.

Lengths: `2048` (fixed), `uniform:LO,HI` (integers, both ends included) or
`lognormal:MEAN,SIGMA` (MEAN is the token count's own mean, not the underlying normal's μ: μ =
ln MEAN − σ²/2; SIGMA the σ of its logarithm; rounded, ≥ 1), either with `,max=N`: each draw
capped at N (min(draw, N): a dataset's length limit, an answer stopped at max_tokens), MEAN
still the uncapped distribution's, as ../shared/calibration/serving-load-measurements.json
writes its MLPerf workloads (`lognormal:300,0.6` with `cap_tokens` 1024: "lognormal lengths as
in prompt/output, each capped at 1024 tokens"). Or a named dataset (datasets.py).
Arrivals: Poisson at --rate (exponential gaps), `gamma:CV` (gamma gaps with that coefficient of
variation: CV > 1 is burstier than Poisson), or a closed loop of --concurrency users who each
send the next request when the last one ends. Or a trace file: JSONL or CSV with the columns
arrival_s, prompt_tokens, output_tokens.

One `random.Random(seed)` draws everything, in a fixed order: the same seed gives the same
requests on every platform.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from .. import lean
from ..inputs.files import escape_controls, read_csv, read_jsonl, shown
from ..inputs.numbers import bounded, bounded_int, parse_number, pos_int
from ..model.config import ShapecalcError
from ..model.record import INT_MAX

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
# bounds that keep a simulation finite: each request is simulated (~10⁵ a second), a rate's gaps
# must stay finite floats and a gamma's shape 1/CV² must not overflow
# (times are float seconds from the first arrival: at most MAX_SPAN_S, whose float spacing,
# 1.2e-7 s, stays far below an iteration's)
MAX_REQUESTS = 10**6
MAX_TRACE_BYTES = 128 * 2**20  # ~10⁶ requests' rows as JSON Lines (~70 bytes each), with room
MAX_SPAN_S = 1e9
RATE = (1e-3, 1e9)
CV = (1e-3, 100.0)


@dataclass(frozen=True)  # the stdlib's: one a request, made faster than a lean one
class Request:
    id: int
    arrival: float  # seconds; closed loop: filled in when a user's previous request ends
    prompt: int  # tokens
    output: int  # tokens generated (the first by the prefill)
    cached: int = 0  # prompt tokens whose KV arrives with it (disagg.py: a decode pool's)


@lean.dataclass(frozen=True)
class Lengths:
    kind: str  # fixed | uniform | lognormal
    a: float
    b: float = 0.0
    cap: int | None = None  # max=N: each draw is min(draw, N)

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            x = rng.randint(int(self.a), int(self.b))
        else:
            mu = math.log(self.a) - self.b * self.b / 2  # E[X] = exp(μ + σ²/2) = MEAN
            x = max(1, round(rng.lognormvariate(mu, self.b)))
        return x if self.cap is None else min(x, self.cap)

    @property
    def mean(self) -> float:
        """The drawn lengths' mean (the cap's included; lognormal: before rounding)."""
        c = self.cap
        if self.kind == "uniform":
            lo, hi = int(self.a), int(self.b)
            if c is None or c >= hi:
                return (lo + hi) / 2
            return ((c * (c + 1) - lo * (lo - 1)) / 2 + (hi - c) * c) / (hi - lo + 1)
        if self.kind != "lognormal" or c is None or self.b == 0:
            return self.a if c is None else min(self.a, c)
        # E[min(X, c)] = MEAN·Φ((ln c − μ − σ²)/σ) + c·(1 − Φ((ln c − μ)/σ))
        s, mu = self.b, math.log(self.a) - self.b * self.b / 2
        z = (math.log(c) - mu) / s
        return self.a * _phi(z - s) + c * (1 - _phi(z))


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def parse_lengths(text: str, field: str) -> Lengths:
    t = str(text).strip().lower()
    kind, sep, rest = t.partition(":")
    try:
        if not sep:
            return Lengths("fixed", pos_int(t, field, str(text)))
        parts = [x.strip() for x in rest.split(",")]
        cap = None
        if len(parts) == 3 and parts[2].startswith("max="):
            cap = pos_int(parts.pop()[4:].strip(), field, str(text))
        if len(parts) != 2:
            raise ValueError
        if kind == "uniform":
            lo, hi = (pos_int(x, field, str(text)) for x in parts)
            if lo > hi:
                raise ValueError
            if cap is not None and cap < lo:
                raise ShapecalcError(field, f"{text!r}: max={cap} is below LO={lo}: every "
                                     "length would be the cap; give N instead")
            return Lengths("uniform", lo, hi, cap)
        if kind == "lognormal":
            mean, sigma = (parse_number(x, field) for x in parts)
            if not (1 <= mean <= INT_MAX and 0 <= sigma <= 4):  # a mean past 2⁶³ overflows exp
                raise ValueError
            return Lengths("lognormal", mean, sigma, cap)
    except ValueError:
        pass
    raise ShapecalcError(field, f"expected N, uniform:LO,HI (1 ≤ LO ≤ HI) or lognormal:MEAN,SIGMA "
                         f"(1 ≤ MEAN ≤ 2⁶³−1, 0 ≤ SIGMA ≤ 4), either with ,max=N (N ≥ 1), "
                         f"got {text!r}")


def parse_arrivals(text: str) -> float | None:
    """`poisson` → None (exponential gaps); `gamma:CV` → CV."""
    t = str(text).strip().lower()
    if t == "poisson":
        return None
    kind, _, cv = t.partition(":")
    if kind == "gamma" and cv:
        return bounded(parse_number(cv, "arrivals"), "arrivals", *CV, "(gamma:CV's CV)")
    raise ShapecalcError("arrivals", f"expected poisson or gamma:CV ({CV[0]:g} ≤ CV ≤ {CV[1]:g}), "
                         f"got {text!r}")


def generate(n: int, rate: float | None, prompt: Lengths, output: Lengths, seed: int,
             cv: float | None = None) -> list[Request]:
    """n requests; rate None: all arrive at 0 (a closed loop sets arrivals as it runs)."""
    bounded_int(n, "requests", 1, MAX_REQUESTS)
    if rate is not None:
        bounded(rate, "rate", *RATE, "requests/s")
    rng = random.Random(seed)
    out: list[Request] = []
    t = 0.0
    for i in range(n):
        if rate is not None:
            if cv is None:
                t += rng.expovariate(rate)
            else:  # shape k = 1/CV², mean 1/rate
                k = 1.0 / (cv * cv)
                t += rng.gammavariate(k, 1.0 / (rate * k))
        out.append(Request(i, t, prompt.draw(rng), output.draw(rng)))
    return out


def _arrival(v: object, where: str, cell: bool) -> Fraction:
    """arrival_s exactly (an int of epoch nanoseconds keeps its last digit): a JSON number or
    (`cell`) a CSV cell; a bool (`true`) is not 1 s, a JSON string not a number."""
    if isinstance(v, str) and cell:
        parse_number(v, "trace")  # ASCII, a number at all
        try:
            return Fraction(v.strip())
        except ValueError:
            pass
    elif isinstance(v, int) and not isinstance(v, bool):
        return Fraction(v)
    elif isinstance(v, float) and math.isfinite(v):
        return Fraction(v)
    raise ShapecalcError("trace", f"{where}: arrival_s must be a finite number ≥ 0, got {v!r}")


def _tokens(v: object, key: str, where: str, cell: bool) -> int:
    if cell and isinstance(v, str) and v.strip().isascii() and v.strip().isdigit():
        v = int(v.strip())
    if isinstance(v, bool) or not isinstance(v, int):
        raise ShapecalcError("trace", f"{where}: {key} must be an integer, got {v!r}")
    return bounded_int(v, "trace", 1, INT_MAX, "tokens", key=f"{where}: {key}")


def read_trace(path: Path) -> list[Request]:
    """A JSONL (one object a line) or CSV (a header line) file of TRACE_COLUMNS, read by the
    shared safe reader (inputs/files.py), in any order of arrival (sorted here; ties keep the
    file's order). Times are made relative to the first arrival, exactly, before they become
    floats: epoch nanoseconds keep their resolution."""
    p, cell = shown(path), path.suffix.lower() == ".csv"
    rows: list[tuple[str, object]] = []
    if cell:
        rows = [(f"{p}: request {i}", r)
                for i, r in enumerate(read_csv(path, "trace", MAX_TRACE_BYTES, MAX_REQUESTS), 1)]
    else:
        got = read_jsonl(path, "trace", MAX_TRACE_BYTES, MAX_REQUESTS)
        rows = [(f"{p}:{i}", r) for i, r in got]
    if not rows:
        raise ShapecalcError("trace", f"{p} has no requests")
    bounded_int(len(rows), "trace", 1, MAX_REQUESTS, f"requests ({p})")
    reqs = []
    for i, (where, r) in enumerate(rows):
        if not isinstance(r, dict):
            raise ShapecalcError("trace", f"{where}: not a JSON object")
        missing = [k for k in TRACE_COLUMNS if k not in r]
        if missing:
            raise ShapecalcError("trace", f"{where} has no {missing[0]!r} "
                                 f"(columns: {', '.join(TRACE_COLUMNS)})")
        extra = sorted(set(r) - set(TRACE_COLUMNS))
        if extra:
            raise ShapecalcError("trace", f"{where}: unknown column {escape_controls(extra[0])!r} "
                                 f"(columns: {', '.join(TRACE_COLUMNS)})")
        a = _arrival(r["arrival_s"], where, cell)
        if a < 0:
            raise ShapecalcError("trace", f"{where}: arrival_s must be ≥ 0, got {float(a)}")
        reqs.append((a, i, _tokens(r["prompt_tokens"], "prompt_tokens", where, cell),
                     _tokens(r["output_tokens"], "output_tokens", where, cell)))
    reqs.sort()
    t0 = reqs[0][0]
    if reqs[-1][0] - t0 > MAX_SPAN_S:
        raise ShapecalcError("trace", f"{p}: arrivals span {float(reqs[-1][0] - t0):g} s, more "
                             f"than the {MAX_SPAN_S:g} s a simulation keeps exact")
    return [Request(k, float(a - t0), pr, o) for k, (a, _, pr, o) in enumerate(reqs)]
