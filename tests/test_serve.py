"""`shapecalc serve` against theory: the iteration cost against the closed form, a static batch
against fit, low load against the single-request times, the saturated ceiling, Little's law,
and a hand-checked schedule with one preemption."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from shapecalc.costs.closed import ClosedForm
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.cases import closed_form_for
from shapecalc.plan.fit import fit
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.perf import perf_params
from shapecalc.serve import sim
from shapecalc.serve import workload as W
from shapecalc.serve.cost import VARYING, IterationCost

H100 = load_gpu("h100-sxm")


def _dep(name="llama3-8b", tp=1, **kw):
    wl = Workload(seq=1, tp=tp, logits="last", block_size=kw.pop("block_size", 16))
    return sim.Deployment(load_preset(name), wl, H100, kw.pop("opts", PlanOptions()), **kw)


def _run(dep, reqs, **kw):
    eng = sim.engine(dep)
    reps, seqs = sim.run(dep, reqs, eng=eng, **kw)
    return eng, reps, seqs


def _fixed(n, prompt, output, rate=None, seed=0):
    return W.generate(n, rate, W.Lengths("fixed", prompt), W.Lengths("fixed", output), seed)


# -- the iteration cost is the closed form's ---------------------------------------------------


@pytest.mark.parametrize(("name", "tp"), [("llama3-70b", 4), ("qwen3-30b-a3b", 2), ("gpt2", 1),
                                          ("falcon-40b", 8)])
def test_cost_reproduces_closed_form_at_any_batch_and_length(name, tp):
    """Coefficients read at B ∈ {1, 2}, T ≤ 4 give the totals at other B, T exactly."""
    model = load_preset(name)
    wl = Workload(seq=1, tp=tp, logits="last")
    cf = closed_form_for(model, wl)
    ic = IterationCost(cf, H100, perf_params(H100), wl, H100.peak("bf16"))
    for B, T in ((1, 1000), (7, 333), (64, 17)):
        pre, dec = cf.at(B, T, "prefill", tp), cf.at(B, T, "decode", tp)
        got_pre = ic.totals(B, B * T, B * T * T, 0, 0, 0)
        got_dec = ic.totals(0, 0, 0, 0, B, B * T)
        for k in VARYING:
            assert got_pre[k] == pre[k], (k, B, T)
            assert got_dec[k] == dec[k], (k, B, T)


@pytest.mark.parametrize("name", ["llama3-8b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("counted", ["full", "causal"])
def test_chunks_add_up_to_the_whole_prefill_under_causal_attention(name, counted):
    """The causal FLOPs (what the time model runs) of a prompt split into chunks are the whole
    prefill's plus one LM head per extra chunk, and a one-token chunk on L cached tokens costs a
    decode step on L: the context offsets are right, not only the c = 0 the coefficients come
    from. (Whatever --attention-flops counts; under `causal` also the counted FLOPs.)"""
    model = load_preset(name)
    wl = Workload(seq=1, tp=1, logits="last", attention_flops=counted)
    cf = ClosedForm(model, logits="last", attention_flops=counted)
    ic = IterationCost(cf, H100, perf_params(H100), wl, H100.peak("bf16"))
    keys = ["causal_flops"] + (["flops"] if counted == "causal" else [])
    for key in keys:
        whole = cf.at(1, 1500, "prefill", 1)[key]
        parts = [(0, 700), (700, 512), (1212, 288)]
        got = sum(ic.totals(1, n, n * n + 2 * c * n, c, 0, 0)[key] for c, n in parts)
        # S(0), the per-sequence constant (the LM head), from the closed form at T = 1, 2, 3
        s = [cf.at(1, t, "prefill", 1)[key] for t in (1, 2, 3)]
        s0 = 3 * s[0] - 3 * s[1] + s[2]
        assert s0 > 0 and got == whole + 2 * s0, key
        for L in (1, 100, 4095):
            chunk = ic.totals(1, 1, 1 + 2 * L, L, 0, 0)[key]
            assert chunk == cf.at(1, L, "decode", 1)[key], (key, L)


# -- a static batch is fit's ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])  # fp8 weights: W8A8 at the fp8 peak, as fit
def test_static_batch_reproduces_fit_exactly(dtype):
    B, T, out = 8, 512, 4
    dep = _dep(max_num_seqs=B)
    dep = replace(dep, wl=dep.wl.model_copy(update={"dtype": dtype}))
    model, wl = dep.model, dep.wl.model_copy(update={"batch": B, "seq": T})
    doc = fit(model, wl, H100, PlanOptions())
    eng, reps, seqs = _run(dep, _fixed(B, T, out), trace=True)
    sched = reps[0].schedule
    assert sched[0]["prefill"] == [(i, 0, T) for i in range(B)] and sched[0]["decodes"] == 0
    assert sched[0]["seconds"] == doc["expected"]["ttft_s"]  # exactly
    assert all(s.first - s.req.arrival == doc["expected"]["ttft_s"] for s in seqs)
    assert sched[1]["decodes"] == B and sched[1]["cache"] == B * T
    assert sched[1]["seconds"] == doc["expected"]["decode_s_per_token"]  # exactly
    assert len(sched) == out and all(s.finish == sched[-1]["start_s"] + sched[-1]["seconds"]
                                     for s in seqs)
    # the blocks: fit's largest batch at a context of 4096 is what the replica's blocks hold
    long = fit(model, wl.model_copy(update={"batch": 1, "seq": 4096}), H100, PlanOptions())
    assert long["max_batch"] == eng.cfg.num_blocks // (4096 // 16)
    assert long["at_max_batch"]["expected"]["decode_s_per_token"] == eng.cost.decode(
        long["max_batch"], 4096)


# -- low load, saturation, Little's law ----------------------------------------------------------


def test_low_load_equals_single_request_times():
    P, O = 1024, 64
    dep = _dep()
    reqs = _fixed(30, P, O, rate=0.01)  # ~100 s apart: each request alone
    eng, reps, seqs = _run(dep, reqs)
    one = fit(dep.model, dep.wl.model_copy(update={"batch": 1, "seq": P}), H100, PlanOptions())
    # each starts at its arrival: its first token comes fit's TTFT later (to the float)
    assert all(s.first == s.req.arrival + one["expected"]["ttft_s"] for s in seqs)
    m = sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, 0.01)
    assert m["ttft_s"]["p99"] == pytest.approx(one["expected"]["ttft_s"], rel=1e-12)
    # the gaps are decode steps of one sequence on P … P+O−2 cached tokens: the median one
    mid = fit(dep.model, dep.wl.model_copy(update={"batch": 1, "seq": P + (O - 1) // 2}), H100,
              PlanOptions())
    assert m["itl_s"]["p50"] == pytest.approx(mid["expected"]["decode_s_per_token"], rel=1e-12)
    assert m["preemptions"] == 0


def test_throughput_never_exceeds_the_saturated_ceiling():
    mixed = W.generate(600, 50.0, W.Lengths("uniform", 200, 900), W.Lengths("lognormal", 200, 0.5),
                       3)
    for dep, reqs, floor in ((_dep(max_num_seqs=512), _fixed(1500, 512, 256), 0.4),
                             (_dep("llama3-70b", tp=4), mixed, 0.0)):
        eng, reps, seqs = _run(dep, reqs)
        m = sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, None)
        ceiling = m["saturated_per_replica"]["output_tokens_per_s"]
        got = m["throughput"]["output_tokens_per_s"]
        assert floor * ceiling <= got <= ceiling  # (a fixed workload comes close to it)


def test_littles_law():
    rate = 4.0
    dep = _dep()
    reqs = W.generate(3000, rate, W.Lengths("fixed", 1024), W.Lengths("lognormal", 200, 0.5), 7)
    eng, reps, seqs = _run(dep, reqs)
    m = sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, rate)
    ll = m["littles_law"]
    # in flight, from the engines' queue and running counts over time, against λ × mean latency
    assert ll["mean_in_flight"] == pytest.approx(ll["arrival_rate_x_mean_latency"], rel=0.05)
    assert 1.0 < ll["mean_in_flight"]


# -- a hand-checked schedule with one preemption -------------------------------------------------


def test_hand_checked_schedule_with_one_preemption():
    """Blocks of 4 tokens, 6 blocks, a budget of 8 tokens; A and B (8-token prompts, 6 output
    tokens) at t = 0. Worked by hand (tests/README: serve):
    0: A prefills 8 (2 blocks; free 4) and emits; B waits (no budget).
    1: A decodes on 8 (a 3rd block; free 3); B prefills 7 of 8 (2 blocks; free 1).
    2: A on 9; B's last prompt token (no new block) → B emits its first token.
    3: A on 10, B on 8 (a 3rd block; free 0).  4: A on 11, B on 9.
    5: A on 12 needs a 4th block, none free: B (last admitted) is preempted, freeing 3 (free 3,
       then 2 after A's); A emits its 6th token and ends (frees 4); B, with 3 tokens out,
       re-prefills 11 tokens: 7 now (2 blocks).
    6: B's other 4 (a 3rd block) → its 4th token.  7: B on 11.  8: B on 12 (a 4th) → ends."""
    dep = _dep("seed-tiny", block_size=4, max_num_seqs=4, kv_blocks=6,
               opts=PlanOptions(max_batched_tokens=8))
    eng, reps, seqs = _run(dep, _fixed(2, 8, 6), trace=True)
    rep = reps[0]
    got = [(s["prefill"], s["decodes"], s["cache"], s["free_blocks"]) for s in rep.schedule]
    assert got == [
        ([(0, 0, 8)], 0, 0, 4),
        ([(1, 0, 7)], 1, 8, 1),
        ([(1, 7, 1)], 1, 9, 1),
        ([], 2, 18, 0),
        ([], 2, 20, 0),
        ([(1, 0, 7)], 1, 12, 0),
        ([(1, 7, 4)], 0, 0, 3),
        ([], 1, 11, 3),
        ([], 1, 12, 2),
    ]
    assert rep.preemptions == 1 and seqs[1].preemptions == 1 and seqs[0].preemptions == 0
    assert [e[1:] for e in rep.events] == [("preempt", 1), ("finish", 0), ("finish", 1)]
    assert rep.free == 6
    # times: each step is the cost of its mix, back to back from 0
    t = 0.0
    ends = []
    for s in rep.schedule:
        assert s["start_s"] == t
        t += s["seconds"]
        ends.append(t)
    assert seqs[0].first == ends[0] and seqs[0].finish == ends[5]
    assert seqs[1].first == ends[2] and seqs[1].finish == ends[8]
    assert rep.gaps == [ends[6] - ends[4]]  # B's 3rd token (step 4) to its 4th (step 6)
    c = eng.cost
    assert rep.schedule[3]["seconds"] == c.seconds(0, 0, 0, 0, 2, 18)
    assert rep.schedule[1]["seconds"] == c.seconds(1, 7, 49, 0, 1, 8)
    assert rep.schedule[2]["seconds"] == c.seconds(1, 1, 1 + 2 * 7, 7, 1, 9)


def test_fast_forward_matches_step_by_step():
    dep = _dep(max_num_seqs=64)
    reqs = W.generate(400, 3.0, W.Lengths("uniform", 100, 3000), W.Lengths("lognormal", 300, 0.8),
                      11)
    out = []
    for trace in (False, True):
        eng, reps, seqs = _run(dep, reqs, trace=trace)
        out.append((sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, 3.0), seqs))
    (a, sa), (b, sb) = out
    assert a["iterations"] == b["iterations"] and a["preemptions"] == b["preemptions"]
    for x, y in zip(sa, sb, strict=True):
        assert x.first == pytest.approx(y.first, rel=1e-12)
        assert x.finish == pytest.approx(y.finish, rel=1e-12)
    assert a["itl_s"]["p99"] == pytest.approx(b["itl_s"]["p99"], rel=1e-12)


def test_shared_prefix_skips_the_cached_blocks():
    dep = _dep(shared_prefix=500)
    reqs = _fixed(2, 1000, 2, rate=0.001)
    eng, reps, seqs = _run(dep, reqs)
    bs = 16
    hit = 500 // bs * bs
    assert seqs[0].first == seqs[0].req.arrival + eng.cost.prefill(1, 1000)
    n = 1000 - hit
    assert seqs[1].first == seqs[1].req.arrival + eng.cost.seconds(1, n, n * n + 2 * hit * n,
                                                                   hit, 0, 0)
    assert reps[0].free == eng.cfg.num_blocks - hit // bs


def test_least_loaded_router_and_replicas():
    reqs = W.generate(300, 20.0, W.Lengths("fixed", 512), W.Lengths("fixed", 64), 5)
    one = _dep()
    for router in sim.ROUTERS:
        dep = _dep(replicas=3, router=router)
        eng, reps, seqs = _run(dep, reqs)
        assert len(reps) == 3 and all(r.durs for r in reps)
        assert sum(len(r.events) for r in reps) == len(reqs)
        m = sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, 20.0)
        assert m["throughput"]["output_tokens_per_s_per_gpu"] == pytest.approx(
            m["throughput"]["output_tokens_per_s"] / 3)
    e1, r1, s1 = _run(one, reqs)
    m1 = sim.metrics(one, e1, r1, s1, sim.SLO(), reqs, 20.0)
    assert m["e2e_s"]["mean"] < m1["e2e_s"]["mean"]


def test_closed_loop_keeps_concurrency():
    dep = _dep()
    reqs = _fixed(40, 256, 32)
    _eng, reps, seqs = _run(dep, reqs, concurrency=4)
    rep = reps[0]
    assert max(r for _, _, _, _, r in rep.log) <= 4
    starts = sorted(s.req.arrival for s in seqs)
    assert starts[:4] == [0.0] * 4 and starts[4] > 0
    ends = sorted(s.finish for s in seqs)
    assert starts[4:] == ends[:36]  # each request starts when one ends


def test_workload_lengths_and_trace(tmp_path):
    rng_reqs = W.generate(5000, 10.0, W.parse_lengths("lognormal:500,0.6", "p"),
                          W.parse_lengths("uniform:10,20", "o"), 1)
    mean = sum(r.prompt for r in rng_reqs) / len(rng_reqs)
    assert mean == pytest.approx(500, rel=0.05)
    assert {r.output for r in rng_reqs} == set(range(10, 21))
    gaps = [b.arrival - a.arrival for a, b in itertools.pairwise(rng_reqs)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.05)
    cv = 3.0
    g = W.generate(5000, 10.0, W.Lengths("fixed", 1), W.Lengths("fixed", 1), 2, cv)
    gg = [b.arrival - a.arrival for a, b in itertools.pairwise(g)]
    m = sum(gg) / len(gg)
    sd = math.sqrt(sum((x - m) ** 2 for x in gg) / len(gg))
    assert m == pytest.approx(0.1, rel=0.1) and sd / m == pytest.approx(cv, rel=0.15)
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 1.5, "prompt_tokens": 10, "output_tokens": 3}\n'
                 '{"arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 4}\n')
    c = tmp_path / "t.csv"
    c.write_text("prompt_tokens,arrival_s,output_tokens\n10,1.5,3\n20,0.5,4\n")
    for path in (p, c):  # sorted, and relative to the first arrival
        assert [(r.arrival, r.prompt, r.output) for r in W.read_trace(path)] == [
            (0.0, 20, 4), (1.0, 10, 3)]
