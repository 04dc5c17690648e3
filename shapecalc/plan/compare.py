"""compare: cases side by side, one column per case (and per value of an expansion axis): the
trace's totals and ledgers at each column's workload, rows derived from a prefill and a decode
step, and with a GPU the fit."""

from __future__ import annotations

import itertools
import math
from typing import Any

from ..costs.trace import build_trace
from ..inputs.hardware import GPU
from ..model.config import DTYPE_BITS, ShapecalcError, Workload, make_workload, nbytes
from ..model.defaults import default_seq
from ..model.parallel import (
    cached_tokens,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_groups,
    pp_layers,
    residual_width,
    stage_group_layers,
    stage_params,
)
from ..model.plan import layer_plan
from .cases import Case, case_fields, closed_form_for, valid
from .fit import fit
from .memory import stage_bytes
from .options import PlanOptions

# the most columns one compare shows (a table, side by side): ~5 s with --gpu at 256
MAX_COLUMNS = 256


def expand_cases(
    cases: list[Case], base: dict[str, Any], axes: dict[str, list[Any]]
) -> list[tuple[str, Case, Workload]]:
    """Each case × the product of the expansion axes, deduplicated; a case's fields as
    `case_fields` says (its @ fields, then the flags and axes, then its file's [workload])."""
    names = [k for k, v in axes.items() if v]
    columns = len(cases) * math.prod(len(axes[k]) for k in names)
    if columns > MAX_COLUMNS:  # each column is a trace (and a fit): 10⁵ of them ran for hours
        raise ShapecalcError("compare", f"{columns:,} columns, more than the {MAX_COLUMNS} a "
                             "comparison shows; use sweep for a grid")
    out: list[tuple[str, Case, Workload]] = []
    seen: set[tuple[str, Any]] = set()
    for case in cases:
        for combo in itertools.product(*(axes[k] for k in names)) or [()]:
            grid = dict(zip(names, combo, strict=True))
            fields, _ = case_fields(case, {**base, **grid})
            if fields.get("seq") is None:  # a T the model fits, for its decode rows too
                fields["seq"] = default_seq(case.model, [fields.get("phase") or "prefill",
                                                         "decode"])
            wl = make_workload(fields)
            label = case.label
            # name the values that tell the columns of one case apart
            extra = [f"{k}={v}" for k, v in grid.items()
                     if k not in case.given and len(axes[k]) > 1]
            if extra:
                label += ("," if "@" in label and "=" in label.rpartition("@")[2] else "@")
                label += ",".join(extra)
            key = (case.label, tuple(wl.model_dump().items()))
            if key in seen:
                continue
            seen.add(key)
            out.append((label, case, wl))
    return out


def compare(
    columns: list[tuple[str, Case, Workload]], gpu: GPU | None, opts: PlanOptions,
    logits_set: bool = False,
) -> list[dict[str, Any]]:
    """The `compare --json` list: per column the trace's totals and parallel sections at the
    column's workload, the compare rows derived from a prefill and a decode trace, and with a
    GPU the fit. Fit rows serve: the logits of the last position only, unless the case or the
    command (`logits_set`) says otherwise."""
    out = []
    for label, case, wl in columns:
        model = case.model
        # the prefill trace with one rank's stages: the per-stage prefill FLOPs are summed off it
        pre = build_trace(model, wl.model_copy(update={"phase": "prefill"}), per_rank=True)
        doc = pre if wl.phase == "prefill" else build_trace(model, wl)
        dec_wl = wl.model_copy(update={"phase": "decode"})
        dec = doc if wl.phase == "decode" else (
            build_trace(model, dec_wl) if valid(model, dec_wl) else None)
        tp = pre["parallel"]["tp"]
        derived: dict[str, Any] = {
            "kv_heads_per_rank": tp["kv_heads_per_rank"],
            "kv_heads_replicated": tp["kv_heads_replicated"],
            "kv_replication": max(1, wl.tp // model.kv_heads),
            "kv_cache_bytes_per_token_per_rank": kv_bytes_per_token(model, wl.kv, wl.tp,
                                                                    mla=wl.mla),
            "kv_cache_bytes_per_sequence_per_rank": kv_bytes_per_sequence(
                model, wl.kv, wl.seq, "prefill", wl.tp, wl.mla),
            "kv_cache_bytes_per_rank": tp["kv_cache_bytes_per_rank"],
            "state_cache_bytes_per_rank": tp["state_cache_bytes_per_rank"],
            # the residual stream [B,T,D] (n_hc·D wide with hyper-connections) that crosses a
            # pipeline boundary (whether or not pp>1)
            "pp_boundary_bytes_per_crossing": nbytes(wl.batch * wl.seq * residual_width(model),
                                                     wl.act),
            "prefill_flops": pre["totals"]["flops"],
            "prefill_flops_per_rank": tp["flops_per_rank"],
            "decode_flops": None,
            "decode_flops_per_token": None,
            "decode_bytes_read_per_rank": None,
            "decode_arithmetic_intensity": None,
            **stage_rows(model, wl, pre.get("rank_stages", pre["stages"])),
        }
        if dec is not None:
            dtp = dec["parallel"]["tp"]
            read = (dtp["weight_bytes_per_rank"] + dtp["kv_cache_bytes_per_rank"]
                    + dtp["state_cache_bytes_per_rank"])
            derived.update({
                "decode_flops": dec["totals"]["flops"],
                "decode_flops_per_token": dec["totals"]["flops"] / wl.batch,
                "decode_bytes_read_per_rank": read,
                "decode_arithmetic_intensity": dtp["flops_per_rank"] / read,
            })
        item: dict[str, Any] = {
            "case": label,
            "model": model.model_dump(),
            "workload": wl.model_dump(),
            "widths": doc["widths"],  # which bytes are at which width (model/deploy.py)
            "totals": doc["totals"],
            "parallel": doc["parallel"],
            "derived": derived,
        }
        if gpu is not None:
            serving = logits_set or "logits" in case.workload
            item["fit"] = fit(model, wl if serving else wl.model_copy(update={"logits": "last"}),
                              gpu, opts)
        out.append(item)
    return out


def stage_rows(model: Any, wl: Workload, rank_stages: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-rank rows of one GPU of the fullest pipeline stage (the one `fit` sizes, so that
    weights + KV cache here add up to fit's memory per rank): its weights and paged KV cache
    (memory.stage_bytes), a token's KV over the largest stage's layers (as fit), and one
    sequence's cache over the stage's layers. With pp = 1, the whole model's on one rank."""
    cf = closed_form_for(model, wl)
    pre = cf.at(wl.batch, wl.seq, "prefill", wl.tp, wl.pp, wl.dtype, wl.kv, wl.act)
    stages = stage_bytes(cf, wl.tp, wl.pp, pre, DTYPE_BITS[wl.dtype], DTYPE_BITS[wl.kv], wl.ep)
    i = max(range(len(stages)), key=lambda j: stages[j][1] + stages[j][2])  # the first fullest
    plan = layer_plan(model)
    per_group = stage_group_layers(plan, wl.pp)[i]
    seq = sum(cached_tokens(w, wl.seq, "prefill")
              * kv_bytes_per_token(model, wl.kv, wl.tp, c, wl.mla, w)
              for (w, _), c in zip(kv_groups(plan), per_group, strict=True) if c)
    return {
        "pp_stage": i,
        "stage_weight_bytes_per_rank": stages[i][1],
        "stage_kv_cache_bytes_per_rank": stages[i][2],
        "stage_kv_cache_bytes_per_token_per_rank": kv_bytes_per_token(
            model, wl.kv, wl.tp, max(pp_layers(model.n_layers, wl.pp)), wl.mla),
        "stage_kv_cache_bytes_per_sequence_per_rank": seq,
        "stage_prefill_flops_per_rank": stage_prefill_flops(model, wl, rank_stages)[i],
    }


def stage_prefill_flops(model: Any, wl: Workload, st: list[dict[str, Any]]) -> list[int]:
    """One rank's prefill matmul FLOPs on each pipeline stage, from the prefill trace's stages of
    one rank (`st`): its layers (each kind's layer once, times the layers of that kind it holds),
    the embedding group on the first stage and the head group on the last, as the parameters are
    placed (parallel.stage_params). They add up to the trace's parallel.tp.flops_per_rank."""
    plan = layer_plan(model)
    per_layer = [sum(s["flops"] for s in st if s["kind"] == k) for k in range(len(plan.kinds))]
    group = {g: sum(s["flops"] * s["repeat"] for s in st if s["group"] == g)
             for g in ("embedding", "head")}
    return stage_params(plan, wl.pp, per_layer, group["embedding"], group["head"], 0, False)
