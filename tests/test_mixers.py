"""Stateful token mixers (Mamba-2, gated DeltaNet): the executor's chunked form equals the
step-by-step recurrence and every other verify check passes; a wrong chunk formula is caught;
the layer plan and its labels; bad configs are refused in one line naming the key."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import deltanet as numeric_deltanet
from shapecalc.interpret import mamba2 as numeric_mamba2
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.model.plan import layer_plan

TINY = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
            ffn="relu2", norm="rmsnorm", positions="none",
            mixer_types=["mamba2", "attention", "none"], ffn_types=["none", "none", "dense"],
            ssm_heads=4, ssm_head_dim=8, ssm_groups=2, ssm_state=6, conv_kernel=4, scan_chunk=8)


# Qwen3-Next's layout: gated DeltaNet, then gated attention (output gate, q/k norms, partial RoPE)
GDN = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40,
           ffn="swiglu", norm="rmsnorm", norm_plus_one=True, positions="rope", rotary_dim=2,
           qk_norm=True, attn_output_gate=True, mixer_types=["gated_deltanet", "attention"],
           gdn_qk_heads=2, gdn_v_heads=4, gdn_qk_dim=8, gdn_v_dim=6, conv_kernel=4,
           scan_chunk=8)


def _scan_check(r: dict) -> dict:
    return next(c for c in r["checks"] if c["name"].startswith("chunked scan =="))


@pytest.mark.parametrize("fields", [TINY, GDN], ids=["mamba2", "gated_deltanet"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("T", [3, 19])  # within one chunk (and under K_c); past two chunks
def test_verify_passes(fields, phase, T):
    r = verify(ModelConfig(**fields), Workload(batch=2, seq=T, phase=phase, dtype="fp32"),
               precision="float64")
    bad = [c for c in r["checks"] if not c["ok"]]
    assert not bad, bad
    names = [c["name"] for c in r["checks"]]
    assert "state cache bytes (all layers)" in names
    assert any(n.startswith("decode (KV cache") for n in names)  # decode from the state


def test_the_scan_check_catches_a_perturbed_chunk_formula(monkeypatch):
    model, wl = ModelConfig(**TINY), Workload(batch=1, seq=19, dtype="fp32")
    assert _scan_check(verify(model, wl, precision="float64"))["ok"]
    segsum = numeric_mamba2._segsum

    def off_by_a_little(a: np.ndarray) -> np.ndarray:  # each decay one part in 10⁴ too strong
        return segsum(a) * 1.0001

    monkeypatch.setattr(numeric_mamba2, "_segsum", off_by_a_little)
    c = _scan_check(verify(model, wl, precision="float64"))
    assert not c["ok"] and float(c["measured"]) > 1e-6


def test_the_delta_rule_check_catches_a_perturbed_chunk_formula(monkeypatch):
    model, wl = ModelConfig(**GDN), Workload(batch=1, seq=19, dtype="fp32")
    assert _scan_check(verify(model, wl, precision="float64"))["ok"]
    decay = numeric_deltanet._pairwise_decay
    monkeypatch.setattr(numeric_deltanet, "_pairwise_decay", lambda G: decay(G * 1.0001))
    c = _scan_check(verify(model, wl, precision="float64"))
    assert not c["ok"] and float(c["measured"]) > 1e-6


def test_layer_plan_kinds_and_labels():
    plan = layer_plan(ModelConfig(**TINY))
    assert [k.label for k in plan.kinds] == ["Mamba-2 · no FFN", "full attention · no FFN",
                                             "FFN only"]
    doc = build_trace(ModelConfig(**TINY), Workload(seq=16))
    # only the attention layer holds K and V; only the Mamba-2 layer a state
    assert doc["totals"]["kv_cache_bytes"] == 2 * 1 * 2 * 16 * 8 * 2
    conv, ssm = (32 + 2 * 2 * 6) * 4 * 2, 4 * 8 * 6 * 4  # bf16 conv window, fp32 state
    assert doc["totals"]["state_cache_bytes"] == conv + ssm


def test_state_bytes_do_not_grow_with_T():
    m = ModelConfig(**TINY)
    seen = {build_trace(m, Workload(seq=T, phase=ph))["totals"]["state_cache_bytes"]
            for T in (1, 7, 300) for ph in ("prefill", "decode")}
    assert len(seen) == 1


BAD = [  # (a field, its bad value, the key the message must name)
    ("conv_kernel", 0, "conv_kernel"),
    ("ssm_state", 0, "ssm_state"),
    ("ssm_groups", 3, "ssm_groups"),  # does not divide H_s = 4
    ("mixer_types", ["mamba2", "attention"], "mixer_types"),  # 2 layers, N = 3
    ("mixer_types", ["mamba2", "mamba3", "none"], "mixer_types"),
    ("ffn_types", ["none", "dense"], "ffn_types"),
    ("gdn_v_heads", 5, "gdn_v_heads"),  # H_qk = 2 does not divide it (with GDN's fields)
    ("gdn_qk_dim", None, "gdn_qk_dim"),  # gated DeltaNet layers need it
]


@pytest.mark.parametrize(("field", "value", "key"), BAD)
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, field, value, key):
    path = tmp_path / "m.json"
    base = GDN if field.startswith("gdn") else TINY
    path.write_text(json.dumps({k: v for k, v in {**base, field: value}.items()
                                if v is not None}))
    r = cli("trace", "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


NANO = {"model_type": "nemotron_h", "num_hidden_layers": 4, "hidden_size": 32,
        "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "vocab_size": 64, "hybrid_override_pattern": "M-*M",
        "mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 6}


@pytest.mark.parametrize(("change", "key"), [
    ({"hybrid_override_pattern": "M-*X"}, "hybrid_override_pattern"),  # unknown layer type
    ({"hybrid_override_pattern": "M-*"}, "hybrid_override_pattern"),  # 3 layers, N = 4
    ({"hybrid_override_pattern": "M-*E"}, "hybrid_override_pattern"),  # MoE: not modelled
    ({"hybrid_override_pattern": None, "layers_block_type": ["mamba"] * 4}, "layers_block_type"),
    ({"n_groups": 3}, "ssm_groups"),
    ({"conv_kernel": 0}, "conv_kernel"),
    ({"mlp_hidden_act": "gelu"}, "mlp_hidden_act"),
    ({"mamba_proj_bias": True}, "mamba_proj_bias"),
])
def test_bad_hf_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**NANO, **change}.items() if v is not None}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err


@pytest.mark.parametrize(("fields", "tp"), [(TINY, 4), (GDN, 4)], ids=["G=2", "H_qk=2"])
def test_tensor_parallel_needs_whole_groups_per_rank(cli, tmp_path, fields, tp):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(fields))
    r = cli("trace", "--config", str(path), "--tp", str(tp))
    assert r.code == 2 and "tp" in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.parametrize("fields", [TINY, GDN], ids=["mamba2", "gated_deltanet"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_under_tensor_parallelism(fields, phase):
    """p = 2 ranks, each its heads (vLLM's split): every stage, p ranks == one, the state per
    rank half the state."""
    r = verify(ModelConfig(**fields), Workload(batch=2, seq=19, phase=phase, dtype="fp32",
                                               tp=2), precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    assert any(c["name"].startswith("TP p=2 == unsharded") for c in r["checks"])
    one = build_trace(ModelConfig(**fields), Workload(batch=2, seq=19, phase=phase))
    two = build_trace(ModelConfig(**fields), Workload(batch=2, seq=19, phase=phase, tp=2))
    total = one["totals"]["state_cache_bytes"]
    assert total == two["totals"]["state_cache_bytes"] > 0
    assert 2 * two["parallel"]["tp"]["state_cache_bytes_per_rank"] == total


QNEXT = {"model_type": "qwen3_next", "num_hidden_layers": 4, "hidden_size": 32,
         "intermediate_size": 48, "num_attention_heads": 4, "vocab_size": 64, "head_dim": 8,
         "num_experts": 0}


@pytest.mark.parametrize(("change", "key"), [
    ({"layer_types": ["linear_attention"] * 3}, "layer_types"),  # 3 layers, N = 4
    ({"layer_types": ["linear_attention", "mamba", "full_attention", "full_attention"]},
     "layer_types"),
    ({"full_attention_interval": 0}, "full_attention_interval"),
    ({"linear_num_value_heads": 3}, "gdn_v_heads"),  # 16 q/k heads (the default) do not divide
    ({"linear_conv_kernel_dim": 0}, "conv_kernel"),
])
def test_bad_qwen3_next_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QNEXT, **change}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err


def test_qwen3_next_reads_its_layout(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QNEXT))
    from shapecalc.inputs.hf import load_hf_config
    m = load_hf_config(path)
    assert m.mixers == ("gated_deltanet",) * 3 + ("attention",)  # full_attention_interval 4
    assert (m.attn_output_gate, m.norm_plus_one, m.rotary_dim, m.scan_chunk) == (True, True, 2,
                                                                                 64)


def test_fit_counts_the_states_of_the_largest_batch():
    """fit reserves each sequence's fixed state: B × the state bytes of one sequence, and the
    largest batch is the largest whose weights, KV blocks, states and workspace fit."""
    from shapecalc.api import fit
    one = build_trace(ModelConfig(**GDN), Workload(batch=1, seq=4096))["totals"]
    doc = fit(ModelConfig(**GDN), "h100-sxm", batch=8, seq=4096).model_dump()
    assert doc["memory_per_rank"]["state_cache"] == 8 * one["state_cache_bytes"] > 0
    mem = doc["memory_per_rank"]
    assert mem["total"] == sum(mem[k] for k in ("weights", "kv_cache", "state_cache",
                                                "activations", "reserve"))
    big = doc["max_batch"]
    at = fit(ModelConfig(**GDN), "h100-sxm", batch=big, seq=4096).model_dump()
    over = fit(ModelConfig(**GDN), "h100-sxm", batch=big + 1, seq=4096).model_dump()
    assert at["fits"] and not over["fits"]
    assert over["memory_per_rank"]["state_cache"] == (big + 1) * one["state_cache_bytes"]


def test_outputs_name_the_mixers_flops_convention():
    mixed = build_trace(ModelConfig(**GDN), Workload(seq=16))["totals"]
    attention_only = {k: v for k, v in TINY.items() if not k.startswith(("ssm_", "conv_",
                                                                         "scan_"))}
    plain = build_trace(ModelConfig(**{**attention_only, "mixer_types": ["attention"] * 3}),
                        Workload(seq=16))["totals"]
    assert (mixed["mixer_flops_convention"], plain["mixer_flops_convention"]) == (
        "transformers-torch", "none")
    assert plain["state_cache_bytes"] == 0 and plain["flops_breakdown"]["token_mixers"] == 0
