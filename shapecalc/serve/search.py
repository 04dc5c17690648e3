"""Searches over simulations: the highest arrival rate that meets an SLO (--find-rate), and the
fewest GPUs that serve a rate within it (--find-gpus).

Both redraw the same seeded workload at each probe: Poisson gaps at rate r are the same draws
divided by r, so a higher rate is the same requests closer together and the SLO is (up to the
scheduler's discrete choices) monotone in the rate and in the replicas; bisection relies on it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..model.config import ShapecalcError
from ..plan.cases import valid
from . import sim
from .slo import alone_miss
from .workload import Lengths, Request, generate

BISECTIONS = 12
CANDIDATE_TP = (8, 4, 2, 1)  # the largest first: its plan bounds the others' search
CANDIDATE_PP = (1, 2, 4)
CANDIDATE_MBT = (2048, 512)  # below the given budget, where its prefill chunks cost the SLO
MISS_KEYS = ("metric", "percentile", "value_s", "target_s", "phase", "why")
MAX_REPLICAS = 256


def _need_slo(slo: sim.SLO, flag: str) -> None:
    if not slo.bounds:
        raise ShapecalcError("slo", f"{flag} needs --slo, e.g. --slo ttft=1s,itl=50ms")


def _probe(dep: sim.Deployment, eng: sim.Engine, reqs: list[Request], slo: sim.SLO,
           rate: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's metrics, and each bound it missed with its phase and why (why.py)."""
    reps, seqs = sim.run(dep, reqs, eng=eng)
    m = sim.metrics(dep, eng, reps, seqs, slo, reqs, rate)
    return m, m["slo_missed"]


@dataclass(frozen=True)
class Dimension:
    """One named axis of --find-gpus' candidate space: the flag it sets, the values tried in
    order, how a value sets a deployment, and whether a candidate is worth simulating given the
    rows so far (a later dimension, ep or speculative k, is one more entry)."""

    name: str
    key: str  # the row's key
    values: tuple[int, ...]
    apply: Callable[[sim.Deployment, int], sim.Deployment]
    wanted: Callable[[dict[str, int], list[dict[str, Any]]], bool] = lambda c, rows: True


def _pp_wanted(c: dict[str, int], rows: list[dict[str, Any]]) -> bool:
    """pp only where tp alone does not serve."""
    return c["pp"] == 1 or not any(r["slo_met"] for r in rows if r["tp"] == c["tp"]
                                   and r["pp"] == 1)


def _mbt_wanted(first: int) -> Callable[[dict[str, int], list[dict[str, Any]]], bool]:
    def wanted(c: dict[str, int], rows: list[dict[str, Any]]) -> bool:
        """A smaller token budget only where a larger one missed ITL or TPOT because its
        prefill chunks shared decode steps (why.py)."""
        return c["max_batched_tokens"] == first or any(
            m["phase"] == "prefill" and m["metric"] in ("itl", "tpot")
            for r in rows if (r["tp"], r["pp"]) == (c["tp"], c["pp"])
            and r["max_batched_tokens"] > c["max_batched_tokens"] for m in r["missed"])
    return wanted


def dimensions(dep: sim.Deployment, tps: tuple[int, ...] | None, pps: tuple[int, ...] | None,
               mbts: tuple[int, ...] | None) -> list[Dimension]:
    """tp, pp and the token budget (replicas are searched for each candidate by bisection)."""
    given = dep.opts.max_batched_tokens or 8192
    budgets = mbts or tuple(v for v in (given, *CANDIDATE_MBT) if v <= given
                            and v >= dep.max_num_seqs)
    budgets = tuple(dict.fromkeys(budgets))
    return [
        Dimension("tp", "tp", tps or CANDIDATE_TP,
                  lambda d, v: replace(d, wl=d.wl.model_copy(update={"tp": v}))),
        Dimension("pp", "pp", pps or CANDIDATE_PP,
                  lambda d, v: replace(d, wl=d.wl.model_copy(update={"pp": v})),
                  (lambda c, rows: True) if pps else _pp_wanted),
        Dimension("max-batched-tokens", "max_batched_tokens", budgets,
                  lambda d, v: replace(d, opts=replace(d.opts, max_batched_tokens=v)),
                  (lambda c, rows: True) if mbts else _mbt_wanted(budgets[0])),
    ]


def find_rate(dep: sim.Deployment, n: int, prompt: Lengths, output: Lengths, seed: int,
              cv: float | None, slo: sim.SLO,
              tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """Bisection on the rate between ~0 and the decode-only ceiling of all replicas."""
    _need_slo(slo, "--find-rate")
    eng = sim.engine(dep)
    probe_reqs = generate(n, 1.0, prompt, output, seed, cv)
    sat = sim.saturated(eng, probe_reqs)
    hi = ceiling = sat["output_tokens_per_s"] / output.mean * dep.replicas
    lo = hi / 1000.0
    tried: list[dict[str, Any]] = []

    def ok(rate: float) -> tuple[bool, dict[str, Any]]:
        reqs = generate(n, rate, prompt, output, seed, cv)
        m, missed = _probe(dep, eng, reqs, slo, rate)
        tried.append({"rate": rate, "slo_met": m["slo_met"], "missed": [x["why"] for x in missed],
                      f"ttft_p{slo.percentile}_s": m["ttft_s"][f"p{slo.percentile}"],
                      f"itl_p{slo.percentile}_s": m["itl_s"][f"p{slo.percentile}"],
                      "goodput_requests_per_s": m["goodput"]["requests_per_s"],
                      "bounds": [b["value_s"] for b in m["slo_bounds"]]})
        if tick is not None:
            tick()
        return bool(m["slo_met"]), m

    good, best = ok(lo)
    if not good:
        return {"rate": None, "reason": f"the SLO is missed even at {lo:.4g} requests/s",
                "ceiling_requests_per_s": hi, "probes": tried, "at_rate": best}
    met_hi, m_hi = ok(hi)
    if met_hi:
        return {"rate": hi, "reason": "meets the SLO at the decode-only ceiling",
                "ceiling_requests_per_s": hi, "probes": tried, "at_rate": m_hi}
    for _ in range(BISECTIONS):
        mid = math.sqrt(lo * hi) if hi / lo > 4 else (lo + hi) / 2
        g, m = ok(mid)
        if g:
            lo, best = mid, m
        else:
            hi = mid
    return {"rate": lo, "reason": f"bisection ({BISECTIONS} steps)", "ceiling_requests_per_s":
            ceiling, "probes": tried, "at_rate": best}


def find_gpus(dep: sim.Deployment, rate: float, n: int, prompt: Lengths, output: Lengths,
              seed: int, cv: float | None, slo: sim.SLO, tps: tuple[int, ...] | None = None,
              pps: tuple[int, ...] | None = None,
              tick: Callable[[], None] | None = None,
              mbts: tuple[int, ...] | None = None,
              extra: list[Dimension] | None = None,
              best_gpus: int | None = None) -> dict[str, Any]:
    """For each candidate of the named dimensions (tp, pp, the token budget) that fits and
    meets the SLO with one request at a time: the fewest replicas meeting the SLO at `rate`
    (doubling, then bisection, from the decode-only ceiling's estimate). A probe of r replicas
    simulates one of them serving n requests at rate/r (each replica's share of the traffic);
    the plan, the fewest GPUs, is then simulated whole (all replicas, the router) and its
    result reported as `plan_simulated`. Each row that misses says which bound, in which phase
    and why (why.py), and what meets it where a row one dimension away does."""
    _need_slo(slo, "--find-gpus")
    frontier: list[dict[str, Any]] = []
    notes: list[str] = []
    reqs_at: dict[int, list[Request]] = {}

    def share(r: int) -> list[Request]:
        if r not in reqs_at:
            reqs_at[r] = generate(n, rate / r, prompt, output, seed, cv)
        return reqs_at[r]

    one = share(1)
    dims = dimensions(dep, tps, pps, mbts) + (extra or [])  # ep, spec k: search_dims.py
    for values in itertools.product(*(d.values for d in dims)):
        cand = {d.key: v for d, v in zip(dims, values, strict=True)}
        if not all(d.wanted(cand, frontier) for d in dims):
            continue
        name = " ".join(f"{d.key}={v}" for d, v in zip(dims, values, strict=True)
                        if d.key != "max_batched_tokens" or len(d.values) > 1)
        base = replace(dep, replicas=1)
        for d, v in zip(dims, values, strict=True):
            base = d.apply(base, v)
        if not valid(dep.model, base.wl):
            continue
        try:
            eng = sim.engine(base)
            sim.check_requests(base, eng, one)
        except ShapecalcError as e:
            notes.append(f"{name}: {e.reason}")
            continue
        # no number of replicas beats one request alone on an idle replica
        short = min(one, key=lambda r: (r.prompt, r.output))
        alone_ttft = eng.cost.prefill(1, short.prompt)
        alone_itl = eng.cost.decode(1, short.prompt)
        if eng.spec is not None:  # a token's share of a speculative step: no bound above it
            alone_itl = eng.spec.seconds(0, 0, 0, 0, 1, short.prompt) / eng.spec.spec.expected
        miss = alone_miss(slo, alone_ttft, alone_itl,
                          alone_ttft + (short.output - 1) * alone_itl)
        if miss is not None:
            notes.append(f"{name}: one request alone already misses the SLO (TTFT "
                         f"{alone_ttft:.4g} s, ITL {alone_itl:.4g} s; {miss})")
            continue
        per = sim.saturated(eng, one)["output_tokens_per_s"] / output.mean
        seen: dict[int, bool] = {}

        def meets(r: int, base: sim.Deployment = base, eng: sim.Engine = eng,
                  seen: dict[int, bool] = seen) -> bool:
            if r not in seen:
                m, missed = _probe(base, eng, share(r), slo, rate / r)
                seen[r] = bool(m["slo_met"])
                frontier.append(_row(replace(base, replicas=r), m, missed, r))
                if tick is not None:
                    tick()
            return seen[r]

        # no more replicas than the best plan so far has GPUs: they could not beat it
        best = min([x["gpus"] for x in frontier if x["slo_met"]]  # and a P:D plan's (search_dims)
                   + ([] if best_gpus is None else [best_gpus]), default=None)
        cap = MAX_REPLICAS if best is None else min(MAX_REPLICAS,
                                                    (best - 1) // base.gpus_per_replica)
        r = max(1, math.ceil(rate / per))
        if r > cap:
            notes.append(f"{name}: {_replicas(r)} (the decode-only ceiling's count) "
                         f"would use as many GPUs as the best plan so far, or more")
            continue
        bad, smaller, chunks, was = 0, cand["max_batched_tokens"] != dims[2].values[-1], False, None
        while not meets(r):
            bad = r
            chunks = smaller and frontier[-1]["missed"] and all(
                m["phase"] == "prefill" and m["metric"] in ("itl", "tpot")
                for m in frontier[-1]["missed"])
            now = [(m["metric"], round(m["value_s"], 9)) for m in frontier[-1]["missed"]]
            flat, was = now == was, now  # twice the replicas missed by as much: more cannot help
            if r == cap or chunks or flat:
                break
            r = min(2 * r, cap)
        if not seen[r]:
            notes.append(f"{name}: the SLO is missed with {_replicas(bad)}" + (
                ": only its prefill chunks miss it (ITL/TPOT), so a smaller "
                "--max-batched-tokens is tried rather than more replicas" if chunks else
                ", as with half as many: more replicas do not change it" if flat else
                "" if cap == MAX_REPLICAS else
                " (more would need as many GPUs as the best plan so far)"))
            continue
        while r - bad > 1:  # bad fails (or is 0), r meets
            mid = (bad + r) // 2
            if meets(mid):
                r = mid
            else:
                bad = mid
    _fixes(frontier, [d.key for d in dims] + ["replicas"])
    ok = [row for row in frontier if row["slo_met"]]
    plan = min(ok, key=lambda x: (x["gpus"], x["ttft_p99_s"]), default=None)
    whole = None
    if plan is not None:
        pd = replace(dep, replicas=plan["replicas"])
        for dim in dims:
            pd = dim.apply(pd, plan[dim.key])
        eng = sim.engine(pd)
        reqs = generate(n, rate, prompt, output, seed, cv)
        whole = _row(pd, *_probe(pd, eng, reqs, slo, rate))
        if tick is not None:
            tick()
    return {"rate": rate, "plan": plan, "plan_simulated": whole, "frontier": frontier,
            "notes": notes}


FLAG = {"tp": "--tp", "pp": "--pp", "max_batched_tokens": "--max-batched-tokens",
        "replicas": "--replicas", "ep": "--ep", "spec_k": "--spec-k"}


def _fixes(rows: list[dict[str, Any]], keys: list[str]) -> None:
    """A missed row's `meets_with`: the value of one dimension that meets it, the rest kept
    (the fewest GPUs among those), e.g. "--max-batched-tokens 512 meets it"."""
    for r in rows:
        if r["slo_met"]:
            continue
        near = [(o["gpus"], k, o[k]) for o in rows if o["slo_met"] for k in keys
                if o[k] != r[k] and all(o[j] == r[j] for j in keys if j != k)]
        if near:
            _, k, v = min(near)
            r["meets_with"] = f"{FLAG[k]} {v} meets it"


def _row(d: sim.Deployment, m: dict[str, Any], missed: list[dict[str, Any]], share: int = 1
         ) -> dict[str, Any]:
    """A frontier row; `share`: m is one replica's of that many (its rates scale up)."""
    return {"tp": d.wl.tp, "pp": d.wl.pp, "ep": d.wl.ep, "replicas": d.replicas, "gpus": d.gpus,
            "max_batched_tokens": d.opts.max_batched_tokens or 8192,
            "missed": [{k: x[k] for k in MISS_KEYS} for x in missed], "meets_with": None,
            "bounds": [b["value_s"] for b in m["slo_bounds"]],
            "slo_met": m["slo_met"], "ttft_p99_s": m["ttft_s"]["p99"],
            "itl_p99_s": m["itl_s"]["p99"],
            "goodput_requests_per_s": m["goodput"]["requests_per_s"] * share,
            "output_tokens_per_s_per_gpu": m["throughput"]["output_tokens_per_s_per_gpu"],
            "preemptions": m["preemptions"],
            "cost_per_hour": None if d.opts.price is None else d.opts.price * d.gpus,
            "spec_k": None if d.spec is None else d.spec.spec.k, "pd": None}


def _replicas(n: int) -> str:
    # serve sits below render (render.units.plural): the one noun its notes count
    return f"{n:,} replica" + ("" if n == 1 else "s")
