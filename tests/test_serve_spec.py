"""Speculative decoding in serve (serve/spec.py, draft.py, specsched.py): expected tokens by
hand, the simulated mean, the draft's exact parameters, bad input, and a published anchor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload
from shapecalc.plan.cases import closed_form_for
from shapecalc.plan.options import PlanOptions
from shapecalc.serve import sim
from shapecalc.serve import workload as W
from shapecalc.serve.draft import eagle3_draft, model_draft
from shapecalc.serve.spec import Spec, default_alpha, make_spec
from shapecalc.serve.specsched import Speculation

DATA = Path(__file__).parent / "data"
EAGLE3 = DATA / "eagle3-llama3.1-8b-config.json"
ANCHORS = json.loads((DATA / "spec_anchors.json").read_text())["records"]


def test_expected_tokens_alpha_07_k3_by_hand():
    # 1 + 0.7 + 0.7² + 0.7³ = 1 + 0.7 + 0.49 + 0.343 = 2.533 = (1 − 0.7⁴)/(1 − 0.7)
    spec = make_spec("draft", 3, "0.7", 0)
    assert spec is not None
    assert spec.expected == pytest.approx(2.533, abs=1e-12)
    assert spec.expected == pytest.approx((1 - 0.7 ** 4) / (1 - 0.7))
    # per position: 1 + 0.8 + 0.8·0.6 + 0.8·0.6·0.5 = 1 + 0.8 + 0.48 + 0.24 = 2.52
    per = make_spec("draft", 3, "0.8,0.6,0.5", 0)
    assert per is not None and per.expected == pytest.approx(2.52, abs=1e-12)
    # P(1..4 tokens) = 0.3, 0.7·0.3, 0.49·0.3, 0.343
    assert spec.pmf() == pytest.approx([0.3, 0.21, 0.147, 0.343])


def test_defaults_solve_their_published_figures():
    a = default_alpha("eagle3")  # τ = 2.77 at K = 7: Σ_{i≤7} α^i = 2.77
    assert sum(a ** i for i in range(8)) == pytest.approx(2.77, abs=1e-9)
    d = default_alpha("draft")  # 58.68 % of 8 drafted accepted: Σ_{i=1..8} α^i / 8 = 0.5868
    assert sum(d ** i for i in range(1, 9)) / 8 == pytest.approx(0.5868, abs=1e-9)
    assert default_alpha("mtp") == 0.85


def _dep(spec: Spec | None, model="seed-tiny", kv_blocks=None) -> sim.Deployment:
    m = load_preset(model)
    sp = None if spec is None else Speculation(spec, model_draft(m, m, "draft-preset"))
    return sim.Deployment(m, Workload(logits="last"), load_gpu("h100-sxm"),
                          PlanOptions(max_batched_tokens=2048), kv_blocks=kv_blocks, spec=sp)


def test_simulated_tokens_per_step_within_2_percent_of_2533():
    spec = make_spec("draft", 3, "0.7", 5)
    reqs = W.generate(120, None, W.parse_lengths("32", "p"), W.parse_lengths("100", "o"), 5)
    dep = _dep(spec)
    eng = sim.engine(dep)
    reps, seqs = sim.run(dep, reqs, eng=eng)
    doc = sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, None)
    got = doc["speculative"]["simulated_tokens_per_step"]
    assert abs(got / 2.533 - 1) < 0.02, got
    # every request still emits exactly its output tokens, in fewer steps than tokens
    assert all(s.gen == s.req.output for s in seqs)
    plain = _dep(None)
    peng = sim.engine(plain)
    preps, _ = sim.run(plain, reqs, eng=peng)
    assert doc["iterations"] < sum(len(r.durs) for r in preps)


def test_preemption_keeps_every_token():
    """A cache too small for the batch preempts decoders; their tokens and draws carry on."""
    spec = make_spec("draft", 2, "0.6", 1)
    reqs = W.generate(12, None, W.parse_lengths("40", "p"), W.parse_lengths("60", "o"), 1)
    dep = _dep(spec, kv_blocks=24)
    reps, seqs = sim.run(dep, reqs)
    assert sum(r.preemptions for r in reps) > 0
    assert all(s.gen == s.req.output and s.finish >= s.first for s in seqs)


def test_eagle3_head_parameters_by_hand():
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: D = 4096, H = 32, H_kv = 8, Dh = 128, Dff = 14336,
    # draft vocabulary 32000; the embedding is the target's.
    # q: 2D·H·Dh = 8192·4096 = 33,554,432; k, v: 8192·1024 = 8,388,608 each; o: 16,777,216;
    # MLP 3·4096·14336 = 176,160,768; fc 12288·4096 = 50,331,648; lm_head 4096·32000 =
    # 131,072,000; norms (hidden, input, post-attention, final) 4·4096 = 16,384
    by_hand = (33_554_432 + 2 * 8_388_608 + 16_777_216 + 176_160_768 + 50_331_648
               + 131_072_000 + 16_384)
    assert by_hand == 424_689_664
    d = eagle3_draft(json.loads(EAGLE3.read_text()), load_preset("llama3.1-8b"))
    c = closed_form_for(d.model, Workload(logits="last")).at(1, 1, "prefill", 1, 1, "bf16",
                                                             "bf16", "bf16")
    assert c["params_per_rank"] - c["embed_params_per_rank"] + d.first + d.each + d.split == by_hand


@pytest.mark.parametrize("args, flag", [
    (["--acceptance", "1.2"], "acceptance"),
    (["--acceptance", "0"], "acceptance"),
    (["--acceptance", "1"], "acceptance"),
    (["--spec-k", "0"], "spec-k"),
    (["--spec-k", "-2"], "spec-k"),
])
def test_bad_speculation_exits_2_naming_the_flag(cli, args, flag):
    base = ["serve", "--preset", "seed-tiny", "--gpu", "h100-sxm", "--requests", "2",
            "--draft", "draft", "--draft-preset", "seed-tiny"]
    if "--spec-k" not in args:
        base += ["--spec-k", "3"]
    r = cli(*base, *args)
    assert r.code == 2 and r.out == ""
    assert r.err.startswith(f"error: {flag}:") and len(r.err.strip().splitlines()) == 1


def test_a_draft_of_another_vocabulary_is_refused_and_eagle3_maps(cli, tmp_path):
    r = cli("serve", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--requests", "2",
            "--draft", "draft", "--draft-preset", "gpt2", "--spec-k", "3")
    assert r.code == 2 and "draft-preset" in r.err and "50,257" in r.err
    # an EAGLE-3 head keeps 32,000 draft tokens with its d2t map onto the target's 128,256
    d = eagle3_draft(json.loads(EAGLE3.read_text()), load_preset("llama3.1-8b"))
    assert d.model.vocab_size == 32000
    bad = {**json.loads(EAGLE3.read_text()), "vocab_size": 32000}
    p = tmp_path / "eagle3.json"
    p.write_text(json.dumps(bad))
    r = cli("serve", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--requests", "2",
            "--draft", "eagle3", "--draft-config", str(p), "--spec-k", "3")
    assert r.code == 2 and r.err.startswith("error: draft-config:")


@pytest.mark.parametrize("rec", ANCHORS, ids=[r["id"] for r in ANCHORS])
def test_published_eagle3_speedup_at_batch_1(rec):
    """SGLang's EAGLE-3 speedup on Llama-3.1-8B-Instruct, one H100, batch 1: 373.25 / 158.34 =
    2.357×. shapecalc's chain of k = 3 at the default α predicts 2.06× (error −12.6 %, stated in
    docs/guides/serving.md; no bar: SGLang drafts a tree)."""
    assert rec["spec_tokens_per_s"] / rec["baseline_tokens_per_s"] == pytest.approx(2.357,
                                                                                    abs=1e-3)
    target = load_preset(rec["model"])
    spec = make_spec("eagle3", 3, None, 0)
    assert spec is not None
    draft = eagle3_draft(json.loads((DATA / rec["draft_config"]).read_text()), target)
    dep = sim.Deployment(target, Workload(logits="last"), load_gpu(rec["gpu"]),
                         PlanOptions(max_batched_tokens=8192), spec=Speculation(spec, draft))
    reqs = W.generate(1, None, W.parse_lengths("256", "p"), W.parse_lengths("64", "o"), 0)
    eng = sim.engine(dep)
    reps, seqs = sim.run(dep, reqs, eng=eng)
    row = sim.metrics(dep, eng, reps, seqs, sim.SLO(), reqs, None)["speculative"]["by_batch"][0]
    measured = rec["spec_tokens_per_s"] / rec["baseline_tokens_per_s"]
    error = row["speedup"] / measured - 1
    assert row["batch"] == 1 and row["regime"] == "memory-bound" and row["speedup"] > 1
    assert -0.5 < error < 0.5, error  # a sanity range, not a calibration bar


def test_json_keys_follow_the_schema(cli):
    from shapecalc.serve.schemas import ServeOut

    r = cli("serve", "--preset", "seed-tiny", "--gpu", "h100-sxm", "--requests", "5",
            "--draft", "draft", "--draft-preset", "seed-tiny", "--spec-k", "2", "--json")
    assert r.code == 0
    doc = r.json()
    ServeOut.model_validate(doc)
    assert doc["deployment"]["speculative"]["k"] == 2
    assert doc["speculative"]["by_batch"][0]["batch"] == 1


def test_mtp_draft_is_the_models_own_module():
    """deepseek-v3's MTP module as a one-layer model of its last layer's kind, plus eh_proj
    (2D·D) and enorm, hnorm (2·D): exactly totals.mtp_params (docs/reference/mtp.md:
    13,463,426,048, the hand count of tests/test_mtp.py)."""
    from shapecalc.serve.draft import mtp_draft

    ds = load_preset("deepseek-v3")
    d = mtp_draft(ds)
    c = closed_form_for(d.model, Workload(logits="last")).at(1, 1, "prefill", 1, 1, "bf16",
                                                             "bf16", "bf16")
    # 2·D·D + 2·D with D = 7168: 102,760,448 + 14,336
    assert d.each == 2 * 7168 * 7168 + 2 * 7168 == 102_774_784
    assert c["params"] + d.each == 13_463_426_048


def test_verify_costs_k_plus_1_tokens_with_their_logits():
    """The target's verify of one sequence, k = 3 on L cached tokens, costs what the closed
    form says 4 more prompt tokens with every position's logits cost: prefill(L + 4) −
    prefill(L) of the model under logits=all (the verify's FLOPs; its KV reads are a chunk's)."""
    m = load_preset("seed-tiny")
    spec = make_spec("draft", 3, "0.7", 0)
    assert spec is not None
    dep = sim.Deployment(m, Workload(logits="last"), load_gpu("h100-sxm"),
                         PlanOptions(max_batched_tokens=2048),
                         spec=Speculation(spec, model_draft(m, m, "draft-preset")))
    sc = sim.engine(dep).spec
    L = 40
    q = 4
    tot = sc.t.totals(1, q, q * q + 2 * L * q, L, 0, 0)
    for key, v in sc.head.items():
        tot[key] += 3 * v
    every = closed_form_for(m, Workload(logits="all"))
    a = every.at(1, L + q, "prefill", 1, 1, "bf16", "bf16", "bf16")
    b = every.at(1, L, "prefill", 1, 1, "bf16", "bf16", "bf16")
    assert tot["flops"] == a["flops"] - b["flops"]
    assert tot["causal_flops"] == a["causal_flops"] - b["causal_flops"]
