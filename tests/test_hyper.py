"""Hyper-connections (mHC, DeepSeek-V4): n_hc residual streams. Their parameters and matmul
FLOPs equal FlopCounterMode on transformers' DeepseekV4 modules (tests/data/hyper_reference.json,
measured by tests/torch_reference/measure_hyper.py), the elementwise convention by hand, what
crosses a pipeline boundary is n_hc·D per token, verify runs them in NumPy (and catches a wrong
Sinkhorn count), and bad configs are refused in one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import symbolic, symbolic_hyper
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.model.parallel import residual_width

DATA = json.loads((Path(__file__).parent / "data" / "hyper_reference.json").read_text())
TINY = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=8, d_ff=48,
            ffn="swiglu", norm="rmsnorm", positions="rope", hc_streams=3, hc_sinkhorn_iters=4)


def _model(case: dict) -> ModelConfig:
    hf = case["hf_config"]
    return ModelConfig(**{**TINY, "d_model": hf["hidden_size"], "hc_streams": hf["hc_mult"],
                          "hc_sinkhorn_iters": hf["hc_sinkhorn_iters"]})


def _sum(st, field: str, *roles: str) -> int:
    return sum(getattr(s, field) for s in st if s.role in roles and s.kind in (0, None))


@pytest.mark.parametrize("case", DATA["cases"],
                         ids=[f"n{c['hf_config']['hc_mult']}-T{c['seq']}" for c in DATA["cases"]])
def test_params_and_flops_equal_flopcountermode(case):
    m = _model(case)
    for phase in ("prefill", "decode"):
        st = symbolic.stages(m, Workload(batch=1, seq=case["seq"], phase=phase, dtype="fp32"))
        ref = case[f"{phase}_flops"]
        assert _sum(st, "flops", "hc.attn.proj") == ref["layers.0.attn_hc"]
        assert _sum(st, "flops", "hc.ffn.proj") == ref["layers.0.ffn_hc"]
        # the decoder layer's own matmuls: its two merges combᵀ·x
        assert _sum(st, "flops", "hc.attn.merge", "hc.ffn.merge") == ref["layers.0"]
        assert _sum(st, "flops", "hc.head.proj") == ref["hc_head"]
        params = case["params"]
        attn = ("hc.attn.proj", "hc.attn.weights", "hc.attn.norm")
        assert _sum(st, "params", *attn) == params["layers.0.attn_hc"]
        assert _sum(st, "params", *[r.replace("attn", "ffn") for r in attn]) == \
            params["layers.0.ffn_hc"]
        assert _sum(st, "params", "hc.head.proj", "hc.head.weights") == params["hc_head"]


@pytest.mark.parametrize("case", DATA["cases"][::2], ids=lambda c: f"n{c['hf_config']['hc_mult']}")
def test_the_pipeline_boundary_carries_n_streams(case):
    m = _model(case)
    assert residual_width(m) == case["residual_per_token"]
    wl = Workload(batch=2, seq=16, dtype="bf16", pp=2)
    pp = build_trace(m, wl)["parallel"]["pp"]
    assert pp["boundary_bytes"] == 2 * 16 * case["residual_per_token"] * 2


def test_elementwise_by_hand():
    """n_hc = 2, t_max = 2, B = T = 1: pre and post 7·2 each, comb 8·4; Sinkhorn 3
    normalisations of 2·4 + 2; the head's pre 7·2; each collapse and merge 2·n_hc·D."""
    m = ModelConfig(**{**TINY, "hc_streams": 2, "hc_sinkhorn_iters": 2})
    st = symbolic.stages(m, Workload(batch=1, seq=1, dtype="fp32"))
    ew = {s.role: s.elementwise_flops for s in st if s.role.startswith("hc.")}
    assert ew["hc.attn.weights"] == 14 * 2 + 8 * 4
    assert ew["hc.attn.sinkhorn"] == 3 * (2 * 4 + 2)
    assert ew["hc.head.weights"] == 7 * 2
    assert ew["hc.attn.collapse"] == ew["hc.ffn.merge"] == 2 * 2 * 32
    assert ew["hc.attn.norm"] == 3 * 2 * 32  # RMS over n_hc·D, no γ


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_runs_the_streams(phase):
    m = ModelConfig(**{**TINY, "n_kv_heads": 2, "n_experts": 4, "experts_per_token": 2,
                       "d_ff_expert": 16, "n_shared_experts": 1, "n_layers": 4})
    r = verify(m, Workload(batch=2, seq=5, phase=phase, dtype="fp32", tp=2, pp=2),
               precision="float64")
    bad = [c for c in r["checks"] if not c["ok"]]
    assert not bad, bad
    assert any(c["name"].startswith("pipeline boundary") for c in r["checks"])


def test_verify_catches_a_wrong_sinkhorn_count(monkeypatch):
    m, wl = ModelConfig(**TINY), Workload(batch=1, seq=4, dtype="fp32")
    assert all(c["ok"] for c in verify(m, wl, precision="float64")["checks"])
    monkeypatch.setattr(symbolic_hyper, "sinkhorn_steps", lambda iters: 2 * iters)  # one too many
    assert not all(c["ok"] for c in verify(m, wl, precision="float64")["checks"])


@pytest.mark.parametrize(("sets", "field"), [
    (["hc_streams=0"], "hc_streams"),
    (["hc_sinkhorn_iters=3"], "hc_sinkhorn_iters"),  # without streams
    (["hc_streams=4", "hc_sinkhorn_iters=0"], "hc_sinkhorn_iters"),
    (["hc_streams=4", "parallel_block=true"], "parallel_block"),
])
def test_bad_configs_exit_2_naming_the_key(cli, sets, field):
    r = cli("trace", *[a for s in sets for a in ("--set", s)])
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert field in r.err


def test_train_refuses_in_one_line(cli, tmp_path):
    cfg = tmp_path / "hc.json"
    cfg.write_text(json.dumps(TINY))
    r = cli("train", "--config", str(cfg))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "hc_streams" in r.err


@pytest.mark.slow
def test_live_remeasure_one_case():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "measure_hyper", Path(__file__).parent / "torch_reference" / "measure_hyper.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = DATA["cases"][2]
    got = mod.measure(case["hf_config"]["hc_mult"], case["hf_config"]["hc_sinkhorn_iters"],
                      case["seq"])
    assert {k: got[k] for k in ("params", "prefill_flops", "decode_flops")} == \
        {k: case[k] for k in ("params", "prefill_flops", "decode_flops")}


@pytest.mark.slow
def test_closed_form_equals_the_stages():
    """The closed form (costs/closed.py) reads the streams' stages as polynomials in B and T,
    and the boundary as n_hc·D per token."""
    import random

    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at

    m = ModelConfig(**{**TINY, "n_layers": 3})
    rng = random.Random(0)
    points = [dict(batch=rng.randint(1, 9), seq=rng.randint(1, 80),
                   phase=rng.choice(["prefill", "decode"]), tp=rng.choice([1, 2, 4]),
                   pp=rng.randint(1, 3), dtype="bf16", kv_dtype="fp8", act_dtype="fp32")
              for _ in range(8)]
    assert_equal_at(m, ClosedForm(m), points)


HY = {**TINY, "hc_mixing": "none"}


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_hunyuan_streams_without_comb(phase):
    """hc_mixing none (Hunyuan 4's HYV4HyperConnection): fn [2·n_hc, n_hc·D], b [2·n_hc], s [2];
    the merge post ⊗ y + x has no matmul; verify runs it."""
    m = ModelConfig(**HY)
    n, D, T = 3, 32, 5
    st = symbolic.stages(m, Workload(batch=1, seq=T, phase=phase, dtype="fp32"))
    q = 1 if phase == "decode" else T
    assert _sum(st, "params", "hc.attn.proj", "hc.attn.weights", "hc.attn.norm") == \
        2 * n * n * D + 2 * n + 2
    assert _sum(st, "flops", "hc.attn.proj") == 2 * q * n * D * 2 * n
    assert _sum(st, "flops", "hc.attn.merge", "hc.ffn.merge") == 0
    assert not [s for s in st if s.role.endswith(".sinkhorn")]
    r = verify(m, Workload(batch=2, seq=T, phase=phase, dtype="fp32", pp=2),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


@pytest.mark.slow
def test_hunyuan_streams_are_transformers_own():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.hy_v4.configuration_hy_v4 import HYV4Config
    from transformers.models.hy_v4.modeling_hy_v4 import HYV4HyperConnection

    hc = HYV4HyperConnection(HYV4Config(hidden_size=32, hc_mult=3))
    assert sum(p.numel() for p in hc.parameters()) == 2 * 3 * 3 * 32 + 2 * 3 + 2
    fc = FlopCounterMode(display=False)
    with fc:
        hc(torch.randn(1, 5, 3, 32))
    m = ModelConfig(**HY)
    st = symbolic.stages(m, Workload(batch=1, seq=5, dtype="fp32"))
    assert fc.get_total_flops() == _sum(st, "flops", "hc.attn.proj")
