"""`shapecalc serve` on every model: sliding-window, chunked and hybrid models (vLLM's hybrid KV
cache manager, serve/blocks.py), their iteration cost against the closed form, a block schedule
worked by hand, and fit's sizing."""

from __future__ import annotations

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.cases import closed_form_for
from shapecalc.plan.fit import fit
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.perf import perf_params
from shapecalc.serve import sim
from shapecalc.serve import workload as W
from shapecalc.serve.basis import value
from shapecalc.serve.cost import IterationCost

H100 = load_gpu("h100-sxm")


def _dep(model, tp=1, block_size=16, **kw):
    wl = Workload(seq=1, tp=tp, logits="last", block_size=block_size)
    return sim.Deployment(model, wl, H100, kw.pop("opts", PlanOptions()), **kw)


def _cost(name, tp=1):
    model = load_preset(name)
    wl = Workload(seq=1, tp=tp, logits="last")
    cf = closed_form_for(model, wl)
    return cf, IterationCost(cf, H100, perf_params(H100), wl, H100.peak("bf16"))


# -- the iteration cost reads each group's keys --------------------------------------------------


@pytest.mark.parametrize(("name", "tp", "lengths"), [
    ("gpt-oss-120b", 4, (100, 128, 129, 300, 5000)),  # sliding W = 128 beside full layers
    pytest.param("gemma3-27b", 1, (1000, 1024, 1025, 4000), marks=pytest.mark.slow),
    pytest.param("llama4-scout", 4, (8191, 8192, 8193, 20000), marks=pytest.mark.slow),  # C
    pytest.param("nemotron-nano-9b-v2", 1, (100, 129, 700), marks=pytest.mark.slow),  # scan
])
def test_cost_reproduces_closed_form_across_windows_and_chunks(name, tp, lengths):
    """Coefficients solved from ClosedForm.at give its totals exactly below, at and past each
    window, chunk or scan cut, at other batches: decode on L reads min(L+1, W) keys a sliding
    layer and (L mod C) + 1 a chunked one; the prefill their sums."""
    cf, ic = _cost(name, tp)
    assert ic.windowed
    for B in (1, 3):
        for T in lengths:
            pre, dec = cf.at(B, T, "prefill", tp), cf.at(B, T, "decode", tp)
            pex = tuple(B * value(b, T) for b in ic.pbasis)
            dex = tuple(B * value(b, T) for b in ic.dbasis)
            got_pre = ic.totals(B, B * T, B * T * T, 0, 0, 0, pex, (0,) * len(dex))
            got_dec = ic.totals(0, 0, 0, 0, B, B * T, (0,) * len(pex), dex)
            for k in ic.varying:
                assert got_pre[k] == pre[k], (k, B, T)
                assert got_dec[k] == dec[k], (k, B, T)


def test_sliding_chunks_add_up_to_the_whole_prefill():
    """A prompt of 1500 tokens past gpt-oss's window of 128, in three chunks: the causal FLOPs
    are the whole prefill's plus one per-sequence constant (the LM head) per extra chunk."""
    cf, ic = _cost("gpt-oss-120b", 4)
    whole = cf.at(1, 1500, "prefill", 4)["causal_flops"]
    got = 0
    for c, n in ((0, 700), (700, 512), (1212, 288)):
        pex = tuple(value(b, c + n) - value(b, c) for b in ic.pbasis)
        rex = tuple(value(b, c) for b in ic.dbasis)
        got += ic.totals(1, n, n * n + 2 * c * n, c, 0, 0, pex, (0,) * len(rex),
                         rex)["causal_flops"]
    head = ic.coeffs["causal_flops"].k0 // 2 + ic.coeffs["causal_flops"].step
    assert got == whole + 2 * head


def test_static_batch_past_the_window_reproduces_fit_exactly():
    """gemma3-27b, 2 prompts of 3000 tokens (past its window of 1024): the prefill step and
    the first decode step take fit's expected times to the float."""
    B, T = 2, 3000
    dep = _dep(load_preset("gemma3-27b"), max_num_seqs=B)
    doc = fit(dep.model, dep.wl.model_copy(update={"batch": B, "seq": T}), H100, PlanOptions())
    eng = sim.engine(dep)
    reps, _ = sim.run(dep, W.generate(B, None, W.Lengths("fixed", T), W.Lengths("fixed", 3),
                                      0), eng=eng, trace=True)
    sched = reps[0].schedule
    assert sched[0]["prefill"] == [(i, 0, T) for i in range(B)]
    assert sched[0]["seconds"] == doc["expected"]["ttft_s"]
    assert sched[1]["decodes"] == B and sched[1]["seconds"] == doc["expected"][
        "decode_s_per_token"]


# -- blocks over time, by hand -------------------------------------------------------------------


def test_sliding_window_block_use_by_hand():
    """gpt-oss-120b with its window cut to W = 8 and blocks of 4 tokens; request 0 of 6 prompt
    and 8 output tokens, request 1 of 3 and 4, both at t = 0. A step on c computed tokens with
    slots for N holds ⌈N/4⌉ blocks of the full group and ⌈N/4⌉ − ⌊max(0, c − 7)/4⌋ of the
    sliding one (vLLM's SlidingWindowManager frees the blocks behind the window):

    it  request 0 (c, N)  sliding  full   request 1 (c, N)  sliding  full   Σ sliding  Σ full
    0   prefill (0, 6)       2      2     prefill (0, 3)       1      1        3        3
    1   decode (6, 7)        2      2     decode (3, 4)        1      1        3        3
    2   decode (7, 8)        2      2     decode (4, 5)        2      2        4        4
    3   decode (8, 9)        3      3     decode (5, 6)        2      2        5        5
    4   decode (9, 10)       3      3     (finished)                           3        3
    5   decode (10, 11)      3      3                                          3        3
    6   decode (11, 12)      2      3     (token 11: ⌊4/4⌋ = 1 block behind)   2        3
    7   decode (12, 13)      3      4                                          3        4
    """
    model = load_preset("gpt-oss-120b").model_copy(update={"sliding_window": 8})
    dep = _dep(model, tp=4, block_size=4, kv_blocks=50)
    eng = sim.engine(dep)
    lay = eng.cfg.layout
    assert lay is not None and lay.reaches == (8, None) and lay.weights == (1, 1)
    assert lay.units == 100  # 50 of fit's blocks (4 slots of all 36 layers) = 100 of 18
    reqs = [W.Request(0, 0.0, 6, 8), W.Request(1, 0.0, 3, 4)]
    reps, _ = sim.run(dep, reqs, eng=eng, trace=True)
    sched = reps[0].schedule
    assert [it["group_blocks"] for it in sched] == [
        [3, 3], [3, 3], [4, 4], [5, 5], [3, 3], [3, 3], [2, 3], [3, 4]]
    assert [it["free_blocks"] for it in sched] == [94, 94, 92, 90, 94, 94, 95, 93]
    assert [it["decodes"] for it in sched] == [0, 2, 2, 2, 1, 1, 1, 1]
    assert reps[0].free == 100 and not reps[0].evs.get(reps[0].it)  # everything given back


def test_fast_forward_matches_step_by_step_with_windows_and_preemption():
    """Window frees, chunk wraps and state slots are events the fast-forward stops at: the
    run is the same stepped one iteration at a time, preemptions included."""
    model = load_preset("gpt-oss-120b")
    dep = _dep(model, tp=4, kv_blocks=300, max_num_seqs=64,
               opts=PlanOptions(max_batched_tokens=2048))
    reqs = W.generate(80, 50.0, W.Lengths("uniform", 100, 600), W.Lengths("uniform", 50, 400), 1)
    eng = sim.engine(dep)
    fast, a = sim.run(dep, reqs, eng=eng)
    slow, b = sim.run(dep, reqs, eng=eng, trace=True)
    assert fast[0].preemptions == slow[0].preemptions > 0
    assert len(fast[0].durs) == len(slow[0].durs)
    assert [s.finish for s in a] == pytest.approx([s.finish for s in b], rel=1e-12)


# -- every model runs ----------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["--preset", "gpt-oss-120b", "--tp", "4"],
    pytest.param(["--preset", "gemma3-27b"], marks=pytest.mark.slow),
    pytest.param(["--preset", "mistral-7b"], marks=pytest.mark.slow),
    pytest.param(["--preset", "llama4-scout", "--tp", "4"], marks=pytest.mark.slow),
    pytest.param(["--preset", "nemotron-nano-9b-v2"], marks=pytest.mark.slow),
    pytest.param(["--preset", "qwen3-next-80b-a3b", "--tp", "4"], marks=pytest.mark.slow),
])
def test_sliding_chunked_and_hybrid_models_serve(cli, args):
    res = cli("serve", *args, "--gpu", "H100-SXM", "--rate", "4", "--requests", "60", "--json")
    assert res.code == 0, res.err
    doc = res.json()
    assert doc["throughput"]["output_tokens_per_s"] > 0
    pool = doc["kv_pool"]
    assert pool["units"] > 0 and (pool["groups"] or pool["state_units_per_sequence"])


def test_hybrid_takes_one_state_slot_a_sequence():
    """nemotron-nano-9b-v2: each running sequence holds its Mamba-2 states (one slot, the
    model's state_cache_bytes on the rank) whatever its length, beside its attention blocks."""
    model = load_preset("nemotron-nano-9b-v2")
    dep = _dep(model)
    eng = sim.engine(dep)
    lay = eng.cfg.layout
    assert lay is not None
    state = closed_form_for(model, dep.wl).at(1, 1, "prefill", 1)["state_cache_bytes_per_rank"]
    assert lay.state == -(-state // lay.unit)
    assert lay.own(0, 1) == lay.state + lay.per_block  # one block of each group, and the state
    assert lay.own(5000, 5001) - lay.own(5, 6) == (313 - 1) * lay.per_block


# -- a window covering every request is full attention ---------------------------------------


def test_window_covering_every_request_gives_the_full_attention_twins_times():
    """mistral-7b (W = 4096 on every layer) and its twin without the window, on requests of at
    most 4096 tokens: the same iterations, times and preemptions."""
    model = load_preset("mistral-7b")
    twin = model.model_copy(update={"sliding_window": None})
    reqs = W.generate(60, 40.0, W.Lengths("uniform", 500, 3000), W.Lengths("uniform", 10, 1000),
                      3)
    out = []
    for m in (model, twin):
        dep = _dep(m, kv_blocks=900, max_num_seqs=32)
        eng = sim.engine(dep)
        reps, seqs = sim.run(dep, reqs, eng=eng)
        out.append((eng, reps[0].durs, [s.finish for s in seqs], reps[0].preemptions))
    (e1, d1, f1, p1), (e2, d2, f2, p2) = out
    assert e1.cost.windowed and not e2.cost.windowed
    assert d1 == d2 and f1 == f2 and p1 == p2 > 0


# -- fit's sizing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "tp"), [
    ("gemma3-27b", 1), pytest.param("gpt-oss-120b", 4, marks=pytest.mark.slow),
    pytest.param("nemotron-nano-9b-v2", 1, marks=pytest.mark.slow)])
def test_pool_is_fits_kv_cache(name, tp):
    """The replica's blocks are fit's (kv_tokens_fit // block_size at a chunk of
    max_batched_tokens), and the most sequences of T tokens its pool holds — each group's
    blocks and the states — is fit's max_batch at T."""
    model = load_preset(name)
    dep = _dep(model, tp=tp)
    eng = sim.engine(dep)
    lay = eng.cfg.layout
    assert lay is not None
    at_chunk = fit(model, dep.wl.model_copy(update={"seq": 8192}), H100, PlanOptions())
    assert eng.cfg.num_blocks == at_chunk["kv_tokens_fit"] // 16
    for T in (8192, 30000, 2000):
        doc = fit(model, dep.wl.model_copy(update={"seq": T}), H100, PlanOptions())
        most = lay.units // lay.own(T - 1, T)
        # a prompt shorter than the chunk leaves fit a smaller activation workspace
        assert most == doc["max_batch"] if T >= 8192 else 0 <= doc["max_batch"] - most <= 1


def test_totals_off_the_forms_are_refused_in_one_line():
    """A total that is not quadratic + the window's functions (here a cubic past W = 8) is
    refused, naming the model and the total; one that is gets its integer coefficients."""
    from shapecalc.model.config import ShapecalcError
    from shapecalc.serve.basis import points, solve

    basis = [("slide_sq", 8), ("slide_lin", 8)]
    ts = sorted({1, 2, 3, 4, 5} | {t for b in basis for t in points(b)})
    quad = [(t, 7 + 3 * t + 2 * t * t) for t in ts]
    good = {t: v - 4 * value(basis[0], t) + 6 * value(basis[1], t) for t, v in quad}
    assert solve("m", "flops", basis, good, quad) == [-4, 6]
    bad = {t: v + max(0, t - 8) ** 3 for t, v in quad}
    with pytest.raises(ShapecalcError, match="m: flops does not follow the window"):
        solve("m", "flops", basis, bad, quad)
