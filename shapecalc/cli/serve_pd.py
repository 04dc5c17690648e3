"""`serve --pd P:D` and `serve --find-pd`: disaggregated prefill and decode (serve/disagg.py).

The pools: --pd P:D replicas; the decode pool takes --tp/--pp/--ep, the prefill pool
--prefill-tp/--prefill-pp (default: the same). Loaded when invoked (lazy.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..model.config import ShapecalcError


def check(pd: str | None, find_pd: bool, prefill_tp: int | None, prefill_pp: int | None, *,
          replicas: int, find_rate: bool, find_gpus: bool, concurrency: int | None,
          rate: float | None, trace: object, shared_prefix: int) -> None:
    """Refuse what does not apply to a disaggregated run (one line naming the flag)."""
    if not (pd is not None or find_pd):
        for flag, v in (("prefill-tp", prefill_tp), ("prefill-pp", prefill_pp)):
            if v is not None:
                raise ShapecalcError(flag, "sets the prefill pool's layout: give --pd P:D (or "
                                     "--find-pd)")
        return
    flag = "pd" if pd is not None else "find-pd"
    if pd is not None and find_pd:
        raise ShapecalcError("find-pd", "searches the P:D split; leave out --pd")
    if find_rate:
        raise ShapecalcError("find-rate", f"does not search a disaggregated deployment; leave "
                             f"out --find-rate (or --{flag})")
    if find_gpus and find_pd:  # --find-gpus searches the split itself (serve/search_dims.py)
        raise ShapecalcError("find-pd", "--find-gpus searches the P:D split too; leave out "
                             "--find-pd (--pd P:D fixes the split)")
    if find_gpus and (prefill_tp is not None or prefill_pp is not None):
        raise ShapecalcError("prefill-tp" if prefill_tp is not None else "prefill-pp",
                             "--find-gpus searches both pools at one layout; leave it out")
    if replicas != 1:
        raise ShapecalcError("replicas", f"--{flag} gives each pool's replicas; leave out "
                             "--replicas")
    if concurrency is not None:
        raise ShapecalcError("concurrency", f"a closed loop is not simulated with --{flag}; "
                             "give --rate")
    if shared_prefix:
        raise ShapecalcError("shared-prefix", f"prefix caching is not simulated with --{flag}; "
                             "leave out --shared-prefix")
    if find_pd and rate is None:
        raise ShapecalcError("rate", "--find-pd needs --rate")
    if find_pd and trace is not None:
        raise ShapecalcError("trace", "--find-pd draws its own workload (--prompt-tokens, "
                             "--output-tokens); a trace fixes the arrivals")


def pools(dep: Any, pd: str | None, prefill_tp: int | None, prefill_pp: int | None) -> Any:
    from ..inputs.numbers import bounded_int
    from ..model.config import check as check_layout
    from ..serve import disagg

    p, d = disagg.parse_pd(pd) if pd is not None else (1, 1)
    given = {k: bounded_int(v, f"prefill-{k}", 1, 4096) for k, v in (("tp", prefill_tp),
                                                                    ("pp", prefill_pp))
             if v is not None}
    wl = dep.wl.model_copy(update=given)
    try:  # as the decode pool's --tp/--pp are checked: against the model
        check_layout(dep.model, wl)
    except ShapecalcError as e:
        if e.field in given:
            raise ShapecalcError(f"prefill-{e.field}", e.reason) from None
        raise
    return disagg.PD(replace(dep, wl=wl, replicas=p), replace(dep, replicas=d))


def head_of(head: dict[str, Any], pd: Any) -> dict[str, Any]:
    """The head with the deployment's pools: tp/pp/ep/replicas the decode pool's, gpus both."""
    dd = pd.decode
    return {**head, "deployment": {**head["deployment"], "tp": dd.wl.tp, "pp": dd.wl.pp,
                                   "ep": dd.wl.ep, "replicas": dd.replicas, "gpus": pd.gpus,
                                   "pd": pd.doc()}}


def simulate(pd: Any, head: dict[str, Any], reqs: list[Any], target: Any,
             rate: float | None) -> dict[str, Any]:
    from ..serve import disagg, sim

    eng = disagg.engines(pd)
    res = disagg.run(pd, reqs, eng)
    d = eng[1]
    return {**head_of(head, pd), "command": "simulate",
            "kv_blocks_per_replica": d.cfg.num_blocks,
            "kv_tokens_per_replica": d.cfg.num_blocks * d.cfg.block_size,
            "kv_pool": sim.pool_doc(d), "perf_terms": d.cost.pp.as_dict(),
            **disagg.metrics(pd, res, target, reqs, rate)}


def find(pd: Any, head: dict[str, Any], rate: float, n: int, plens: Any, olens: Any,
         seed: int, cv: float | None, target: Any, tick: Any) -> dict[str, Any]:
    from ..serve import pd_search

    found = pd_search.find_pd(pd, rate, n, plens, olens, seed, cv, target, tick)
    plan = found["plan"]
    if plan is None:
        return {**head_of(head, pd), "command": "find-pd", "find_pd": found,
                "deployment_is": "as given: no explored P:D split meets the SLO"}
    best = pd_search.deployment(pd, plan)
    return {**head_of(head, best), "command": "find-pd", "find_pd": found,
            "deployment_is": "the plan --find-pd found"}
