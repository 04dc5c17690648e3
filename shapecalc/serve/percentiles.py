"""Nearest-rank percentiles of the simulator's latencies: TTFT, TPOT, end-to-end, and the
inter-token gaps of every iteration (weighted by the tokens it emitted)."""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate, compress
from operator import mul
from typing import Any

from .scheduler import Replica

PERCENTILES = (50, 90, 99)


def percentile(pairs: list[tuple[float, int]], q: float, cum: list[int] | None = None
               ) -> float | None:
    """Nearest rank over (value, weight) pairs sorted by value: the smallest value whose
    cumulative weight reaches q% of the total (`cum`: the pairs' running weights, made once
    where several qs are asked of the same pairs)."""
    if cum is None:
        cum = running(pairs)
    total = cum[-1] if cum else 0
    if total == 0:
        return None
    return pairs[min(bisect_left(cum, q / 100.0 * total), len(pairs) - 1)][0]


def running(pairs: list[tuple[float, int]]) -> list[int]:
    """The running sums of the pairs' weights."""
    return list(accumulate(w for _, w in pairs))


def summary(values: list[float] | list[tuple[float, int]],
            qs: tuple[float, ...] = PERCENTILES) -> dict[str, float | None]:
    """Nearest-rank percentiles at qs (keys p50, p99.9), mean and max."""
    if values and not isinstance(values[0], tuple):  # one sample each: the rank is an index
        xs = sorted(values)
        n = len(xs)
        out1: dict[str, float | None] = {
            f"p{q:g}": xs[min(n - 1, max(0, math.ceil(q / 100.0 * n) - 1))] for q in qs}
        out1["mean"], out1["max"] = sum(xs) / n, xs[-1]
        return out1
    pairs = sorted(v if isinstance(v, tuple) else (v, 1) for v in values)
    total = sum(w for _, w in pairs)
    cum = running(pairs)
    out: dict[str, float | None] = {f"p{q:g}": percentile(pairs, q, cum) for q in qs}
    out["mean"] = sum(v * w for v, w in pairs) / total if total else None
    out["max"] = pairs[-1][0] if pairs else None
    return out


SMALL_RUN = 50_000  # steps: the one rule (nearest rank) either way, NumPy's sort past it


def itl_summary(reps: list[Replica], qs: tuple[float, ...] = PERCENTILES
                ) -> dict[str, float | None]:
    """Inter-token gaps: each iteration's seconds, once for every decode token it emitted (the
    previous token of a running sequence came at the end of the step before), and the gaps
    across a preemption; nearest-rank percentiles, with NumPy past SMALL_RUN steps (millions
    of steps; below it, loading NumPy would cost a short run more than the sort), at qs."""
    if sum(len(rep.durs) + len(rep.gaps) for rep in reps) <= SMALL_RUN:
        pairs: list[tuple[float, int]] = []
        for rep in reps:  # (seconds, tokens) of the steps that emitted any: C loops, no genexpr
            weights = rep.toks + [1] * len(rep.gaps)
            pairs += compress(zip(rep.durs + rep.gaps, weights, strict=True), weights)
            pairs += rep.wgaps  # prefill-first's held-back gaps (scheduler.py)
        if not pairs:
            return {**{f"p{q:g}": None for q in qs}, "mean": None, "max": None}
        pairs.sort()
        ds, ws = zip(*pairs, strict=True)
        acc = list(accumulate(ws))
        return {**{f"p{q:g}": percentile(pairs, q, acc) for q in qs},
                "mean": math.fsum(map(mul, ds, ws)) / acc[-1], "max": ds[-1]}
    import numpy as np

    d = np.concatenate([np.asarray(rep.durs + rep.gaps + [g for g, _ in rep.wgaps],
                                   dtype=float) for rep in reps])
    w = np.concatenate([np.asarray(rep.toks + [1] * len(rep.gaps) + [c for _, c in rep.wgaps],
                                   dtype=np.int64) for rep in reps])
    keep = w > 0
    d, w = d[keep], w[keep]
    if not d.size:
        return {**{f"p{q:g}": None for q in qs}, "mean": None, "max": None}
    order = np.argsort(d, kind="stable")
    d, cum = d[order], np.cumsum(w[order])
    total = int(cum[-1])
    out: dict[str, float | None] = {}
    for q in qs:
        i = int(np.searchsorted(cum, q / 100.0 * total, side="left"))
        out[f"p{q:g}"] = float(d[min(i, d.size - 1)])
    out["mean"] = math.fsum((d * w[order]).tolist()) / total  # exact: the same either way
    out["max"] = float(d[-1])
    return out


def tpot_per_request(seqs: list[Any]) -> list[float]:
    """TPOT as MLPerf defines it, per request: (end − first token) / (output − 1); requests
    of one output token have none and are left out. (Minimal, for calibrate's load records:
    the SLO definitions' home may take it over.)"""
    return [(s.finish - s.first) / (s.req.output - 1) for s in seqs if s.req.output > 1]
