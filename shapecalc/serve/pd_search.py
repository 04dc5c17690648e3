"""`serve --find-pd`: the split of prefill and decode replicas (each pool's layout as given) with
the fewest GPUs that serves --rate within the SLO, and why each other split fails.

The prefill pool does not see the decode pool (disagg.py: it runs first, its requests leave as
their prefill ends), so TTFT's prefill part depends on P alone and falls as P grows; the decode
pool's ITL and its share of TTFT depend on D (and on when the caches arrive). So:
1. the fewest P whose prefill part (queue + prompt + transfer, p-th percentile) is within the
   TTFT target: doubling, then bisection, on prefill-only runs (cheap: one step a prompt chunk);
2. for P = P_min, P_min + 1, …: the fewest D meeting the SLO (doubling, then bisection), at most
   the last P's D (more prefill never needs more decode); it stops when D stops falling, or when
   P's GPUs with one decode replica reach the best plan's.
Each simulated split is a row with its verdict and, when it fails, which pool is the bottleneck:
the part of TTFT that is largest at the percentile (prefill: its queue and prompts; the
transfer; decode: its queue for blocks and its first step), or ITL (the decode pool's steps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..model.config import ShapecalcError
from . import disagg, sim
from .percentiles import summary
from .why_pd import missed
from .workload import Lengths, generate

MAX_SIDE = 256  # replicas a pool in the search
MISSES = 4  # prefill counts past P_min that meet no D before the search gives up


def deployment(pd: disagg.PD, row: dict[str, Any]) -> disagg.PD:
    return disagg.PD(replace(pd.prefill, replicas=row["prefill_replicas"]),
                     replace(pd.decode, replicas=row["decode_replicas"]))


def _why(m: dict[str, Any], slo: sim.SLO) -> str | None:
    """Which SLO a split misses and which pool is its bottleneck; None when it meets it."""
    q = f"p{slo.percentile}"
    parts = m["disaggregation"]["ttft_parts"]
    out = []
    ttft, itl = m["ttft_s"][q] or 0.0, m["itl_s"][q] or 0.0
    if slo.ttft_s is not None and ttft > slo.ttft_s:
        name, v = max((("prefill", parts["prefill_s"][q] or 0.0),
                       ("transfer", parts["transfer_s"][q] or 0.0),
                       ("decode", parts["decode_first_s"][q] or 0.0)), key=lambda x: x[1])
        busy = m["disaggregation"]["prefill" if name != "decode" else "decode"]["busy_fraction"]
        where = {"prefill": "the prefill pool (its queue and prompts)",
                 "transfer": "the KV transfer (its link's queue and send)",
                 "decode": "the decode pool (its queue for blocks and first step)"}[name]
        out.append(f"TTFT {q} {ttft:.4g} s > {slo.ttft_s:.4g} s: {where} takes {v:.4g} s of it"
                   + ("" if name == "transfer" else f", {busy:.0%} busy"))
    if slo.itl_s is not None and itl > slo.itl_s:
        busy = m["disaggregation"]["decode"]["busy_fraction"]
        out.append(f"ITL {q} {itl * 1e3:.4g} ms > {slo.itl_s * 1e3:.4g} ms: the decode pool's "
                   f"steps ({busy:.0%} busy)")
    # the other bounds (any percentile of TTFT, TPOT, ITL, e2e) as sim.metrics evaluated them
    out += [f"{b['metric'].upper()} p{b['percentile']:g} {b['value_s']:.4g} s > "
            f"{b['target_s']:.4g} s" for b in m["slo_bounds"] if not b["met"]
            and not (b["percentile"] == slo.percentile and (
                (b["metric"] == "ttft" and slo.ttft_s is not None)
                or (b["metric"] == "itl" and slo.itl_s is not None)))]
    return "; ".join(out) or None


def _row(pd: disagg.PD, m: dict[str, Any], slo: sim.SLO) -> dict[str, Any]:
    dis = m["disaggregation"]
    return {"prefill_replicas": pd.prefill.replicas, "decode_replicas": pd.decode.replicas,
            "prefill_gpus": pd.prefill.gpus, "decode_gpus": pd.decode.gpus, "gpus": pd.gpus,
            "slo_met": m["slo_met"], "ttft_p99_s": m["ttft_s"]["p99"],
            "itl_p99_s": m["itl_s"]["p99"],
            "prefill_busy_fraction": dis["prefill"]["busy_fraction"],
            "decode_busy_fraction": dis["decode"]["busy_fraction"],
            "goodput_requests_per_s": m["goodput"]["requests_per_s"],
            "output_tokens_per_s_per_gpu": m["throughput"]["output_tokens_per_s_per_gpu"],
            "why": _why(m, slo),
            # each missed bound's phase and why, as --find-gpus' rows give them (why_pd.py)
            "missed": missed(m, slo), "preemptions": dis["decode"]["preemptions"],
            "bounds": [b["value_s"] for b in m["slo_bounds"]]}


def find_pd(pd: disagg.PD, rate: float, n: int, prompt: Lengths, output: Lengths, seed: int,
            cv: float | None, slo: sim.SLO, tick: Callable[[], None] | None = None
            ) -> dict[str, Any]:
    if not slo.bounds:
        raise ShapecalcError("slo", "--find-pd needs --slo, e.g. --slo ttft=1s,itl=50ms")
    ttft_b = next((b for b in slo.bounds if b.metric == "ttft"), None)
    reqs = generate(n, rate, prompt, output, seed, cv)
    eng = disagg.engines(pd)
    sim.check_requests(pd.decode, eng[1], reqs)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    seen: dict[tuple[int, int], dict[str, Any]] = {}

    def probe(p: int, d: int) -> dict[str, Any]:
        if (p, d) not in seen:
            x = disagg.PD(replace(pd.prefill, replicas=p), replace(pd.decode, replicas=d))
            m = disagg.metrics(x, disagg.run(x, reqs, eng), slo, reqs, rate)
            seen[p, d] = row = _row(x, m, slo)
            rows.append(row)
            if tick is not None:
                tick()
        return seen[p, d]

    def prefill_ok(p: int) -> bool:  # the prefill part alone within TTFT (module doc, 1.)
        if ttft_b is None:
            return True
        x = disagg.PD(replace(pd.prefill, replicas=p), pd.decode)
        res = disagg.run_prefill(x, reqs, eng)
        if tick is not None:
            tick()
        return (summary(res, (ttft_b.q,))[ttft_b.pkey] or 0.0) <= ttft_b.seconds

    lo, hi = 0, 1
    while not prefill_ok(hi):
        lo, hi = hi, 2 * hi
        if hi > MAX_SIDE:
            assert ttft_b is not None  # prefill_ok is only False against a TTFT bound
            notes.append(f"prefill-bound: even {MAX_SIDE} prefill replicas leave TTFT "
                         f"{ttft_b.pkey} over {ttft_b.seconds:.4g} s")
            return {"rate": rate, "plan": None, "splits": rows, "notes": notes}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if prefill_ok(mid) else (mid, hi)
    if hi > 1 and ttft_b is not None:
        notes.append(f"P < {hi}: prefill-bound, the prefill part of TTFT alone is over "
                     f"{ttft_b.seconds:.4g} s at {ttft_b.pkey}")
    best: dict[str, Any] | None = None
    last_d, misses = MAX_SIDE, 0
    for p in range(hi, MAX_SIDE + 1):
        if best is not None and p * pd.prefill.gpus_per_replica + \
                pd.decode.gpus_per_replica >= best["gpus"]:
            break
        bad, d = 0, 1
        while not probe(p, d)["slo_met"]:
            bad = d
            if d >= last_d:
                break
            d = min(2 * d, last_d)
            was, now = probe(p, bad), probe(p, d)
            if not now["slo_met"] and (now["itl_p99_s"] or 0.0) <= (slo.itl_s or float("inf")) \
                    and (now["ttft_p99_s"] or 0.0) >= 0.99 * (was["ttft_p99_s"] or 0.0):
                break  # twice the decode replicas did not lower TTFT: the prefill side bounds it
        if not probe(p, d)["slo_met"]:
            why = probe(p, d)["why"] or ""
            notes.append(f"P={p}: no D ≤ {d} meets the SLO ({why})")
            misses += 1
            if "TTFT" in why and "ITL" not in why and misses < MISSES:
                continue  # more prefill replicas may
            break  # decode-bound at the most decode replicas: more prefill cannot help
        while d - bad > 1:
            mid = (bad + d) // 2
            bad, d = (bad, mid) if probe(p, mid)["slo_met"] else (mid, d)
        row = probe(p, d)
        if best is None or (row["gpus"], row["ttft_p99_s"] or 0.0) < (best["gpus"],
                                                                       best["ttft_p99_s"] or 0.0):
            best = row
        if d == last_d:
            break  # D stopped falling: more prefill only adds GPUs
        last_d = d
    if best is not None and hi > 1:  # the prefill count below, at the plan's D: why it fails
        probe(hi - 1, best["decode_replicas"])
    return {"rate": rate, "plan": best, "splits": sorted(
        rows, key=lambda r: (r["gpus"], r["prefill_replicas"])), "notes": notes}
