"""sweep: every point of a grid over batch, seq, tp, pp, dtypes and phase, in closed form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..inputs.hardware import GPU
from ..model.config import DTYPE_BITS, make_workload
from .planning import Case, PlanOptions, _valid, closed_form_for, plan_arrays

SWEEP_KEYS = (
    "params", "flops", "elementwise_flops", "weight_bytes", "kv_cache_bytes", "kv_cache_tokens",
    "kv_cache_bytes_per_token", "kv_cache_blocks", "kv_cache_paged_bytes",
    "largest_activation_bytes", "kv_heads_per_rank", "allreduce_per_layer", "allreduce_bytes",
    "allreduce_bytes_per_layer", "allreduce_bytes_total", "ring_bytes_per_rank",
    "ring_bytes_per_rank_total", "embedding_allreduce_bytes", "logits_allgather_bytes",
    "params_per_rank", "weight_bytes_per_rank", "kv_cache_bytes_per_rank", "flops_per_rank",
    "boundary_bytes", "boundary_bytes_total",
)
SWEEP_FIT_KEYS = (
    "fits", "mem_weights", "mem_kv_cache", "mem_activations", "mem_reserve", "mem_total",
    "mem_capacity", "kv_tokens_fit", "prefill_s", "decode_s_per_token", "ttft_s", "tokens_per_s",
    "prefill_bound", "decode_bound",
)


@dataclass
class SweepAxes:
    batch: list[int]
    seq: list[int]
    tp: list[int]
    pp: list[int]
    dtype: list[str]
    kv_dtype: list[str | None]  # None: follows dtype
    phase: list[str]


@dataclass
class SweepChunk:
    """Columns of one model's rows (arrays of equal length) and the points it skipped."""

    case: str
    model: str
    columns: dict[str, np.ndarray]
    skipped: dict[str, int]

    def __len__(self) -> int:
        return int(next(iter(self.columns.values())).size) if self.columns else 0


def sweep(
    case: Case,
    axes: SweepAxes,
    fixed: dict[str, Any],
    gpu: GPU | None = None,
    opts: PlanOptions | None = None,
) -> SweepChunk:
    """All points of the grid for one case, evaluated at once. Points `check` refuses (tp not
    dividing the heads, pp > N, seq beyond a learned position table) are skipped and counted."""
    model = case.model
    fields = {**fixed, **case.workload}
    axis_names = ("batch", "seq", "tp", "pp", "dtype", "kv_dtype", "phase")
    base = make_workload({k: v for k, v in fields.items() if k not in axis_names})
    pick = {k: ([make_workload({k: fields[k]}).model_dump()[k]] if k in case.workload else v)
            for k, v in vars(axes).items()}
    skipped: dict[str, int] = {}
    one = base.model_copy(update={"seq": 1})  # seq limits are checked per point below
    tps = [p for p in pick["tp"] if _valid(model, one, tp=p)]
    pps = [s for s in pick["pp"] if s <= model.n_layers]
    n_other = (len(pick["batch"]) * len(pick["seq"]) * len(pick["dtype"])
               * len(pick["kv_dtype"]) * len(pick["phase"]))
    if len(tps) < len(pick["tp"]):
        skipped["tp"] = (len(pick["tp"]) - len(tps)) * len(pick["pp"]) * n_other
    if len(pps) < len(pick["pp"]):
        skipped["pp"] = (len(pick["pp"]) - len(pps)) * len(tps) * n_other
    cf = closed_form_for(model, base)
    dnames = list(pick["dtype"])
    knames = [k if k is not None else "=" for k in pick["kv_dtype"]]
    ph_codes = [0 if x == "prefill" else 1 for x in pick["phase"]]
    # phase and tp outermost: the closed form then evaluates each part as a slice
    grid = np.meshgrid(
        np.array(ph_codes, dtype=np.int64), np.array(tps, dtype=np.int64),
        np.array(pick["batch"], dtype=np.int64), np.array(pick["seq"], dtype=np.int64),
        np.array(pps, dtype=np.int64), np.arange(len(dnames)), np.arange(len(knames)),
        indexing="ij",
    )
    ph, P, B, T, S, di, ki = (g.ravel() for g in grid)
    if ph.size:
        lim = np.array([cf.seq_limit("prefill") or 0, cf.seq_limit("decode") or 0])[ph]
        ok = (lim == 0) | (T <= lim)
        if not ok.all():
            skipped["seq"] = int((~ok).sum())
            ph, P, B, T, S, di, ki = (x[ok] for x in (ph, P, B, T, S, di, ki))
    dbits = np.array([DTYPE_BITS[d] for d in dnames], dtype=np.int64)[di]
    kbits_tab = np.array([DTYPE_BITS[k] if k != "=" else 0 for k in knames], dtype=np.int64)[ki]
    kbits = np.where(kbits_tab == 0, dbits, kbits_tab)
    act_name = fields.get("act_dtype")
    abits = dbits if act_name is None else np.full(dbits.size, DTYPE_BITS[act_name], np.int64)
    res = cf.evaluate(B, T, ph, P, S, dbits, kbits, abits) if B.size else {}
    dname_arr = np.array(dnames, dtype=object)[di]
    kname_arr = np.where(np.array(knames, dtype=object)[ki] == "=", dname_arr,
                         np.array(knames, dtype=object)[ki])
    cols: dict[str, np.ndarray] = {
        "batch": B, "seq": T,
        "phase": np.array(["prefill", "decode"], dtype=object)[ph],
        "tp": P, "pp": S, "dtype": dname_arr, "kv_dtype": kname_arr,
        "act_dtype": dname_arr if act_name is None else np.full(B.size, act_name, dtype=object),
    }
    for k in SWEEP_KEYS:
        cols[k] = res[k] if res else np.zeros(0, dtype=np.int64)
    if gpu is not None and B.size:
        opts = opts or PlanOptions()
        cnames = cols["act_dtype"] if opts.compute_dtype is None else np.full(
            B.size, opts.compute_dtype, dtype=object)
        peak = np.full(B.size, np.nan)
        for name in np.unique(cnames.astype(str)):
            v = gpu.peak(str(name))
            peak[cnames == name] = np.nan if v is None else v
        # serving computes the logits of the last position only (unless --logits says otherwise)
        cf_fit = cf if "logits" in fields else closed_form_for(
            model, base.model_copy(update={"logits": "last"}))
        plan = plan_arrays(cf_fit, gpu, opts, B, T, P, S, dbits, kbits, abits, peak)
        for k in SWEEP_FIT_KEYS:
            cols[k] = plan[k]
        if opts.price is not None:
            cols["cost_per_million_tokens"] = plan["cost_per_million_tokens"]
    return SweepChunk(case.label, model.name, cols, skipped)
