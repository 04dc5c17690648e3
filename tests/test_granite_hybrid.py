"""granitemoehybrid (Granite 4.0-H): Mamba-2 and Granite's attention by layer_types, every layer
a MoE plus a shared MLP, Granite's four multipliers. The reader's layout; verify passes on it;
bad configs are refused in one line naming the key."""

from __future__ import annotations

import json

import pytest

from shapecalc.check.verify import verify
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload

GRANITE = {"model_type": "granitemoehybrid", "vocab_size": 64, "hidden_size": 32,
           "intermediate_size": 12, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
           "shared_intermediate_size": 16, "mamba_n_heads": 8, "mamba_n_groups": 2,
           "mamba_d_state": 6, "mamba_chunk_size": 8,
           "layer_types": ["mamba", "attention", "linear_attention", "full_attention"],
           "embedding_multiplier": 12.0, "attention_multiplier": 0.015625,
           "residual_multiplier": 0.22, "logits_scaling": 2.0}


def _load(tmp_path, **change):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GRANITE, **change}))
    return load_hf_config(path)


def test_granite_hybrid_reads_its_layout(tmp_path):
    m = _load(tmp_path)
    assert m.mixers == ("mamba2", "attention", "mamba2", "attention")  # legacy names remapped
    assert (m.n_experts, m.n_shared_experts, m.d_ff_shared, m.norm_topk_prob) == (4, 1, 16, True)
    assert (m.ssm_heads, m.ssm_head_dim, m.ssm_gated_norm) == (8, 8, True)  # 2·32 / 8 heads
    assert (m.positions, m.residual_multiplier, m.logit_scale) == ("none", 0.22, 0.5)
    assert _load(tmp_path, position_embedding_type="rope").positions == "rope"
    assert _load(tmp_path, layer_types=None).mixers == ("mamba2",) * 4  # the class default


@pytest.mark.parametrize(("phase", "T"), [("prefill", 19), ("decode", 3)])
def test_verify_passes(tmp_path, phase, T):
    r = verify(_load(tmp_path, position_embedding_type="rope"),
               Workload(batch=2, seq=T, phase=phase, dtype="fp32"), precision="float64")
    bad = [c for c in r["checks"] if not c["ok"]]
    assert not bad, bad


@pytest.mark.parametrize(("change", "key"), [
    ({"layer_types": ["mamba", "attention", "conv", "mamba"]}, "layer_types"),  # unknown type
    ({"layer_types": ["mamba", "attention"]}, "layer_types"),  # 2 layers, N = 4
    ({"mamba_d_head": 5}, "mamba_d_head"),  # 5 × 8 heads is not 2·D = 64
    ({"mamba_d_conv": 0}, "mamba_d_conv"),
    ({"mamba_d_state": 0}, "mamba_d_state"),
    ({"mamba_n_groups": 3}, "ssm_groups"),  # does not divide H_s = 8
    ({"position_embedding_type": "alibi"}, "position_embedding_type"),
    ({"mamba_proj_bias": True}, "mamba_proj_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
])
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GRANITE, **change}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err
