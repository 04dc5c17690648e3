"""Engine profiles (serve/engines.py): each policy's schedule worked by hand on four requests
(decode-first, prefill-first, no-evict), vllm's profile identical to today's run, the profiles'
refusals, and the load-test records' validation (serve/loadrecords.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ShapecalcError, Workload
from shapecalc.plan.options import PlanOptions
from shapecalc.serve import engines, sim
from shapecalc.serve import workload as W
from shapecalc.serve.loadrecords import check

H100 = load_gpu("h100-sxm")


def _schedule(engine: str | None, blocks: int):
    """Four requests at t = 0, 4-token prompts and 3 output tokens; blocks of 4 tokens, a budget
    of 8 tokens a step, up to 4 sequences."""
    prof = None if engine is None else engines.profile(engine)
    wl = Workload(seq=1, tp=1, logits="last", block_size=4)
    dep = sim.Deployment(load_preset("seed-tiny"), wl, H100, PlanOptions(max_batched_tokens=8),
                         max_num_seqs=4, kv_blocks=blocks, profile=prof)
    reqs = W.generate(4, None, W.Lengths("fixed", 4), W.Lengths("fixed", 3), 0)
    eng = sim.engine(dep)
    reps, seqs = sim.run(dep, reqs, trace=True, eng=eng)
    rows = [(s["prefill"], s["decodes"]) for s in reps[0].schedule]
    return rows, reps[0], seqs


def test_decode_first_by_hand():
    """vLLM: the decoders first, the budget left to prefills, chunked.
    0: R0, R1 prefill 4 each (budget 8 spent); both emit their first token.
    1: R0, R1 decode (2 tokens); 6 left: R2 prefills 4, R3 its first 2 of 4.
    2: R0, R1, R2 decode (3); 5 left: R3's other 2 → its first token; R0, R1 end (3 tokens).
    3: R2, R3 decode; R2 ends.  4: R3 decodes and ends."""
    for engine in (None, "vllm", "trtllm-max-utilization"):
        rows, rep, seqs = _schedule(engine, 12)
        assert rows == [([(0, 0, 4), (1, 0, 4)], 0), ([(2, 0, 4), (3, 0, 2)], 2),
                        ([(3, 2, 2)], 3), ([], 2), ([], 1)], engine
        # a client sees each token after the profile's front end (request_overhead_s)
        front = 0.0 if engine is None else engines.profile(engine).terms.get(
            "request_overhead_s", 0.0)
        ends = [s["start_s"] + s["seconds"] + front for s in rep.schedule]
        assert [s.first for s in seqs] == [ends[0], ends[0], ends[1], ends[2]]
        assert [s.finish for s in seqs] == [ends[2], ends[2], ends[3], ends[4]]


def test_prefill_first_by_hand():
    """SGLang: a step that can prefill holds no decodes.
    0: R0, R1 prefill 4 each.  1: R2, R3 prefill 4 each (R0, R1 wait: no decode this step).
    2: all four decode (their 2nd token).  3: all four decode their 3rd and end."""
    rows, rep, seqs = _schedule("sglang", 12)
    assert rows == [([(0, 0, 4), (1, 0, 4)], 0), ([(2, 0, 4), (3, 0, 4)], 0), ([], 4), ([], 4)]
    ends = [s["start_s"] + s["seconds"] for s in rep.schedule]
    assert [s.first for s in seqs] == [ends[0], ends[0], ends[1], ends[1]]
    assert all(s.finish == ends[3] for s in seqs)
    assert rep.preemptions == 0
    # the gaps: R0, R1's 2nd token comes two steps after their first (steps 1 and 2), R2, R3's
    # one step after; step 3 is a plain decode of all four
    d = [s["seconds"] for s in rep.schedule]
    assert rep.wgaps == [(d[2], 2), (pytest.approx(d[1] + d[2], rel=1e-12), 2)]
    assert rep.toks == [0, 0, 0, 4]


def test_no_evict_by_hand():
    """TensorRT-LLM GUARANTEED_NO_EVICT, 5 blocks: a request's 4 + 3 tokens take 2 blocks at
    most, so two run at once (4 of 5 blocks reserved; a third would need 6).
    0: R0, R1 prefill (reserved 2 + 2).  1: R0, R1 decode; R2 is not admitted (4 + 2 > 5).
    2: R0, R1 decode and end (their reservations free at the step's end).
    3: R2, R3 prefill.  4, 5: R2, R3 decode; they end. Nothing is preempted."""
    rows, rep, _ = _schedule("trtllm", 5)
    assert rows == [([(0, 0, 4), (1, 0, 4)], 0), ([], 2), ([], 2),
                    ([(2, 0, 4), (3, 0, 4)], 0), ([], 2), ([], 2)]
    assert rep.preemptions == 0 and rep.reserved == 0 and rep.free == 5
    # vLLM's evicting policy on the same 5 blocks preempts
    _, evict, _ = _schedule("vllm", 5)
    assert evict.preemptions > 0


def test_vllm_profile_is_todays_run():
    """--engine vllm takes the same path as no profile: the same times, to the last bit."""
    reqs = W.generate(60, 20.0, W.Lengths("uniform", 50, 900), W.Lengths("lognormal", 80, 0.7),
                      3)
    out = []
    for prof in (None, engines.profile("vllm")):
        wl = Workload(seq=1, tp=1, logits="last")
        dep = sim.Deployment(load_preset("llama3-8b"), wl, H100, PlanOptions(), profile=prof)
        _, seqs = sim.run(dep, reqs)
        out.append([(s.first, s.finish) for s in seqs])
    assert out[0] == out[1]


def test_profiles_and_refusals():
    assert engines.profile(None).label == "vllm"
    p = engines.profile("trtllm@mlperf-v4.1")
    assert (p.order, p.capacity, p.attention, p.kv_memory) == ("decode-first", "no-evict",
                                                               "separate", "of-free")
    assert engines.profile("trtllm-max-utilization").capacity == "evict"
    assert engines.profile("sglang").order == "prefill-first"
    for bad in ("foo", "vllm@0.6", "trtllm@9"):
        with pytest.raises(ShapecalcError) as e:
            engines.profile(bad)
        assert e.value.field == "engine"
    with pytest.raises(ShapecalcError):
        engines.check_terms({"bogus_s": 1.0}, "x")
    with pytest.raises(ShapecalcError):
        engines.check_terms({"gemm_efficiency": 1.5}, "x")


RECORD = {"id": "r", "engine": "TensorRT-LLM v4.1", "model": "llama2-70b", "gpu": "8x H100",
          "gpus": 8, "tp": 2, "pp": 1, "replicas": 4, "dtype": "fp8",
          "workload": {"prompt": "lognormal:300,0.6", "output": "290", "requests": 100,
                       "rate": 75, "cap_tokens": 1024},
          "measured": {"ttft_p99_s": 0.46, "tpot_p50_ms": 156.4, "requests_per_s": 74.4},
          "shapecalc": {"preset": "llama2-70b", "gpu": "H100-SXM", "tp": 2, "replicas": 4,
                        "dtype": "fp8", "kv_dtype": "fp8", "max_num_seqs": 1024}}


def test_load_record_reads():
    r = check(json.loads(json.dumps(RECORD)), 0)
    assert r.profile == "trtllm-max-utilization@mlperf-v4.1" and r.rate == 75 and r.cap == 1024
    assert [(m.kind, m.stat, m.scale) for m in r.metrics] == [
        ("ttft", "p99", 1.0), ("tpot", "p50", 1e-3), ("requests", "rate", 1.0)]


@pytest.mark.parametrize(("edit", "says"), [
    (lambda d: d.pop("gpus"), "needs 'gpus'"),
    (lambda d: d.update(tp="2"), "tp"),
    (lambda d: d["workload"].update(rate=0), "workload.rate"),
    (lambda d: d["workload"].update(rate=float("nan")), "workload.rate"),
    (lambda d: d["measured"].update(ttft_p50_min=1.0), "unknown metric or unit"),
    (lambda d: d["measured"].update(tpot_p50_ms=-1), "measured.tpot_p50_ms"),
    (lambda d: d["measured"].update(tpot_p50_ms=True), "measured.tpot_p50_ms"),
    (lambda d: d.update(bogus=1), "unknown key 'bogus'"),
    (lambda d: d["workload"].update(concurrency=5), "rate and concurrency"),
    (lambda d: d.update(gpus=6), "tp × pp × replicas"),
    (lambda d: d.update(engine="mystery"), "engine_profile"),
    (lambda d: d["shapecalc"].pop("kv_dtype"), "needs 'kv_dtype'"),
])
def test_load_record_refusals(edit, says):
    d = json.loads(json.dumps(RECORD))
    edit(d)
    with pytest.raises(ShapecalcError) as e:
        check(d, 0)
    assert e.value.field == "calibrate" and says in str(e.value), str(e.value)


def test_profile_doc_names_it():
    doc = engines.profile("trtllm@nim-1.8").doc()
    assert doc["profile"] == "trtllm@nim-1.8" and set(doc["terms"]) <= set(engines.TERMS)
    assert replace(engines.profile("vllm"), version="x").label == "vllm@x"


def test_same_seed_same_json(cli):
    """--engine trtllm, prefill-first and no-evict alike: the same seed, byte-identical JSON."""
    for engine in ("trtllm", "sglang"):
        args = ("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "8",
                "--requests", "40", "--prompt-tokens", "uniform:100,900", "--output-tokens",
                "lognormal:60,0.5", "--engine", engine, "--json")
        a, b = cli(*args), cli(*args)
        assert a.code == 0 and a.out == b.out
        assert json.loads(a.out)["engine"]["name"] == engine
    r = cli("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--requests", "5",
            "--engine", "trtllm", "--shared-prefix", "16")
    assert r.code == 2 and "shared-prefix" in r.err
