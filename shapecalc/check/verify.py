"""`verify`: run the model in NumPy and check every symbolic number against the measured one.

Checks compare the numeric stage list with the symbolic one stage by stage (names, shapes, FLOPs,
elementwise FLOPs, params, bytes), the totals and the TP/PP ledger of the trace, and behaviour the
symbolic side can only claim: decode from a KV cache equals the full forward, a paged cache equals
a contiguous one, p ranks equal one, masks hide what they must. Real presets run at their real
widths with K of N layers (at least one of each kind in the layer plan); layers of one kind are
alike, so per-layer numbers are measured on the layers run and each kind's totals extrapolated
×count/run.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from ..costs.trace import build_trace
from ..interpret import symbolic
from ..interpret.caches import ContiguousKV, PagedKV
from ..interpret.numeric import PRECISIONS, Step, step, windows
from ..interpret.weights import Weights
from ..model.config import ModelConfig, ShapecalcError, Workload, check
from ..model.parallel import distinct_experts
from ..model.plan import LayerPlan, layer_plan
from ..model.stage import Stage
from .budget import CHUNK, default_budget, plan_layers
from .mixers import pads_skipped, state_checks
from .mtp import mtp_checks

FIELDS = {"FLOPs": "flops", "elementwise FLOPs": "elementwise_flops", "params": "params",
          "bytes": "bytes"}
TOL = {"float64": 1e-9, "float32": 2e-4, "float16": 3e-2}
# A K or V value within rounding noise of a KV-dtype rounding boundary can round either way in
# two runs that order their sums differently (p ranks vs one, a padded batch vs one sequence):
# one step of the KV dtype, which the comparison must allow.
KV_TOL = {"fp32": 0.0, "fp16": 1e-3, "bf16": 8e-3, "int8": 3e-2, "fp8": 3e-2, "int4": 0.1}
Progress = Callable[[str, int, int], None]  # (what runs now, steps done, steps in all)


class Steps:
    """verify's progress in units of real work: each forward run of the model is its embedding,
    K layers and its head, K + 1 steps (the embedding's ends at layer 0, the last layer's with
    the head); `report(label, k, n)` says k of the n steps are done (n: every run verify makes,
    counted up front by `runs_planned`), at each layer and at each run's end."""

    def __init__(self, report: Progress | None, runs: int, layers: int) -> None:
        self.report, self.per_run, self.n, self.k = report, layers + 1, runs * (layers + 1), 0

    def start(self, label: str) -> Callable[[int, int], None] | None:
        if self.report is None:
            return None
        report, base, n = self.report, self.k, self.n
        report(label, min(base, n), n)
        # at layer i: the embedding and layers 0..i-1 are done
        return lambda i, _k: report(label, min(base + 1 + i, n), n)

    def finish(self, label: str) -> None:
        self.k += self.per_run
        if self.report is not None:
            self.report(label, min(self.k, self.n), self.n)


def runs_planned(can_decode: bool, p: int, ep: int, T: int) -> int:
    """The forward runs verify() makes, in its order: prefill (and decode) on a contiguous
    cache at p=1, an ep=1 reference (ep > 1), the same on a paged cache, at p ranks (p > 1),
    the full forward over T+1 tokens, the causal check, and the padding check's three runs."""
    d = int(can_decode)
    return ((1 + d) * (3 if p > 1 else 2) + (ep > 1) + d + (T + d >= 2) + 3 * (T >= 2))


# -- comparing ------------------------------------------------------------------------------------
def _expand(sym: list[Stage], k: int, plan: LayerPlan | None = None) -> list[Stage]:
    """The symbolic list as the executor runs it: for each of the first K layers, the block
    recorded (×count) for that layer's kind (no plan: every layer of kind 0), then the MTP
    modules' stages once per module (the executor runs each)."""
    kind_of = plan.kind_of if plan is not None else (0,) * k
    blocks: dict[int | None, list[Stage]] = {}
    for s in sym:
        if s.group == "block":
            blocks.setdefault(s.kind, []).append(s)
    emb = [s for s in sym if s.group == "embedding"]
    run = [s for layer in range(k) for s in blocks[kind_of[layer]]]
    mtp = [s for s in sym if s.group == "mtp"]
    mtp = [s for _ in range(mtp[0].repeat) for s in mtp] if mtp else []
    return emb + run + mtp + [s for s in sym if s.group == "head"]


def _where(s: Stage) -> str:
    layer = s.extra.get("layer", -1)
    return f"{s.name!r}" + (f" (layer {layer})" if layer >= 0 else "")


def compare_stages(num: list[Stage], sym: list[Stage], plan: LayerPlan, k: int, label: str
                   ) -> list[dict]:
    exp = _expand(sym, k, plan)
    checks = []
    same = [a.role == b.role and a.kind == b.kind and a.name == b.name and a.op == b.op
            and a.group == b.group and a.shape == b.shape and a.operands == b.operands
            for a, b in zip(num, exp, strict=False)]
    bad = next((i for i, ok in enumerate(same) if not ok), None)
    c = _check(f"stage names and shapes ({label})", len(exp), sum(same),
               len(num) == len(exp) and bad is None)
    if bad is not None:
        c["detail"] = (f"stage {bad}: symbolic {exp[bad].name!r} {exp[bad].shape}, "
                       f"measured {num[bad].name!r} {num[bad].shape}")
    elif len(num) != len(exp):
        c["detail"] = f"{len(exp)} symbolic stages, {len(num)} measured"
    checks.append(c)
    for title, f in FIELDS.items():
        pairs = [(getattr(b, f), getattr(a, f)) for a, b in zip(num, exp, strict=False)]
        wrong = [(i, s, m) for i, (s, m) in enumerate(pairs) if s != m]
        c = _check(f"stage {title} ({label})", sum(s for s, _ in pairs),
                   sum(m for _, m in pairs), not wrong and len(num) == len(exp))
        if wrong:
            i, s, m = wrong[0]
            c["detail"] = f"{_where(num[i])}: symbolic {s}, measured {m}"
        checks.append(c)
    checks.append(_scale_factors(num, exp, label))
    return checks


def _scale_factors(num: list[Stage], exp: list[Stage], label: str) -> dict:
    """Each scale stage's factor (the score scale 1/√Dh or 1/√s, √D, …) against the one measured
    on the arrays (after / before, to rounding)."""
    pairs: list[tuple[Any, float, Stage]] = [
        (b.extra.get("factor"), a.extra["factor"], a) for a, b in zip(num, exp, strict=False)
        if a.op == "scale" and a.extra.get("factor") is not None]
    wrong = [(s, m, a) for s, m, a in pairs
             if s is None or abs(s - m) > 2e-3 * max(abs(s), abs(m))]
    c = _check(f"stage scale factors ({label})", len(pairs), len(pairs) - len(wrong), not wrong)
    if wrong:
        s, m, a = wrong[0]
        c["detail"] = f"{_where(a)}: symbolic {s}, measured {m}"
    return c


def _check(name: str, symbolic: Any, measured: Any, ok: bool | None = None) -> dict:
    return {"name": name, "symbolic": symbolic, "measured": measured,
            "ok": bool(symbolic == measured if ok is None else ok)}


def _close(name: str, a: np.ndarray, b: np.ndarray, tol: float) -> dict:
    """Equal up to rounding: max |a − b| against tol × max |b| (relative to the output's size:
    small seeded weights give small logits)."""
    diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
    scale = max(1e-12, float(np.max(np.abs(b)))) if b.size else 1.0
    finite = bool(np.isfinite(a).all() and np.isfinite(b).all())
    return {"name": name, "symbolic": 0.0, "measured": diff, "tolerance": tol * scale,
            "ok": finite and diff <= tol * scale}


def _exact(x: Fraction) -> int | float:
    return int(x) if x.denominator == 1 else float(x)


def _kind_total(values: list[int], plan: LayerPlan) -> Fraction:
    """Per-layer values of the K layers run, standing for all N: the layers of each kind run
    stand for all layers of that kind."""
    total = Fraction(0)
    for kind, count in enumerate(plan.counts):
        ran = [v for i, v in enumerate(values) if plan.kind_of[i] == kind]
        total += Fraction(sum(ran) * count, len(ran))
    return total


def _by_kind(values: list[int], plan: LayerPlan) -> int | float:
    return _exact(_kind_total(values, plan))


def _extrapolate(stages: list[Stage], f: str, plan: LayerPlan, k: int) -> int | float:
    """Σ over stages, with the K layers run standing for all N."""
    outside = sum(getattr(s, f) for s in stages if s.group not in ("block", "mtp"))
    per_layer = [0] * k
    for s in stages:
        if s.group == "block":
            per_layer[s.extra["layer"]] += getattr(s, f)
    return _exact(outside + _kind_total(per_layer, plan))


# -- the run --------------------------------------------------------------------------------------
def verify(model: ModelConfig, wl: Workload, *, layers: int | None = None,
           precision: str = "float32", seed: int = 0, budget: int | None = None,
           progress: Progress | None = None, weights: str = "auto") -> dict[str, Any]:
    """Every check of one model and workload (see the module doc). `weights`: auto (resident
    when they fit the budget, else streamed), resident, or streamed."""
    check(model, wl)
    if wl.ep > 1 and wl.tp > 1:
        raise ShapecalcError("ep", "verify simulates expert parallelism with tp=1 (attention in "
                             "ep data-parallel replicas); give --tp 1, or check tp and ep apart")
    budget = default_budget() if budget is None else budget
    plan = layer_plan(model)
    n_mtp = model.mtp_layers if wl.mtp else 0  # MTP layers the executor writes after the K
    K, need, resident = plan_layers(model, wl, layers, precision, budget, weights,
                                    least=plan.covering())
    N, p, B, T = model.n_layers, wl.tp, wl.batch, wl.seq
    dt = PRECISIONS[precision]
    tol = TOL[precision] + KV_TOL[wl.kv]
    w = Weights(model, seed, dt, p=p, resident=resident, chunk_bytes=CHUNK)
    rng = np.random.default_rng(seed + 1)
    ids = rng.integers(0, model.vocab_size, (B, T + 1))
    pre = wl.model_copy(update={"phase": "prefill"})
    dec = wl.model_copy(update={"phase": "decode"})
    can_decode = not (model.positions == "learned" and model.max_positions is not None
                      and T + 1 > model.max_positions)
    win = windows(model)
    steps = Steps(progress, runs_planned(can_decode, p, wl.ep, T), K)

    def run(label: str, wl_: Workload, ids_: np.ndarray, p_: int, cache: Any = None,
            valid: np.ndarray | None = None) -> Step:
        out = step(model, wl_, w, ids_, p=p_, cache=cache, layers=K, valid=valid,
                   on_layer=steps.start(label))
        steps.finish(label)
        return out

    def contiguous() -> ContiguousKV:
        return ContiguousKV(wl.kv, win, dt)

    def both(p_: int, cache: Any, tag: str) -> tuple[Step, Step | None]:
        a = run(f"prefill, p={p_}{tag}", pre, ids[:, :T], p_, cache)
        b = run(f"decode, p={p_}{tag}", dec, ids[:, T:], p_, cache) if can_decode else None
        return a, b

    checks: list[dict] = []
    doc = build_trace(model, wl)
    totals, tp_led, pp_led = doc["totals"], doc["parallel"]["tp"], doc["parallel"]["pp"]
    phase = wl.phase
    if phase == "decode" and not can_decode:  # check() refuses this already
        raise ShapecalcError("seq", "decode needs T+1 positions")

    # 1. one rank (p = 1): every stage, the totals, the KV cache, the pipeline hand-off
    a_pre, a_dec = both(1, contiguous(), "")
    main = a_dec if phase == "decode" else a_pre
    assert main is not None
    if phase == "decode":
        checks += compare_stages(a_pre.stages, symbolic.stages(model, pre, 1), plan, K,
                                 "prefill, p=1")
    checks += compare_stages(main.stages, symbolic.stages(model, wl, 1), plan, K,
                             f"{phase}, p=1")
    for key, f in (("params", "params"), ("flops", "flops"),
                   ("elementwise_flops", "elementwise_flops")):
        checks.append(_check(f"total {key.replace('_', ' ')}", totals[key],
                             _extrapolate(main.stages, f, plan, K)))
    checks.append(_check("KV cache bytes (all layers)", totals["kv_cache_bytes"],
                         _by_kind(main.kv_bytes, plan)))
    checks.append(_check("largest activation bytes", totals["largest_activation"]["bytes"],
                         _largest(main.stages)))
    if n_mtp:  # the MTP modules, counted apart: each run once by the executor
        checks += mtp_checks(main.stages, main.mtp_kv_bytes, totals)
    held = [s for s in main.stages if s.op == "state_cache"]
    if held:  # stateful mixers (mixers.py)
        checks += state_checks(main.stages, totals["state_cache_bytes"],
                               _extrapolate(held, "bytes", plan, K))
    if wl.ep > 1:
        checks += _ep_checks(run, main, doc["parallel"]["ep"], pre, ids[:, :T], a_pre, wl, tol)
    if main.routed:  # a report, not a check: how many experts the real routing reached
        tokens = main.routed[0].shape[0] * main.routed[0].shape[1]
        checks.append({
            "name": f"experts reached per MoE layer by {tokens} tokens (expected under uniform "
                    "routing, measured)", "symbolic": round(distinct_experts(tokens, model), 2),
            "measured": [int(np.unique(ids).size) for ids in main.routed], "ok": True,
            "report": True})
    s_pp = wl.pp
    hand = sorted(set(main.boundaries)) or [0]
    checks.append(_check(f"pipeline boundary bytes (s={s_pp})", pp_led["boundary_bytes"],
                         hand[0] if len(hand) == 1 else hand))

    # 2. paged KV cache (p = 1): same logits as the contiguous one, blocks as the trace counts
    paged = PagedKV(wl.kv, win, dt, wl.block_size, B, T + 1, seed)
    g_pre, g_dec = both(1, paged, ", paged")
    g_main = g_dec if phase == "decode" else g_pre
    c_main = a_dec if phase == "decode" else a_pre
    assert g_main is not None and c_main is not None
    checks.append(_close(f"paged KV cache == contiguous ({phase} logits)", g_main.logits,
                         c_main.logits, tol))
    if can_decode and phase == "prefill":
        assert g_dec is not None and a_dec is not None
        checks.append(_close("paged KV cache == contiguous (decode logits)", g_dec.logits,
                             a_dec.logits, tol))
    checks.append(_check(f"paged KV cache blocks (block_size {wl.block_size})",
                         totals["kv_cache_blocks"], g_main.kv_blocks))
    checks.append(_check("paged KV cache bytes (all layers)", totals["kv_cache_paged_bytes"],
                         _by_kind(g_main.kv_bytes, plan)))
    del g_pre, g_dec, paged

    # 3. tensor parallel: p ranks on their shards == one rank; the ledger
    if p > 1:
        b_pre, b_dec = both(p, contiguous(), "")
        b_main = b_dec if phase == "decode" else b_pre
        assert b_main is not None
        if phase == "decode":
            checks += compare_stages(b_pre.stages, symbolic.stages(model, pre, p), plan, K,
                                     f"prefill, p={p}")
        checks += compare_stages(b_main.stages, symbolic.stages(model, wl, p), plan, K,
                                 f"{phase}, p={p}")
        checks += _tp_checks(b_main, tp_led, plan, K, p)
        checks.append(_close(f"TP p={p} == unsharded (prefill logits)", b_pre.logits,
                             a_pre.logits, tol))
        if can_decode:
            assert b_dec is not None and a_dec is not None
            checks.append(_close(f"TP p={p} == unsharded (decode logits)", b_dec.logits,
                                 a_dec.logits, tol))
    else:
        b_pre, b_dec = a_pre, a_dec
        checks.append(_check("TP all-reduce bytes per layer (p=1: none)",
                             tp_led["allreduce_bytes_per_layer"],
                             _layer_sum(a_pre.stages, "allreduce", K)))
    del a_pre, a_dec

    # 4. decode from the cache == the full forward over T+1 tokens (at p)
    full = None
    if can_decode:
        full = run(f"full T+1, p={p}", pre.model_copy(update={"seq": T + 1}), ids, p)
        assert b_dec is not None
        checks.append(_close(f"decode (KV cache, p={p}) == full forward over T+1 tokens",
                             b_dec.logits, full.logits, tol))
        kv_dec = sum(s.bytes * s.repeat for s in symbolic.stages(model, dec, p)
                     if s.op == "kv_cache" and s.group != "mtp")
        checks.append(_check(f"KV cache bytes after decode (p={p}, all layers)", kv_dec,
                             _by_kind(b_dec.kv_bytes, plan)))
    else:
        checks.append(_skipped("decode (KV cache) == full forward",
                               f"T+1={T + 1} exceeds max_positions"))

    # 5. masks: the causal one hides the future, the padding one hides the pads (at p)
    ref, n = (full, T + 1) if full is not None else (b_pre, T)  # a run to change the end of
    if n >= 2:
        cut = (n + 1) // 2
        ids2 = ids[:, :n].copy()
        ids2[:, cut:] = (ids2[:, cut:] + rng.integers(1, model.vocab_size, ids2[:, cut:].shape)
                         ) % model.vocab_size  # every later token really changes
        changed = run(f"causal check, p={p}", pre.model_copy(update={"seq": n}), ids2, p)
        checks.append(_close(f"causal mask: tokens from {cut} on changed, positions < {cut} "
                             "unchanged", changed.full[:, :cut], ref.full[:, :cut], tol))
        del changed
    else:
        checks.append(_skipped("causal mask", "one token: nothing later to change"))
    del b_pre, b_dec, full, ref
    if (why := pads_skipped(model, T)) is None:
        checks.append(_padding_check(run, model, pre, ids, T, p, rng, tol))
    else:  # DeepSeek-V4's attention: modelled without padding; biased CCA: not invariant
        checks.append(_skipped("padding mask", why))

    ok = all(c["ok"] for c in checks)
    note = (f"ran {K} of {N} layers at real widths; per-layer numbers measured on them, "
            f"totals extrapolated {_factors(plan, K)}" if K < N else f"ran all {N} layer(s)")
    if not resident:
        note += ("; weights streamed (too big to hold at once): each linear makes its shard in "
                 "chunks and drops them, the embedding gathers only the rows looked up")
    return {
        "model": model.name, "workload": wl.model_dump(), "layers_run": K, "n_layers": N,
        "extrapolated": K < N, "note": note, "precision": precision, "seed": seed,
        "memory_estimate_bytes": need, "memory_budget_bytes": budget,
        "weights": "resident" if resident else "streamed", "ok": ok,
        "checks": checks,
    }


def _ep_checks(run: Callable[..., Step], main: Step, led: dict, pre: Workload, ids: np.ndarray,
               a_pre: Step, wl: Workload, tol: float) -> list[dict]:
    """Expert parallelism simulated: experts split over ep ranks, each sequence on replica
    b mod ep, the off-rank (token, expert) pairs sent and their outputs sent back."""
    ep = wl.ep
    per_layer = {t["bytes_every_pair"] for t in main.ep_traffic}
    pairs = sum(t["pairs"] for t in main.ep_traffic)
    off = sum(t["off_rank"] for t in main.ep_traffic)
    plain = run("ep=1 reference", pre.model_copy(update={"ep": 1}), ids, 1)
    return [
        _check(f"EP all-to-all bytes per MoE layer (ep={ep}, every pair off-rank)",
               led["alltoall_bytes_per_layer"], per_layer.pop() if len(per_layer) == 1 else
               sorted(per_layer)),
        _close(f"EP ep={ep} == one rank (prefill logits)", a_pre.logits, plain.logits, tol),
        {"name": f"EP off-rank share of the (token, expert) pairs (expected (ep−1)/ep under "
                 f"uniform routing, measured over {pairs} pairs)",
         "symbolic": round((ep - 1) / ep, 3), "measured": round(off / max(pairs, 1), 3),
         "ok": True, "report": True},
    ]


def _factors(plan: LayerPlan, k: int) -> str:
    """×N/K, or per kind ×count/run (`×21/1 sliding window W=4096, ×21/1 full attention`)."""
    ran = [plan.kind_of[:k].count(kind) for kind in range(len(plan.kinds))]
    if plan.uniform:
        return f"×{plan.counts[0]}/{ran[0]}"
    return ", ".join(f"×{c}/{r} {spec.label}"
                     for spec, c, r in zip(plan.kinds, plan.counts, ran, strict=True))


def _skipped(what: str, why: str) -> dict:
    return {"name": f"{what} (skipped: {why})", "symbolic": None, "measured": None, "ok": True,
            "skipped": True}


def _scale(x: int, k: int, n: int) -> int | float:
    f = Fraction(x * n, k)
    return int(f) if f.denominator == 1 else float(f)


def _largest(stages: list[Stage]) -> int:
    """The biggest activation written (the KV cache is counted apart, as the trace does)."""
    return max(s.bytes for s in stages if s.op not in ("kv_cache", "kv_append", "state_cache"))


def _layer_sum(stages: list[Stage], op: str, k: int) -> int | float:
    return _scale(sum(s.bytes for s in stages if s.op == op and s.group == "block"), k, 1)


def _tp_checks(b: Step, led: dict, plan: LayerPlan, k: int, p: int) -> list[dict]:
    st = b.stages
    ar = [s for s in st if s.op == "allreduce" and s.group == "block"]
    return [
        _check(f"TP all-reduce bytes per layer (p={p})", led["allreduce_bytes_per_layer"],
               _layer_sum(st, "allreduce", k)),
        _check(f"TP all-reduces per layer (p={p})", led["allreduce_per_layer"],
               _scale(len(ar), k, 1)),
        _check(f"TP embedding all-reduce bytes (p={p})", led["embedding_allreduce_bytes"],
               sum(s.bytes for s in st if s.op == "allreduce" and s.group == "embedding")),
        _check(f"TP logits all-gather bytes (p={p})", led["logits_allgather_bytes"],
               sum(s.bytes for s in st if s.op == "allgather" and s.group != "mtp")),
        _check(f"TP params per rank (p={p})", led["params_per_rank"],
               _extrapolate(st, "params", plan, k)),
        _check(f"TP FLOPs per rank (p={p})", led["flops_per_rank"],
               _extrapolate(st, "flops", plan, k)),
        _check(f"TP KV cache bytes per rank (p={p})", led["kv_cache_bytes_per_rank"],
               _by_kind(b.kv_bytes, plan)),
        _check(f"TP largest activation bytes per rank (p={p})",
               led.get("largest_activation_bytes_per_rank"), _largest(st)),
    ]


def _padding_check(run: Callable[..., Step], model: ModelConfig, pre: Workload, ids: np.ndarray,
                   T: int, p: int, rng: np.random.Generator, tol: float) -> dict:
    """Two sequences, the second left-padded to T: their real positions must match runs of each
    sequence alone (pads masked as keys, positions counted from the first real token)."""
    L = T - max(1, T // 4)
    rows = np.stack([ids[0, :T], rng.integers(0, model.vocab_size, T)])
    valid = np.ones((2, T), dtype=bool)
    valid[1, : T - L] = False
    padded = run(f"padding check, p={p}",
                 pre.model_copy(update={"batch": 2, "padding_mask": True}), rows, p, None, valid)
    one = pre.model_copy(update={"batch": 1, "padding_mask": False})
    r0 = run(f"padding check, p={p}", one, rows[:1], p)
    r1 = run(f"padding check, p={p}", one.model_copy(update={"seq": L}), rows[1:, T - L:], p)
    got = np.concatenate([padded.full[0], padded.full[1, T - L:]])
    want = np.concatenate([r0.full[0], r1.full[0]])
    return _close(f"padding mask: padded batch (pads 0..{T - L - 1} of row 1) == unpadded "
                  "sequences", got, want, tol)
