"""Searches over simulations: the highest arrival rate that meets an SLO (--find-rate), and the
fewest GPUs that serve a rate within it (--find-gpus).

Both redraw the same seeded workload at each probe: Poisson gaps at rate r are the same draws
divided by r, so a higher rate is the same requests closer together and the SLO is (up to the
scheduler's discrete choices) monotone in the rate and in the replicas; bisection relies on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..model.config import ShapecalcError
from ..plan.cases import valid
from . import sim
from .slo import alone_miss
from .workload import Lengths, Request, generate

BISECTIONS = 12
CANDIDATE_TP = (8, 4, 2, 1)  # the largest first: its plan bounds the others' search
CANDIDATE_PP = (1, 2, 4)
MAX_REPLICAS = 256


def _need_slo(slo: sim.SLO, flag: str) -> None:
    if not slo.bounds:
        raise ShapecalcError("slo", f"{flag} needs --slo, e.g. --slo ttft=1s,itl=50ms")


def _probe(dep: sim.Deployment, eng: sim.Engine, reqs: list[Request], slo: sim.SLO,
           rate: float) -> dict[str, Any]:
    reps, seqs = sim.run(dep, reqs, eng=eng)
    return sim.metrics(dep, eng, reps, seqs, slo, reqs, rate)


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
        m = _probe(dep, eng, reqs, slo, rate)
        tried.append({"rate": rate, "slo_met": m["slo_met"],
                      f"ttft_p{slo.percentile}_s": m["ttft_s"][f"p{slo.percentile}"],
                      f"itl_p{slo.percentile}_s": m["itl_s"][f"p{slo.percentile}"],
                      "goodput_requests_per_s": m["goodput"]["requests_per_s"]})
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
              tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """For each (tp, pp) that fits and meets the SLO with one request at a time: the fewest
    replicas meeting the SLO at `rate` (doubling, then bisection, from the decode-only
    ceiling's estimate). A probe of r replicas simulates one of them serving n requests at
    rate/r (each replica's share of the traffic); the plan, the fewest GPUs, is then simulated
    whole (all replicas, the router) and its result reported as `plan_simulated`."""
    _need_slo(slo, "--find-gpus")
    frontier: list[dict[str, Any]] = []
    notes: list[str] = []
    reqs_at: dict[int, list[Request]] = {}

    def share(r: int) -> list[Request]:
        if r not in reqs_at:
            reqs_at[r] = generate(n, rate / r, prompt, output, seed, cv)
        return reqs_at[r]

    one = share(1)
    for p in tps or CANDIDATE_TP:
        for s in pps or CANDIDATE_PP:
            if s > 1 and not pps and any(r["slo_met"] for r in frontier if r["tp"] == p):
                continue  # pp only where tp alone does not serve
            wl = dep.wl.model_copy(update={"tp": p, "pp": s})
            if not valid(dep.model, wl):
                continue
            base = replace(dep, wl=wl, replicas=1)
            try:
                eng = sim.engine(base)
                sim.check_requests(base, eng, one)
            except ShapecalcError as e:
                notes.append(f"tp={p} pp={s}: {e.reason}")
                continue
            # no number of replicas beats one request alone on an idle replica
            short = min(one, key=lambda r: (r.prompt, r.output))
            alone_ttft = eng.cost.prefill(1, short.prompt)
            alone_itl = eng.cost.decode(1, short.prompt)
            miss = alone_miss(slo, alone_ttft, alone_itl,
                              alone_ttft + (short.output - 1) * alone_itl)
            if miss is not None:
                notes.append(f"tp={p} pp={s}: one request alone already misses the SLO (TTFT "
                             f"{alone_ttft:.4g} s, ITL {alone_itl:.4g} s; {miss})")
                continue
            per = sim.saturated(eng, one)["output_tokens_per_s"] / output.mean
            seen: dict[int, bool] = {}

            def meets(r: int, p: int = p, s: int = s, base: sim.Deployment = base,
                      eng: sim.Engine = eng, seen: dict[int, bool] = seen) -> bool:
                if r not in seen:
                    reqs = share(r)
                    m = _probe(base, eng, reqs, slo, rate / r)
                    seen[r] = bool(m["slo_met"])
                    frontier.append(_row(replace(base, replicas=r), m, r))
                    if tick is not None:
                        tick()
                return seen[r]

            # no more replicas than the best plan so far has GPUs: they could not beat it
            best = min((x["gpus"] for x in frontier if x["slo_met"]), default=None)
            cap = MAX_REPLICAS if best is None else min(MAX_REPLICAS,
                                                        (best - 1) // base.gpus_per_replica)
            r = max(1, math.ceil(rate / per))
            if r > cap:
                notes.append(f"tp={p} pp={s}: {_replicas(r)} (the decode-only ceiling's count) "
                             f"would use as many GPUs as the best plan so far, or more")
                continue
            bad = 0
            while not meets(r):
                bad = r
                if r == cap:
                    break
                r = min(2 * r, cap)
            if not seen[r]:
                notes.append(f"tp={p} pp={s}: the SLO is missed with {_replicas(bad)}"
                             + ("" if cap == MAX_REPLICAS else
                                " (more would need as many GPUs as the best plan so far)"))
                continue
            while r - bad > 1:  # bad fails (or is 0), r meets
                mid = (bad + r) // 2
                if meets(mid):
                    r = mid
                else:
                    bad = mid
    ok = [row for row in frontier if row["slo_met"]]
    plan = min(ok, key=lambda x: (x["gpus"], x["ttft_p99_s"]), default=None)
    whole = None
    if plan is not None:
        d = replace(dep, wl=dep.wl.model_copy(update={"tp": plan["tp"], "pp": plan["pp"]}),
                    replicas=plan["replicas"])
        eng = sim.engine(d)
        reqs = generate(n, rate, prompt, output, seed, cv)
        whole = _row(d, _probe(d, eng, reqs, slo, rate))
        if tick is not None:
            tick()
    return {"rate": rate, "plan": plan, "plan_simulated": whole, "frontier": frontier,
            "notes": notes}


def _row(d: sim.Deployment, m: dict[str, Any], share: int = 1) -> dict[str, Any]:
    """A frontier row; `share`: m is one replica's of that many (its rates scale up)."""
    return {"tp": d.wl.tp, "pp": d.wl.pp, "ep": d.wl.ep, "replicas": d.replicas, "gpus": d.gpus,
            "slo_met": m["slo_met"], "ttft_p99_s": m["ttft_s"]["p99"],
            "itl_p99_s": m["itl_s"]["p99"],
            "goodput_requests_per_s": m["goodput"]["requests_per_s"] * share,
            "output_tokens_per_s_per_gpu": m["throughput"]["output_tokens_per_s_per_gpu"],
            "preemptions": m["preemptions"],
            "cost_per_hour": None if d.opts.price is None else d.opts.price * d.gpus}


def _replicas(n: int) -> str:
    # serve sits below render (render.units.plural): the one noun its notes count
    return f"{n:,} replica" + ("" if n == 1 else "s")
