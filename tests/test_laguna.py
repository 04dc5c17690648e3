"""Laguna (transformers 5.24's models/laguna): a head count per layer, the softplus output gate
(per head or per channel), RoPE per layer type, its sigmoid MoE; counted by hand, run in both
interpreters (verify), refused in one line where the config asks for what the class cannot build.
The preset's and the class defaults' totals against transformers are test_families_reference's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ShapecalcError, Workload, check
from shapecalc.model.plan import layer_plan
from shapecalc.train.memory import check_trainable

ROOT = Path(__file__).parent.parent
BASE = json.loads((ROOT / "tests" / "data" / "hf" / "laguna.json").read_text())
# 4 layers, the full one 4 heads and the sliding ones 6, 2 KV heads, 4 experts
TINY = {**BASE, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 64,
        "num_attention_heads_per_layer": [4, 6, 6, 6], "num_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 24, "sliding_window": 4,
        "layer_types": BASE["layer_types"][:4], "mlp_layer_types": BASE["mlp_layer_types"][:4]}


def _model(tmp_path, cfg: dict):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def _params(m) -> int:
    return build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]


def test_the_preset_reads_heads_per_layer_the_gate_and_rope_per_layer_type():
    m = load_preset("laguna")
    assert m.layer_widths.n_heads == tuple(48 if i % 4 == 0 else 64 for i in range(40))
    assert (m.attn_head_gate, m.attn_output_gate, m.attn_gate_act) == (True, False, "softplus")
    assert (m.rotary_dim, m.rotary_dim_local) == (64, 128)  # partial on the full layers only
    assert (m.router_scoring, m.routing_bias, m.routed_scaling_factor) == ("sigmoid", True, 2.5)
    labels = [k.label for k in layer_plan(m).kinds]
    assert labels == ["full attention", "sliding window W=512 · MoE · H=64",
                      "full attention · MoE"]


def test_a_layers_parameters_follow_its_own_heads_by_hand(tmp_path):
    """Per layer: q [D → H_ℓ·Dh], o [H_ℓ·Dh → D], the per-head gate [D → H_ℓ]; k, v [D → H_kv·Dh];
    q/k norms Dh each; two RMSNorms D each. One more head on a layer adds 2·D·Dh + D."""
    D, dh, kv = 32, 8, 2
    m = _model(tmp_path, TINY)

    def attention(h: int) -> int:
        return 2 * D * h * dh + 2 * D * kv * dh + D * h + 2 * dh

    moe = 4 * 3 * D * 16 + 3 * D * 24 + 4 * D + 4  # experts, shared MLP, router, correction bias
    want = (2 * 64 * D + D + attention(4) + 3 * attention(6) + 3 * D * 48 + 3 * moe
            + 4 * 2 * D)
    assert _params(m) == want
    more = _model(tmp_path, {**TINY, "num_attention_heads_per_layer": [4, 8, 6, 6]})
    assert _params(more) - want == 2 * (2 * D * dh + D)


def test_the_per_channel_gate_is_h_l_dh_wide(tmp_path):
    """gating "per-element" (or false): W_g [D → H_ℓ·Dh], one softplus gate a channel."""
    head = _model(tmp_path, TINY)
    chan = _model(tmp_path, {**TINY, "gating": "per-element"})
    assert (chan.attn_output_gate, chan.attn_head_gate, chan.attn_gate_act) == (
        True, False, "softplus")
    assert _model(tmp_path, {**TINY, "gating": False}) == chan
    assert _params(chan) - _params(head) == 32 * (4 + 3 * 6) * (8 - 1)


def test_verify_runs_both_gates_the_heads_and_the_tables_in_numpy(tmp_path):
    """Both interpreters agree stage by stage (tp 1 and 2: every H_ℓ splits), the router
    softcap and the per-channel gate included."""
    for extra in ({}, {"gating": "per-element", "moe_router_logit_softcapping": 30.0}):
        m = _model(tmp_path, {**TINY, **extra})
        doc = verify(m, Workload(batch=1, seq=8, tp=2), layers=layer_plan(m).covering())
        assert doc["ok"], [c["name"] for c in doc["checks"] if not c["ok"]]


@pytest.mark.parametrize("key,value", [
    ("num_attention_heads_per_layer", [4, 6, 6]),  # not one per layer
    ("num_attention_heads_per_layer", [4, 5, 6, 6]),  # 5 heads over 2 KV heads
    ("mlp_layer_types", ["dense", "sparse", "moe", "sparse"]),
    ("layer_types", ["full_attention"] * 3),
    ("gating", 1),
    ("moe_apply_router_weight_on_input", True),  # transformers raises NotImplementedError
    ("norm_topk_prob", False),  # LagunaTopKRouter always renormalises
    ("mlp_only_layers", [0, 1]),  # the original code's placement, not mlp_layer_types'
    ("decoder_sparse_step", 2),
    ("moe_router_logit_softcapping", -1.0),
    ("rope_parameters", {"rope_theta": 10000.0}),  # no entry per layer type
    ("rope_parameters", {"full_attention": {"rope_theta": "x"}, "sliding_attention": {}}),
    ("moe_routed_scaling_factor", None),
])
def test_bad_configs_are_refused_naming_the_key(tmp_path, key, value):
    with pytest.raises(ShapecalcError) as err:
        _model(tmp_path, {**TINY, key: value})
    assert err.value.field == key


@pytest.mark.slow  # a subprocess: over a second
def test_the_cli_exits_2_in_one_line_naming_the_key(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY, "num_attention_heads_per_layer": [4, 6]}))
    r = subprocess.run([sys.executable, "-m", "shapecalc", "trace", "--hf-config", str(p)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "num_attention_heads_per_layer" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout


def test_tp_must_split_every_layers_heads_and_train_refuses_them(tmp_path):
    m = _model(tmp_path, {**TINY, "num_attention_heads_per_layer": [4, 6, 6, 6]})
    check(m, Workload(batch=1, seq=8, tp=2))
    with pytest.raises(ShapecalcError) as err:
        check(m, Workload(batch=1, seq=8, tp=4))  # 4 splits H = 4, not H_ℓ = 6
    assert err.value.field == "tp"
    chan = _model(tmp_path, {**TINY, "gating": "per-element"})  # a gate with a backward rule
    for model, key in ((chan.model_copy(update={"attn_gate_act": "sigmoid"}), "layer_widths"),
                       (m, "attn_head_gate"),
                       (chan.model_copy(update={"layer_widths": None}), "attn_gate_act")):
        with pytest.raises(ShapecalcError) as err:
            check_trainable(model)  # no backward rules for these yet
        assert err.value.field == key
    with pytest.raises(ShapecalcError) as err:
        m.model_copy(update={"layer_widths": {"n_heads": (4, 6)}})._check()
    assert err.value.field == "layer_widths.n_heads"


@pytest.mark.slow
def test_live_the_variants_equal_transformers(tmp_path):
    """With torch installed: the per-channel gate, a router softcap and 2 shared widths measured
    by transformers (FlopCounterMode, real tensors, T=16) equal shapecalc's totals."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    sys.path.insert(0, str(ROOT / "tests" / "torch_reference"))
    import measure_families

    cfg = {k: v for k, v in {**TINY, "gating": "per-element",
                             "moe_router_logit_softcapping": 30.0}.items()
           if k not in ("model_type", "architectures", "auto_map", "torch_dtype")}
    live = measure_families.measure_case("laguna-variant", "laguna", cfg, 16)
    m = _model(tmp_path, {"model_type": "laguna", **live["hf_config"]})
    wl = dict(batch=1, seq=16, dtype="fp32")
    prefill = build_trace(m, Workload(**wl))["totals"]
    decode = build_trace(m, Workload(**wl, phase="decode"))["totals"]
    assert (prefill["flops"], decode["flops"]) == (live["prefill_flops"], live["decode_flops"])
    assert (prefill["params"], prefill["kv_cache_bytes"]) == (
        live["params"], live["kv_cache_bytes_window_W"])
