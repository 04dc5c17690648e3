"""Capacity planning: compare cases, sweep grids, fit a model on a GPU, roofline time estimates.

Exact where it counts: weights, KV cache, all-reduce and boundary bytes are the trace's integers
(through the closed form of closed.py, which a test holds equal to the stage pipeline). Honest
where it estimates: the activation workspace is an estimate (see `ACTIVATIONS`), and times are
roofline lower bounds, scaled by efficiency factors the user sets.

Conventions (also in `--help`):
- context T = `seq`: the KV cache holds T tokens per sequence, in paged blocks of `block_size`
  (vLLM's max_model_len); time to first token is the prefill of T tokens; the decode step is the
  next token with T cached (`trace --phase decode --seq T`), whose new K/V takes one more slot.
- memory per rank = weights + KV cache + activation workspace + reserve, for the pipeline stage
  that needs the most; reserve = capacity − ⌊capacity × utilization⌋ (vLLM's
  --gpu-memory-utilization, default 0.9).
- prefill time = max(FLOPs/peak, bytes/bandwidth) per rank + (ring all-reduce bytes per rank + PP
  boundary bytes) / link bandwidth; bytes = weights per rank + the KV cache written. Decode per
  token: the same with the weights and the KV cache read. Each term is divided by its efficiency.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..costs.closed import ClosedForm
from ..inputs.hardware import GPU, PEAK_DTYPES
from ..model.config import (
    DTYPE_BITS,
    ModelConfig,
    ShapecalcError,
    Workload,
    bytes_of,
    check,
    make_workload,
    nbytes,
)
from ..model.parallel import (
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_elements_per_token,
    kv_groups,
    kv_heads_per_rank,
    kv_replicated,
    pp_layers,
    stage_group_layers,
)
from ..model.plan import layer_plan

ACTIVATIONS = (
    "2 × the largest tensor one rank writes in the prefill step, the KV cache aside (its input "
    "and output live together); with FlashAttention (the default) the [B,H,T,T] scores and the "
    "GQA-repeated K/V are never materialised and are left out; the step holds all B·T prompt "
    "tokens, or with --max-batched-tokens N (chunked prefill, as vLLM profiles it) N tokens"
)
BOUNDS = ("compute", "memory", "communication")
WORKLOAD_FIELDS = tuple(Workload.field_info())


# ── options ──────────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class PlanOptions:
    utilization: float = 0.9
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    link_efficiency: float = 1.0
    price: float | None = None  # per GPU-hour
    compute_dtype: str | None = None
    attention: str = "flash"  # flash | eager: which tensors the workspace estimate counts
    max_batched_tokens: int | None = None  # a prefill step's tokens (vLLM); None: all B·T

    def __post_init__(self) -> None:
        for name in ("utilization", "compute_efficiency", "memory_efficiency", "link_efficiency"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v <= 1 and math.isfinite(v)):
                raise ShapecalcError(name.replace("_", "-"), f"must be in (0, 1], got {v}")
        if self.price is not None and not (self.price >= 0 and math.isfinite(self.price)):
            raise ShapecalcError(
                "price", f"must be a non-negative price per GPU-hour, got {self.price}"
            )
        if self.compute_dtype is not None and self.compute_dtype not in PEAK_DTYPES:
            raise ShapecalcError(
                "compute-dtype", f"{self.compute_dtype!r} is not one of {', '.join(PEAK_DTYPES)}"
            )
        if self.attention not in ("flash", "eager"):
            raise ShapecalcError("attention", f"{self.attention!r} is not one of flash, eager")
        if self.max_batched_tokens is not None and self.max_batched_tokens < 1:
            raise ShapecalcError(
                "max-batched-tokens", f"must be ≥ 1, got {self.max_batched_tokens}"
            )

    def reserve(self, capacity: int) -> int:
        """Bytes kept free: capacity − ⌊capacity × utilization⌋ (exact)."""
        return capacity - math.floor(capacity * Fraction(str(self.utilization)))


def compute_dtype(gpu: GPU, act: str, opts: PlanOptions) -> tuple[str, float | None]:
    """The dtype matmuls run in (the activation dtype unless --compute-dtype), and its peak."""
    dt = opts.compute_dtype or act
    return dt, gpu.peak(dt)


def require_peak(gpu: GPU, act: str, opts: PlanOptions) -> tuple[str, float]:
    dt, peak = compute_dtype(gpu, act, opts)
    if peak is None:
        have = ", ".join(d for d in PEAK_DTYPES if gpu.peak(d) is not None)
        raise ShapecalcError(
            "compute-dtype",
            f"{gpu.name} has no {dt} peak FLOP/s (it has {have}); pass --compute-dtype to estimate "
            f"with another (e.g. bf16, as weight-only {dt} kernels compute), or --set-gpu "
            f"peak_flops.{dt}=…",
        )
    return dt, peak


# ── grids and cases ──────────────────────────────────────────────────────────────────────────────

MAX_AXIS = 10_000_000


def parse_int_grid(text: str, field: str) -> list[int]:
    """`1..256x2` (×2 from 1 to 256), `1..64+8` (steps of 8), `1..8` (every integer),
    `512,2048,8192`, and mixtures (`1,2,64..256x2`). Order kept, duplicates dropped."""
    out: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            raise ShapecalcError(field, f"empty item in {text!r}")
        if ".." not in part:
            out.append(_pos_int(part, field, text))
            continue
        a, _, rest = part.partition("..")
        mult = step = None
        if "x" in rest:
            rest, _, f = rest.partition("x")
            mult = _pos_int(f, field, text)
            if mult < 2:
                raise ShapecalcError(field, f"factor x{mult} in {part!r} must be ≥ 2")
        elif "+" in rest:
            rest, _, st = rest.partition("+")
            step = _pos_int(st, field, text)
        lo, hi = _pos_int(a, field, text), _pos_int(rest, field, text)
        if hi < lo:
            raise ShapecalcError(field, f"empty range {part!r}: {hi} < {lo}")
        if mult:
            x = lo
            while x <= hi:
                out.append(x)
                x *= mult
        else:
            step = step or 1
            if (hi - lo) // step + 1 > MAX_AXIS:
                raise ShapecalcError(field, f"{part!r} has more than {MAX_AXIS:,} values")
            out.extend(range(lo, hi + 1, step))
    seen: set[int] = set()
    return [x for x in out if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


def _pos_int(s: str, field: str, whole: str) -> int:
    s = s.strip().replace("_", "")
    try:
        v = int(s)
    except ValueError:
        raise ShapecalcError(field, f"{s!r} in {whole!r} is not an integer") from None
    if v < 1:
        raise ShapecalcError(field, f"{v} in {whole!r} must be ≥ 1")
    return v


def parse_str_grid(text: str, field: str, allowed: Iterable[str]) -> list[str]:
    allowed = list(allowed)
    out: list[str] = []
    for part in (p.strip() for p in str(text).split(",")):
        if part not in allowed:
            raise ShapecalcError(field, f"{part!r} is not one of {', '.join(allowed)}")
        if part not in out:
            out.append(part)
    return out


@dataclass
class Case:
    label: str
    model: ModelConfig
    workload: dict[str, Any] = field(default_factory=dict)  # fields the case fixes


def parse_case(text: str, presets_dir: list[Path] | None = None) -> Case:
    """`NAME[@field=value,…]`: NAME a preset, a .toml/.json config or an HF config.json;
    workload fields set the workload, model fields go through the same path as --set."""
    from ..inputs import sources
    from ..inputs.hf import load_hf_config

    src, at, spec = text.rpartition("@")
    if not at or (Path(text).exists() and "=" not in spec):  # a file whose name has an @
        src, spec = text, ""
    elif not spec.strip():
        raise ShapecalcError("case", f"{text!r}: expected field=value after @")
    if not src.strip():
        raise ShapecalcError("case", f"{text!r}: expected NAME[@field=value,…]")
    src = src.strip()
    path = Path(src)
    looks_like_file = path.suffix.lower() in (".toml", ".json") or "/" in src or path.is_dir()
    workload: dict[str, Any] = {}
    if looks_like_file:
        if not path.exists():
            raise ShapecalcError("case", f"{text!r}: file not found: {src}")
        if _is_hf(path):
            model = load_hf_config(path)
        else:
            model, workload = sources.load_config_file(path)
    else:
        model = sources.load_preset(src, presets_dir)
    sets: list[str] = []
    for item in (s.strip() for s in spec.split(",")) if spec else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key or not value.strip():
            raise ShapecalcError("case", f"{text!r}: expected field=value, got {item!r}")
        if key in WORKLOAD_FIELDS:
            workload[key] = value.strip()
        elif key in ModelConfig.field_info():
            sets.append(f"{key}={value.strip()}")
        else:
            raise ShapecalcError("case", f"{text!r}: unknown field {key!r}")
    if sets:
        model = sources.apply_overrides(model, sets)
    return Case(text, model, workload)


def _is_hf(path: Path) -> bool:
    if path.is_dir():
        return True
    if path.suffix.lower() != ".json":
        return False
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # load_config_file says what is wrong with it
    return isinstance(data, dict) and "model_type" in data


# ── the vectorised core: memory and time per point ───────────────────────────────────────────────


def plan_arrays(
    cf: ClosedForm,
    gpu: GPU,
    opts: PlanOptions,
    B: np.ndarray,
    T: np.ndarray,
    P: np.ndarray,
    S: np.ndarray,
    wbits: np.ndarray,
    kvbits: np.ndarray,
    actbits: np.ndarray,
    peak: np.ndarray,
    times: bool = True,
) -> dict[str, np.ndarray]:
    """Memory per rank (exact integers), and roofline times (floats; NaN where the GPU has no
    peak for the compute dtype or decode at T is outside the model's positions) at each point."""
    m = cf.model
    n = B.size
    pre = cf.evaluate(B, T, 0, P, S, wbits, kvbits, actbits)
    dtype = pre["params"].dtype
    cap = gpu.memory_bytes
    reserve = opts.reserve(cap)
    usable = cap - reserve
    key = f"workspace_{opts.attention}_bytes_per_rank"
    if opts.max_batched_tokens is None:
        ws = pre[key]
    else:  # chunked prefill: a step of at most N tokens, sized as one sequence of that length
        tokens = np.minimum(B * T, opts.max_batched_tokens)
        limit = cf.seq_limit("prefill")
        if limit is not None:
            tokens = np.minimum(tokens, limit)
        ws = cf.evaluate(np.ones_like(B), tokens, 0, P, S, wbits, kvbits, actbits)[key]
        ws = ws.astype(pre["params"].dtype)
    act = 2 * ws
    weights = np.zeros(n, dtype=dtype)
    kv = np.zeros(n, dtype=dtype)
    stage = np.zeros(n, dtype=np.int64)
    tokens_fit = np.zeros(n, dtype=dtype)
    bs = cf.block_size
    plan = layer_plan(m)
    groups = kv_groups(plan)
    pairs = np.unique(np.stack([P.astype(np.int64), S.astype(np.int64)]), axis=1)
    for p, s in pairs.T:
        p, s = int(p), int(s)
        sel = np.flatnonzero((P == p) & (S == s))
        # one token, one layer, one rank
        tok_layer = bytes_of(kv_elements_per_token(m, p, layers=1), kvbits[sel])
        # paged token slots of the batch in each KV group (layers that share a window)
        slots = [pre[f"kv_cache_blocks@{g}"][sel] * bs for g in range(len(groups))]
        best = None
        fit_tokens = None
        for i, (k, per_group, sp) in enumerate(zip(
                pp_layers(m.n_layers, s), stage_group_layers(plan, s), cf.stage_params(p, s),
                strict=True)):
            w_i = bytes_of(sp, wbits[sel])
            kv_i = sum(slots[g] * c * tok_layer for g, c in enumerate(per_group) if c)
            tot = w_i + kv_i
            if best is None:
                best, bw, bkv, bst = tot, w_i, kv_i, np.zeros(sel.size, dtype=np.int64)
            else:
                more = tot > best
                best = np.where(more, tot, best)
                bw, bkv = np.where(more, w_i, bw), np.where(more, kv_i, bkv)
                bst = np.where(more, i, bst)
            free = usable - w_i - act[sel]
            free = np.where(free > 0, free, 0)
            t_i = free // (bs * k * tok_layer) * bs
            fit_tokens = t_i if fit_tokens is None else np.minimum(fit_tokens, t_i)
        weights[sel], kv[sel], stage[sel], tokens_fit[sel] = bw, bkv, bst, fit_tokens
    total = weights + kv + act + reserve
    out: dict[str, np.ndarray] = {
        "fits": total <= cap,
        "mem_weights": weights,
        "mem_kv_cache": kv,
        "mem_activations": act,
        "mem_reserve": np.full(n, reserve, dtype=dtype),
        "mem_total": total,
        "mem_capacity": np.full(n, cap, dtype=dtype),
        "pp_stage": stage,
        "kv_tokens_fit": tokens_fit,
    }
    if not times:
        return out
    f = _f64
    bw_ = gpu.hbm_bandwidth * opts.memory_efficiency
    link = gpu.link_bandwidth * opts.link_efficiency
    comp = peak * opts.compute_efficiency
    pc = f(pre["flops_per_rank"]) / comp
    pm = f(pre["weight_bytes_per_rank"] + pre["kv_cache_bytes_per_rank"]) / bw_
    pl = f(pre["ring_bytes_per_rank_total"] + pre["boundary_bytes_total"]) / link
    dc = np.full(n, np.nan)
    dm = np.full(n, np.nan)
    dl = np.full(n, np.nan)
    limit = cf.seq_limit("decode")
    ok = np.ones(n, dtype=bool) if limit is None else (T <= limit)
    if ok.any():
        idx = np.flatnonzero(ok)
        dec = cf.evaluate(B[idx], T[idx], 1, P[idx], S[idx], wbits[idx], kvbits[idx], actbits[idx])
        dc[idx] = f(dec["flops_per_rank"]) / comp[idx]
        dm[idx] = f(dec["weight_bytes_per_rank"] + dec["kv_cache_bytes_per_rank"]) / bw_
        dl[idx] = f(dec["ring_bytes_per_rank_total"] + dec["boundary_bytes_total"]) / link
    prefill_s = np.maximum(pc, pm) + pl
    decode_s = np.maximum(dc, dm) + dl
    out.update({
        "prefill_compute_s": pc, "prefill_memory_s": pm, "prefill_comm_s": pl,
        "decode_compute_s": dc, "decode_memory_s": dm, "decode_comm_s": dl,
        "prefill_s": prefill_s,
        "decode_s_per_token": decode_s,
        "ttft_s": prefill_s,
        "tokens_per_s": f(B) / decode_s,
        "prefill_tokens_per_s": f(B) * f(T) / prefill_s,
        "prefill_bound": _bound(pc, pm, pl),
        "decode_bound": _bound(dc, dm, dl),
    })
    if opts.price is not None:
        gpus = f(P) * f(S)
        out["cost_per_million_tokens"] = opts.price * gpus / 3600.0 * decode_s / f(B) * 1e6
    return out


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64) if a.dtype != object else a.astype(np.float64)


def _bound(c: np.ndarray, m: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """Which term is largest: the phase is compute-, memory- or communication-bound."""
    stack = np.stack([c, m, comm])
    idx = np.argmax(np.nan_to_num(stack, nan=-1.0), axis=0)
    out = np.array(BOUNDS, dtype=object)[idx]
    out[np.isnan(c)] = None
    return out


# ── fit: one model on one GPU ────────────────────────────────────────────────────────────────────


def closed_form_for(model: ModelConfig, wl: Workload) -> ClosedForm:
    """The closed form of a model under a workload's switches; kept, so that its fits are made
    once per process (a planner's loop calls sweep and fit many times)."""
    return _closed_form(model, wl.logits, wl.attention_flops, wl.padding_mask, wl.block_size)


@lru_cache(maxsize=64)
def _closed_form(model: ModelConfig, logits: str, attention_flops: str, padding_mask: bool,
                 block_size: int) -> ClosedForm:
    return ClosedForm(model, logits=logits, attention_flops=attention_flops,
                      padding_mask=padding_mask, block_size=block_size)


def _point(
    cf: ClosedForm, gpu: GPU, opts: PlanOptions, wl: Workload, peak: float,
    B: Any = None, T: Any = None, P: Any = None, S: Any = None, times: bool = False,
) -> dict[str, np.ndarray]:
    arrs = np.broadcast_arrays(
        np.asarray(wl.batch if B is None else B, dtype=object),
        np.asarray(wl.seq if T is None else T, dtype=object),
        np.asarray(wl.tp if P is None else P, dtype=object),
        np.asarray(wl.pp if S is None else S, dtype=object),
    )
    b, t, p, s = (np.ravel(a) for a in arrs)
    # ints beyond int64 stay Python ints (the closed form then evaluates in object mode)
    b, t, p, s = (x.astype(np.int64) if max(x, default=0) < 2**62 else x for x in (b, t, p, s))
    n = b.size
    bits = {k: np.full(n, DTYPE_BITS[v], dtype=np.int64)
            for k, v in (("w", wl.dtype), ("kv", wl.kv), ("act", wl.act))}
    return plan_arrays(cf, gpu, opts, b, t, p, s, bits["w"], bits["kv"], bits["act"],
                       np.full(n, peak), times=times)


def _largest_ok(ok: Callable[[list[int]], list[bool]], lo: int, hi: int) -> int:
    """The largest x in [lo, hi] with ok(x), for ok true up to some point then false; lo − 1 if
    none. Probes up to 64 points a round, so a range of 2⁴⁸ takes 8 rounds."""
    if not ok([lo])[0]:
        return lo - 1
    good, bad = lo, hi + 1
    while bad - good > 1:
        span = bad - good - 1
        k = min(64, span)
        pts = sorted({good + 1 + (span * i) // k for i in range(k)} | {bad - 1})
        res = ok(pts)
        for x, r in zip(pts, res, strict=True):
            if r:
                good = max(good, x)
            else:
                bad = min(bad, x)
                break
    return good


SEARCH_MAX = 2**48


def fit(model: ModelConfig, wl: Workload, gpu: GPU, opts: PlanOptions) -> dict[str, Any]:
    """The `fit --json` document (a contract: see plan_schemas.FitOut)."""
    check(model, wl)
    cf = closed_form_for(model, wl)
    cdt, peak = require_peak(gpu, wl.act, opts)
    r = _point(cf, gpu, opts, wl, peak, times=True)

    def one(key: str) -> Any:
        v = r[key][0]
        if isinstance(v, (np.floating, float)):
            return None if math.isnan(v) else float(v)
        if isinstance(v, (np.bool_, bool)):
            return bool(v)
        return v if v is None or isinstance(v, str) else int(v)

    def fits_at(key: str) -> Callable[[list[int]], list[bool]]:
        def ok(xs: list[int]) -> list[bool]:
            r = (_point(cf, gpu, opts, wl, peak, B=xs) if key == "B"
                 else _point(cf, gpu, opts, wl, peak, T=xs))
            return [bool(x) for x in r["fits"]]

        return ok

    max_batch = _largest_ok(fits_at("B"), 1, SEARCH_MAX)
    limit = cf.seq_limit("prefill")
    cap_pos = model.max_positions
    hi = min(x for x in (limit, cap_pos, SEARCH_MAX) if x is not None)
    max_seq = _largest_ok(fits_at("T"), 1, hi)
    # memory alone, beyond the model's positions (rope models can be stretched)
    max_seq_memory = max_seq
    if cap_pos is not None and max_seq == hi and limit is None:
        max_seq_memory = _largest_ok(fits_at("T"), hi, SEARCH_MAX)
    min_tp = _smallest(
        [p for p in range(1, model.n_heads + 1) if _valid(model, wl, tp=p)],
        lambda p: bool(_point(cf, gpu, opts, wl, peak, P=[p])["fits"][0]),
    )
    min_pp = _smallest(
        [s for s in range(1, model.n_layers + 1) if _valid(model, wl, pp=s)],
        lambda s: bool(_point(cf, gpu, opts, wl, peak, S=[s])["fits"][0]),
    )
    times = {
        "prefill_s": one("prefill_s"),
        "decode_s_per_token": one("decode_s_per_token"),
        "ttft_s": one("ttft_s"),
        "itl_s": one("decode_s_per_token"),
        "tokens_per_s": one("tokens_per_s"),
        "prefill_tokens_per_s": one("prefill_tokens_per_s"),
        "prefill_bound": one("prefill_bound"),
        "decode_bound": one("decode_bound"),
        "prefill_compute_s": one("prefill_compute_s"),
        "prefill_memory_s": one("prefill_memory_s"),
        "prefill_comm_s": one("prefill_comm_s"),
        "decode_compute_s": one("decode_compute_s"),
        "decode_memory_s": one("decode_memory_s"),
        "decode_comm_s": one("decode_comm_s"),
    }
    notes = []
    if times["decode_s_per_token"] is None:
        notes.append(f"no decode estimate: a step with {wl.seq} cached tokens needs position "
                     f"{wl.seq + 1} > max_positions={model.max_positions}")
    if wl.tp > 8:
        notes.append("tp > 8 spans more than one 8-GPU node: the link bandwidth is optimistic")
    if cap_pos is not None and max_seq_memory > max_seq:
        notes.append(f"max_seq is capped at the model's max_positions={cap_pos}; "
                     f"memory alone would allow {max_seq_memory:,}")
    doc: dict[str, Any] = {
        "model": model.name,
        "gpu": gpu.name,
        "workload": wl.model_dump(),
        "fits": one("fits"),
        "memory_per_rank": {
            "weights": one("mem_weights"),
            "kv_cache": one("mem_kv_cache"),
            "activations": one("mem_activations"),
            "reserve": one("mem_reserve"),
            "total": one("mem_total"),
            "capacity": one("mem_capacity"),
        },
        "pp_stage": one("pp_stage"),
        "kv_heads_per_rank": kv_heads_per_rank(model, wl.tp),
        "kv_heads_replicated": kv_replicated(model, wl.tp),
        "kv_cache_bytes_per_token_per_rank": kv_bytes_per_token(
            model, wl.kv, wl.tp, layers=max(pp_layers(model.n_layers, wl.pp))),
        "kv_tokens_fit": one("kv_tokens_fit"),
        "max_batch": max_batch,
        "max_seq": max_seq,
        "max_seq_memory": max_seq_memory,
        "min_tp": min_tp,
        "min_pp": min_pp,
        "gpus": wl.tp * wl.pp,
        "times": times,
    }
    if opts.price is not None:
        doc["cost_per_million_tokens"] = one("cost_per_million_tokens")
        doc["price_per_gpu_hour"] = opts.price
    doc["assumptions"] = {
        "lower_bound": True,
        "utilization": opts.utilization,
        "compute_efficiency": opts.compute_efficiency,
        "memory_efficiency": opts.memory_efficiency,
        "link_efficiency": opts.link_efficiency,
        "compute_dtype": cdt,
        "peak_flops": peak,
        "hbm_bandwidth": gpu.hbm_bandwidth,
        "link_bandwidth": gpu.link_bandwidth,
        "attention": opts.attention,
        "max_batched_tokens": opts.max_batched_tokens,
        "activations": ACTIVATIONS,
        "kv_cache": f"paged: B × ⌈T/{wl.block_size}⌉ blocks of {wl.block_size} tokens",
    }
    doc["notes"] = notes
    return doc


def _valid(model: ModelConfig, wl: Workload, **change: int) -> bool:
    try:
        check(model, wl.model_copy(update=change))
    except ShapecalcError:
        return False
    return True


def _smallest(cands: list[int], ok: Callable[[int], bool]) -> int | None:
    for c in cands:
        if ok(c):
            return c
    return None


# ── compare: one column per case ─────────────────────────────────────────────────────────────────


def expand_cases(
    cases: list[Case], base: dict[str, Any], axes: dict[str, list[Any]]
) -> list[tuple[str, Case, Workload]]:
    """Each case × the product of the expansion axes (a case's own fields win), deduplicated."""
    import itertools

    names = [k for k, v in axes.items() if v]
    out: list[tuple[str, Case, Workload]] = []
    seen: set[tuple[str, Any]] = set()
    for case in cases:
        for combo in itertools.product(*(axes[k] for k in names)) or [()]:
            grid = dict(zip(names, combo, strict=True))
            fields = {**base, **grid, **case.workload}
            wl = make_workload(fields)
            label = case.label
            # name the values that tell the columns of one case apart
            extra = [f"{k}={v}" for k, v in grid.items()
                     if k not in case.workload and len(axes[k]) > 1]
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
    columns: list[tuple[str, Case, Workload]], gpu: GPU | None, opts: PlanOptions
) -> list[dict[str, Any]]:
    """The `compare --json` list: per column the trace's totals and parallel sections at the
    column's workload, the compare rows derived from a prefill and a decode trace, and the fit."""
    from ..costs.trace import build_trace

    out = []
    for label, case, wl in columns:
        model = case.model
        doc = build_trace(model, wl)
        pre = doc if wl.phase == "prefill" else build_trace(
            model, wl.model_copy(update={"phase": "prefill"}))
        dec_wl = wl.model_copy(update={"phase": "decode"})
        dec = doc if wl.phase == "decode" else (
            build_trace(model, dec_wl) if _valid(model, dec_wl) else None)
        tp = pre["parallel"]["tp"]
        derived: dict[str, Any] = {
            "kv_heads_per_rank": tp["kv_heads_per_rank"],
            "kv_heads_replicated": tp["kv_heads_replicated"],
            "kv_replication": max(1, wl.tp // model.kv_heads),
            "kv_cache_bytes_per_token_per_rank": kv_bytes_per_token(model, wl.kv, wl.tp),
            "kv_cache_bytes_per_sequence_per_rank": kv_bytes_per_sequence(
                model, wl.kv, wl.seq, "prefill", wl.tp),
            "kv_cache_bytes_per_rank": tp["kv_cache_bytes_per_rank"],
            # the residual stream [B,T,D] that crosses a pipeline boundary (whether or not pp>1)
            "pp_boundary_bytes_per_crossing": nbytes(wl.batch * wl.seq * model.d_model, wl.act),
            "prefill_flops": pre["totals"]["flops"],
            "prefill_flops_per_rank": tp["flops_per_rank"],
            "decode_flops": None,
            "decode_flops_per_token": None,
            "decode_bytes_read_per_rank": None,
            "decode_arithmetic_intensity": None,
        }
        if dec is not None:
            dtp = dec["parallel"]["tp"]
            read = dtp["weight_bytes_per_rank"] + dtp["kv_cache_bytes_per_rank"]
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
            "totals": doc["totals"],
            "parallel": doc["parallel"],
            "derived": derived,
        }
        if gpu is not None:
            item["fit"] = fit(model, wl, gpu, opts)
        out.append(item)
    return out
