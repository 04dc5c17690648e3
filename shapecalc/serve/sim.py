"""Replicas behind a router, driven by a workload; the metrics of a run.

A discrete-event loop: the busy replica whose clock is earliest runs its next iteration, unless a
request arrives first (an arrival at the very time an iteration would start is queued first).
The router sends each request, as it arrives, round-robin or to the replica with the fewest
requests queued or running (ties: the lowest index). A closed loop of C users sends request
k + C when request k ends.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import KW_ONLY, replace
from typing import Any

from ..inputs.hardware import GPU
from ..inputs.numbers import bounded_int
from ..lean import dataclass
from ..model.config import DTYPE_BITS, ModelConfig, ShapecalcError, Workload, bytes_of, check
from ..model.parallel import kv_elements_per_token, kv_groups, pp_layers, stage_group_layers
from ..model.plan import layer_plan
from ..model.record import INT_MAX
from ..plan.cases import closed_form_for
from ..plan.ep import EPPlan, attention_ranks, copies_bytes
from ..plan.fit import point
from ..plan.memory import group_token_bytes, stage_state_bytes
from ..plan.options import PlanOptions, require_peak
from ..plan.perf import perf_overrides, perf_params
from ..plan.price import serving_cost
from ..plan.topology import layout_fills_nodes
from .alone import independent, run_alone
from .blocks import Layout, layout
from .cost import IterationCost
from .decoders import Seq
from .engines import Profile
from .percentiles import PERCENTILES
from .scheduler import Replica, SchedulerConfig
from .slo import SLO, distributions, evaluate, good, latency_doc, percentiles_for
from .slo import parse_slo as parse_slo  # its home moved to slo.py; sim.parse_slo stays
from .workload import Request

ROUTERS = ("round-robin", "least-loaded")
MAX_REPLICAS = 4096  # each is simulated (its own scheduler and logs)
TIMELINE_POINTS = 100


@dataclass(frozen=True)
class Deployment:
    """One replica's model, parallelism (wl.tp/pp/ep), GPU and scheduler, and their count."""

    model: ModelConfig
    wl: Workload
    gpu: GPU
    opts: PlanOptions
    replicas: int = 1
    router: str = "round-robin"
    max_num_seqs: int = 256
    kv_blocks: int | None = None  # None: fit's memory model
    shared_prefix: int = 0
    _: KW_ONLY  # the features below by name: each branch added one, positions would collide
    spec: Any = None  # specsched.Speculation: speculative decoding (None: off)
    ep_plan: EPPlan | None = None  # how ep > 1 exchanges (plan/ep.py; None: the defaults)

    @property
    def attention_ranks(self) -> int:
        """Schedulers a replica runs: its dp = ep/tp attention ranks (1 without ep)."""
        return attention_ranks(self.wl)

    @property
    def ep_settings(self) -> EPPlan | None:
        """The ep plan, its defaults where ep > 1 and none was given."""
        return self.ep_plan or (EPPlan() if self.wl.ep > 1 else None)
    profile: Profile | None = None  # engines.py; None: vllm's policies, no load terms (today's)

    @property
    def gpus_per_replica(self) -> int:
        return max(self.wl.tp, self.wl.ep) * self.wl.pp

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas


@dataclass
class Engine:
    cost: IterationCost
    cfg: SchedulerConfig
    spec: Any = None  # draft.SpecCost with speculative decoding


def kv_blocks(dep: Deployment, peak: float) -> int:
    """Blocks of the paged KV cache a replica holds, as fit sizes it: the memory left beside
    the weights, the reserve and the workspace of one prefill chunk of max_batched_tokens."""
    cf = closed_form_for(dep.model, dep.wl)
    mbt = dep.opts.max_batched_tokens or 8192
    limit = cf.seq_limit("prefill")
    seq = mbt if limit is None else min(mbt, limit)
    tokens = point(cf, dep.gpu, dep.opts, dep.wl, peak, batch=1, seq=seq)["kv_tokens_fit"]
    if dep.ep_settings is not None and dep.ep_settings.redundant:  # EPLB's copies take KV room
        wl = dep.wl
        tot = cf.at(1, 1, "prefill", wl.tp, wl.pp, wl.dtype, wl.kv, wl.act)
        share = max(pp_layers(dep.model.n_layers, wl.pp)) / dep.model.n_layers
        lay = pool(dep, 1)
        per = lay.unit * lay.units // wl.block_size  # a token's KV bytes on the stage
        extra = copies_bytes(tot, dep.model, dep.ep_settings, wl.ep, share)
        tokens = max(0, int(tokens) - -(-extra // per))
    return int(tokens) // dep.wl.block_size


def engine(dep: Deployment) -> Engine:
    if dep.router not in ROUTERS:
        raise ShapecalcError("router", f"{dep.router!r} is not one of {', '.join(ROUTERS)}")
    bounded_int(dep.replicas, "replicas", 1, MAX_REPLICAS)
    if dep.kv_blocks is not None:
        bounded_int(dep.kv_blocks, "kv-blocks", 1, INT_MAX, "blocks per replica")
    plan = dep.ep_settings
    check(dep.model, dep.wl, plan.redundant if plan else 0)  # as trace and fit
    layout_fills_nodes(dep.gpu, dep.wl)
    mbt = dep.opts.max_batched_tokens
    if mbt is None:
        raise ShapecalcError("max-batched-tokens", "serve needs a token budget per iteration "
                             "(> 0)")
    if not 1 <= dep.max_num_seqs <= mbt:
        raise ShapecalcError("max-num-seqs", f"must be in [1, --max-batched-tokens = {mbt}], got "
                             f"{dep.max_num_seqs}")
    if dep.shared_prefix < 0:
        raise ShapecalcError("shared-prefix", f"must be ≥ 0, got {dep.shared_prefix}")
    cf = closed_form_for(dep.model, dep.wl)
    _, peak = require_peak(dep.gpu, dep.wl.compute, dep.opts)  # as fit: fp8 weights run W8A8
    if dep.kv_blocks is not None:
        blocks = dep.kv_blocks
    elif dep.profile is not None and dep.profile.kv_memory == "of-free":
        # TensorRT-LLM's kv_cache_free_gpu_mem_fraction: --utilization of the memory the
        # weights and workspace leave, not of the GPU's
        free = kv_blocks(replace(dep, opts=replace(dep.opts, utilization=1.0)), peak)
        blocks = int(free * dep.opts.utilization)
    else:
        blocks = kv_blocks(dep, peak)
    if blocks < 1:
        raise ShapecalcError("gpu", f"{dep.model.name} leaves no room for a KV cache on "
                             f"{dep.gpu.name} at tp={dep.wl.tp}, pp={dep.wl.pp}")
    prof = dep.profile
    load = None
    if prof is None:
        pp = perf_params(dep.gpu, dep.opts.perf)
    else:  # the engine's kernels over the GPU's terms, --perf over both
        pp = replace(perf_params(dep.gpu), **prof.perf)
        pp = replace(pp, **{k.split("=")[0].strip(): float(k.split("=")[1])
                            for k in perf_overrides(list(dep.opts.perf or ()))})
        load = prof.load
    cost = IterationCost(cf, dep.gpu, pp, dep.wl, peak, dep.ep_settings, load)
    spec = None
    if dep.spec is not None:  # the draft's weights and KV share the memory (specsched.py)
        from .specsched import attach  # speculation only: it loads the draft and NumPy

        spec, blocks = attach(dep.spec, dep.wl, cost, blocks, pool(dep, blocks).simple
                              and not cost.windowed, dep.kv_blocks is not None)
        if blocks < 1:
            raise ShapecalcError("gpu", f"{dep.model.name} and its draft leave no room for a "
                                 f"KV cache on {dep.gpu.name} at tp={dep.wl.tp}")
    policy = () if prof is None else (prof.order, prof.capacity == "no-evict")
    cfg = SchedulerConfig(dep.max_num_seqs, mbt, dep.wl.block_size, blocks, dep.shared_prefix,
                          pool(dep, blocks), *policy)
    return Engine(cost, cfg, spec)


def pool(dep: Deployment, blocks: int) -> Layout:
    """The replica's KV groups and states (blocks.py) on the pipeline stage that holds the most
    KV bytes a token: `blocks` of fit's size (block_size token slots of every layer of the
    stage, as fit's kv_tokens_fit divides its free memory) are its bytes."""
    wl, m = dep.wl, dep.model
    cf = closed_form_for(m, wl)
    plan = layer_plan(m)
    per = stage_group_layers(plan, wl.pp)
    i = max(range(wl.pp), key=lambda x: (sum(per[x]), -x))
    layer = bytes_of(kv_elements_per_token(m, wl.tp, layers=1, mla=cf.mla), DTYPE_BITS[wl.kv])
    tok = group_token_bytes(cf, wl.tp, DTYPE_BITS[wl.kv])  # each group's own (MiMo: H_sw)
    pre = cf.at(1, 1, "prefill", wl.tp, wl.pp, wl.dtype, wl.kv, wl.act)
    state = stage_state_bytes(cf, wl.pp, pre)[i]
    groups = [(r, n) for (r, _), n in zip(kv_groups(plan), per[i], strict=True)]
    k = pp_layers(m.n_layers, wl.pp)[i]
    extra = sum(n * (t - layer) for (_, n), t in zip(groups, tok, strict=True))
    return layout(wl.block_size, groups, tok, state,
                  blocks * wl.block_size * (k * layer + extra), dep.shared_prefix // wl.block_size)


def pool_doc(eng: Engine) -> dict[str, Any]:
    """The pool's groups for --json: each group's window or chunk and the units its block takes,
    the units one running sequence's states take, the pool's units and a unit's bytes."""
    lay = eng.cfg.layout
    assert lay is not None
    return {"groups": [{"window": r if isinstance(r, int) else None,
                        "chunk": None if r is None or isinstance(r, int) else r.size,
                        "units_per_block": w} for r, w in zip(lay.reaches, lay.weights,
                                                              strict=True)],
            "state_units_per_sequence": lay.state, "units": lay.units, "unit_bytes": lay.unit}


def check_requests(dep: Deployment, eng: Engine, reqs: list[Request]) -> None:
    """One line for a request no replica could ever serve."""
    cap = eng.cfg.num_blocks * eng.cfg.block_size
    limit = dep.model.max_positions if dep.model.positions == "learned" else None
    lay, mbt = eng.cfg.layout, eng.cfg.max_batched_tokens
    for r in reqs:
        if lay is not None and not lay.simple:  # its largest step: the last chunk, or decode
            n = r.prompt + r.output
            room = lay.units - lay.pinned_units
            most = max(lay.own(max(0, r.prompt - mbt), r.prompt), lay.own(n - 1, n))
            if most > room:
                raise ShapecalcError("prompt-tokens", f"request {r.id}: {r.prompt} prompt + "
                                     f"{r.output} output tokens need {most:,} units of "
                                     f"{lay.unit:,} bytes of a replica's KV cache, which holds "
                                     f"{room:,}")
        elif r.prompt + r.output > cap:
            raise ShapecalcError("prompt-tokens", f"request {r.id}: {r.prompt} prompt + "
                                 f"{r.output} output tokens exceed the KV cache of a replica "
                                 f"({cap:,} tokens: {eng.cfg.num_blocks:,} blocks of "
                                 f"{eng.cfg.block_size})")
        if limit is not None and r.prompt + r.output > limit:
            raise ShapecalcError("prompt-tokens", f"request {r.id}: {r.prompt} + {r.output} "
                                 f"tokens exceed the model's max_positions={limit}")
        if r.prompt < dep.shared_prefix:
            raise ShapecalcError("shared-prefix", f"request {r.id}: its prompt of {r.prompt} "
                                 f"tokens is shorter than the shared prefix {dep.shared_prefix}")


def run(dep: Deployment, reqs: list[Request], concurrency: int | None = None,
        progress: Callable[[int, int], None] | None = None, trace: bool = False,
        eng: Engine | None = None, rebase: bool = True) -> tuple[list[Replica], list[Seq]]:
    """Simulate; returns the replicas (their logs) and each request's sequence, by id.
    `rebase=False`: keep the arrivals as given (disagg.py's decode pool: on the run's clock)."""
    eng = eng or engine(dep)
    check_requests(dep, eng, reqs)
    if reqs and concurrency is None and rebase:  # times from the first arrival (absolute: ulps)
        t0 = min(r.arrival for r in reqs)
        if t0:
            reqs = [replace(r, arrival=r.arrival - t0) for r in reqs]
    n = len(reqs)
    seqs: list[Seq | None] = [None] * n
    pending: list[tuple[float, int]] = []
    nxt = n
    if concurrency is None:
        pending = [(r.arrival, r.id) for r in reqs]
        heapq.heapify(pending)
    else:
        if concurrency < 1:
            raise ShapecalcError("concurrency", f"must be ≥ 1, got {concurrency}")
        nxt = min(concurrency, n)
        pending = [(0.0, i) for i in range(nxt)]

    def on_finish(s: Seq) -> None:
        nonlocal nxt
        if concurrency is not None and nxt < n:
            heapq.heappush(pending, (s.finish, nxt))
            nxt += 1

    ranks = dep.replicas * dep.attention_ranks  # each attention rank its own scheduler
    if eng.spec is not None:
        from .specsched import replicas
    reps = [Replica(eng.cost, eng.cfg, on_finish, trace) for _ in range(ranks)] \
        if eng.spec is None else replicas(eng.spec, eng.cost, eng.cfg, ranks, on_finish, trace,
                                          reqs)
    ready: list[tuple[float, int]] = []  # (clock, index) of busy replicas; stale entries skipped
    k = steps = 0
    if independent(dep.router, concurrency, ranks, eng.spec):  # exact fast path (alone.py)
        run_alone(reps, reqs, seqs, progress)
        pending = []
    while True:
        while ready and not (reps[ready[0][1]].busy and reps[ready[0][1]].clock == ready[0][0]):
            heapq.heappop(ready)
        a = pending[0][0] if pending else math.inf
        if ready and ready[0][0] < a:
            _, idx = heapq.heappop(ready)
            r = reps[idx]
            before = (len(r.durs), r.preemptions)
            r.advance(a)
            if (len(r.durs), r.preemptions) == before:
                raise AssertionError("serve: a replica made no progress")
            if r.busy:
                heapq.heappush(ready, (r.clock, idx))
            steps += 1
            if progress is not None and steps % 2000 == 0:
                progress(sum(1 for s in seqs if s is not None and s.finish >= 0), n)
            continue
        if not pending:
            break
        t, i = heapq.heappop(pending)
        req = reqs[i] if concurrency is None else replace(reqs[i], arrival=t)
        if dep.router == "round-robin":
            idx = k % len(reps)
        else:
            idx = min(range(len(reps)), key=lambda x: reps[x].outstanding)
        k += 1
        was = reps[idx].busy
        seqs[i] = reps[idx].add(req, t)
        if not was:
            heapq.heappush(ready, (reps[idx].clock, idx))
    out = [s for s in seqs if s is not None]
    assert len(out) == n and all(s.finish >= 0 for s in out)
    front = 0.0 if dep.profile is None else dep.profile.terms.get("request_overhead_s", 0.0)
    if front:  # the engine's front end (HTTP, tokenising), as a client sees it (engines.py)
        for s in out:
            s.first += front
            s.finish += front
    if progress is not None:
        progress(n, n)
    return reps, out


# -- metrics --------------------------------------------------------------------------------------


def saturated(eng: Engine, reqs: list[Request]) -> dict[str, Any]:
    """The decode-only ceiling of one replica: the most sequences that can decode at once (max
    num_seqs, or the blocks of the shortest prompt plus a token each) at the shortest context.
    A decode token costs least there (a step's time per sequence falls with the batch and
    grows with the context) and a first token costs a prefill, so no run exceeds it."""
    cfg = eng.cfg
    pmin = min(r.prompt for r in reqs)
    pb = cfg.shared_prefix // cfg.block_size
    per = max(1, -(-(pmin + 1) // cfg.block_size) - pb)
    room = cfg.num_blocks - pb
    if cfg.layout is not None and not cfg.layout.simple:
        lay = replace(cfg.layout, pinned=pb)
        per, room = max(1, lay.own(pmin, pmin + 1)), lay.units - lay.pinned_units
    if eng.spec is not None:  # a verify holds k + 1 slots past the cache (specsched.py)
        per = max(1, -(-(pmin + 1 + eng.spec.k) // cfg.block_size) - pb)
    b = max(1, min(cfg.max_num_seqs, room // per))
    if eng.spec is not None:  # a step emits its expected tokens, on average
        step = eng.spec.seconds(0, 0, 0, 0, b, b * pmin)
        return {"max_decode_batch": b, "decode_step_s": step,
                "output_tokens_per_s": b * eng.spec.spec.expected / step}
    step = eng.cost.decode(b, pmin)
    return {"max_decode_batch": b, "decode_step_s": step, "output_tokens_per_s": b / step}


def _buckets(reps: list[Replica], end: float) -> dict[str, list[float]]:
    """The KV-cache utilisation (mean over replicas) and the waiting and running requests
    (summed) over TIMELINE_POINTS equal spans of [0, end], time-weighted."""
    m = TIMELINE_POINTS
    width = end / m if end > 0 else 1.0
    kv = [0.0] * m
    wait = [0.0] * m
    run_ = [0.0] * m
    for rep in reps:
        nb = rep.total
        for start, d, used, w, r in rep.log:
            s, e = start, start + d
            i = min(int(s / width), m - 1)
            while s < e and i < m:
                hi = min(e, (i + 1) * width) if i < m - 1 else e
                f = (hi - s) / width
                kv[i] += f * used / nb / len(reps)
                wait[i] += f * w
                run_[i] += f * r
                s = hi
                i += 1
    return {"t_s": [round((i + 0.5) * width, 9) for i in range(m)],
            "kv_utilization": kv, "waiting": wait, "running": run_}


def metrics(dep: Deployment, eng: Engine, reps: list[Replica], seqs: list[Seq], slo: SLO,
            reqs: list[Request], rate: float | None) -> dict[str, Any]:
    t0 = min(s.req.arrival for s in seqs)
    end = max(s.finish for s in seqs)
    span = max(end - t0, 1e-12)
    dists = distributions(seqs, reps, percentiles_for(slo))  # the definitions: slo.py
    e2e = [s.finish - s.req.arrival for s in seqs]
    n = len(seqs)
    inp = sum(s.req.prompt for s in seqs)
    outp = sum(s.req.output for s in seqs)
    gpus = dep.gpus
    good_n = sum(1 for s in seqs if good(slo, s)) if slo.bounds else len(seqs)
    bounds = evaluate(slo, dists)
    met = all(b["met"] for b in bounds)
    if eng.spec is not None:
        from .specsched import doc as spec_doc
    old = (*(f"p{q}" for q in PERCENTILES), "mean", "max")
    ttft_sum, itl_sum = ({k: dists[m][k] for k in old} for m in ("ttft", "itl"))
    busy = sum(d * (w + r) for rep in reps for _, d, _, w, r in rep.log)
    sat = saturated(eng, reqs)
    if dep.attention_ranks > 1:  # a replica's dp attention ranks each decode that batch
        dp = dep.attention_ranks
        sat = {**sat, "max_decode_batch": sat["max_decode_batch"] * dp,
               "output_tokens_per_s": sat["output_tokens_per_s"] * dp}
    iters = sum(len(rep.durs) for rep in reps)
    kv_time = sum(d * used / rep.total for rep in reps for _, d, used, _, _ in rep.log)
    wait_time = sum(d * w for rep in reps for _, d, _, w, _ in rep.log)
    kv_max = max((used / rep.total for rep in reps for _, _, used, _, _ in rep.log),
                 default=0.0)
    wait_max = max((w for rep in reps for _, _, _, w, _ in rep.log), default=0)
    throughput = {
        "requests_per_s": n / span,
        "input_tokens_per_s": inp / span,
        "output_tokens_per_s": outp / span,
        "requests_per_s_per_gpu": n / span / gpus,
        "input_tokens_per_s_per_gpu": inp / span / gpus,
        "output_tokens_per_s_per_gpu": outp / span / gpus,
    }
    return {
        "requests": n,
        "duration_s": span,
        "iterations": iters,
        "ttft_s": ttft_sum,
        "itl_s": itl_sum,
        "tpot_s": {k: dists["tpot"][k] for k in old},
        "e2e_s": {k: dists["e2e"][k] for k in old},
        "throughput": throughput,
        "goodput": {
            "slo": {"ttft_s": slo.tightest("ttft"), "itl_s": slo.tightest("itl", "tpot"),
                    "e2e_s": slo.tightest("e2e")},
            "requests_per_s": good_n / span,
            "fraction": good_n / n,
        },
        "slo_met": met,
        "slo_percentile": slo.percentile,
        "slo_bounds": bounds,
        "latency": latency_doc(dists, seqs),
        "slo_missed": [] if met else _why(slo, bounds, eng, reps, seqs),
        "preemptions": sum(rep.preemptions for rep in reps),
        # time-weighted over [first arrival, last finish] (idle time: an empty cache and queue)
        "kv_utilization": {"mean": kv_time / len(reps) / span, "max": kv_max},
        "queue": {"mean": wait_time / span, "max": wait_max},
        "littles_law": {"mean_in_flight": busy / span,
                        "arrival_rate_x_mean_latency": None if rate is None
                        else rate * sum(e2e) / n},
        "saturated_per_replica": sat,
        "timeline": _buckets(reps, end),
        **({} if eng.spec is None else {"speculative": spec_doc(
            eng.spec, reps, sat, round(sum(r.prompt for r in reqs) / len(reqs)))}),
        **({} if dep.opts.price is None else {"cost": serving_cost(
            dep.opts.price, dep.opts.price_source or "--price", gpus, throughput,
            good_n / span if slo.bounds else None)}),
    }


def _why(slo: SLO, bounds: list[dict[str, Any]], eng: Engine, reps: list[Replica],
         seqs: list[Seq]) -> list[dict[str, Any]]:
    """Each missed bound's phase and cause (why.py), read only when one is missed."""
    from .why import explain

    return explain(slo, bounds, reps, seqs, lambda t: eng.cost.prefill(1, t),
                   sum(rep.preemptions for rep in reps))
