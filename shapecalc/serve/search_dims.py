"""--find-gpus and --find-rate over every deployment kind: the dimensions search.py's list gains
(ep with data-parallel attention, speculative k) and the disaggregated P:D split, which reuses
pd_search.find_pd for each layout rather than a copy of its search.

- ep (MoE models): 1 and the divisors of the experts (with EPLB the experts plus the redundant
  ones) that are multiples of tp, so that ep/tp attention ranks of tp GPUs each fill the ep GPUs
  (plan/ep.py); tried at pp = 1. `--ep N` fixes it.
- speculative k (with --draft and no --spec-k): k = 1 … K, K = SPEC_K, or the positions
  --acceptance lists; each k keeps the first k positions' acceptance. `--spec-k K` fixes it.
- P:D: for each layout the aggregated search simulated (at its largest token budget: the decode
  pool runs no prefill chunks, so a smaller budget only slows the prefill pool), in order of the
  fewest GPUs a split could take, pd_search.find_pd finds the fewest prefill and decode
  replicas; a layout whose bound is not below the best plan's GPUs is rejected without a run,
  with that reason. `--pd P:D` fixes the split: each layout is simulated at P:D once, unless
  its pools' saturated throughput cannot reach the rate (rejected without a run, the reason
  said).

Bounds (no run beats them): a decode replica's ceiling is sim.saturated's; a prefill replica
runs at most its token budget a step, in prompts of the mean length: budget / the step's time
(cost.prefill of ⌊budget / prompt⌋ prompts), tokens/s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..model.config import ShapecalcError
from ..model.errors import plural
from . import disagg, pd_search, sim
from .search import Dimension, dimensions, find_gpus, find_rate
from .workload import Lengths, generate

SPEC_K = 4  # draft tokens a step tried when --draft is given without --spec-k
MAX_EP = 256
LAYOUT = ("tp", "pp", "ep", "max_batched_tokens", "spec_k")


def spec_at(sp: Any, k: int) -> Any:
    """The speculation at k draft tokens a step: the first k positions' acceptance."""
    if sp.spec.k == k:
        return sp
    return replace(sp, spec=replace(sp.spec, k=k, alphas=sp.spec.alphas[:k]))


def ep_values(dep: sim.Deployment) -> tuple[int, ...]:
    m = dep.model
    if not m.moe:
        return (1,)
    n = (m.n_experts or 1) + (dep.ep_settings.redundant if dep.ep_settings else 0)
    return (1, *(v for v in range(2, min(n, MAX_EP) + 1) if n % v == 0))


def _ep_wanted(c: dict[str, int], rows: list[dict[str, Any]]) -> bool:
    """ep > 1 in whole attention ranks (a multiple of tp), at pp = 1."""
    return c["ep"] == 1 or (c["ep"] % c["tp"] == 0 and c["pp"] == 1)


def extra(dep: sim.Deployment, ep_fixed: bool, k_fixed: bool) -> list[Dimension]:
    """ep and speculative k, each one entry (fixed by --ep / --spec-k; none for a dense model
    or without --draft, so their runs are as before)."""
    eps = (dep.wl.ep,) if ep_fixed else ep_values(dep)
    dims = [] if eps == (1,) else [
        Dimension("ep", "ep", eps, lambda d, v: replace(d, wl=d.wl.model_copy(update={"ep": v})),
                  (lambda c, rows: True) if ep_fixed else _ep_wanted)]
    if dep.spec is not None:
        ks = (dep.spec.spec.k,) if k_fixed else tuple(range(1, dep.spec.spec.k + 1))
        dims.append(Dimension("spec-k", "spec_k", ks,
                              lambda d, v: replace(d, spec=spec_at(d.spec, v))))
    return dims


def layout_of(dep: sim.Deployment, row: dict[str, Any]) -> sim.Deployment:
    wl = dep.wl.model_copy(update={"tp": row["tp"], "pp": row["pp"], "ep": row["ep"]})
    d = replace(dep, wl=wl, replicas=1,
                opts=replace(dep.opts, max_batched_tokens=row["max_batched_tokens"]))
    if dep.spec is not None and row.get("spec_k"):
        d = replace(d, spec=spec_at(dep.spec, row["spec_k"]))
    return d


def _name(row: dict[str, Any]) -> str:
    return " ".join(f"{k}={row[k]}" for k in LAYOUT if row.get(k) is not None
                    and (k != "ep" or row[k] > 1))


def bounds(d: sim.Deployment, one: list[Any], prompt: Lengths) -> tuple[float, float]:
    """(prefill tokens/s, decode output tokens/s) one replica of `d` cannot exceed (module
    doc), each from its own engine."""
    eng = sim.engine(d)
    mbt = d.opts.max_batched_tokens or 8192
    p = max(1, min(mbt, round(prompt.mean)))
    b = max(1, mbt // p)
    return b * p / eng.cost.prefill(b, p), sim.saturated(eng, one)["output_tokens_per_s"]


def _pd_row(pd: disagg.PD, row: dict[str, Any], split: dict[str, Any]) -> dict[str, Any]:
    """A find_pd split as a frontier row: the layout's keys, `pd` the two pools' replicas."""
    d = pd.decode
    price = d.opts.price
    return {"tp": d.wl.tp, "pp": d.wl.pp, "ep": d.wl.ep,
            "replicas": split["prefill_replicas"] + split["decode_replicas"],
            "gpus": split["gpus"], "max_batched_tokens": row["max_batched_tokens"],
            "missed": split["missed"], "meets_with": None, "bounds": split["bounds"],
            "slo_met": split["slo_met"],
            "ttft_p99_s": split["ttft_p99_s"], "itl_p99_s": split["itl_p99_s"],
            "goodput_requests_per_s": split["goodput_requests_per_s"],
            "output_tokens_per_s_per_gpu": split["output_tokens_per_s_per_gpu"],
            "preemptions": split.get("preemptions", 0),
            "cost_per_hour": None if price is None else price * split["gpus"],
            "spec_k": row.get("spec_k"),
            "pd": {"prefill_replicas": split["prefill_replicas"],
                   "decode_replicas": split["decode_replicas"]}}


def _pd_split(base: sim.Deployment, p: int, d: int) -> disagg.PD:
    return disagg.PD(replace(base, replicas=p), replace(base, replicas=d))


def _need(rate: float, prompt: Lengths, output: Lengths, pre: float, dec: float
          ) -> tuple[int, int]:
    return max(1, math.ceil(rate * prompt.mean / pre)), max(1, math.ceil(rate * output.mean
                                                                         / dec))


def layouts(dep: sim.Deployment, dims: list[Dimension]) -> list[tuple[dict[str, Any],
                                                                      sim.Deployment]]:
    """Each layout of the dimensions at the largest token budget (the P:D split's: the decode
    pool runs no prefill chunks), the model valid for it; pp > 1 only where given."""
    import itertools

    from ..plan.cases import valid

    out = []
    first = ("pp", "max_batched_tokens")  # pp = 1 unless --pp is given (its one value)
    for values in itertools.product(*(d.values[:1] if d.key in first else d.values
                                      for d in dims)):
        cand = {d.key: v for d, v in zip(dims, values, strict=True)}
        if not all(d.key in first or d.wanted(cand, []) for d in dims):
            continue
        base = replace(dep, replicas=1)
        for d, v in zip(dims, values, strict=True):
            base = d.apply(base, v)
        if valid(dep.model, base.wl):
            out.append(({"spec_k": None, "ep": base.wl.ep, **cand}, base))
    return out


def pd_stage(dep: sim.Deployment, dims: list[Dimension], rate: float, n: int, prompt: Lengths,
             output: Lengths, seed: int, cv: float | None, slo: sim.SLO,
             tick: Callable[[], None] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The P:D dimension (module doc): each layout in order of the fewest GPUs a split could
    take, find_pd where that bound is below the best plan's; (rows, notes)."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    if dep.shared_prefix:
        return rows, ["pd: prefix caching is not simulated with disaggregation; no P:D split "
                      "tried (leave out --shared-prefix)"]
    if dep.spec is not None:  # disagg.py's decode pool runs plain replicas (cli refuses --pd)
        return rows, ["pd: speculative decoding is not simulated with disaggregation; no P:D "
                      "split tried (leave out --draft)"]
    one = generate(n, rate, prompt, output, seed, cv)
    cands = []
    for r, base in layouts(dep, dims):
        try:
            pre, dec = bounds(base, one, prompt)
        except ShapecalcError as e:
            notes.append(f"{_name(r)} pd: {e.reason}")
            continue
        pmin, dmin = _need(rate, prompt, output, pre, dec)
        cands.append(((pmin + dmin) * base.gpus_per_replica, pmin, dmin, r, base))
    for lb, pmin, dmin, r, base in sorted(cands, key=lambda c: (c[0], _name(c[3]))):
        best = min((x["gpus"] for x in rows if x["slo_met"]), default=None)
        if best is not None and lb >= best:
            notes.append(f"{_name(r)} pd: ≥ {pmin} prefill + {dmin} decode replicas at "
                         f"saturation ({plural(lb, 'GPU')}), not fewer than the best split's "
                         f"{best}: not simulated")
            continue
        pools = _pd_split(base, 1, 1)
        try:
            got = pd_search.find_pd(pools, rate, n, prompt, output, seed, cv, slo, tick)
        except ShapecalcError as e:
            notes.append(f"{_name(r)} pd: {e.reason}")
            continue
        rows += [_pd_row(pools, r, split) for split in got["splits"]]
        notes += [f"{_name(r)} pd: {x}" for x in got["notes"]]
    return rows, notes


def pd_fixed(dep: sim.Deployment, split: tuple[int, int], dims: list[Dimension], rate: float,
             n: int, prompt: Lengths, output: Lengths, seed: int, cv: float | None,
             slo: sim.SLO, tick: Callable[[], None] | None) -> dict[str, Any]:
    """--find-gpus with --pd P:D: every layout of the dimensions (the largest budget) at that
    split, each simulated once unless its pools' bounds cannot reach the rate."""
    reqs = generate(n, rate, prompt, output, seed, cv)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for row, base in layouts(dep, dims):
        try:
            pre, dec = bounds(base, reqs, prompt)
            pd = _pd_split(base, *split)
            eng = disagg.engines(pd)
        except ShapecalcError as e:
            notes.append(f"{_name(row)}: {e.reason}")
            continue
        np_, nd = split
        if np_ * pre < rate * prompt.mean or nd * dec < rate * output.mean:
            side, have, need = (("prefill", np_ * pre, rate * prompt.mean)
                                if np_ * pre < rate * prompt.mean
                                else ("decode", nd * dec, rate * output.mean))
            notes.append(f"{_name(row)}: the {side} pool's saturated {have:,.0f} tokens/s "
                         f"cannot reach the rate's {need:,.0f}: not simulated")
            continue
        m = disagg.metrics(pd, disagg.run(pd, reqs, eng), slo, reqs, rate)
        rows.append(_pd_row(pd, row, pd_search._row(pd, m, slo)))
        if tick is not None:
            tick()
    ok = [r for r in rows if r["slo_met"]]
    plan = min(ok, key=lambda x: (x["gpus"], x["ttft_p99_s"]), default=None)
    return {"rate": rate, "plan": plan, "plan_simulated": plan, "frontier": rows,
            "notes": notes}


def search_gpus(dep: sim.Deployment, rate: float, n: int, prompt: Lengths, output: Lengths,
                seed: int, cv: float | None, slo: sim.SLO, tps: tuple[int, ...] | None,
                pps: tuple[int, ...] | None, tick: Callable[[], None] | None,
                mbts: tuple[int, ...] | None, ep_fixed: bool, k_fixed: bool,
                split: tuple[int, int] | None) -> dict[str, Any]:
    """--find-gpus over every kind: search.find_gpus with ep and k, then the P:D dimension
    (or, with --pd P:D, that split at every layout); the plan is the fewest GPUs of all."""
    more = extra(dep, ep_fixed, k_fixed)
    if split is not None:
        return pd_fixed(dep, split, dimensions(dep, tps, pps, mbts) + more, rate, n, prompt,
                        output, seed, cv, slo, tick)
    # the splits first: their plan's GPUs bound the aggregated candidates' replicas
    pd_rows, pd_notes = pd_stage(dep, dimensions(dep, tps, pps, mbts) + more, rate, n, prompt,
                                 output, seed, cv, slo, tick)
    best = min((r["gpus"] for r in pd_rows if r["slo_met"]), default=None)
    found = find_gpus(dep, rate, n, prompt, output, seed, cv, slo, tps, pps, tick, mbts,
                      extra=more, best_gpus=best)
    agg = found["plan"]
    found["frontier"] += pd_rows
    found["notes"] += pd_notes
    ok = [r for r in found["frontier"] if r["slo_met"]]
    plan = min(ok, key=lambda x: (x["gpus"], x["ttft_p99_s"] or 0.0), default=None)
    if plan is not None and plan.get("pd"):
        found["plan"] = found["plan_simulated"] = plan  # find_pd ran both pools whole
    elif plan is not None:
        found["plan"] = agg
    _pd_fixes(found["frontier"])
    return found


def _pd_fixes(rows: list[dict[str, Any]]) -> None:
    """An aggregated row that missed, where a split of its layout met: "--pd P:D meets it"."""
    for r in rows:
        if r["slo_met"] or r.get("pd") or r.get("meets_with"):
            continue
        met = [o for o in rows if o.get("pd") and o["slo_met"]
               and all(o.get(k) == r.get(k) for k in ("tp", "pp", "ep", "spec_k"))]
        if met:
            o = min(met, key=lambda x: x["gpus"])
            r["meets_with"] = (f"--pd {o['pd']['prefill_replicas']}:"
                               f"{o['pd']['decode_replicas']} meets it")


def rate_layouts(dep: sim.Deployment, ep_fixed: bool) -> list[sim.Deployment]:
    """--find-rate's layouts: the deployment as given, and for a MoE model (no --ep) each ep of
    ep_values that fills whole attention ranks of its tp on the same GPUs (fewer replicas of
    max(tp, ep) · pp GPUs each)."""
    out = [dep]
    if ep_fixed or not dep.model.moe:
        return out
    wl, g = dep.wl, dep.gpus
    for ep in ep_values(dep)[1:]:
        per = max(wl.tp, ep) * wl.pp
        if ep == wl.ep or ep % wl.tp or g % per or wl.pp > 1:
            continue
        out.append(replace(dep, wl=wl.model_copy(update={"ep": ep}), replicas=g // per))
    return out


def search_rate(dep: sim.Deployment, n: int, prompt: Lengths, output: Lengths, seed: int,
                cv: float | None, slo: sim.SLO, tick: Callable[[], None] | None,
                k_fixed: bool, ep_fixed: bool = True) -> dict[str, Any]:
    """--find-rate over speculative k (with --draft and no --spec-k) and, for a MoE model
    without --ep, ep on the same GPUs (rate_layouts): the highest rate of any; `spec_k` is the k
    found and `by_spec_k` each k's rate at the layout found; `layout` the ep and replicas found
    and `by_layout` each layout's best rate. A layout the GPUs cannot hold is a note."""
    ks: list[int | None] = [None] if dep.spec is None or k_fixed else list(
        range(1, dep.spec.spec.k + 1))
    tried, notes, errors = [], [], []
    lays = rate_layouts(dep, ep_fixed)
    for d in lays:
        for k in ks:
            dk = d if k is None else replace(d, spec=spec_at(d.spec, k))
            try:
                got = find_rate(dk, n, prompt, output, seed, cv, slo, tick)
            except ShapecalcError as e:
                notes.append(f"ep={d.wl.ep} × {plural(d.replicas, 'replica')}: {e.reason}")
                errors.append(e)
                break
            tried.append((d, k, got))
    if not tried:  # nothing fits: the deployment as given's own refusal (its flag, its reason)
        raise errors[0]
    d, k, best = max(tried, key=lambda t: (t[2]["rate"] or 0.0, -(t[1] or 0), t[0] is dep))
    out = dict(best)
    if k is not None:
        out["spec_k"] = k
        out["by_spec_k"] = [{"spec_k": j, "rate": g["rate"]} for x, j, g in tried if x is d]
    if len(lays) > 1:
        out["layout"] = {"ep": d.wl.ep, "replicas": d.replicas}
        out["by_layout"] = [{"ep": x.wl.ep, "replicas": x.replicas,
                             "rate": max((g["rate"] or 0.0 for y, _, g in tried if y is x),
                                         default=None)} for x in lays]
        out["notes"] = notes
    return out
