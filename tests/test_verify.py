"""verify: symbolic == measured for every number, on random configs; and it can fail."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapecalc.check import budget
from shapecalc.check.budget import DEFAULT_BUDGET, GiB, default_budget, estimate, plan_layers
from shapecalc.check.verify import verify
from shapecalc.inputs import sources
from shapecalc.interpret import symbolic
from shapecalc.interpret.numeric import NumericOps
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload

DTYPES = ["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


@st.composite
def cases(draw):
    H = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4) if H % k == 0]))  # MHA, GQA, MQA
    positions = draw(st.sampled_from(["learned", "sinusoidal", "rope", "none"]))
    pre = draw(st.booleans())
    model = ModelConfig(
        vocab_size=draw(st.integers(5, 40)),
        d_model=draw(st.sampled_from([8, 12, 16])),
        head_dim=draw(st.sampled_from([2, 4, 6])),
        n_layers=draw(st.integers(1, 3)),
        n_heads=H,
        n_kv_heads=kv,
        d_ff=4 * draw(st.integers(1, 5)),
        ffn=draw(st.sampled_from(["gelu", "relu", "swiglu", "geglu"])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        norm_position="pre" if pre else "post",
        positions=positions,
        max_positions=16 if positions == "learned" else None,
        tie_embeddings=draw(st.booleans()),
        qkv_bias=draw(st.booleans()),
        attn_out_bias=draw(st.booleans()),
        ffn_bias=draw(st.booleans()),
        norm_bias=draw(st.sampled_from([None, True, False])),
        lm_head_bias=draw(st.booleans()),
        fused_qkv=draw(st.booleans()),
        parallel_block=pre and draw(st.booleans()),
        sliding_window=draw(st.sampled_from([None, None, 2, 5])),
        embedding_scale=draw(st.booleans()),
    )
    tps = [p for p in (1, 2, 4) if H % p == 0 and model.d_ff % p == 0
           and (kv % p == 0 if kv >= p else p % kv == 0)]
    wl = Workload(
        batch=draw(st.integers(1, 3)),
        seq=draw(st.integers(1, 9)),
        phase=draw(st.sampled_from(["prefill", "decode"])),
        dtype=draw(st.sampled_from(DTYPES)),
        kv_dtype=draw(st.sampled_from([None, *DTYPES])),
        act_dtype=draw(st.sampled_from([None, "fp32", "bf16", "int4"])),
        logits=draw(st.sampled_from(["all", "last"])),
        tp=draw(st.sampled_from(tps)),
        pp=draw(st.integers(1, min(2, model.n_layers))),
        block_size=draw(st.integers(1, 8)),
        attention_flops=draw(st.sampled_from(["full", "causal"])),
        padding_mask=draw(st.booleans()),
    )
    layers = draw(st.sampled_from([None, *range(1, model.n_layers + 1)]))
    precision = draw(st.sampled_from(["float32", "float32", "float64"]))
    weights = draw(st.sampled_from(["auto", "auto", "streamed"]))
    return model, wl, layers, precision, weights


def failing(doc):
    return [c for c in doc["checks"] if not c["ok"]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_number_checks_out_on_random_configs(case):
    model, wl, layers, precision, weights = case
    doc = verify(model, wl, layers=layers, precision=precision, weights=weights)
    assert doc["ok"], failing(doc)
    names = " ".join(c["name"] for c in doc["checks"])
    for what in ("shapes", "FLOPs", "params", "bytes", "KV cache", "paged", "pipeline",
                 "all-reduce"):
        assert what in names
    assert doc["extrapolated"] == (doc["layers_run"] < model.n_layers)


TINY = ModelConfig(vocab_size=30, d_model=8, n_layers=2, n_heads=2, d_ff=16, positions="rope",
                   norm="rmsnorm", ffn="swiglu")
WL = Workload(batch=2, seq=6, tp=2, pp=2, phase="prefill")


def test_a_symbolic_matmul_one_flop_off_fails(monkeypatch):
    real = symbolic.SymbolicOps.matmul

    def off_by_one(self, a, b, role, name, causal, window, chunk=None):
        out = real(self, a, b, role, name, causal, window, chunk)
        self.stages[-1].flops += 1
        return out

    monkeypatch.setattr(symbolic.SymbolicOps, "matmul", off_by_one)
    bad = {c["name"] for c in failing(verify(TINY, WL))}
    assert "stage FLOPs (prefill, p=1)" in bad and "total flops" in bad


def test_a_different_softmax_constant_fails(monkeypatch):
    monkeypatch.setitem(symbolic.ELEMENTWISE, "softmax", 6)
    bad = {c["name"] for c in failing(verify(TINY, WL))}
    assert "stage elementwise FLOPs (prefill, p=2)" in bad


@pytest.mark.parametrize("kind", ["causal", "padding"])
def test_a_mask_that_does_nothing_fails(monkeypatch, kind):
    real = NumericOps.mask

    def skip_one(self, s, role, name, k, window=None):
        return s if k == kind else real(self, s, role, name, k, window)

    monkeypatch.setattr(NumericOps, "mask", skip_one)
    bad = " ".join(c["name"] for c in failing(verify(TINY, WL)))
    other = "padding" if kind == "causal" else "causal"
    assert f"{kind} mask:" in bad and f"{other} mask:" not in bad


def test_an_all_reduce_that_drops_ranks_fails(monkeypatch):
    monkeypatch.setattr(NumericOps, "allreduce", lambda self, x, role, name: x[:1])
    bad = " ".join(c["name"] for c in failing(verify(TINY, WL)))
    assert "TP p=2 == unsharded" in bad


def test_memory_is_estimated_first_and_refused_with_a_way_out():
    with pytest.raises(ShapecalcError) as e:
        verify(TINY, WL, budget=1000)
    assert e.value.field == "memory"
    for word in ("--layers", "batch", "seq"):
        assert word in e.value.reason
    assert estimate(TINY, WL, 2) > estimate(TINY, WL, 1)


def test_default_layers_fit_the_budget_and_totals_are_extrapolated():
    big = TINY.model_copy(update={"n_layers": 40, "d_model": 64, "d_ff": 256})
    wl = Workload(batch=1, seq=4)
    per = estimate(big, wl, 2) - estimate(big, wl, 1)
    doc = verify(big, wl, budget=estimate(big, wl, 3) + per // 2)
    assert doc["layers_run"] == 3 and doc["extrapolated"] and "×40/3" in doc["note"]
    assert doc["ok"], failing(doc)


# -- the budget: a constant, not the free memory ---------------------------------------------------
def test_the_default_budget_is_a_constant_whatever_the_free_memory(monkeypatch, pinned_memory):
    assert pinned_memory == DEFAULT_BUDGET == budget.available_memory() == 4 * GiB
    big = sources.load_preset("llama3-8b")  # streams (405b is refused by the time bound)
    small = sources.load_preset("llama2-7b")
    wl = Workload(batch=2, seq=16)
    plans = []
    for have in (1 << 20, 8 * GiB, 1 << 40):  # a small machine, a laptop, a big server
        monkeypatch.setattr(budget, "available_memory", lambda have=have: have)
        assert default_budget() == DEFAULT_BUDGET
        if have < DEFAULT_BUDGET:  # the same plan, refused: it does not fit this machine
            with pytest.raises(ShapecalcError, match="available"):
                plan_layers(small, wl, None, "float32", default_budget())
            continue
        plans.append([plan_layers(m, wl, None, "float32", default_budget())[::2]
                      for m in (big, small)])
    assert plans[0] == plans[1] == [(1, False), (plans[0][1][0], True)]
    assert 1 < plans[0][1][0] < small.n_layers


def test_the_same_json_on_any_machine_that_can_hold_the_plan(cli, monkeypatch):
    """K (here fewer than N layers, chosen by the budget) and the whole JSON do not follow the
    machine's free memory."""
    update = {"n_layers": 12, "d_model": 64, "d_ff": 256}
    deep = sources.load_preset("seed-tiny").model_copy(update=update)  # verify's default model
    wl = Workload(batch=2, seq=16)
    per = estimate(deep, wl, 2) - estimate(deep, wl, 1)
    gib = f"{(estimate(deep, wl, 3) + per // 2) / GiB:.12f}"  # room for K = 3 of N = 12
    sets = [f"--set={k}={v}" for k, v in update.items()] + ["--batch", "2", "--seq", "16"]
    outs: dict[int, tuple[str, ...]] = {}
    for have in (DEFAULT_BUDGET, 1 << 40):
        monkeypatch.setattr(budget, "available_memory", lambda have=have: have)
        rs = [cli("verify", "--json"), cli("verify", *sets, "--memory-budget", gib, "--json")]
        assert all(r.code == 0 for r in rs), [r.err for r in rs]
        outs[have] = tuple(r.out for r in rs)
    assert len(set(outs.values())) == 1
    tiny, doc = (json.loads(o) for o in outs[DEFAULT_BUDGET])
    assert tiny["memory_budget_bytes"] == DEFAULT_BUDGET
    assert (doc["layers_run"], doc["n_layers"], doc["extrapolated"]) == (3, 12, True)


def test_a_plan_bigger_than_the_machine_is_refused_before_allocating(cli, monkeypatch):
    monkeypatch.setattr(budget, "available_memory", lambda: 1 << 20)
    with pytest.raises(ShapecalcError) as e:
        verify(TINY, WL)
    assert e.value.field == "memory" and "available" in e.value.reason
    r = cli("verify", "--tp", "2")
    assert r.code == 2
    line = r.err.strip()
    assert "\n" not in line and "available" in line and "--memory-budget" in line
    assert "--layers" in line and "batch" in line and "seq" in line


def test_hypothesis_draws_the_same_examples_every_run(request):
    """tests/conftest.py loads the `ci` profile unless --hypothesis-profile or HYPOTHESIS_PROFILE
    names another."""
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None
    if not (os.environ.get("HYPOTHESIS_PROFILE") or request.config.getoption("hypothesis_profile")):
        assert settings.get_current_profile_name() == "ci" and settings.default.derandomize


def test_memory_budget_option_sets_the_budget(cli):
    r = cli("verify", "--memory-budget", "0.5", "--json")
    assert r.code == 0, r.err
    assert r.json()["memory_budget_bytes"] == GiB // 2
    assert cli("verify", "--json").json()["memory_budget_bytes"] == DEFAULT_BUDGET


# -- the command ----------------------------------------------------------------------------------
def test_cli_json_lists_every_check(cli):
    r = cli("verify", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["ok"] and doc["checks"]
    for c in doc["checks"]:
        assert {"name", "symbolic", "measured", "ok"} <= set(c)


def test_cli_real_preset_at_real_width(cli):
    r = cli("verify", "--preset", "gpt2", "--layers", "1", "--batch", "1", "--seq", "4",
            "--tp", "2", "--pp", "2", "--phase", "decode", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["layers_run"] == 1 and doc["n_layers"] == 12 and doc["extrapolated"]
    shapes = next(c for c in doc["checks"] if c["name"] == "stage names and shapes (decode, p=2)")
    assert shapes["ok"] and shapes["symbolic"] > 30


def test_cli_exit_1_and_fail_rows_on_a_mismatch(cli, monkeypatch):
    monkeypatch.setitem(symbolic.ELEMENTWISE, "gelu", 9)
    r = cli("verify")
    assert r.code == 1
    assert "FAIL" in r.out and "activation (gelu)" in r.out


def test_cli_refuses_what_does_not_fit(cli):
    r = cli("verify", "--preset", "llama2-70b", "--layers", "2", "--memory-budget", "0.05")
    assert r.code == 2
    line = r.err.strip()
    assert "\n" not in line and "--layers" in line and "batch" in line and "seq" in line
    assert cli("verify", "--layers", "0").code == 2
    assert cli("verify", "--precision", "float8").code == 2


def test_python_dash_m_exit_codes():
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "shapecalc", "verify", "--tp", "2"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "all checks pass" in ok.stdout
