"""ZAYA (CCA attention, top-1 MoE with its MLP router and skip expert, residual scaling): verify
passes at reduced width, prefill and decode; the router's state passed between layers (the first
layer adds none); the zaya reader's bad configs exit 2 naming the key."""

from __future__ import annotations

import json

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload
from shapecalc.model.plan import layer_plan

ZAYA = {"model_type": "zaya", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "moe_intermediate_size": 16, "num_experts": 3, "router_hidden_size": 12,
        "cca_time0": 2, "cca_time1": 3, "sliding_window": 5,
        "layer_types": ["hybrid", "hybrid_sliding", "hybrid"]}


def _load(tmp_path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return load_hf_config(path)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_at_reduced_width(tmp_path, phase):
    r = verify(_load(tmp_path, ZAYA), Workload(batch=2, seq=9, phase=phase, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


def test_verify_passes_with_biases_and_pipeline_stages(tmp_path):
    """Attention and LM-head biases, untied, two pipeline stages; the padding check is skipped
    (transformers zeroes the pads' hidden states, so their projections' biases reach the convs
    and the real tokens: a padded batch differs from the unpadded runs there too)."""
    cfg = {**ZAYA, "attention_bias": True, "lm_head_bias": True, "tie_word_embeddings": False}
    r = verify(_load(tmp_path, cfg), Workload(batch=2, seq=7, dtype="fp32", pp=2),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    pad = next(c for c in r["checks"] if c["name"].startswith("padding mask"))
    assert "biases" in str(pad)


def test_the_router_state_passes_down_the_layers(tmp_path):
    m = _load(tmp_path, ZAYA)
    plan = layer_plan(m)
    assert [k.router_eda for k in plan.kinds] == [False, True, True]  # layer 0 adds none
    doc = build_trace(m, Workload(batch=1, seq=4))
    eda = [s for s in doc["stages"] if s["role"] == "moe.router.eda"]
    assert sum(s["repeat"] for s in eda) == 2 and all(s["params"] == 12 for s in eda)
    router = next(s for s in doc["stages"] if s["role"] == "moe.router")
    assert router["shape"][-1] == 3 + 1  # E experts and the skip expert


@pytest.mark.parametrize(("change", "key"), [
    ({"layer_types": ["hybrid", "full_attention", "hybrid"]}, "layer_types"),
    ({"layer_types": ["hybrid", "hybrid"]}, "layer_types"),  # 2 layers, N = 3
    ({"num_experts_per_tok": 2}, "num_experts_per_tok"),
    ({"cca_time0": 0}, "cca_time0"),
    ({"router_hidden_size": 0}, "router_hidden_size"),
    ({"sliding_window": None}, "sliding_window"),  # hybrid_sliding layers need W
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"partial_rotary_factor": 0.25}, "partial_rotary_factor"),  # the nested ones say 0.5
    ({"rope_parameters": {"hybrid": {"rope_theta": 1e4, "partial_rotary_factor": 0.5},
                          "hybrid_sliding": {"rope_theta": 1e4, "partial_rotary_factor": 1.0}}},
     "rope_parameters"),
])
def test_bad_zaya_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**ZAYA, **change}.items() if v is not None}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


@pytest.mark.slow
def test_live_remeasures_a_zaya_case():
    """With torch and transformers installed, one case of tests/data/mixers_reference_zaya.json
    measured again (tests/torch_reference/measure_mixers.py) gives the stored numbers."""
    import importlib.util
    from pathlib import Path
    if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")):
        pytest.skip("torch and transformers are not installed")
    root = Path(__file__).parent
    spec = importlib.util.spec_from_file_location(
        "measure_mixers", root / "torch_reference" / "measure_mixers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ref = json.loads((root / "data" / "mixers_reference_zaya.json").read_text())
    case = next(c for c in ref["cases"] if c["name"] == "zaya-sliding-bias")
    live = mod.measure(case["full_config"], case["hf_config"])
    assert live == {k: case[k] for k in ("params_meta", "steps")}
