"""`train --search --gpus N` and `--dp-overlap`: the flags' checks and the call into
shapecalc/train/search.py (thin: parse, call, render)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..model.config import ShapecalcError

SEARCHED = ("tp", "pp", "ep", "dp", "zero", "cp", "virtual_stages", "micro_batch", "grad_accum",
            "recompute")


def refuse_search_flags(search: bool, gpus: int | None, given: dict[str, Any]) -> None:
    """--gpus needs --search and the reverse; a searched dimension cannot also be fixed."""
    if gpus is None:
        raise ShapecalcError("search", "needs --gpus N: the GPUs to lay out")
    if not search:
        raise ShapecalcError("gpus", "applies to --search only (a layout's GPUs are tp·cp·pp·dp)")
    from ..inputs.numbers import bounded_int
    from ..model.record import INT_MAX

    bounded_int(gpus, "gpus", 1, INT_MAX, "GPUs")
    for key in SEARCHED:
        if given.get(key) not in (None, False):
            raise ShapecalcError(key.replace("_", "-"), "is searched by --search: leave it out")
    if given.get("train_tokens") is not None:
        raise ShapecalcError("train-tokens", "does not apply to --search (it prices a step and "
                             "a trillion tokens)")


def overlap_perf(base: Any, perf: list[str] | None, dp_overlap: str | None,
                 framework: str = "hf") -> Any:
    """The step model's terms (`base`: --perf on the framework's efficiencies), with
    --dp-overlap's share, else the framework's own policy (network.DP_OVERLAP); None without
    --gpu."""
    if base is None:
        if dp_overlap is not None:
            raise ShapecalcError("dp-overlap", "needs --gpu: it shapes the step time")
        return None
    from ..train.network import DP_OVERLAP
    from ..train.network import dp_overlap as parse_overlap

    given = any(x.partition("=")[0].strip() == "dp_overlap" for x in perf or [])
    if dp_overlap is not None:
        if given:
            raise ShapecalcError("dp-overlap", "given twice: --dp-overlap and --perf dp_overlap")
        return replace(base, dp_overlap=parse_overlap(dp_overlap)[0])
    if framework in DP_OVERLAP and not given:
        return replace(base, dp_overlap=DP_OVERLAP[framework])
    return base


def search_perf(model: Any, wl: Any, card: Any, perf: list[str] | None,
                dp_overlap: str | None, *, framework: str | None, fp8: str | None,
                fw_term: list[str] | None, compile_: bool, power_limit: str | None,
                precision: str) -> tuple[tuple[str, ...], Any, Any, str | None]:
    """The frameworks the search runs (train/search_fw.searched), their memory terms, and each
    one's step-time terms on a layout, made as `train --framework X` makes them (--perf,
    --compile, --power-limit, then --dp-overlap or the framework's policy)."""
    if card is None:
        raise ShapecalcError("search", "needs --gpu: the layouts are timed and fitted on it")
    from ..train.fp8 import check_fp8
    from ..train.fwmemory import fw_terms
    from ..train.fwoptions import run_perf_for
    from ..train.search_fw import searched

    if fp8 is not None:
        check_fp8(fp8, card)
    fws = searched(framework, fp8=fp8, compile_=compile_, fw_terms=bool(fw_term),
                   precision=precision)
    terms = fw_terms(fw_term)
    cache: dict[Any, Any] = {}

    def perf_of(name: str, w: Any, cp: int, stages: Any = None) -> Any:
        key = (name, cp, w.tp, w.ep, w.batch) if name != "hf" else name  # what the terms read
        if key not in cache:
            got = run_perf_for(card, perf, name, model, w, cp=cp, compile_=compile_,
                               power_limit=power_limit, stages=stages)
            cache[key] = overlap_perf(got[0] if got else None, perf, dp_overlap, name)
        return cache[key]

    perf_of("hf" if "hf" in fws else fws[0], wl, 1)  # a bad --perf or --power-limit: exit 2 now
    return fws, terms, perf_of, fp8


def run_search(model: Any, wl: Any, card: Any, plan: tuple[Any, ...], *, gpus: int | None,
               global_batch: int | None, precision: str, attention: str,
               price: float | None, fmt: str, output: str | None, svg: str | None,
               html: str | None) -> int:
    """Search, render, and the exit code: 0 with a layout that fits, 1 (a verdict) without."""
    if card is None:
        raise ShapecalcError("search", "needs --gpu: the layouts are timed and fitted on it")
    if gpus is None:
        raise ShapecalcError("search", "needs --gpus N: the GPUs to lay out")
    if global_batch is None:
        raise ShapecalcError("global-batch", "--search needs it: the step it times is of a "
                             "fixed global batch")
    from ..plan.options import PlanOptions
    from ..plan.price import with_default_price
    from ..plan.topology import check_nodes
    from ..render.train_search import print_search
    from ..train.memory import check_training
    from ..train.network import train_topology
    from ..train.search import Search, search_doc
    from .document import emit

    check_training(model, precision, 0, 1, 1)
    check_nodes(train_topology(card, 1.0, None), gpus, "gpus")
    opts = with_default_price(PlanOptions(price=price), card)
    frameworks, fw_terms, perf_of, fp8 = plan
    base = perf_of(frameworks[0] if "hf" not in frameworks else "hf", wl, 1)  # hf's, the links
    s = Search(model, wl, card, base, gpus=gpus, global_batch=global_batch,
               precision=precision, attention=attention, frameworks=frameworks,
               perf_of=perf_of, fw_terms=fw_terms, fp8=fp8)
    doc = search_doc(s, s.run(), opts.price, opts.price_source)
    emit(doc, fmt, output, svg, html, f"train --search: {model.name}", print_search)
    return 0 if doc["best"] else 1
