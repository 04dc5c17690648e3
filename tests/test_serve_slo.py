"""The SLO definitions (serve/slo.py) by hand on a small trace, their bounds, goodput and the
`--slo` grammar; the p99 of every gap (ITL) against MLPerf's per-request TPOT where a prefill
chunk lengthens one gap."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ShapecalcError, Workload
from shapecalc.plan.options import PlanOptions
from shapecalc.serve import sim, slo
from shapecalc.serve.decoders import Seq
from shapecalc.serve.workload import Request


def _seq(i, arrival, output, first, finish):
    s = Seq(Request(i, arrival, 100, output))
    s.first, s.finish = first, finish
    return s


# One replica, five iterations (start, seconds, decode tokens emitted):
#   s0 [0.0, 0.5)  R0's prefill                 → R0's first token at 0.5
#   s1 [0.5, 0.6)  R0 decodes                   1 token
#   s2 [0.6, 0.9)  R0 decodes + R1's prefill    1 token (the chunk makes this gap 0.3 s)
#   s3 [0.9, 1.0)  R0, R1 decode + R2's prefill 2 tokens; R2 (one output token) ends at 1.0
#   s4 [1.0, 1.1)  R0, R1 decode                2 tokens; both end at 1.1
SEQS = [_seq(0, 0.0, 5, 0.5, 1.1), _seq(1, 0.2, 3, 0.9, 1.1), _seq(2, 0.3, 1, 1.0, 1.0)]
REP = SimpleNamespace(durs=[0.5, 0.1, 0.3, 0.1, 0.1], toks=[0, 1, 1, 2, 2], gaps=[], wgaps=[])


def test_each_definition_by_hand():
    d = slo.distributions(SEQS, [REP], (50, 99))
    # TTFT: 0.5 − 0, 0.9 − 0.2, 1.0 − 0.3 = [0.5, 0.7, 0.7]; nearest rank p50: the 2nd of 3
    assert d["ttft"]["p50"] == pytest.approx(0.7) and d["ttft"]["p99"] == pytest.approx(0.7)
    assert d["ttft"]["mean"] == pytest.approx(1.9 / 3)
    # TPOT (MLPerf): (e2e − TTFT)/(output − 1) = (1.1 − 0.5)/4 = 0.15, (1.1 − 0.9)/2 = 0.1;
    # R2's one token has none (left out)
    assert d["tpot"]["p50"] == pytest.approx(0.1) and d["tpot"]["p99"] == pytest.approx(0.15)
    assert d["tpot"]["mean"] == pytest.approx(0.125)
    # ITL: every gap: R0 0.1, 0.3, 0.1, 0.1 and R1 0.1, 0.1 → five of 0.1 and one of 0.3; the
    # p99 of six is the 6th (0.99 × 6 = 5.94 → rank 6)
    assert d["itl"]["p50"] == pytest.approx(0.1) and d["itl"]["p99"] == pytest.approx(0.3)
    assert d["itl"]["mean"] == pytest.approx(0.8 / 6) and d["itl"]["max"] == pytest.approx(0.3)
    # e2e: 1.1, 0.9, 0.7 → sorted 0.7, 0.9, 1.1
    assert d["e2e"]["p50"] == pytest.approx(0.9) and d["e2e"]["p99"] == pytest.approx(1.1)
    lat = slo.latency_doc(d, SEQS)
    assert (lat["tpot"]["requests"], lat["tpot"]["excluded"]) == (2, 1)
    assert (lat["ttft"]["requests"], lat["ttft"]["excluded"]) == (3, 0)


def test_itl_of_every_gap_and_mlperf_tpot_differ_where_a_chunk_delays_one_gap():
    d = slo.distributions(SEQS, [REP], slo.percentiles_for(slo.parse_slo("itl=200ms")))
    rows = slo.evaluate(slo.parse_slo("itl_p99=200ms,tpot_p99=200ms"), d)
    by = {r["metric"]: r for r in rows}
    assert by["itl"]["met"] is False and by["itl"]["value_s"] == pytest.approx(0.3)
    assert by["tpot"]["met"] is True and by["tpot"]["value_s"] == pytest.approx(0.15)


def test_goodput_holds_each_request_to_every_bound():
    s = slo.parse_slo("ttft_p99=600ms,tpot_p99=200ms")
    # R0: TTFT 0.5 ≤ 0.6, TPOT 0.15 ≤ 0.2 → good; R1 and R2: TTFT 0.7 > 0.6
    assert [slo.good(s, x) for x in SEQS] == [True, False, False]
    # an ITL bound holds the request's mean gap (its TPOT): 0.15 > 0.12, 0.1 ≤ 0.12; R2 has none
    assert [slo.good(slo.parse_slo("itl=120ms"), x) for x in SEQS] == [False, True, True]
    assert [slo.good(slo.parse_slo("e2e_p50=1s"), x) for x in SEQS] == [False, True, True]


def test_grammar_old_keys_percentiles_and_names():
    old = slo.parse_slo("ttft=1s,itl=50ms")
    assert [(b.metric, b.q, b.seconds) for b in old.bounds] == [("ttft", 99, 1.0),
                                                                ("itl", 99, 0.05)]
    assert (old.ttft_s, old.itl_s, old.percentile) == (1.0, 0.05, 99)
    new = slo.parse_slo("ttft_p99=2s,tpot_p99=200ms,e2e_p50=10s,itl_p95=80ms")
    assert [b.key for b in new.bounds] == ["ttft_p99", "tpot_p99", "itl_p95", "e2e_p50"]
    assert new.itl_s is None and new.ttft_s == 2.0
    assert slo.parse_slo("ttft_p99.9=3s").bounds[0].q == 99.9
    server = slo.parse_slo("mlperf-server")  # loadgen's mlperf.conf: 2000 ms and 200 ms at p99
    assert [(b.key, b.seconds) for b in server.bounds] == [("ttft_p99", 2.0), ("tpot_p99", 0.2)]
    inter = slo.parse_slo("mlperf-interactive,e2e_p50=10s")
    assert [(b.key, b.seconds) for b in inter.bounds] == [
        ("ttft_p99", 0.45), ("tpot_p99", 0.04), ("e2e_p50", 10.0)]
    assert inter.name == "mlperf-interactive"


@pytest.mark.parametrize(("text", "says"), [
    ("tpot_p99=200", "has no unit: add s, ms or us"),
    ("ttft_p0=1s", "percentile must be in (0, 100]"),
    ("ttft_p101=1s", "percentile must be in (0, 100]"),
    ("ttft_pfast=1s", "percentile must be in (0, 100]"),
    ("latency_p99=1s", "expected"),
    ("ttft_p=1s", "expected"),
    ("tpot_p99=1s,tpot_p99=2s", "given twice"),
    ("ttft=1s,ttft_p99=2s", "given twice"),
    ("mlperf-server,ttft_p99=1s", "leave out ttft_p99="),
    ("mlperf-server,mlperf-interactive", "one named set"),
    ("mlperf", "expected"),
])
def test_bad_slo_names_the_flag(text, says):
    with pytest.raises(ShapecalcError) as e:
        slo.parse_slo(text)
    assert e.value.field == "slo" and says in e.value.reason


def test_a_run_reports_each_bound_and_definition():
    dep = sim.Deployment(load_preset("gpt2"), Workload(seq=1, logits="last"),
                         load_gpu("h100-sxm"), PlanOptions(max_batched_tokens=512))
    reqs = [Request(i, 0.01 * i, 300, 1 if i == 3 else 20) for i in range(8)]
    eng = sim.engine(dep)
    reps, seqs = sim.run(dep, reqs, eng=eng)
    target = slo.parse_slo("ttft_p90=1s,tpot_p99=1s,itl_p95=1s,e2e_p50=10s")
    m = sim.metrics(dep, eng, reps, seqs, target, reqs, None)
    assert [b["metric"] for b in m["slo_bounds"]] == ["ttft", "tpot", "itl", "e2e"]
    assert m["slo_met"] is True and all(b["met"] for b in m["slo_bounds"])
    assert set(m["latency"]["itl"]["summary"]) == {"p50", "p90", "p95", "p99", "mean", "max"}
    assert m["latency"]["tpot"]["excluded"] == 1  # request 3's one token
    # today's keys are the definitions' own numbers
    assert m["tpot_s"]["p99"] == m["latency"]["tpot"]["summary"]["p99"]
    assert m["itl_s"]["p90"] == m["latency"]["itl"]["summary"]["p90"]
    assert m["slo_missed"] == []
    missed = sim.metrics(dep, eng, reps, seqs, slo.parse_slo("itl=1us"), reqs, None)
    assert [x["metric"] for x in missed["slo_missed"]] == ["itl"] and not missed["slo_met"]
    assert missed["slo_missed"][0]["why"].startswith("ITL p99 ")


def test_why_a_bound_is_missed_is_read_from_the_steps():
    from shapecalc.serve.why import explain

    rep = SimpleNamespace(durs=REP.durs, toks=REP.toks, gaps=[], wgaps=[],
                          ptoks=[100, 0, 300, 100, 0])
    target = slo.parse_slo("ttft_p99=600ms,itl_p99=200ms")
    rows = slo.evaluate(target, slo.distributions(SEQS, [rep], (99,)))
    got = {m["metric"]: m for m in explain(target, rows, [rep], SEQS, lambda t: 0.3, 0)}
    # the one gap ≥ 0.3 s (R0's, in s2) shares its step with R1's 300-token chunk
    assert got["itl"]["phase"] == "prefill"
    assert got["itl"]["why"].startswith("ITL p99 300 ms > 200 ms: prefill chunks (up to 300 "
                                        "tokens a step) share decode steps")
    # R1's TTFT 0.7 s against its prefill alone (0.3 s here): 0.4 s waiting
    assert got["ttft"]["phase"] == "queue" and "400 ms of it waiting" in got["ttft"]["why"]


def test_a_missed_row_names_the_one_dimension_that_meets_it():
    from shapecalc.serve.search import _fixes

    def row(tp, mbt, replicas, met):
        return {"tp": tp, "pp": 1, "max_batched_tokens": mbt, "replicas": replicas,
                "gpus": tp * replicas, "slo_met": met, "meets_with": None}

    rows = [row(4, 8192, 2, False), row(4, 512, 2, True), row(4, 8192, 6, True),
            row(2, 8192, 3, False)]
    _fixes(rows, ["tp", "pp", "max_batched_tokens", "replicas"])
    # of the two one step away, the fewer GPUs: 8 (the budget) before 24 (more replicas)
    assert rows[0]["meets_with"] == "--max-batched-tokens 512 meets it"
    assert rows[3]["meets_with"] is None and rows[1]["meets_with"] is None


def test_the_search_space_is_a_list_of_named_dimensions():
    from shapecalc.serve.search import dimensions

    dep = sim.Deployment(load_preset("gpt2"), Workload(seq=1, logits="last"),
                         load_gpu("h100-sxm"), PlanOptions(max_batched_tokens=4096))
    dims = dimensions(dep, None, None, None)
    assert [d.name for d in dims] == ["tp", "pp", "max-batched-tokens"]
    assert dims[2].values == (4096, 2048, 512)  # the given budget, then the smaller ones
    assert dimensions(dep, (2,), None, (4096,))[2].values == (4096,)  # given: fixed


def test_find_gpus_searches_the_budget_says_why_and_reports_the_plan(cli):
    r = cli("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "40",
            "--prompt-tokens", "1024", "--output-tokens", "128", "--requests", "60",
            "--find-gpus", "--slo", "ttft=1s,itl=20ms", "--tp", "2", "--json")
    doc = r.json()
    fg, d = doc["find_gpus"], doc["deployment"]
    plan = fg["plan"]
    assert r.code == 0 and plan["max_batched_tokens"] == 512
    assert (d["tp"], d["replicas"], d["gpus"], d["max_batched_tokens"]) == (
        plan["tp"], plan["replicas"], plan["gpus"], 512)
    big = [x for x in fg["frontier"] if x["max_batched_tokens"] == 8192]
    assert big and not big[0]["slo_met"]
    miss = big[0]["missed"][0]
    assert (miss["metric"], miss["phase"]) == ("itl", "prefill")
    assert "prefill chunks (up to" in miss["why"] and "share decode steps" in miss["why"]
    assert big[0]["meets_with"] == "--max-batched-tokens 512 meets it"


def test_unweighted_percentiles_are_the_weighted_rule():
    import random

    from shapecalc.serve.percentiles import percentile, summary

    rng = random.Random(1)
    qs = (0.001, 1, 50, 90, 95, 99, 99.9, 100)
    for n in (1, 2, 3, 7, 100, 1001):
        xs = [rng.lognormvariate(0, 1) for _ in range(n)]
        pairs = sorted((x, 1) for x in xs)
        want = {f"p{q:g}": percentile(pairs, q) for q in qs}
        got = summary(xs, qs)
        assert {k: got[k] for k in want} == want and got["max"] == max(xs)
    # by hand: 3 samples, p50 is the 2nd (0.5 × 3 = 1.5 → rank 2), p99 the 3rd
    assert summary([3.0, 1.0, 2.0], (50, 99)) == {"p50": 2.0, "p99": 3.0, "mean": 2.0,
                                                  "max": 3.0}


def test_weighted_nearest_rank_by_hand():
    from shapecalc.serve.percentiles import percentile

    # weights 1, 3, 0, 1: running 1, 4, 4, 5 of 5; p50 → 2.5 → the 2nd value; p80 → 4.0 → the
    # 2nd (its running weight reaches 4 first); p81 → 4.05 → the 4th; p10 → 0.5 → the 1st
    pairs = [(1.0, 1), (2.0, 3), (2.5, 0), (3.0, 1)]
    assert [percentile(pairs, q) for q in (10, 50, 80, 81, 100)] == [1.0, 2.0, 2.0, 3.0, 3.0]
    assert percentile([], 50) is None and percentile([(1.0, 0)], 50) is None


def test_find_rate_holds_the_definition_asked_for():
    from shapecalc.serve import search
    from shapecalc.serve import workload as W

    dep = sim.Deployment(load_preset("gpt2"), Workload(seq=1, logits="last"),
                         load_gpu("h100-sxm"), PlanOptions(max_batched_tokens=512))
    target = slo.parse_slo("tpot_p90=1ms")
    out = search.find_rate(dep, 40, W.Lengths("fixed", 300), W.Lengths("fixed", 20), 0, None,
                           target)
    assert out["at_rate"]["slo_bounds"][0]["metric"] == "tpot" and out["rate"] is not None
    assert {p["slo_met"] for p in out["probes"]} == {True, False}  # both sides were probed
    for p in out["probes"]:  # each probe met exactly when its p90 TPOT is within 1 ms
        assert p["slo_met"] == (p["bounds"][0] <= 1e-3)
        assert p["slo_met"] or p["missed"][0].startswith("TPOT p90 ")
