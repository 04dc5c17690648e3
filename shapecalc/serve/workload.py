"""The requests a simulation serves: arrival times and prompt/output lengths, seeded.

Lengths: `2048` (fixed), `uniform:LO,HI` (integers, both ends included) or
`lognormal:MEAN,SIGMA` (the token count's mean and the σ of its logarithm; rounded, ≥ 1).
Arrivals: Poisson at --rate (exponential gaps), `gamma:CV` (gamma gaps with that coefficient of
variation: CV > 1 is burstier than Poisson), or a closed loop of --concurrency users who each
send the next request when the last one ends. Or a trace file: JSONL or CSV with the columns
arrival_s, prompt_tokens, output_tokens.

One `random.Random(seed)` draws everything, in a fixed order: the same seed gives the same
requests on every platform.
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from ..inputs.numbers import parse_number, pos_int
from ..model.config import ShapecalcError

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class Request:
    id: int
    arrival: float  # seconds; closed loop: filled in when a user's previous request ends
    prompt: int  # tokens
    output: int  # tokens generated (the first by the prefill)


@dataclass(frozen=True)
class Lengths:
    kind: str  # fixed | uniform | lognormal
    a: float
    b: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        mu = math.log(self.a) - self.b * self.b / 2  # E[X] = exp(μ + σ²/2) = MEAN
        return max(1, round(rng.lognormvariate(mu, self.b)))

    @property
    def mean(self) -> float:
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a


def parse_lengths(text: str, field: str) -> Lengths:
    t = str(text).strip().lower()
    kind, sep, rest = t.partition(":")
    try:
        if not sep:
            return Lengths("fixed", pos_int(t, field, str(text)))
        parts = [x.strip() for x in rest.split(",")]
        if len(parts) != 2:
            raise ValueError
        if kind == "uniform":
            lo, hi = (pos_int(x, field, str(text)) for x in parts)
            if lo > hi:
                raise ValueError
            return Lengths("uniform", lo, hi)
        if kind == "lognormal":
            mean, sigma = (parse_number(x, field) for x in parts)
            if not (mean >= 1 and 0 <= sigma <= 4 and math.isfinite(mean)):
                raise ValueError
            return Lengths("lognormal", mean, sigma)
    except ValueError:
        pass
    raise ShapecalcError(field, f"expected N, uniform:LO,HI (1 ≤ LO ≤ HI) or lognormal:MEAN,SIGMA "
                         f"(MEAN ≥ 1, 0 ≤ SIGMA ≤ 4), got {text!r}")


def parse_arrivals(text: str) -> float | None:
    """`poisson` → None (exponential gaps); `gamma:CV` → CV."""
    t = str(text).strip().lower()
    if t == "poisson":
        return None
    kind, _, cv = t.partition(":")
    try:
        v = float(cv)
        if kind == "gamma" and 0 < v <= 100:
            return v
    except ValueError:
        pass
    raise ShapecalcError("arrivals", f"expected poisson or gamma:CV (0 < CV ≤ 100), got {text!r}")


def generate(n: int, rate: float | None, prompt: Lengths, output: Lengths, seed: int,
             cv: float | None = None) -> list[Request]:
    """n requests; rate None: all arrive at 0 (a closed loop sets arrivals as it runs)."""
    if n < 1:
        raise ShapecalcError("requests", f"must be ≥ 1, got {n}")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise ShapecalcError("rate", f"must be a finite number > 0 requests/s, got {rate}")
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


def read_trace(path: Path) -> list[Request]:
    """A JSONL (one object a line) or CSV (a header line) file of TRACE_COLUMNS, in any order
    of arrival (sorted here; ties keep the file's order)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ShapecalcError("trace", f"cannot read {path}: {e}") from None
    rows: list[dict[str, object]] = []
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    else:
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise ShapecalcError("trace", f"{path}:{i}: not a JSON object") from None
                if not isinstance(obj, dict):
                    raise ShapecalcError("trace", f"{path}:{i}: not a JSON object")
                rows.append(obj)
    if not rows:
        raise ShapecalcError("trace", f"{path} has no requests")
    reqs = []
    for i, r in enumerate(rows):
        try:
            a = float(r["arrival_s"])  # type: ignore[arg-type]
            p = int(str(r["prompt_tokens"]))
            o = int(str(r["output_tokens"]))
        except KeyError as e:
            raise ShapecalcError("trace", f"{path}: request {i + 1} has no {e.args[0]!r} "
                                 f"(columns: {', '.join(TRACE_COLUMNS)})") from None
        except (TypeError, ValueError):
            raise ShapecalcError("trace", f"{path}: request {i + 1}: arrival_s must be a number, "
                                 "prompt_tokens and output_tokens integers") from None
        if not (math.isfinite(a) and a >= 0 and p >= 1 and o >= 1):
            raise ShapecalcError("trace", f"{path}: request {i + 1}: needs arrival_s ≥ 0, "
                                 "prompt_tokens ≥ 1, output_tokens ≥ 1")
        reqs.append((a, i, p, o))
    reqs.sort()
    return [Request(k, a, p, o) for k, (a, _, p, o) in enumerate(reqs)]
