"""`serve --find-gpus` / `--find-rate` over every deployment kind (serve/search_dims.py): which
dimensions the flags fix, and the header and `deployment` of the plan found, whatever its kind
(ep with its attention ranks, the P:D pools, speculative k). Loaded when invoked (lazy.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any


def spec_k(spec_k: int | None, draft: str | None, acceptance: str | None, searching: bool
           ) -> int | None:
    """The k the speculation is built at: --spec-k, or (searching, --draft without --spec-k)
    the most k tried: SPEC_K, or the positions --acceptance lists."""
    if spec_k is not None or draft is None or not searching:
        return spec_k
    from ..serve.search_dims import SPEC_K

    return len(acceptance.split(",")) if acceptance and "," in acceptance else SPEC_K


def find_gpus(dep: Any, head: dict[str, Any], rate: float, n: int, plens: Any, olens: Any,
              seed: int, cv: float | None, target: Any, tick: Any, *, tp: bool, pp: bool,
              mbt: int | None, ep: bool, k: bool, split: tuple[int, int] | None
              ) -> dict[str, Any]:
    """--find-gpus' document: the search, then the plan found as the header's deployment."""
    from ..serve.search_dims import search_gpus

    wl = dep.wl
    found = search_gpus(dep, rate, n, plens, olens, seed, cv, target,
                        (wl.tp,) if tp else None, (wl.pp,) if pp else None, tick,
                        (mbt,) if mbt else None, ep, k, split)
    doc = {**head, "command": "find-gpus", "find_gpus": found}
    p = found["plan"]
    if p is None:
        doc["deployment_is"] = "as given: no explored deployment meets the SLO"
        return doc
    d = {**head["deployment"], "tp": p["tp"], "pp": p["pp"], "ep": p["ep"],
         "replicas": p["replicas"], "gpus": p["gpus"],
         "attention_ranks": max(1, p["ep"] // p["tp"]),
         "max_batched_tokens": p["max_batched_tokens"]}
    if p.get("spec_k") is not None and d.get("speculative") is not None:
        d["speculative"] = plan_spec(dep, p["spec_k"])
    if p["ep"] > 1 and d.get("ep_mode") is None:  # searched ep: plan/ep.py's defaults
        d.update(ep_mode="normal", ep_imbalance=1.0)
    if p.get("pd"):  # as serve_pd.head_of: replicas the decode pool's, gpus both pools'
        pools = plan_pools(dep, p)
        d.update(replicas=pools.decode.replicas, pd=pools.doc())
    doc["deployment"] = d
    doc["deployment_is"] = "the plan --find-gpus found"
    return doc


def plan_spec(dep: Any, k: int) -> dict[str, Any]:
    from ..serve.search_dims import spec_at

    return dict(spec_at(dep.spec, k).spec.doc())


def plan_dep(dep: Any, p: dict[str, Any]) -> Any:
    """The Deployment of a frontier row (one replica)."""
    from ..serve.search_dims import layout_of

    return layout_of(dep, p)


def plan_pools(dep: Any, p: dict[str, Any]) -> Any:
    from ..serve import disagg

    base = plan_dep(dep, p)
    return disagg.PD(replace(base, replicas=p["pd"]["prefill_replicas"]),
                     replace(base, replicas=p["pd"]["decode_replicas"]))


def find_rate(dep: Any, head: dict[str, Any], n: int, plens: Any, olens: Any, seed: int,
              cv: float | None, target: Any, tick: Any, k: bool, ep: bool) -> dict[str, Any]:
    """--find-rate's document; the deployment at the k and the ep (same GPUs) it found."""
    from ..serve.search_dims import search_rate

    found = search_rate(dep, n, plens, olens, seed, cv, target, tick, k, ep)
    doc = {**head, "command": "find-rate", "find_rate": found}
    d = dict(head["deployment"])
    if "spec_k" in found:  # the k found is the deployment's
        d["speculative"] = plan_spec(dep, found["spec_k"])
    lay = found.get("layout")
    if lay is not None and lay["ep"] != d["ep"]:
        d.update(ep=lay["ep"], replicas=lay["replicas"],
                 attention_ranks=max(1, lay["ep"] // d["tp"]),
                 ep_mode=d.get("ep_mode") or "normal", ep_imbalance=d.get("ep_imbalance") or 1.0)
    if d != head["deployment"]:
        doc["deployment"] = d
        doc["deployment_is"] = "the given GPUs at the layout --find-rate found"
    return doc
