"""The delta-rule hybrids' readers: Kimi-Linear (KDA : MLA without RoPE, DeepSeek-V3's MoE under
its own key names) and OLMo-Hybrid (gated DeltaNet with β ∈ (0, 2) : OLMo 3 attention). Each
reads its layout as transformers 5.24's config class does; bad configs exit 2 in one line
naming the key; verify passes at the reference cases' reduced widths (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.check.verify import verify
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload

ROOT = Path(__file__).parent.parent
HF = ROOT / "tests" / "data" / "hf"
KIMI = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
LING = json.loads((HF / "ling-3.0-flash.json").read_text())
OLMO = {"model_type": "olmo_hybrid", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 4, "num_attention_heads": 4, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 6}


def _load(tmp_path: Path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return load_hf_config(path)


def test_kimi_linear_reads_its_one_based_layer_lists():
    m = load_hf_config(HF / "kimi-linear-48b-a3b.json")
    full = [i + 1 for i, mx in enumerate(m.mixers) if mx == "attention"]
    assert full == [4, 8, 12, 16, 20, 24, 27]  # linear_attn_config.full_attn_layers
    assert (m.positions, m.kv_lora_rank, m.qk_rope_head_dim, m.n_experts, m.experts_per_token,
            m.n_shared_experts, m.router_scoring) == ("none", 512, 64, 256, 8, 1, "sigmoid")
    assert (m.gdn_qk_heads, m.gdn_qk_dim, m.conv_kernel, m.scan_chunk) == (32, 128, 4, 64)
    assert m.ffn_types is not None and m.ffn_types[:2] == ("dense", "moe")  # first_k_dense 1


def test_kimi_linear_class_defaults_put_mla_on_every_fourth_layer_from_the_fifth(tmp_path):
    m = _load(tmp_path, {"model_type": "kimi_linear"})
    assert [i for i, mx in enumerate(m.mixers) if mx == "attention"] == [4, 8, 12, 16, 20, 24]


def test_bailing_hybrid_reads_its_layout(tmp_path):
    m = load_hf_config(HF / "ling-3.0-flash.json")
    assert [i + 1 for i, mx in enumerate(m.mixers) if mx == "attention"] == list(range(6, 43, 6))
    assert m.ffn_types is not None and m.ffn_types[:3] == ("dense", "dense", "moe")
    assert (m.gdn_qk_heads, m.gdn_qk_dim, m.kda_low_rank, m.kda_gate_bound, m.attn_head_gate,
            m.positions, m.rope_base) == (32, 128, False, -5.0, True, "rope", 6e6)
    unsafe = _load(tmp_path, {**LING, "kda_safe_gate": False, "layer_types": None,
                              "layer_group_size": 3})
    assert unsafe.kda_gate_bound is None and unsafe.mixers[:3] == ("kda", "kda", "attention")


def test_olmo_hybrid_reads_its_layout(tmp_path):
    m = _load(tmp_path, OLMO)
    assert m.mixers == ("gated_deltanet",) * 3 + ("attention",)
    assert (m.norm_position, m.qk_norm_width, m.gdn_neg_eigval, m.positions) == (
        "output", "all", True, "rope")
    two = _load(tmp_path, {**OLMO, "num_hidden_layers": 2,
                           "rope_parameters": {"rope_type": "default", "rope_theta": None}})
    assert two.mixers == ("gated_deltanet", "attention")  # the last layer attends if none does
    assert two.positions == "none"  # rope_theta null: NoPE, as the released checkpoint
    d = _load(tmp_path, {k: v for k, v in OLMO.items() if not k.startswith("linear_")})
    assert (d.gdn_qk_heads, d.gdn_qk_dim, d.gdn_v_dim) == (4, 6, 12)  # ¾·D/H_qk, then 2·D_qk


@pytest.mark.parametrize(("cfg", "change", "key"), [
    (KIMI, {"linear_attn_config": {**KIMI["linear_attn_config"], "full_attn_layers": [4, 8]}},
     "linear_attn_config"),  # layers 12, … in neither list
    (KIMI, {"layer_types": ["linear_attention"] * 26}, "layer_types"),  # 26 layers, N = 27
    (KIMI, {"layer_types": ["linear_attention"] * 26 + ["mamba"]}, "layer_types"),
    (KIMI, {"mlp_layer_types": ["dense"] * 3}, "mlp_layer_types"),
    (KIMI, {"num_expert_group": 3}, "num_expert_group"),  # 256 experts in 3 groups
    (KIMI, {"topk_group": 2}, "topk_group"),  # of 1 group
    (KIMI, {"mla_use_nope": False}, "mla_use_nope"),
    (KIMI, {"moe_router_activation_func": "softmax"}, "moe_router_activation_func"),
    (KIMI, {"moe_layer_freq": 2}, "moe_layer_freq"),
    (KIMI, {"num_key_value_heads": 4}, "num_key_value_heads"),  # MLA makes K, V for every head
    (LING, {"layer_types": None, "layer_group_size": 0}, "layer_group_size"),
    (LING, {"kda_lower_bound": 2.0}, "kda_lower_bound"),  # the log-decay must stay below 0
    (LING, {"num_expert_group": 3}, "num_expert_group"),  # 512 experts in 3 groups
    (LING, {"head_dim": None}, "head_dim"),  # KDA's head width
    (LING, {"mlp_layer_types": ["dense"] * 41}, "mlp_layer_types"),  # 41 layers, N = 42
    (OLMO, {"layer_types": ["linear_attention"] * 4}, "layer_types"),  # no attention layer
    (OLMO, {"layer_types": ["linear_attention"] * 3}, "layer_types"),  # 3 layers, N = 4
    (OLMO, {"layer_types": ["linear_attention"] * 3 + ["sliding_attention"]}, "layer_types"),
    (OLMO, {"linear_num_value_heads": 3}, "gdn_v_heads"),  # 2 q/k heads do not divide it
    (OLMO, {"linear_conv_kernel_dim": 0}, "conv_kernel"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, cfg, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, **change}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


def _cases() -> dict:
    doc = json.loads((ROOT / "tests" / "data" / "mixers_reference_delta.json").read_text())
    return {c["name"]: c["hf_config"] for c in doc["cases"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_cases()))
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_at_the_reference_widths(tmp_path, name, phase):
    """Past one chunk of 64 (T = 70): the chunked rules equal the recurrence, every stage."""
    m = _load(tmp_path, _cases()[name])
    r = verify(m, Workload(batch=1, seq=70, phase=phase, dtype="fp32"), precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


@pytest.mark.slow
def test_live():
    """With torch installed, one case measured again equals its stored numbers (KDA with the
    bounded gate, MLA with the head-wise gate)."""
    import importlib.util
    if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")):
        pytest.skip("torch and transformers are not installed")
    path = ROOT / "tests" / "torch_reference" / "measure_mixers.py"
    spec = importlib.util.spec_from_file_location("measure_mixers", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = json.loads((ROOT / "tests" / "data" / "mixers_reference_delta.json").read_text())
    case = next(c for c in doc["cases"] if c["name"] == "bailing_hybrid-variant")
    live = mod.measure(case["full_config"], case["hf_config"])
    assert live == {k: case[k] for k in ("params_meta", "steps")}
