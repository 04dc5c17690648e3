"""Expert parallelism with data-parallel attention in serve (plan/ep.py): an all-to-all across
2 nodes in a serve step by hand, the ranks' own schedulers and pools, the refusals."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from test_errors import _one_clean_line

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.cases import closed_form_for
from shapecalc.plan.ep import EPPlan, exchange_bytes
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.perf import perf_params
from shapecalc.serve import sim
from shapecalc.serve import workload as W
from shapecalc.serve.cost import IterationCost

H100 = load_gpu("h100-sxm")  # 8 a node, NVLink 450 GB/s, 50 GB/s a GPU between nodes
QWEN = load_preset("qwen3-30b-a3b")  # E = 128, k = 8, D = 2048, 48 MoE layers


def _comm(ep: int, plan: EPPlan, B: int = 64) -> float:
    """The communication term of a decode step of B sequences on one attention rank, tp = 1
    (no all-reduce), every link at its full bandwidth."""
    wl = Workload(tp=1, ep=ep, logits="last")
    pp = replace(perf_params(H100), link_efficiency=1.0)
    cost = IterationCost(closed_form_for(QWEN, wl), H100, pp, wl, 989.5e12, plan)
    return cost.terms(0, 0, 0, 0, B, B * 100)[2]


def test_the_exchange_bytes_by_hand():
    # 64 tokens, k = 8: dispatch 512 copies of 2048 fp8 values + 16 fp32 scales (2048/128):
    # 512 · 2112 = 1,081,344 B; combine 512 · 2048 · 2 (bf16) = 2,097,152 B
    assert exchange_bytes(64, QWEN, "bf16") == (1_081_344, 2_097_152)


def test_an_all_to_all_across_two_nodes_in_a_serve_step_by_hand():
    # ep = 16 over 2 nodes of 8, B = 64 tokens on the GPU, k = 8 copies each: 512 copies of
    # 2,112 B (dispatch) and 4,096 B (combine) a MoE layer, 1/16 of them to every rank.
    # low-latency (pure RDMA): the 15/16 off the GPU through its NIC at 50 GB/s, plus 5 µs each
    ll = 48 * (15 / 16 * (1_081_344 + 2_097_152) / 50e9 + 2 * 5e-6)
    assert _comm(16, EPPlan("low-latency")) == pytest.approx(ll, rel=1e-9)
    # normal (NVLink + RDMA forwarding): a token crosses once to the other node if any of its 8
    # experts is there, 1 − (1/2)^8 = 0.99609375 of the time: 64 · 2,112 · 0.99609375 = 134,640 B
    # at 50 GB/s = 2.6928 µs, while the 7/8 of the copies for the node's other GPUs go over
    # NVLink: 7/8 · 1,081,344 / 450e9 = 2.1026 µs; the network sets it. Combine: 64 · 4,096 ·
    # 0.99609375 = 261,120 B = 5.2224 µs (NVLink 7/8 · 2,097,152 / 450e9 = 4.0778 µs).
    # Per layer 2.6928 + 5.2224 + 2·5 = 17.9152 µs; × 48 MoE layers = 0.8599296 ms
    assert _comm(16, EPPlan()) == pytest.approx(48 * 17.9152e-6, rel=1e-9)
    # inside one node (ep = 8): 7/8 of the copies over NVLink at 450 GB/s, 2 µs each
    one = 48 * (7 / 8 * (1_081_344 + 2_097_152) / 450e9 + 2 * 2e-6)
    assert _comm(8, EPPlan()) == pytest.approx(one, rel=1e-9)
    # the busiest GPU takes 1.5× the mean tokens: its bytes (and so their time) are 1.5×
    hot = 48 * (1.5 * (2.6928e-6 + 5.2224e-6) + 2 * 5e-6)
    assert _comm(16, EPPlan(imbalance=1.5)) == pytest.approx(hot, rel=1e-9)


def test_auto_runs_prefill_normal_and_decode_low_latency():
    """SGLang's --deepep-mode auto: a step with prefill dispatches normal, a pure decode step
    low-latency."""
    wl = Workload(tp=1, ep=16, logits="last")
    pp = replace(perf_params(H100), link_efficiency=1.0)
    cf = closed_form_for(QWEN, wl)
    auto, normal, ll = (IterationCost(cf, H100, pp, wl, 989.5e12, EPPlan(m))
                        for m in ("auto", "normal", "low-latency"))
    assert auto.terms(0, 0, 0, 0, 64, 6400)[2] == ll.terms(0, 0, 0, 0, 64, 6400)[2]
    assert auto.terms(1, 64, 64 * 64, 0, 0, 0)[2] == normal.terms(1, 64, 64 * 64, 0, 0, 0)[2]


def test_each_attention_rank_has_its_own_scheduler_and_pool():
    """ep = 2, tp = 1: two attention ranks, each a scheduler with the KV pool of one GPU; the
    router sends them alternate requests."""
    wl = Workload(tp=1, ep=2, logits="last")
    dep = sim.Deployment(QWEN, wl, H100, PlanOptions(), ep_plan=EPPlan())
    assert dep.attention_ranks == 2 and dep.gpus == 2
    reqs = W.generate(4, None, W.parse_lengths("64", "p"), W.parse_lengths("4", "o"), 0, None)
    eng = sim.engine(dep)
    reps, seqs = sim.run(dep, reqs, eng=eng)
    assert len(reps) == 2 and len(seqs) == 4
    assert eng.cfg.num_blocks == sim.kv_blocks(dep, 989.5e12)
    assert [r.outstanding for r in reps] == [0, 0]


def _refused(cli, *args: str) -> str:
    return _one_clean_line(cli("serve", "--gpu", "H100-SXM", "--requests", "2", *args))


@pytest.mark.parametrize(("args", "start", "word"), [
    (("--preset", "llama3-8b", "--ep", "2"), "error: ep", "Mixture-of-Experts"),
    (("--preset", "qwen3-30b-a3b", "--ep", "3"), "error: ep", "E=128"),
    (("--preset", "qwen3-30b-a3b", "--ep", "16", "--redundant-experts", "8"), "error: ep",
     "128 experts + 8 redundant"),
    (("--preset", "qwen3-30b-a3b", "--ep", "12", "--redundant-experts", "4"), "error: ep",
     "12 GPUs span nodes of 8"),
    (("--preset", "qwen3-30b-a3b", "--ep-mode", "normal"), "error: ep-mode", "--ep > 1"),
    (("--preset", "qwen3-30b-a3b", "--redundant-experts", "2"), "error: redundant-experts",
     "--ep > 1"),
    (("--preset", "qwen3-30b-a3b", "--ep", "8", "--ep-mode", "fast"), "error: ep-mode",
     "normal, low-latency, auto"),
    (("--preset", "qwen3-30b-a3b", "--ep", "8", "--ep-imbalance", "0.5"),
     "error: ep-imbalance", "[1, ep = 8]"),
    (("--preset", "qwen3-30b-a3b", "--ep", "8", "--ep-imbalance", "9"),
     "error: ep-imbalance", "got 9"),
    (("--preset", "llama3-8b", "--tp", "4", "--pp", "3"), "error: pp", "12 GPUs span nodes"),
])
def test_refusals(cli, args, start, word):
    line = _refused(cli, *args)
    assert line.startswith(start) and word in line, line


def test_eplb_copies_take_kv_room_and_the_json_says_the_plan(cli):
    base = ("serve", "--preset", "qwen3-30b-a3b", "--gpu", "H100-SXM", "--ep", "8",
            "--requests", "2", "--prompt-tokens", "64", "--output-tokens", "2", "--json")
    plain = json.loads(cli(*base).out)
    eplb = json.loads(cli(*base, "--redundant-experts", "8").out)
    d = eplb["deployment"]
    assert (d["attention_ranks"], d["ep_mode"], d["ep_imbalance"], d["redundant_experts"]) == (
        8, "normal", 1.0, 8)
    # 8 more experts over 8 GPUs: one more expert a GPU, 48 layers × 3 · 2048 · 768 bf16
    # weights = 452,984,832 B, at 48 layers × 2 (K, V) × 4 heads × 128 × 2 B = 98,304 B a token:
    # 4,608 tokens = 288 blocks of 16 fewer
    assert plain["kv_blocks_per_replica"] - eplb["kv_blocks_per_replica"] == 288


def test_fit_holds_each_attention_ranks_own_sequences(cli):
    """deepseek-v3 at ep = 8, tp = 1 on H200: 8 attention ranks, so B = 64 puts 8 sequences on
    each; their latent cache is 8 · 4096 tokens · 61 layers · 576 elements · 2 B (bf16)."""
    r = cli("fit", "--preset", "deepseek-v3", "--gpu", "h200", "--ep", "8", "--dtype", "fp8",
            "--batch", "64", "--seq", "4096", "--json")
    assert r.code == 0, r.err
    assert r.json()["memory_per_rank"]["kv_cache"] == 8 * 4096 * 61 * 576 * 2
