"""sim.run's fast path (serve/alone.py): round-robin replicas of an open loop, each run alone
over its own arrivals, make the very runs of the shared event loop, to the bit."""

from __future__ import annotations

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.ep import EPPlan
from shapecalc.plan.options import PlanOptions
from shapecalc.serve import alone, sim
from shapecalc.serve import workload as W

H100 = load_gpu("h100-sxm")


def _runs(dep: sim.Deployment, reqs: list[W.Request]) -> tuple:
    reps, seqs = sim.run(dep, reqs)
    return ([(r.log, r.durs, r.toks, r.ptoks, r.gaps, r.events, r.preemptions) for r in reps],
            [(s.req.id, s.first, s.last, s.finish, s.preemptions) for s in seqs])


@pytest.mark.parametrize("name,ep,replicas,rate", [
    ("llama3-8b", 1, 3, 40.0),  # arrivals while the others decode: every stretch is cut
    ("llama3-8b", 1, 2, None),  # all at t = 0
    ("qwen3-30b-a3b", 4, 1, 30.0),  # 4 attention ranks, each its own scheduler
    ("gpt-oss-20b", 1, 2, 20.0),  # sliding windows: events the stretch stops at
])
def test_fast_path_is_the_shared_loop(monkeypatch, name, ep, replicas, rate):
    wl = Workload(seq=1, tp=1, ep=ep, logits="last")
    dep = sim.Deployment(load_preset(name), wl, H100, PlanOptions(), replicas=replicas,
                         kv_blocks=400, ep_plan=EPPlan() if ep > 1 else None)
    # 2 prompt lengths, short outputs: prefills, decodes and a cache that runs out (preemption)
    reqs = W.generate(48, rate, W.Lengths("fixed", 700), W.Lengths("fixed", 40), 0)
    reqs = [W.Request(r.id, r.arrival, 700 + 900 * (r.id % 2), r.output) for r in reqs]
    assert alone.independent(dep.router, None, replicas * ep, None)
    fast = _runs(dep, reqs)
    monkeypatch.setattr(sim, "independent", lambda *a: False)
    assert _runs(dep, reqs) == fast


def test_interacting_runs_keep_the_shared_loop():
    assert not alone.independent("least-loaded", None, 2, None)  # reads every queue
    assert not alone.independent("round-robin", 8, 2, None)  # a closed loop
    assert not alone.independent("round-robin", None, 2, object())  # one stream of draws
    assert alone.independent("round-robin", None, 1, object())
