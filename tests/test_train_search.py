"""`train --search --gpus N` (shapecalc/train/search.py), the training network
(shapecalc/train/network.py: groups placed in Megatron's order, DP overlap, MoE terms) and
training cost, by hand and against the shared training records."""

from __future__ import annotations

import pytest
from train_records import RECORDS, record_inputs

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ShapecalcError, Workload
from shapecalc.plan.price import training_cost
from shapecalc.train.network import (
    DP_OVERLAP,
    check_layout,
    dp_exposed,
    dp_overlap,
    dp_s,
    ep_s,
    moe_terms,
    pp_s,
    tp_s,
    train_topology,
)
from shapecalc.train.report import build_train
from shapecalc.train.search import Search
from shapecalc.train.time import perf_for

H100 = load_gpu("H100-SXM")
# 8 a node, NVLink 450 GB/s, 50 GB/s a GPU between nodes; at link efficiency 1, and the links'
# latencies left to the step model's collective_latency_s (train_topology)
TOPO = train_topology(H100, 1.0, None)


def test_tp_inside_a_node_by_hand():
    # tp=8, one layer, not first or last, no recompute: 8 collectives (2 all-gathers + 2
    # reduce-scatters forward, as many backward), each (8−1)/8 of a 1 GB [s,b,h] at 450 GB/s
    assert tp_s(TOPO, 10**9, 0, 8, 1, False, False, False) == pytest.approx(8 * 7 / 8 * 1e9 / 450e9)
    assert tp_s(TOPO, 10**9, 0, 1, 1, False, False, False) == 0.0


def test_dp_over_two_nodes_is_hierarchical_by_hand():
    # ZeRO 0: an all-reduce of 1e9 params × 2 B of bf16 gradients over dp=16 with stride 1
    # (tp=1): 8 ranks a node. In the node 2·7/8 · 2 GB at 450 GB/s, then across 2 nodes
    # 2·1/2 · (2 GB / 8) at 50 GB/s.
    per = {"weights": 2, "gradients": 2, "optimizer": 12}
    want = 2 * 7 / 8 * 2e9 / 450e9 + 2 * 1 / 2 * (2e9 / 8) / 50e9
    assert dp_s(TOPO, 10**9, 0, per, 0, 16, 1, 1) == pytest.approx(want)
    # tp=8 puts the 16 dp ranks one a node (stride 8): all over the network, 2·15/16 · 2 GB
    assert dp_s(TOPO, 10**9, 0, per, 0, 16, 8, 1) == pytest.approx(2 * 15 / 16 * 2e9 / 50e9)
    # ZeRO 3: a gradient reduce-scatter and two weight all-gathers, each 15/16 · 2 GB
    assert dp_s(TOPO, 10**9, 0, per, 3, 16, 8, 1) == pytest.approx(3 * 15 / 16 * 2e9 / 50e9)


def test_ep_across_nodes_and_pp_sends_by_hand():
    # ep=16 (stride 1): per MoE layer 4 all-to-alls of half the 2 GB dispatch + combine; of
    # each rank's 1 GB, 7/16 stays in the node (15.6 ms at 450 GB/s), 8/16 crosses (10 ms at
    # 50 GB/s): the network sets it. Imbalance 1.5 moves 1.5 × the bytes.
    one = 8 / 16 * 1e9 / 50e9
    assert ep_s(TOPO, 2 * 10**9, 16, 1, 1, 1.0) == pytest.approx(4 * one)
    assert ep_s(TOPO, 2 * 10**9, 16, 1, 1, 1.5) == pytest.approx(4 * 1.5 * one)
    # pp=2 with 8 GPUs of tp·cp·dp between the stages: the neighbour is in the next node;
    # v=2 chunks: 2·2 sends of 1 GB at 50 GB/s
    assert pp_s(TOPO, 10**9, 2, 8, 2) == pytest.approx(4 * 1e9 / 50e9)
    assert pp_s(TOPO, 10**9, 2, 4, 1) == pytest.approx(2 * 1e9 / 450e9)  # both in one node


def test_dp_overlap_policies_and_the_exposed_time_by_hand():
    assert dp_overlap(None) == (1.0, "megatron")
    assert dp_overlap("deepspeed") == (0.0, "deepspeed")
    assert dp_overlap("0.25") == (0.25, "0.25")
    assert set(DP_OVERLAP) == {"megatron", "torchtitan", "hf", "deepspeed", "none"}
    # 1 s of DP under a 0.6 s window with a 0.1 s last bucket: (0.6 − 0.1) hideable; at 0.5
    # half of it is hidden: 1 − 0.25 = 0.75 s exposed
    assert dp_exposed(1.0, 0.6, 0.1, 0.5) == pytest.approx(0.75)
    assert dp_exposed(1.0, 0.6, 0.1, 0.0) == 1.0
    for bad in ("1.5", "-0.1", "sometimes"):
        with pytest.raises(ShapecalcError, match="dp-overlap"):
            dp_overlap(bad)


def test_moe_permutation_and_grouped_rows_by_hand():
    m = load_preset("qwen3-30b-a3b", None)  # E = 128, k = 8, D = 2048
    assert (m.n_experts, m.experts_per_token, m.d_model) == (128, 8, 2048)
    # 4096 tokens on a rank, bf16: permute + unpermute forward and backward, each a read and a
    # write of T·k·D·2 B: 8 · 4096·8·2048·2; ep=4: each expert gets 4096·8·4/128 = 1024 rows,
    # 1024 / (1024 + 24.17) of the large-GEMM efficiency
    moved, eff = moe_terms(m, 4096, 2, 4, 24.17)
    assert moved == 8 * 4096 * 8 * 2048 * 2
    assert eff == pytest.approx(1024 / (1024 + 24.17))
    assert moe_terms(load_preset("llama3-8b", None), 4096, 2, 1, 24.17) == (0, 1.0)


def test_a_stride_of_a_domain_or_more_puts_each_rank_in_its_own():
    from shapecalc.plan.topology import span

    # Llama 3's pp=16 ranks 1,024 GPUs apart: 16 domains, one rank in each (was refused)
    assert span(TOPO, 16, 1024) == (1, 16)
    # the experts' dp group of 2 ranks 16 apart (tp·ep = 16): 2 domains, not 4 of half a rank
    assert span(TOPO, 2, 16) == (1, 2)
    with pytest.raises(ShapecalcError, match="split evenly"):
        span(TOPO, 2, 12)  # 12 apart: not a whole number of domains


def test_layouts_the_topology_cannot_place_name_their_flag():
    with pytest.raises(ShapecalcError, match=r"^tp: tp=16 exceeds"):
        check_layout(TOPO, 16, 1, 1, 1, 1)
    with pytest.raises(ShapecalcError, match=r"^gpus:"):
        check_layout(TOPO, 2, 1, 6, 1, 1)  # 12 GPUs: a node and a half
    with pytest.raises(ShapecalcError, match=r"^dp:"):
        check_layout(TOPO, 1, 1, 12, 2, 1)  # 12 dp ranks do not split over nodes of 8
    check_layout(TOPO, 8, 1, 128, 16, 1)  # Llama 3's 16,384: placed


def test_cost_per_trillion_tokens_by_hand():
    # 64 GPUs at $2/h: $128 an hour; 1e6 tokens/s: 1e12 tokens take 1e6 s = 277.8 h = $35,555.6
    c = training_cost(2.0, "--price", 64, {"step_s": 1.0, "tokens_per_s": 1e6, "gpu_hours": None})
    assert c["per_trillion_tokens"] == pytest.approx(128 / 3600 * 1e6)
    assert c["per_step"] == pytest.approx(128 / 3600)


def test_the_search_times_and_fits_a_layout_as_train_does():
    """The search's own step and peak for a layout equal train's for it (the one place)."""
    model = load_preset("gpt2", None)
    perf = perf_for(H100)
    s = Search(model, Workload(batch=1, seq=64), H100, perf, gpus=16, global_batch=32,
               precision="mixed", attention="flash")
    for tp, cp, pp, b, rc, v, z in ((2, 1, 2, 1, "selective", 2, 1), (1, 2, 1, 2, "full", 1, 3)):
        dp = 16 // (tp * cp * pp)
        got = [r for r in s.evaluate(tp, cp, pp, 1, rc, b)
               if r.get("virtual_stages") == v and r.get("zero") == z]
        doc = build_train(model, Workload(batch=b, seq=64, tp=tp, pp=pp), dp=dp, zero=z,
                          precision="mixed", recompute=rc, grad_accum=None, global_batch=32,
                          gpu_memory=H100.memory_bytes, gpu_name=H100.name, cp=cp, virtual=v,
                          gpu=H100, perf=perf)
        assert got[0]["step_s"] == pytest.approx(doc["time"]["step_s"], rel=1e-12)
        assert got[0]["peak_bytes"] == doc["memory"]["peak_bytes"]


def test_the_search_times_and_fits_an_moe_layout_as_train_does():
    model = load_preset("qwen3-30b-a3b", None)
    perf = perf_for(H100)
    s = Search(model, Workload(batch=1, seq=64), H100, perf, gpus=16, global_batch=32,
               precision="mixed", attention="flash")
    got = [r for r in s.evaluate(2, 1, 2, 2, "none", 2)
           if r.get("virtual_stages") == 1 and r.get("zero") == 1]
    doc = build_train(model, Workload(batch=2, seq=64, tp=2, pp=2, ep=2), dp=4, zero=1,
                      precision="mixed", recompute="none", grad_accum=None, global_batch=32,
                      gpu_memory=H100.memory_bytes, gpu_name=H100.name, gpu=H100, perf=perf)
    assert got[0]["step_s"] == pytest.approx(doc["time"]["step_s"], rel=1e-12)
    assert got[0]["peak_bytes"] == doc["memory"]["peak_bytes"]


FAST = "korthikanti-22b-selective"  # 8 GPUs: the default run searches its recompute and ZeRO


@pytest.mark.parametrize("rec", [pytest.param(r, id=r["id"], marks=pytest.mark.slow)
                                 for r in RECORDS] + [pytest.param(
                                     r, id=f"{r['id']}-its-recompute-and-zero")
                                     for r in RECORDS if r["id"] == FAST])
def test_the_search_finds_a_layout_at_least_as_fast_as_the_published(rec, request):
    """For the record's model, GPUs, batch and sequence, the search's fastest layout that fits
    is no slower than train's prediction for the published layout (which the search's space
    holds); the default run keeps the record's recompute and ZeRO, -m slow searches them all."""
    x = record_inputs(rec)
    lay = x["layout"]
    doc = build_train(x["model"], x["wl"], dp=lay["dp"], zero=lay["zero"], precision="mixed",
                      recompute=x["recompute"], grad_accum=None, global_batch=x["global_batch"],
                      cp=lay["cp"], virtual=lay["virtual_stages"], attention=x["attention"],
                      gpu=x["gpu"], perf=x["perf"])
    narrow = request.node.callspec.id.endswith("-its-recompute-and-zero")
    kw = {"recompute": (x["recompute"],), "zero": (lay["zero"],)} if narrow else {}
    s = Search(x["model"], x["wl"], x["gpu"], x["perf"], gpus=x["gpus"],
               global_batch=x["global_batch"], precision="mixed", attention=x["attention"], **kw)
    fits = sorted(r["step_s"] for r in s.run() if "fails" not in r)
    assert fits and fits[0] <= doc["time"]["step_s"]


def test_no_records_is_no_silent_pass():
    assert len(RECORDS) == 11, "tests/data/training-measurements.json holds the 11 records"


ARGS = ["train", "--preset", "gpt2", "--seq", "64", "--gpu", "h100-sxm"]


def test_search_prints_the_best_and_the_failures(cli):
    from shapecalc.render.train_search import search_text

    doc = cli(*ARGS, "--search", "--gpus", "4", "--global-batch", "4", "--price", "2",
              "--framework", "hf", "--json").json()
    steps = [b["step_s"] for b in doc["best"]]
    assert doc["best"] and steps == sorted(steps) and doc["closest_miss"] is None
    assert doc["fitting"] + sum(f["count"] for f in doc["failed"]) == doc["candidates"]
    # the best layout's cost: $2 × 4 GPUs an hour over its step
    best = doc["best"][0]
    assert best["cost"]["per_step"] == pytest.approx(8 / 3600 * best["step_s"])
    assert all(f"{k} {best[f]} " in best["train_args"] + " " for k, f in (
        ("--tp", "tp"), ("--pp", "pp"), ("--dp", "dp"), ("--zero", "zero")))
    text = search_text(doc)
    assert "best (fastest step that fits):" in text and f"  1. {best['framework']} tp=" in text
    assert "per trillion tokens" in text and "bubble:" in text


def test_search_with_nothing_that_fits_is_a_verdict(cli):
    r = cli("train", "--preset", "llama3.1-405b", "--seq", "8192", "--gpu", "h100-sxm",
            "--search", "--gpus", "8", "--global-batch", "16")
    assert r.code == 1 and "nothing fits; closest miss: " in r.out


@pytest.mark.parametrize("extra, flag", [
    (["--search", "--gpus", "12", "--global-batch", "8"], "gpus"),
    (["--search", "--gpus", "8", "--global-batch", "8", "--tp", "2"], "tp"),
    (["--search", "--gpus", "8", "--global-batch", "8", "--zero", "1"], "zero"),
    (["--search", "--gpus", "8"], "global-batch"),
    (["--gpus", "8"], "gpus"), (["--search", "--global-batch", "8"], "search"),
    (["--search", "--gpus", "0", "--global-batch", "8"], "gpus"),
    (["--tp", "2", "--dp", "2", "--price", "0"], "price"),
    (["--dp-overlap", "1.5"], "dp-overlap"),
    (["--dp-overlap", "none", "--perf", "dp_overlap=1"], "dp-overlap"),
    (["--perf", "dp_overlap=2"], "perf.dp_overlap"),
    (["--tp", "1", "--dp", "12", "--pp", "2"], "dp"),
])
def test_bad_search_and_network_input_names_its_flag(cli, extra, flag):
    r = cli(*ARGS, *extra)
    assert r.code == 2 and r.out == "" and r.err.startswith(f"error: {flag}:"), r.err


def test_tp_beyond_the_scale_up_domain_is_refused(cli):
    r = cli("train", "--preset", "llama3-8b", "--seq", "64", "--gpu", "h100-sxm", "--tp", "16")
    assert r.code == 2 and r.out == "" and r.err.startswith("error: tp: tp=16 exceeds the "
                                                            "scale-up domain of 8 GPUs")
    # on an NVL72 domain the same 16 ranks are one domain
    r = cli("train", "--preset", "llama3-8b", "--seq", "64", "--gpu", "h100-sxm", "--tp", "16",
            "--set-gpu", "scale_up_domain=72", "--set-gpu", "gpus_per_node=4")
    assert r.code == 0, r.err


def test_dp_overlap_needs_a_gpu_and_changes_the_exposed_dp(cli):
    r = cli("train", "--preset", "llama3-8b", "--seq", "64", "--dp-overlap", "none")
    assert r.code == 2 and r.err.startswith("error: dp-overlap:")
    base = ["train", "--preset", "gpt2", "--seq", "1024", "--micro-batch", "8", "--gpu",
            "h100-sxm", "--dp", "16", "--json"]
    hidden = cli(*base).json()["time"]
    shown = cli(*base, "--dp-overlap", "deepspeed").json()["time"]
    assert shown["perf"]["dp_overlap"] == 0.0 and hidden["perf"]["dp_overlap"] == 1.0
    assert shown["dp_exposed_s"] == pytest.approx(shown["per_stage"][0]["dp_s"])
    assert hidden["dp_exposed_s"] < shown["dp_exposed_s"]


def test_moe_terms_in_the_step_by_hand(cli):
    base = ["train", "--preset", "qwen3-30b-a3b", "--seq", "64", "--ep", "4", "--dp", "4",
            "--gpu", "h100-sxm", "--json"]
    t = cli(*base).json()["time"]
    s = t["per_stage"][0]
    # 48 MoE layers × 8 · 64 tokens · k=8 · D=2048 · 2 B, at 3.35 TB/s × memory_efficiency
    moved = 48 * 8 * 64 * 8 * 2048 * 2
    assert s["permute_s"] == pytest.approx(moved / (3.35e12 * t["perf"]["memory_efficiency"]))
    assert s["expert_gemm_s"] > 0 and s["ep_s"] > 0
    worse = cli(*base, "--perf", "moe_imbalance=2").json()["time"]["per_stage"][0]
    assert worse["expert_gemm_s"] == pytest.approx(2 * s["expert_gemm_s"])  # the busiest rank
    assert worse["ep_s"] > s["ep_s"]
    r = cli(*base, "--perf", "moe_imbalance=0.5")
    assert r.code == 2 and r.err.startswith("error: perf.moe_imbalance:")


def test_the_space_by_hand():
    from shapecalc.train.search import space

    # 16 GPUs, dense, T = 64: tp ∈ {1, 2, 4, 8} (the node), cp a power of two with 64 a
    # multiple of 2·cp, pp up to the 12 layers of GPT-2, ep 1
    got = space(load_preset("gpt2", None), TOPO, 16, 64)
    assert {x[0] for x in got} == {1, 2, 4, 8} and {x[3] for x in got} == {1}
    assert {x[1] for x in got} == {1, 2, 4, 8, 16} and max(x[2] for x in got) == 8
    assert all(16 % (tp * cp * pp) == 0 for tp, cp, pp, _ in got)
    # MoE (E = 128): ep runs over the divisors of dp that divide E
    moe = space(load_preset("qwen3-30b-a3b", None), TOPO, 16, 64)
    assert sorted(ep for tp, cp, pp, ep in moe if (tp, cp, pp) == (1, 1, 1)) == [1, 2, 4, 8, 16]


# -- the framework as a searched dimension (train/search_fw.py) ---------------------------------

FW_LAYOUTS = [  # (framework, tp, cp, pp, micro-batch, recompute, v, zero, fp8): one each
    ("megatron", 2, 1, 2, 1, "selective", 2, 1, None),
    ("torchtitan", 1, 2, 1, 2, "selective", 1, 3, None),  # per-op SAC, FSDP2's gathers
    ("deepspeed", 2, 1, 2, 1, "torch", 1, 1, None),  # autograd's activations, pipeline ZeRO-1
    ("llm-foundry", 2, 1, 1, 2, "full", 1, 2, None),
    ("megatron", 2, 1, 2, 1, "full", 1, 0, "te-current"),
    ("torchtitan", 2, 1, 1, 1, "none", 1, 3, "torchao-tensor")]


@pytest.mark.parametrize("fw, tp, cp, pp, b, rc, v, z, fp8", FW_LAYOUTS)
def test_the_search_times_and_fits_each_framework_as_train_does(fw, tp, cp, pp, b, rc, v, z,
                                                                 fp8):
    """Under each framework the search's step and peak for a layout are `train --framework`'s
    (the same terms: its efficiencies on the layout, DP overlap, memory rules, fp8)."""
    from dataclasses import replace

    from shapecalc.train.efficiency import FUSED_ROLES
    from shapecalc.train.fwoptions import run_perf_for

    model = load_preset("llama3.2-1b", None)
    s = Search(model, Workload(batch=1, seq=64), H100, perf_for(H100), gpus=16, global_batch=32,
               precision="mixed", attention="flash", frameworks=(fw,), fp8=fp8)
    got = [r for r in s.evaluate(tp, cp, pp, 1, rc, b, fw)
           if r.get("virtual_stages") == v and r.get("zero") == z]
    wl = Workload(batch=b, seq=64, tp=tp, pp=pp)
    made = run_perf_for(H100, None, fw, model, wl, cp=cp, compile_=False, power_limit=None)
    perf = replace(made[0], dp_overlap=DP_OVERLAP.get(fw, made[0].dp_overlap))
    doc = build_train(model, wl, dp=16 // (tp * cp * pp), zero=z, precision="mixed",
                      recompute=rc, grad_accum=None, global_batch=32, gpu_memory=None, cp=cp,
                      virtual=v, gpu=H100, perf=perf, framework=fw, fp8=fp8,
                      fused=FUSED_ROLES.get(fw, ()))
    assert "fails" not in got[0] and got[0]["framework"] == fw
    assert got[0]["step_s"] == doc["time"]["step_s"]
    assert got[0]["peak_bytes"] == doc["memory"]["peak_bytes"]


@pytest.mark.parametrize("fw", ["megatron", "torchtitan", "deepspeed", "llm-foundry"])
def test_the_best_rows_train_args_reproduce_their_step_and_peak(cli, fw):
    """`train` with a best row's train_args prints the row's step and peak exactly."""
    doc = cli(*ARGS, "--search", "--gpus", "4", "--global-batch", "8", "--framework", fw,
              "--json").json()
    assert doc["space"]["frameworks"] == [fw]
    best = doc["best"][0]
    assert best["framework"] == fw and best["train_args"].startswith(f"--framework {fw} ")
    one = cli(*ARGS, *best["train_args"].split(), "--global-batch", "8", "--json").json()
    assert one["time"]["step_s"] == best["step_s"]
    assert one["memory"]["peak_bytes"] == best["peak_bytes"]


def test_the_search_runs_every_framework_and_names_each_refusal(cli):
    doc = cli(*ARGS, "--search", "--gpus", "2", "--global-batch", "4", "--json").json()
    assert doc["space"]["frameworks"] == ["hf", "megatron", "torchtitan", "deepspeed",
                                          "llm-foundry"]
    whys = {w["why"] for f in doc["failed"] if f["reason"] == "framework" for w in f["whys"]}
    # DeepSpeed's PipelineEngine: ZeRO-2/3 refused with a pipeline, and no interleaving
    assert "deepspeed with --pp 2: its pipeline engine refuses ZeRO-2 and ZeRO-3" in whys
    assert any(w.startswith("deepspeed's pipeline engine runs 1F1B only") for w in whys)
    assert "llm-foundry with --pp 2: it has no pipeline schedule here" in whys
    assert {r["framework"] for r in doc["best"]} <= set(doc["space"]["frameworks"])


@pytest.mark.parametrize("extra, frameworks", [
    (["--fp8", "te-current"], ["megatron", "deepspeed"]),  # those that run the recipe
    (["--compile"], ["torchtitan", "deepspeed", "llm-foundry"]),  # torch modules'
    (["--fw-term", "allocator_reserve=0.1"], ["megatron", "torchtitan", "deepspeed",
                                             "llm-foundry"])])  # all but hf's exact count
def test_framework_flags_choose_the_frameworks_they_apply_to(cli, extra, frameworks):
    doc = cli(*ARGS, "--search", "--gpus", "2", "--global-batch", "2", *extra, "--json").json()
    assert doc["space"]["frameworks"] == frameworks


@pytest.mark.parametrize("extra, flag", [
    (["--framework", "hf", "--fp8", "te-current"], "fp8"),
    (["--framework", "megatron", "--compile"], "compile"),
    (["--framework", "hf", "--fw-term", "allocator_reserve=0.1"], "fw-term"),
    (["--framework", "megatron", "--precision", "fp32"], "precision"),
    (["--framework", "nope"], "framework")])
def test_a_framework_flag_it_cannot_run_is_refused_with_search(cli, extra, flag):
    r = cli(*ARGS, "--search", "--gpus", "2", "--global-batch", "2", *extra)
    assert r.code == 2 and r.out == "" and r.err.startswith(f"error: {flag}:"), r.err


def test_deepspeed_refuses_interleaving_in_train_too(cli):
    r = cli(*ARGS, "--framework", "deepspeed", "--pp", "2", "--virtual-stages", "2")
    assert r.code == 2 and r.err.startswith("error: virtual_stages: deepspeed's pipeline")


FW_FAST = "korthikanti-22b-selective"


def _record_search(rec: dict, narrow: bool) -> tuple[float, list[float]]:
    """(train --framework's step for the published layout, the search's fitting steps), both
    under the record's framework, power limit, torch.compile, fp8 and recipe terms."""
    from shapecalc.train.calibrate_train import setup_of
    from shapecalc.train.efficiency import FUSED_ROLES
    from shapecalc.train.fwmemory import fw_terms
    from shapecalc.train.fwoptions import run_perf_for

    x, st = record_inputs(rec), setup_of(rec)
    fw, lay = st["framework"], x["layout"]
    sets = [f"net_bandwidth={rec['shapecalc']['net_bandwidth']}"]
    watts = None if st["power_w"] is None else str(int(st["power_w"]))

    def perf_of(name, w, cp, stages=None):
        made = run_perf_for(x["gpu"], sets, name, x["model"], w, cp=cp, compile_=st["compile"],
                            power_limit=watts, stages=stages)
        return replace_overlap(made[0], name)

    wl = x["wl"].model_copy(update={"batch": st.get("micro_batch", rec["micro_batch"])})
    terms = fw_terms(st.get("fw_terms"))
    doc = build_train(x["model"], wl, dp=lay["dp"], zero=lay["zero"], precision="mixed",
                      recompute=x["recompute"], grad_accum=None, global_batch=x["global_batch"],
                      cp=lay["cp"], virtual=lay["virtual_stages"], attention=x["attention"],
                      gpu=x["gpu"], perf=perf_of(fw, wl, lay["cp"]), framework=fw,
                      fw_terms=terms, fp8=st["fp8"], fused=FUSED_ROLES.get(fw, ()))
    kw = {"recompute": (x["recompute"],), "zero": (lay["zero"],)} if narrow else {}
    s = Search(x["model"], x["wl"], x["gpu"], x["perf"], gpus=x["gpus"],
               global_batch=x["global_batch"], precision="mixed", attention=x["attention"],
               frameworks=(fw,), perf_of=perf_of, fw_terms=terms, fp8=st["fp8"], **kw)
    return doc["time"]["step_s"], sorted(r["step_s"] for r in s.run() if "fails" not in r)


def replace_overlap(perf, name):
    from dataclasses import replace

    return replace(perf, dp_overlap=DP_OVERLAP.get(name, perf.dp_overlap))


@pytest.mark.parametrize("rec", [pytest.param(r, id=f"{r['id']}-its-framework",
                                              marks=pytest.mark.slow) for r in RECORDS]
                         + [pytest.param(r, id=f"{r['id']}-its-framework-recompute-and-zero")
                            for r in RECORDS if r["id"] == FW_FAST])
def test_the_search_under_the_records_framework_is_at_least_as_fast(rec, request):
    """Fixed to the record's framework, the search's fastest layout that fits is no slower than
    `train --framework`'s prediction for the published layout (which its space holds)."""
    narrow = request.node.callspec.id.endswith("-recompute-and-zero")
    published, fits = _record_search(rec, narrow)
    assert fits and fits[0] <= published


def test_a_framework_layout_over_the_gpu_by_its_model_states_alone_is_a_memory_failure(cli):
    """405B on 8 H100s under Megatron: its 18 B a parameter (bf16 weights, fp32 main gradients,
    fp32 master and Adam) are over 80 GiB on every layout, so nothing fits (exit 1) and no
    activations are counted for those (peak_bytes null, the states' bytes in the reason)."""
    r = cli("train", "--preset", "llama3.1-405b", "--seq", "8192", "--gpu", "h100-sxm",
            "--search", "--gpus", "8", "--global-batch", "16", "--framework", "megatron",
            "--json")
    doc = r.json()
    assert r.code == 1 and not doc["best"] and doc["best_by_framework"] == []
    mem = next(f for f in doc["failed"] if f["reason"] == "memory")["example"]
    assert mem["peak_bytes"] is None and mem["why"].startswith("model states alone ")
    # tp=1 pp=1 zero 0: every parameter's 18 bytes on the rank, at least 405e9 × 18 B
    assert int(mem["why"].split()[3].replace(",", "")) >= 405 * 10**9 * 18
