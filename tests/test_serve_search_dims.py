"""--find-gpus over every deployment kind (serve/search_dims.py): each case is built so that the
other dimensions are fixed (--tp, --pp, --max-batched-tokens) and only the dimension under test
can meet the SLO; the test reads the frontier to show that the fixed alternatives miss."""

from __future__ import annotations

import json

import pytest

from shapecalc.serve.slo import parse_slo
from shapecalc.serve.why_pd import missed

GPU = ("--gpu", "h100-sxm")


def _find(cli, *args: str) -> dict:
    r = cli("serve", *args, "--find-gpus", "--json")
    assert r.code in (0, 1), r.err
    return json.loads(r.out)


def test_only_a_pd_split_meets_an_itl_that_prefill_chunks_break(cli):
    # 2048-token prompts at the fixed 8192 budget: every aggregated step that prefills a prompt
    # is a decode gap of its whole chunk (≈ 60 ms on one H100), far over 12 ms; a decode pool
    # runs no prefill, so its gaps are the decode steps alone
    run = ("--preset", "llama3-8b", *GPU, "--rate", "8", "--prompt-tokens", "2048",
           "--output-tokens", "64", "--requests", "60", "--slo", "ttft=1s,itl=12ms", "--tp", "1",
           "--pp", "1", "--max-batched-tokens", "8192")
    doc = _find(cli, *run)
    fg = doc["find_gpus"]
    plan = fg["plan"]
    assert plan["pd"] == {"prefill_replicas": 1, "decode_replicas": 1} and plan["gpus"] == 2
    agg = [r for r in fg["frontier"] if r["pd"] is None]
    assert agg and not any(r["slo_met"] for r in agg)  # cannot pass by accident
    assert all(m["metric"] == "itl" and m["phase"] == "prefill" for r in agg
               for m in r["missed"])
    # the same 2 GPUs aggregated (2 replicas, the search's bound stopped short of them) miss
    two = json.loads(cli("serve", *run, "--replicas", "2", "--json").out)
    assert two["slo_met"] is False and two["itl_s"]["p99"] > 0.012
    # the header and deployment are the plan's: both pools, GPUs of both
    d = doc["deployment"]
    assert doc["deployment_is"] == "the plan --find-gpus found"
    assert d["gpus"] == 2 and d["pd"]["prefill"]["replicas"] == 1 == d["pd"]["decode"]["replicas"]


def test_only_ep_fits_a_moe_model_that_one_gpu_cannot_hold(cli):
    # qwen3-30b-a3b in bf16 is 30.5B parameters, 61 GB: past an L40S' 48 GB at tp=1, so tp=1
    # ep=1 has no KV cache; ep=2 puts half the experts on each GPU
    doc = _find(cli, "--preset", "qwen3-30b-a3b", "--gpu", "l40s", "--rate", "4",
                "--prompt-tokens", "512", "--output-tokens", "64", "--requests", "40",
                "--slo", "ttft=2s,itl=100ms", "--tp", "1", "--pp", "1",
                "--max-batched-tokens", "4096")
    fg = doc["find_gpus"]
    assert fg["plan"]["ep"] == 2 and fg["plan"]["gpus"] == 2
    assert any(n.startswith("tp=1 pp=1 ep=1:") and "no room for a KV cache" in n
               for n in fg["notes"])
    d = doc["deployment"]
    assert (d["ep"], d["attention_ranks"], d["ep_mode"]) == (2, 2, "normal")


def test_only_a_larger_spec_k_meets_a_tpot_below_the_plain_step(cli):
    # a decode step of llama3.1-8b on one H100 at 512 cached tokens is 7.3 ms, so TPOT ≤ 3.6 ms
    # needs about 2 tokens a step or more: at α = 0.8 k = 1 emits 1 + 0.8 = 1.8 on average,
    # k = 2 1 + 0.8 + 0.64 = 2.44, k = 3 2.95, each k over a longer verify step (p99 TPOT of
    # these 16 requests: 4.6 ms at k = 1, 3.8 ms at k = 2)
    doc = _find(cli, "--preset", "llama3.1-8b", *GPU, "--rate", "1", "--prompt-tokens", "512",
                "--output-tokens", "64", "--requests", "16", "--slo", "ttft=1s,tpot=3.6ms",
                "--tp", "1", "--pp", "1", "--max-batched-tokens", "4096", "--draft", "eagle3",
                "--draft-config", "tests/data/eagle3-llama3.1-8b-config.json",
                "--acceptance", "0.8")
    fg = doc["find_gpus"]
    assert fg["plan"]["spec_k"] == 3 and fg["plan"]["gpus"] == 1
    for k in (1, 2):  # every smaller k misses, at every count of replicas tried (or is
        # rejected without a run: one request alone already misses)
        rows = [r for r in fg["frontier"] if r["spec_k"] == k]
        alone = any(f"spec_k={k}: one request alone already misses" in n for n in fg["notes"])
        assert (rows or alone) and not any(r["slo_met"] for r in rows)
        assert all(m["metric"] == "tpot" and m["phase"] == "decode" for r in rows
                   for m in r["missed"])
    assert doc["deployment"]["speculative"]["k"] == 3


def test_a_fixed_split_is_searched_and_an_unreachable_rate_rejected_without_a_run(cli):
    base = ("--preset", "llama3-8b", *GPU, "--prompt-tokens", "1024", "--output-tokens", "32",
            "--requests", "30", "--slo", "ttft=2s,itl=50ms", "--pd", "1:1", "--pp", "1",
            "--max-batched-tokens", "4096")
    doc = _find(cli, *base, "--rate", "4")
    fg = doc["find_gpus"]
    assert {r["pd"]["prefill_replicas"] for r in fg["frontier"]} == {1}
    assert fg["plan"]["tp"] == 1 and fg["plan"]["gpus"] == 2
    # 1e5 requests/s of 1024-token prompts: no tp of one prefill replica reaches 102M tokens/s
    doc = _find(cli, *base, "--rate", "100000")
    fg = doc["find_gpus"]
    assert fg["frontier"] == [] and fg["plan"] is None
    assert len(fg["notes"]) == 4 and all("pool's saturated" in n and "cannot reach the rate"
                                         in n and "not simulated" in n for n in fg["notes"])


def test_a_disaggregated_miss_names_its_phase():
    # a --pd run's metrics where the prefill part dominates TTFT, by hand
    parts = {"prefill_s": {"p99": 2.5}, "transfer_s": {"p99": 0.002},
             "decode_first_s": {"p99": 0.03}}
    m = {"slo_bounds": [{"metric": "ttft", "percentile": 99, "value_s": 2.532,
                         "target_s": 1.0, "met": False},
                        {"metric": "itl", "percentile": 99, "value_s": 0.06, "target_s": 0.05,
                         "met": False}],
         "disaggregation": {"ttft_parts": parts, "prefill": {"busy_fraction": 0.97},
                            "decode": {"busy_fraction": 0.4, "preemptions": 0}}}
    out = missed(m, parse_slo("ttft=1s,itl=50ms"))
    assert [(x["metric"], x["phase"]) for x in out] == [("ttft", "prefill"), ("itl", "decode")]
    assert out[0]["why"].startswith("TTFT p99 2.532 s > 1 s: the prefill pool")
    assert "97% busy" in out[0]["why"]


@pytest.mark.slow  # 4 bisections of 14 runs (about 1.5 s)
def test_find_rate_searches_spec_k_and_reports_it(cli):
    from shapecalc.serve.schemas import ServeFindRateOut

    r = cli("serve", "--preset", "llama3.1-8b", *GPU, "--prompt-tokens", "512",
            "--output-tokens", "32", "--requests", "12", "--slo", "ttft=1s,tpot=5ms",
            "--draft", "eagle3", "--draft-config", "tests/data/eagle3-llama3.1-8b-config.json",
            "--acceptance", "0.8", "--find-rate", "--json")
    doc = json.loads(r.out)
    ServeFindRateOut.model_validate(doc)
    fr = doc["find_rate"]
    assert [x["spec_k"] for x in fr["by_spec_k"]] == [1, 2, 3, 4]
    rates = {x["spec_k"]: x["rate"] or 0.0 for x in fr["by_spec_k"]}
    assert fr["rate"] == max(rates.values()) and rates[fr["spec_k"]] == fr["rate"]
    assert doc["deployment"]["speculative"]["k"] == fr["spec_k"]


def test_a_pd_plan_found_is_emitted_as_its_pools(cli):
    r = cli("serve", "--preset", "llama3-8b", *GPU, "--rate", "8", "--prompt-tokens", "2048",
            "--output-tokens", "64", "--requests", "60", "--slo", "ttft=1s,itl=12ms", "--tp",
            "1", "--pp", "1", "--max-batched-tokens", "8192", "--find-gpus", "--emit", "dynamo")
    assert r.code == 0, r.err
    assert r.out.count("--is-prefill-worker") == 1 and r.out.count("--is-decode-worker") == 1
    assert "prefill 1 × 1 GPU + decode 1 × 1 GPU = 2 GPUs (the plan --find-gpus found)" in r.out


def test_find_rate_tries_ep_on_the_same_gpus(cli):
    # the L40S case above: two tp=1 replicas cannot hold qwen3-30b-a3b, one replica of 2
    # attention ranks with the experts over ep=2 can, on the same 2 GPUs
    from shapecalc.serve.schemas import ServeFindRateOut

    r = cli("serve", "--preset", "qwen3-30b-a3b", "--gpu", "l40s", "--tp", "1", "--replicas",
            "2", "--prompt-tokens", "512", "--output-tokens", "64", "--requests", "40",
            "--find-rate", "--slo", "ttft=2s,itl=100ms", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    ServeFindRateOut.model_validate(doc)
    fr = doc["find_rate"]
    assert fr["layout"] == {"ep": 2, "replicas": 1} and fr["rate"] > 0
    assert [(x["ep"], x["replicas"]) for x in fr["by_layout"]] == [(1, 2), (2, 1)]
    assert fr["by_layout"][0]["rate"] is None and "no room for a KV cache" in fr["notes"][0]
    d = doc["deployment"]
    assert (d["ep"], d["replicas"], d["gpus"], d["attention_ranks"]) == (2, 1, 2, 2)
