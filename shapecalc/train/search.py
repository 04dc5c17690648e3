"""`train --search --gpus N`: the fastest layout of N GPUs whose every rank fits, over tp, cp, pp,
dp (= N / (tp·cp·pp)), ep, virtual stages, micro-batch, recompute and ZeRO, at a fixed global
batch and sequence; the best few, and for the others the reason each fails, grouped.

How it is fast and exact: a layout class (tp, cp, pp, ep) × (recompute, micro-batch) has one
set of exact counts (its pipeline stages' saved bytes, saved.py; their parameters, memory.py;
the step model's per-stage terms, time.py's Layout), computed once; a stage type (its layer
kinds, first, last) is computed once per class, as every stage of a type is alike. The grid
over (virtual stages × ZeRO) is then numpy arrays through the same formulas `train` uses
(time.py's `pace`, report.py's `chunks_in_flight` and `in_flight_bytes`, memory.py's
`model_state`). `evaluate` is the one place the search calls memory and time. The framework
is a dimension (train/search_fw.py): each layout is tried under every framework the run allows
(`frameworks`), with that framework's ZeRO, pipeline and recompute rules, its step-time terms on
the layout (`perf_of`: train --framework's efficiencies and DP overlap) and, for all but hf, its
memory through train's own call (fwattach.attach_framework); hf keeps the vectorised exact count.

Reasons a layout fails (`FAILS`): divisibility (heads, layers, sequence, batch, experts over
tp, pp, cp, dp, ep), topology (a group the GPUs' domains cannot place), framework (a ZeRO stage
or pipeline the framework refuses, or a model its memory rules do not cover), bubble (interleaving
needs m a multiple of p, Megatron's rule; or fewer micro-batches than stages, m < p, a bubble
of half the step or more), memory (the peak rank over the GPU). The space: tp ≤ the scale-up
domain, cp a power of two ≤ 64 with T a multiple of 2·cp, pp ≤ the layers, micro-batches the
divisors of global batch / dp up to MAX_MICRO, v = 1..MAX_VIRTUAL with at least v layers a
stage, recompute none | selective | full | torch (transformers' checkpointing), ZeRO 0..3.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..inputs.hardware import GPU
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload, check, nbytes
from ..model.errors import plural
from ..model.parallel import pp_layers, stage_kind_counts
from ..model.plan import layer_plan
from .activations import saved_bytes
from .backward import step_flops
from .frameworks import FRAMEWORKS, NO_INTERLEAVING
from .fwmemory import FwTerms
from .memory import PRECISIONS, check_training, model_state, rank_params
from .network import check_layout, train_topology
from .report import ACT_DTYPE, check_parallel, chunks_in_flight, in_flight_bytes
from .saved import saved_tensors
from .search_fw import FwLayout, PerfOf, default_perf, train_flags, zeros
from .time import Layout, TrainPerf, layer_work, pace

MAX_MICRO, MAX_VIRTUAL, MAX_CP = 64, 8, 64
RECOMPUTE = ("none", "selective", "full", "torch")
ZERO = (0, 1, 2, 3)
FAILS = ("divisibility", "topology", "framework", "bubble", "memory")
CLASS_FAILS = ("divisibility", "topology", "framework")  # whatever b and recompute
BEST = 5


def _divisors(n: int, cap: int | None = None) -> list[int]:
    return [d for d in range(1, (cap or n) + 1) if n % d == 0 and d <= n]


def space(model: ModelConfig, topo: Any, gpus: int, seq: int) -> list[tuple[int, int, int, int]]:
    """(tp, cp, pp, ep) classes of `gpus` GPUs, each a divisor chain (dp = the rest)."""
    out = []
    for tp in _divisors(gpus, min(gpus, topo.domain)):
        for cp in (c for c in _divisors(gpus // tp, MAX_CP) if c & (c - 1) == 0):
            if cp > 1 and seq % (2 * cp):
                continue
            for pp in _divisors(gpus // (tp * cp), model.n_layers):
                dp = gpus // (tp * cp * pp)
                e_n = model.n_experts or 0
                eps = [e for e in _divisors(dp, min(dp, e_n)) if e_n % e == 0] if e_n else [1]
                out += [(tp, cp, pp, ep) for ep in eps]
    return out


class Search:
    """One search: the model, the fixed batch, the GPU; caches of the exact counts by class."""

    def __init__(self, model: ModelConfig, wl: Workload, gpu: GPU, perf: TrainPerf, *, gpus: int,
                 global_batch: int, precision: str, attention: str,
                 recompute: tuple[str, ...] = RECOMPUTE, zero: tuple[int, ...] = ZERO,
                 frameworks: tuple[str, ...] = ("hf",), perf_of: PerfOf | None = None,
                 fw_terms: FwTerms | None = None, fp8: str | None = None) -> None:
        """`perf` is hf's step-time terms; `perf_of(framework, wl, cp)` the others' on a
        layout (default: train --framework's without --perf)."""
        self.model, self.wl, self.gpu, self.perf = model, wl, gpu, perf
        self.gpus, self.gb = gpus, global_batch
        self.precision, self.attention = precision, attention
        self.recompute, self.zero = recompute, zero
        self.act = ACT_DTYPE[precision]
        self.width = nbytes(1, self.act)
        self.per = {x.name: x.bytes_per_param for x in PRECISIONS[precision]}
        self.topo = train_topology(gpu, perf.link_efficiency, perf.net_bandwidth)
        self.plan = layer_plan(model)
        self._work: dict[tuple[str, int], Any] = {}
        self._walk: dict[tuple[int, int, int], Any] = {}
        self._stages: dict[int, Any] = {}
        self.peak = gpu.peak(wl.compute) or 0.0
        self.frameworks, self.fp8, self.terms = frameworks, fp8, fw_terms or FwTerms()
        self.perf_of = perf_of or default_perf(gpu, model, perf)
        self._fw: dict[tuple[Any, ...], Any] = {}
        if fp8 is not None:
            self.peak = gpu.peak("fp8") or 0.0

    def work(self, recompute: str, b: int) -> Any:
        key = (recompute, b)
        if key not in self._work:
            self._work[key] = layer_work(self.model, self.wl.model_copy(
                update={"batch": b, "tp": 1, "pp": 1, "ep": 1}), recompute, self.attention)
        return self._work[key]

    def stages(self, tp: int) -> Any:
        if tp not in self._stages:
            self._stages[tp] = symbolic_stages(self.model, self.wl.model_copy(
                update={"batch": 1, "tp": tp, "pp": 1, "ep": 1}), tp)
        return self._stages[tp]

    def model_flops(self, recompute: str, fw: str = "hf") -> tuple[int, int]:
        """(model, hardware) FLOPs of one step: one sequence's × the global batch (per-op SAC
        re-runs its own GEMMs: report.build_train's count)."""
        policy = FRAMEWORKS[fw].recompute[recompute]
        f = step_flops(self.stages(1), self.model.n_layers, "none" if policy == "op" else
                       recompute)
        FwLayout.sac_flops(self.model, self.stages(1), policy, f, self.terms)
        model = f["forward_flops"] + f["backward_flops"] - f["backward_convention_only_flops"]
        return model * self.gb, (model + f["recompute_flops"]) * self.gb

    def full(self, b: int) -> Any:
        key = ("full", b)
        if key not in self._fw:
            self._fw[key] = symbolic_stages(self.model, self.wl.model_copy(
                update={"batch": b, "tp": 1, "pp": 1, "ep": 1}), 1)
        return self._fw[key]

    def framework(self, fw: str, wl: Workload, cp: int, recompute: str) -> FwLayout:
        """A framework's step-time terms and memory rules on a layout (cached)."""
        key = (fw, wl.tp, cp, wl.pp, wl.ep, wl.batch, recompute)
        if key not in self._fw:
            perf = self.perf if fw == "hf" else self.perf_of(fw, wl, cp, self.full(wl.batch))
            self._fw[key] = FwLayout(FRAMEWORKS[fw], self.model, wl, self.gpu, perf,
                                     recompute=recompute, attention=self.attention, cp=cp,
                                     full=self.full(wl.batch), terms=self.terms, fp8=self.fp8)
        return self._fw[key]

    def evaluate(self, tp: int, cp: int, pp: int, ep: int, recompute: str, b: int,
                 fw: str = "hf") -> list[dict[str, Any]]:
        """Every (v, ZeRO) candidate of one class at micro-batch b under framework fw: its
        step and peak memory, or the reason it fails. The one place the search calls
        `train`'s memory and time."""
        model, gpus = self.model, self.gpus
        dp = gpus // (tp * cp * pp)
        base = {"tp": tp, "cp": cp, "pp": pp, "ep": ep, "dp": dp, "micro_batch": b,
                "recompute": recompute, "framework": fw}
        if self.gb % (b * dp):
            return [{**base, "fails": "divisibility", "why": f"global batch {self.gb} is not a "
                     f"multiple of micro-batch {b} × dp {dp}"}]
        accum = self.gb // (b * dp)
        lkey = ("wl", tp, cp, pp, ep, b)  # every framework's evaluation of the layout
        if lkey not in self._fw:
            w = self.wl.model_copy(update={"batch": b, "tp": tp, "pp": pp, "ep": ep})
            self._fw[lkey] = w, w.model_copy(update={"seq": w.seq // cp, "dtype": self.act,
                                                     "act_dtype": None})
        wl, sized = self._fw[lkey]
        try:
            check(model, wl)
            check_training(model, self.precision, 0, dp, ep)
            check_parallel(model, wl, cp, 1)
        except ShapecalcError as e:
            return [{**base, "fails": "divisibility", "why": f"{e.field}: {e.reason}"}]
        try:
            check_layout(self.topo, tp, cp, dp, pp, ep)
        except ShapecalcError as e:
            return [{**base, "fails": "topology", "why": f"{e.field}: {e.reason}"}]
        rules = FRAMEWORKS[fw]
        zs, refused = zeros(rules, self.zero, recompute, pp, self.fp8)
        if not zs:
            return [{**base, "fails": "framework", "why": refused[0][1]}]
        layers = pp_layers(model.n_layers, pp)
        counts = stage_kind_counts(self.plan, pp)
        types: dict[tuple[Any, ...], int] = {}  # stage type → its first stage
        for i, kc in enumerate(counts):
            types.setdefault((tuple(kc), i == 0, i == pp - 1), i)
        firsts = list(types.values())
        # memory: the exact saved bytes of one micro-batch on each stage type
        wkey = (tp, cp, b)
        autograd = rules.activations == "autograd"  # the others' rules count their own
        if autograd and wkey not in self._walk:
            self._walk[wkey] = saved_tensors(model, sized, self.attention, tp)
        starts = np.cumsum([0, *layers])
        okey = ("one", tp, cp, pp, b, recompute)  # hf's and deepspeed's alike
        if autograd and okey not in self._fw:
            self._fw[okey] = [saved_bytes(
                model, sized, recompute, self.attention, tp=tp,
                layers=range(int(starts[i]), int(starts[i + 1])), first=i == 0,
                last=i == pp - 1, every=self._walk[wkey]) for i in firsts]
        one = self._fw[okey] if autograd else []
        full, rank = self.stages(1), self.stages(tp)
        pkey = ("placed", tp, pp, ep)
        if pkey not in self._fw:  # the parameters, whatever the micro-batch
            self._fw[pkey] = rank_params(model, wl, full, rank)
        placed_all = self._fw[pkey]
        placed = [placed_all[i] for i in firsts]
        # time: the stage types' terms of one micro-batch (time.py's Layout)
        fl = self.framework(fw, wl, cp, recompute)
        if fw == "hf":
            work = self.work(recompute, b)
        else:
            wk = ("work", fw, recompute, b)
            if wk not in self._fw:
                self._fw[wk] = layer_work(model, self.wl.model_copy(
                    update={"batch": b, "tp": 1, "pp": 1, "ep": 1}), fl.work_rc,
                    self.attention, fl.extra, fl.fused)
            work = self._fw[wk]
        lay = Layout(model, wl, self.gpu, fl.perf, cp=cp, dp=dp, recompute=fl.work_rc,
                     attention=self.attention, act_width=self.width, work=work,
                     peak_dtype=fl.peak_dtype, fused=fl.fused)
        terms = [lay.stage(i, counts[i], i == 0, i == pp - 1) for i in firsts]
        compute = np.array([x["compute_forward_s"] + x["compute_backward_s"] for x in terms])
        base_micro = compute + np.array([x["tp_s"] + x["cp_exposed_s"] + x["ep_s"]
                                         for x in terms])
        params = np.array([d + e for d, e in placed], dtype=float)
        out: list[dict[str, Any]] = []
        vs = [v for v in range(1, MAX_VIRTUAL + 1) if v == 1 or (pp > 1 and min(layers) >= v)]
        run = []
        for v in vs:
            if accum < pp or (v > 1 and accum % pp):
                why = (f"m={plural(accum, 'micro-batch', 'micro-batches')} < p={pp} stages: "
                       "the pipeline never fills"
                       if accum < pp else f"interleaving needs m={accum} a multiple of p={pp}")
                out += [{**base, "virtual_stages": v, "grad_accum": accum, "zero": z,
                         "fails": "bubble", "why": why} for z in zs]
            elif v > 1 and fw in NO_INTERLEAVING:
                why = zeros(rules, (zs[0],), recompute, pp, self.fp8, v)[1][0][1]
                out += [{**base, "virtual_stages": v, "grad_accum": accum, "zero": z,
                         "fails": "framework", "why": why} for z in zs]
            else:
                run.append(v)
            out += [{**base, "virtual_stages": v, "grad_accum": accum, "zero": z,
                     "fails": "framework", "why": why} for z, why in refused]
        if not run:
            return out
        v_ax = np.array(run, dtype=float)[:, None]
        micro = (base_micro[None, :] + np.array([lay.boundary_s(v) for v in run])[:, None]
                 )[:, None, :]
        dp_time = np.array([[lay.dp_s(d, e, self.per, z) if dp * cp > 1 else 0.0
                             for d, e in placed] for z in zs])
        window = compute[None, :] * np.array([accum if z == 3 else 1 for z in zs])[:, None]
        _, _, step = pace(micro, window[None], dp_time[None], params, accum, pp, v_ax,
                          fl.perf.dp_overlap)
        if fw == "hf":
            ms = np.array([[model_state(d, e, self.precision, z, dp * cp, ep)["bytes"]
                            for d, e in placed] for z in zs], dtype=np.int64)
            acts = np.array([[in_flight_bytes(chunks_in_flight(pp, i, accum, v), v, o)
                              for i, o in zip(firsts, one, strict=True)] for v in run],
                            dtype=np.int64)
            peak = np.max(ms[None, :, :] + acts[:, None, :], axis=-1)
        else:
            kind = {i: j for j, i in enumerate(firsts)}  # each stage's type, by its first
            type_of = [kind[types[(tuple(kc), i == 0, i == pp - 1)]]
                       for i, kc in enumerate(counts)]
            every = [one[j] for j in type_of] if autograd else None
            bound = [fl.states(placed, z, dp * cp) for z in zs]
            try:
                peak = np.array([[fl.peak(zero=z, dp=dp, virtual=v, accum=accum,
                                          placed=placed_all, one=every, rank=rank, full=full)
                                  if bound[k] <= self.gpu.memory_bytes else -bound[k]
                                  for k, z in enumerate(zs)] for v in run])
            except ShapecalcError as e:  # a model or term the framework's rules do not cover
                return [{**base, "fails": "framework", "why": f"{fw}: {e.field}: {e.reason}"}]
        cap = self.gpu.memory_bytes
        for j, v in enumerate(run):
            for k, z in enumerate(zs):
                r = {**base, "virtual_stages": v, "grad_accum": accum, "zero": z,
                     "step_s": float(step[j, k]), "peak_bytes": int(peak[j, k])}
                if peak[j, k] < 0:  # over by the model states alone (FwLayout.states)
                    r.update(fails="memory", peak_bytes=None, why=f"model states alone "
                             f"{int(-peak[j, k]):,} B > {cap:,} B")
                elif peak[j, k] > cap:
                    r.update(fails="memory", why=f"peak rank {int(peak[j, k]):,} B > {cap:,} B")
                out.append(r)
        return out

    def run(self, micro_batches: list[int] | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for tp, cp, pp, ep, fw in ((*c, f) for c in space(self.model, self.topo, self.gpus,
                                                          self.wl.seq) for f in self.frameworks):
            dp = self.gpus // (tp * cp * pp)
            share = self.gb // dp if self.gb % dp == 0 else 0
            bs = micro_batches or _divisors(share, min(share, MAX_MICRO)) if share else [1]
            got: list[dict[str, Any]] = []
            for rc in (r for r in self.recompute if r in FRAMEWORKS[fw].recompute):
                for b in bs:
                    got = self.evaluate(tp, cp, pp, ep, rc, b, fw)
                    rows += got
                    # saved bytes grow with b: when nothing fits at b, nothing fits above it
                    ran = [r for r in got if r.get("fails") != "framework"]
                    if ran and all(r.get("fails") == "memory" for r in ran):
                        rows += [{**r, "micro_batch": x, "grad_accum": self.gb // (x * dp),
                                  "why": f"micro-batch {b} already over the GPU's memory",
                                  "step_s": None, "peak_bytes": None}
                                 for x in bs if x > b for r in ran]
                        break
                    if len(got) == 1 and got[0].get("fails") in CLASS_FAILS:
                        break  # the class, whatever b and recompute
                if len(got) == 1 and got[0].get("fails") in CLASS_FAILS:
                    break
        return rows


def train_args(r: dict[str, Any], fp8: str | None = None) -> str:
    """The `train` flags that plan this layout alone (its whole report)."""
    flags = [*train_flags(r, fp8), ("--tp", r["tp"]), ("--cp", r["cp"]), ("--pp", r["pp"]),
             ("--dp", r["dp"]),
             ("--ep", r["ep"]), ("--virtual-stages", r["virtual_stages"]),
             ("--micro-batch", r["micro_batch"]), ("--zero", r["zero"]),
             ("--recompute", r["recompute"])]
    return " ".join(f"{k} {v}" for k, v in flags
                    if not (v == 1 and k in ("--cp", "--ep", "--virtual-stages")))


def search_doc(s: Search, rows: list[dict[str, Any]], price: float | None, source: str | None,
               ) -> dict[str, Any]:
    """`train --search --json`: the space, the best few (fastest step; ties to the fewer model
    copies' ranks, then the smaller peak), the failures grouped by reason with an example each,
    and the closest miss (the smallest peak over the GPU) where nothing fits."""
    from ..plan.price import training_cost
    from .time import rates

    ok = sorted((r for r in rows if "fails" not in r),
                key=lambda r: (r["step_s"], r["tp"] * r["cp"] * r["pp"], r["peak_bytes"]))
    tokens = s.gb * s.wl.seq
    best = []
    for r in ok[:BEST]:
        mf, hf = s.model_flops(r["recompute"], r.get("framework", "hf"))
        t = rates(r["step_s"], s.gpus, s.peak, mf, hf, tokens, None)
        row = {**r, "mfu": t["mfu"], "hfu": t["hfu"], "tokens_per_s_per_gpu":
               t["tokens_per_s_per_gpu"], "free_bytes": s.gpu.memory_bytes - r["peak_bytes"],
               "train_args": train_args(r, s.fp8)}
        if price is not None:
            row["cost"] = training_cost(price, source or "--price", s.gpus, {
                **t, "step_s": r["step_s"], "gpu_hours": None})
        best.append(row)
    failed = []
    for reason in FAILS:
        got = [r for r in rows if r.get("fails") == reason]
        if got:
            failed.append({"reason": reason, "count": len(got), "example": got[0]})
            if reason == "framework":  # each framework's own refusal, most common first
                whys: dict[str, int] = {}
                for r in got:
                    whys[r["why"]] = whys.get(r["why"], 0) + 1
                failed[-1]["whys"] = [{"why": w, "count": n} for w, n in
                                      sorted(whys.items(), key=lambda x: -x[1])]
    by_fw: dict[str, dict[str, Any]] = {}
    for r in ok:  # fastest first: each framework's first is its best
        by_fw.setdefault(r["framework"], {**r, "train_args": train_args(r, s.fp8)})
    misses = [r for r in rows if r.get("fails") == "memory" and r.get("peak_bytes")]
    closest = min(misses, key=lambda r: r["peak_bytes"]) if misses else None
    return {"gpus": s.gpus, "gpu": s.gpu.name, "gpu_memory_bytes": s.gpu.memory_bytes,
            "global_batch": s.gb, "seq": s.wl.seq, "tokens_per_step": tokens,
            "precision": s.precision, "attention": s.attention, "fp8": s.fp8,
            "space": {"frameworks": list(s.frameworks), "recompute": list(s.recompute),
                      "zero": list(s.zero),
                      "max_micro_batch": MAX_MICRO, "max_virtual_stages": MAX_VIRTUAL,
                      "max_cp": MAX_CP},
            "candidates": len(rows), "fitting": len(ok), "best": best,
            "best_by_framework": [by_fw[f] for f in s.frameworks if f in by_fw], "failed": failed,
            "closest_miss": closest if not ok else None}
