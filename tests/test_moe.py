"""Mixture-of-Experts: exact parameters (total and active), routed FLOPs, the EP ledger, planning's
expert reads, and the executor routing for real — against hand calculations and perturbations."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shapecalc.check.verify import verify
from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.grid import evaluate
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hardware import load_gpu
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.plan.fit import fit
from shapecalc.plan.options import PlanOptions

# Mixtral-8x7B's shapes (config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads, 14336, 8 experts
# of which 2 per token, vocabulary 32000, untied)
MIXTRAL = ModelConfig(name="mixtral-8x7b", vocab_size=32000, d_model=4096, n_layers=32,
                      n_heads=32, n_kv_heads=8, d_ff=14336, ffn="swiglu", norm="rmsnorm",
                      positions="rope", max_positions=32768, n_experts=8, experts_per_token=2,
                      norm_topk_prob=True)


def test_mixtral_total_and_active_params_are_the_published_ones():
    doc = build_trace(MIXTRAL, Workload(seq=16))
    assert doc["totals"]["params"] == 46_702_792_704  # the model card's count
    # active: all but 6 of the 8 experts' 3·D·Dff_e in each of the 32 layers
    assert doc["totals"]["active_params"] == 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336
    assert doc["totals"]["active_params"] == 12_879_925_248  # as the issue states
    roles = [s["role"] for s in doc["stages"] if s["group"] == "block"]
    for r in ("moe.router", "moe.route", "moe.experts.gate", "moe.experts.up",
              "moe.experts.down", "moe.combine"):
        assert r in roles


@pytest.mark.parametrize(("B", "T", "phase"), [(1, 16, "prefill"), (3, 100, "decode")])
def test_routed_expert_flops_are_k_expert_ffns_per_token(B, T, phase):
    doc = build_trace(MIXTRAL, Workload(batch=B, seq=T, phase=phase))
    tokens = B * (T if phase == "prefill" else 1)
    experts = sum(s["flops"] * s["repeat"] for s in doc["stages"]
                  if s["role"].startswith("moe.experts."))
    assert experts == 32 * 2 * tokens * 2 * (3 * 4096 * 14336)
    router = sum(s["flops"] * s["repeat"] for s in doc["stages"] if s["role"] == "moe.router")
    assert router == 32 * 2 * tokens * 4096 * 8


def test_expert_parallel_ledger():
    wl = Workload(batch=2, seq=1000, tp=2, ep=8, dtype="fp8")
    ep = build_trace(MIXTRAL, wl)["parallel"]["ep"]
    experts = 32 * 8 * 3 * 4096 * 14336
    assert ep["experts_per_rank"] == 1 and ep["moe_layers"] == 32
    assert ep["expert_params"] == experts and ep["expert_params_per_rank"] == experts // 8
    assert ep["expert_weight_bytes_per_rank"] == experts // 8  # fp8: a byte a parameter
    # dispatch + combine of B·T·k tokens of D activations (bf16: fp8 weights keep 16-bit
    # activations, as engines run them)
    assert ep["alltoall_bytes_per_layer"] == 2 * 2 * 1000 * 2 * 4096 * 2
    assert ep["alltoall_bytes_per_layer_expected"] == ep["alltoall_bytes_per_layer"] * 7 / 8
    assert ep["alltoall_bytes_total"] == 32 * ep["alltoall_bytes_per_layer"]
    assert "4 data-parallel replicas" in ep["composition"]
    # the rest (attention, embeddings, norms, router) split by tp=2
    tp = build_trace(MIXTRAL, wl)["parallel"]["tp"]
    assert ep["params_per_rank"] == tp["params_per_rank"] - experts // 2 + experts // 8
    # without expert parallelism a rank holds its Dff_e/tp slice of every expert, not all of them
    no_ep = build_trace(MIXTRAL, Workload(batch=2, seq=1000, tp=2, dtype="fp8"))["parallel"]
    assert no_ep["ep"]["expert_params_per_rank"] == experts // 2
    assert no_ep["ep"]["expert_weight_bytes_per_rank"] == experts // 2
    assert no_ep["ep"]["params_per_rank"] == no_ep["tp"]["params_per_rank"]


@pytest.mark.parametrize(("args", "field"), [
    (["--set", "experts_per_token=9"], "experts_per_token"),
    (["--ep", "3"], "ep"),
    (["--ep", "2", "--tp", "4"], "ep"),
])
def test_bad_moe_input_is_one_line(cli, tmp_path, args, field):
    cfg = tmp_path / "mix.json"
    cfg.write_text(json.dumps({k: v for k, v in MIXTRAL.model_dump().items() if v is not None}))
    r = cli("trace", "--config", str(cfg), *args)
    assert r.code == 2 and r.err.startswith(f"error: {field}") and r.err.count("\n") == 1, r.err
    dense = cli("trace", "--preset", "llama3-8b", "--ep", "2")
    assert dense.code == 2 and "error: ep: expert parallelism needs" in dense.err


def test_fit_splits_experts_over_ep_and_reads_only_the_experts_a_step_reaches():
    gpu = load_gpu("h100-sxm")
    wl = Workload(batch=1, seq=4096, tp=2, logits="last")
    doc = fit(MIXTRAL, wl, gpu, PlanOptions())
    tr = build_trace(MIXTRAL, wl)
    ep = build_trace(MIXTRAL, wl.model_copy(update={"ep": 2}))
    assert doc["memory_per_rank"]["weights"] == tr["parallel"]["tp"]["weight_bytes_per_rank"]
    on_ep = fit(MIXTRAL, wl.model_copy(update={"tp": 2, "ep": 2}), gpu, PlanOptions())
    assert on_ep["memory_per_rank"]["weights"] == ep["parallel"]["ep"]["weight_bytes_per_rank"]
    # decode at batch 1: one token reaches 1 − (1 − 2/8)^1 = 1/4 of each layer's experts
    dec = build_trace(MIXTRAL, wl.model_copy(update={"phase": "decode"}))["parallel"]["tp"]
    experts = 32 * 8 * 3 * 4096 * (14336 // 2) * 2  # bf16 bytes, one rank's slices
    # of the untied embedding table (32000/2 rows a rank) the step gathers ⌈B/2⌉ rows
    others = dec["weight_bytes_per_rank"] - experts - (16000 - 1) * 4096 * 2
    want = (others + dec["kv_cache_bytes_per_rank"] + experts * 0.25) / gpu.hbm_bandwidth
    assert doc["times"]["decode_memory_s"] == pytest.approx(want, rel=1e-12)
    # at batch 64 nearly every expert is read: 1 − (3/4)^64
    big = fit(MIXTRAL, wl.model_copy(update={"batch": 64}), gpu, PlanOptions())
    dec64 = build_trace(MIXTRAL, wl.model_copy(update={"phase": "decode", "batch": 64}))
    want64 = (others + (32 - 1) * 4096 * 2 + dec64["parallel"]["tp"]["kv_cache_bytes_per_rank"]
              + experts * (1 - 0.75**64)) / gpu.hbm_bandwidth
    assert big["times"]["decode_memory_s"] == pytest.approx(want64, rel=1e-12)


def _tiny(**kw):
    base = dict(name="tiny-moe", vocab_size=40, d_model=16, n_layers=3, n_heads=4, n_kv_heads=2,
                d_ff=24, ffn="swiglu", norm="rmsnorm", positions="rope", n_experts=4,
                experts_per_token=2, ffn_types=("dense", "moe", "moe"))
    return ModelConfig(**{**base, **kw})


def test_closed_form_equals_the_trace_on_moe():
    m = _tiny(n_shared_experts=1, d_ff_shared=8, shared_expert_gate=True, router_bias=True,
              expert_bias=True, qk_norm=True, attention_sinks=True, norm_topk_prob=True,
              routed_scaling_factor=2.5)
    cf = ClosedForm(m)
    keys = ("params", "active_params", "flops", "elementwise_flops", "kv_cache_bytes",
            "weight_bytes_per_rank", "flops_per_rank", "params_per_rank")
    for phase, T, B, p in itertools.product(("prefill", "decode"), (1, 5, 9), (1, 3), (1, 2)):
        doc = build_trace(m, Workload(batch=B, seq=T, phase=phase, tp=p))
        flat = {**doc["totals"], **doc["parallel"]["tp"]}
        got = evaluate(cf, B, T, phase, p)
        assert {k: int(got[k][0]) for k in keys} == {k: flat[k] for k in keys}


@settings(max_examples=12)
@given(shared=st.booleans(), gate=st.booleans(), bias=st.booleans(),
       scoring=st.sampled_from(["softmax", "sigmoid"]), norm_topk=st.booleans(),
       k=st.integers(1, 4), gated=st.booleans(), sinks=st.booleans(), qk=st.booleans(),
       tp=st.sampled_from([1, 2]), phase=st.sampled_from(["prefill", "decode"]))
def test_verify_routes_for_real_on_random_moe_configs(shared, gate, bias, scoring, norm_topk, k,
                                                      gated, sinks, qk, tp, phase):
    m = _tiny(n_shared_experts=1 if shared else 0, shared_expert_gate=shared and gate,
              router_bias=bias, expert_bias=bias, router_scoring=scoring,
              norm_topk_prob=norm_topk, experts_per_token=k,
              ffn="swiglu" if gated else "gelu", attention_sinks=sinks, qk_norm=qk)
    doc = verify(m, Workload(batch=2, seq=5, tp=tp, phase=phase), precision="float64")
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]


@pytest.mark.parametrize("what", ["k", "E"])
def test_verify_fails_when_the_symbolic_expert_count_or_k_is_perturbed(monkeypatch, what):
    from shapecalc.model.expr import Dim
    from shapecalc.model.forward import Sizes

    real = Sizes.of

    def perturbed(model, wl, p=None, poly=False):
        z = real(model, wl, p, poly)
        field = {"k": "k", "E": "E"}[what]
        return z._replace(**{field: Dim.const(getattr(z, field).value + 1)})

    monkeypatch.setattr(Sizes, "of", staticmethod(perturbed))
    doc = verify(_tiny(), Workload(batch=2, seq=5), precision="float64")
    bad = {c["name"] for c in doc["checks"] if not c["ok"]}
    assert bad & {"stage FLOPs (prefill, p=1)", "stage params (prefill, p=1)",
                  "stage names and shapes (prefill, p=1)"}


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_simulates_expert_parallelism(phase):
    m = _tiny(n_experts=8, experts_per_token=2)
    doc = verify(m, Workload(batch=4, seq=6, ep=4, phase=phase), precision="float64")
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    names = [c["name"] for c in doc["checks"]]
    assert any(n.startswith("EP all-to-all bytes per MoE layer (ep=4") for n in names)
    assert any(n.startswith("EP ep=4 == one rank") for n in names)


def test_verify_fails_when_the_all_to_all_formula_is_off(monkeypatch):
    from shapecalc.costs import trace

    real = trace.alltoall_bytes
    monkeypatch.setattr(trace, "alltoall_bytes", lambda *a: real(*a) // 2)  # dispatch only
    doc = verify(_tiny(n_experts=8), Workload(batch=4, seq=6, ep=2), precision="float64")
    assert "EP all-to-all bytes per MoE layer (ep=2, every pair off-rank)" in {
        c["name"] for c in doc["checks"] if not c["ok"]}


def test_verify_refuses_expert_parallelism_with_tensor_parallelism():
    with pytest.raises(ShapecalcError, match="ep"):
        verify(_tiny(), Workload(batch=2, seq=5, ep=2, tp=2), precision="float64")


def test_fit_with_expert_parallelism_finds_the_smallest_tp_beside_it():
    from shapecalc.inputs.sources import load_preset

    model, gpu = load_preset("qwen3-235b-a22b"), load_gpu("h200")
    wl = Workload(batch=1, seq=4096, dtype="fp8", logits="last")
    # one GPU cannot hold 235 B fp8 parameters; eight holding an eighth of the experts each can
    assert fit(model, wl, gpu, PlanOptions())["min_tp"] == 2
    on_ep = fit(model, wl.model_copy(update={"ep": 8}), gpu, PlanOptions())
    assert on_ep["fits"] and on_ep["min_tp"] == 1
    ep = build_trace(model, wl.model_copy(update={"ep": 8}))["parallel"]["ep"]
    assert on_ep["memory_per_rank"]["weights"] == ep["weight_bytes_per_rank"]
