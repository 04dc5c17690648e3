"""Disaggregated prefill and decode (`serve --pd P:D`): a prefill pool and a decode pool, each a
Deployment of its own (its tp, pp, ep, replicas and scheduler), the KV cache of each request sent
from one to the other over the topology (plan/topology.py's send_s).

As NVIDIA Dynamo, SGLang and vLLM run it:
- the prefill pool runs prompts only, chunked under its token budget, on the scheduler of
  scheduler.py (a request of one output token: its prefill, then it leaves). Dynamo
  (ai-dynamo/dynamo docs/architecture/architecture.md): "prefill workers pass KV cache data to
  decode workers" over NIXL; SGLang (sgl-project/sglang srt/disaggregation/prefill.py: "Waiting
  Queue ... Run forward ... Inflight Queue ... Once the transfer has finished, return the
  request");
- the KV cache is sent once the prefill's forward is done, not layer by layer: SGLang "Prefill
  completes, starts copying kvs into decode" (dynamo components/backends/sglang/docs/
  sglang-kv-transfer-explainer.md); vLLM's NixlConnector hands a finished prefill's blocks
  to the decode worker, which reads them once it has allocated its own
  (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py: request_finished,
  update_state_after_alloc → reqs_to_recv; wait_for_layer_load: "NixlConnector does not do
  layerwise saving."). Both engines alike: layer-wise overlap (LMCache's layerwise mode) is
  not modelled;
- a prefill replica's sends go one after another over its GPUs' links (each TP rank sends its
  own shard on its own NIC, in parallel), the next starting when the last has arrived;
- the decode replica admits the request when it has the blocks of its whole prompt (its
  router: --router, over the decode replicas), and its first step computes the first token on
  the received cache (a one-token chunk on prompt − 1 cached tokens, scheduler.py): TTFT =
  prefill (its queue included) + transfer (its link's queue included) + the decode's queue and
  first step.

The bytes sent are exact: each KV group's blocks the prompt holds (blocks.py's Layout.blocks:
a sliding group only the blocks of its window, a chunked group its chunk), bs token slots of
each of its layers at its token bytes (plan/memory.py's group_token_bytes: the cache's dtype,
an MLA latent, per-layer widths), plus a stateful mixer's fixed state bytes; per rank of each
pipeline stage, the stages sending at once. The time is send_s of the larger of the prefill
rank's bytes and the decode rank's (heterogeneous tp: one side's rank sends, or receives, the
most), across nodes unless both pools fit in one scale-up domain, at the link's full bandwidth
(one RDMA write per block run, no collective efficiency) plus its latency once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..model.config import DTYPE_BITS, ShapecalcError
from ..model.parallel import stage_group_layers
from ..model.plan import layer_plan
from ..plan.cases import closed_form_for
from ..plan.memory import group_token_bytes, stage_state_bytes
from ..plan.price import serving_cost
from ..plan.topology import send_s, topology
from . import sim
from .percentiles import summary
from .scheduler import Replica
from .workload import Request

MAX_POOL = 4096  # replicas a side (sim.MAX_REPLICAS)
WHEN = ("after the prefill: the cache is sent once the prompt's forward is done (vLLM "
        "NixlConnector, SGLang Mooncake/NIXL), not layer by layer")


def parse_pd(text: str) -> tuple[int, int]:
    """`P:D`: prefill replicas and decode replicas, each ≥ 1."""
    from ..inputs.numbers import bounded_int, pos_int

    head, colon, tail = text.partition(":")
    if not colon or not head.strip() or not tail.strip():
        raise ShapecalcError("pd", f"{text!r}: give PREFILL:DECODE replicas, e.g. --pd 1:2")
    sides = []
    for side, v in (("prefill", head), ("decode", tail)):
        digits = v.strip().replace("_", "")
        if digits.isascii() and digits.isdigit() and int(digits) == 0:
            raise ShapecalcError("pd", f"{text!r} has no {side} replica: each side needs ≥ 1 "
                                 "(e.g. --pd 1:2)")
        sides.append(bounded_int(pos_int(v, "pd", text), "pd", 1, MAX_POOL, f"{side} replicas"))
    return sides[0], sides[1]


@dataclass(frozen=True)
class PD:
    """The two pools: each a Deployment (its layout, replicas, router, scheduler)."""

    prefill: sim.Deployment
    decode: sim.Deployment

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def across(self) -> bool:
        """Whether a transfer crosses the network: both pools do not fit one scale-up domain."""
        g = self.decode.gpu
        return self.gpus > (g.scale_up_domain or g.gpus_per_node)

    def doc(self) -> dict[str, Any]:
        return {side: {"tp": d.wl.tp, "pp": d.wl.pp, "ep": d.wl.ep, "replicas": d.replicas,
                       "gpus": d.gpus}
                for side, d in (("prefill", self.prefill), ("decode", self.decode))}


class Cache:
    """One request's KV cache after its prompt, on one pool's ranks (module doc)."""

    def __init__(self, dep: sim.Deployment, eng: sim.Engine):
        wl, m = dep.wl, dep.model
        cf = closed_form_for(m, wl)
        lay = eng.cfg.layout
        assert lay is not None
        self.lay = replace(lay, pinned=0)
        self.per = stage_group_layers(layer_plan(m), wl.pp)
        self.tok = group_token_bytes(cf, wl.tp, DTYPE_BITS[wl.kv])
        pre = cf.at(1, 1, "prefill", wl.tp, wl.pp, wl.dtype, wl.kv, wl.act)
        self.states = [int(x) for x in stage_state_bytes(cf, wl.pp, pre)]
        self.tp = wl.tp
        self.memo: dict[int, tuple[int, int]] = {}

    def bytes(self, prompt: int) -> tuple[int, int]:
        """(bytes on the rank of the fullest stage, bytes over every rank of every stage)."""
        if prompt not in self.memo:
            bs = self.lay.block_size
            blocks = [self.lay.blocks(g, prompt, prompt) for g in range(len(self.tok))]
            stage = [sum(b * bs * n * t for b, n, t in zip(blocks, layers, self.tok, strict=True))
                     + s for layers, s in zip(self.per, self.states, strict=True)]
            self.memo[prompt] = (max(stage), sum(stage) * self.tp)
        return self.memo[prompt]


@dataclass
class Result:
    pre: list[Replica]
    dec: list[Replica]
    seqs: list[Any]  # the decode pool's sequences, each with the user's request (its arrival)
    prefill_done: list[float]  # by request id
    ready: list[float]  # its cache on the decode side
    rank_bytes: list[int]
    total_bytes: list[int]
    peng: sim.Engine
    deng: sim.Engine


def engines(pd: PD) -> tuple[sim.Engine, sim.Engine]:
    for d in (pd.prefill, pd.decode):
        if d.shared_prefix:
            raise ShapecalcError("shared-prefix", "prefix caching is not simulated with --pd: "
                                 "leave out --shared-prefix")
    return sim.engine(pd.prefill), sim.engine(pd.decode)


def _rebase(reqs: list[Request]) -> list[Request]:
    """One clock for both pools: from the first arrival."""
    t0 = min((r.arrival for r in reqs), default=0.0)
    return [replace(r, arrival=r.arrival - t0) for r in reqs] if t0 else reqs


def _prefill(pd: PD, reqs: list[Request], peng: sim.Engine, deng: sim.Engine
             ) -> tuple[list[Replica], list[float], list[float], list[int], list[int]]:
    """The prefill pool's run and each request's send: (replicas, prefill end, cache arrived,
    bytes per rank, bytes), by request id."""
    pre, pseqs = sim.run(pd.prefill, [replace(r, output=1) for r in reqs], eng=peng)
    owner = {rid: i for i, rep in enumerate(pre) for _, kind, rid in rep.events
             if kind == "finish"}
    pc, dc = Cache(pd.prefill, peng), Cache(pd.decode, deng)
    topo, across = topology(pd.decode.gpu), pd.across
    free = [0.0] * len(pre)
    n = len(reqs)
    done = [s.finish for s in pseqs]
    ready, rank, total = [0.0] * n, [0] * n, [0] * n
    for i in sorted(range(n), key=lambda x: (done[x], x)):  # each link in order of prefill end
        p = reqs[i].prompt
        (rp, tot), (rd, _) = pc.bytes(p), dc.bytes(p)
        o = owner[i]
        free[o] = ready[i] = max(done[i], free[o]) + send_s(topo, max(rp, rd), across)
        rank[i], total[i] = rp, tot
    return pre, done, ready, rank, total


def run_prefill(pd: PD, reqs: list[Request], eng: tuple[sim.Engine, sim.Engine]) -> list[float]:
    """Each request's prefill part of TTFT: arrival to its cache on the decode side."""
    reqs = _rebase(reqs)
    ready = _prefill(pd, reqs, *eng)[2]
    return [r - q.arrival for r, q in zip(ready, reqs, strict=True)]


def run(pd: PD, reqs: list[Request], eng: tuple[sim.Engine, sim.Engine] | None = None) -> Result:
    peng, deng = eng or engines(pd)
    reqs = _rebase(reqs)
    sim.check_requests(pd.decode, deng, reqs)
    pre, done, ready, rank, total = _prefill(pd, reqs, peng, deng)
    dec, seqs = sim.run(pd.decode, [replace(r, arrival=ready[r.id], cached=r.prompt)
                                    for r in reqs], eng=deng, rebase=False)
    for s in seqs:
        s.req = reqs[s.req.id]
    return Result(pre, dec, seqs, done, ready, rank, total, peng, deng)


def _busy(reps: list[Replica], span: float) -> float:
    """Fraction of the run the pool's replicas spend in iterations."""
    return sum(sum(r.durs) for r in reps) / len(reps) / span


def _pool(d: sim.Deployment, eng: sim.Engine, reps: list[Replica], span: float
          ) -> dict[str, Any]:
    wait = sum(dur * w for rep in reps for _, dur, _, w, _ in rep.log)
    return {"tp": d.wl.tp, "pp": d.wl.pp, "ep": d.wl.ep, "replicas": d.replicas, "gpus": d.gpus,
            "kv_blocks_per_replica": eng.cfg.num_blocks,
            "iterations": sum(len(r.durs) for r in reps), "busy_fraction": _busy(reps, span),
            "queue_mean": wait / span,
            "queue_max": max((w for rep in reps for _, _, _, w, _ in rep.log), default=0),
            "preemptions": sum(r.preemptions for r in reps)}


def _ints(v: list[int]) -> dict[str, Any]:
    return {"min": min(v), "max": max(v), "mean": sum(v) / len(v)}


def metrics(pd: PD, res: Result, slo: sim.SLO, reqs: list[Request], rate: float | None
            ) -> dict[str, Any]:
    """sim.metrics of the decode pool, the user's arrivals its clock (TTFT from arrival to the
    decode's first token), its per-GPU rates and cost over both pools' GPUs, Little's law over
    both pools and the transfers, and the `disaggregation` block: each pool, the transfers,
    TTFT's parts."""
    m = sim.metrics(pd.decode, res.deng, res.dec, res.seqs, slo, reqs, rate)
    span = m["duration_s"]
    th = m["throughput"]
    for k in ("requests_per_s", "input_tokens_per_s", "output_tokens_per_s"):
        th[k + "_per_gpu"] = th[k] / pd.gpus
    if "cost" in m:
        opts = pd.decode.opts
        assert opts.price is not None
        good = m["goodput"]["requests_per_s"] if slo.bounds else None
        m["cost"] = serving_cost(opts.price, opts.price_source or "--price", pd.gpus, th, good)
    busy = sum(d * (w + r) for reps in (res.pre, res.dec) for rep in reps
               for _, d, _, w, r in rep.log)
    sent = sum(r - p for r, p in zip(res.ready, res.prefill_done, strict=True))
    m["littles_law"]["mean_in_flight"] = (busy + sent) / span
    arrival = [s.req.arrival for s in res.seqs]
    topo = topology(pd.decode.gpu)
    m["disaggregation"] = {
        "prefill": _pool(pd.prefill, res.peng, res.pre, span),
        "decode": _pool(pd.decode, res.deng, res.dec, span),
        "kv_transfer": {
            "when": WHEN, "link": "scale-out network" if pd.across else "scale-up link",
            "bandwidth_bytes_per_s": topo.out_bw if pd.across else topo.up_bw,
            "latency_s": topo.out_lat if pd.across else topo.up_lat,
            "bytes_per_rank": _ints(res.rank_bytes), "bytes": _ints(res.total_bytes),
            "bytes_all_requests": sum(res.total_bytes)},
        "ttft_parts": {
            "prefill_s": summary([d - a for d, a in zip(res.prefill_done, arrival,
                                                        strict=True)]),
            "transfer_s": summary([r - d for r, d in zip(res.ready, res.prefill_done,
                                                         strict=True)]),
            "decode_first_s": summary([s.first - r for s, r in zip(res.seqs, res.ready,
                                                                   strict=True)])}}
    return m
