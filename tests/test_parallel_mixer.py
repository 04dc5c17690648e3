"""The parallel mixer (Falcon-H1: attention and a Mamba-2 side by side in every layer, their
outputs added, μP multipliers on every branch): verify passes (the chunked scan equals the
recurrence, decode from the caches, every stage); the layer plan; the falcon_h1 reader; bad
configs are refused in one line naming the key; train, serve and tensor parallelism refuse it."""

from __future__ import annotations

import json

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.model.errors import ShapecalcError
from shapecalc.model.plan import layer_plan
from shapecalc.train.memory import check_trainable

MUP = dict(ssm_in_multiplier=0.5, ssm_out_multiplier=0.7, ssm_multipliers=(0.9, 1.1, 0.8, 1.2, 1.3),
           attention_in_multiplier=1.2, attention_out_multiplier=0.6, key_multiplier=0.8,
           mlp_multipliers=(1.5, 0.5), embedding_multiplier=2.0, logit_scale=0.5)
PAR = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40,
           ffn="swiglu", norm="rmsnorm", positions="rope", mixer_types=["parallel", "parallel"],
           ssm_heads=4, ssm_head_dim=6, ssm_groups=2, ssm_state=5, conv_kernel=4, scan_chunk=8,
           ssm_gated_norm=False, **MUP)


# (gated norm, phase, T): T=3 within one chunk and under K_c, T=19 past two chunks; two in the
# default run (over a second each), the rest under -m slow
CASES = [pytest.param(g, ph, t, marks=[] if (g, ph, t) in ((False, "prefill", 19),
                                                            (True, "decode", 3))
                      else [pytest.mark.slow])
         for g in (False, True) for ph in ("prefill", "decode") for t in (3, 19)]


@pytest.mark.parametrize(("gated", "phase", "T"), CASES)
def test_verify_passes(gated, phase, T):
    m = ModelConfig(**{**PAR, "ssm_gated_norm": gated})
    r = verify(m, Workload(batch=2, seq=T, phase=phase, dtype="fp32"), precision="float64")
    bad = [c for c in r["checks"] if not c["ok"]]
    assert not bad, bad
    names = [c["name"] for c in r["checks"]]
    assert "state cache bytes (all layers)" in names
    assert (phase == "prefill") == any(n.startswith("chunked scan ==") for n in names)


def test_a_parallel_layer_holds_both_caches_and_every_multiplier():
    m = ModelConfig(**PAR)
    assert [k.label for k in layer_plan(m).kinds] == ["full attention ∥ Mamba-2"]
    doc = build_trace(m, Workload(batch=1, seq=16, dtype="bf16"))
    t = doc["totals"]
    assert t["kv_cache_bytes"] == 2 * 2 * 2 * 16 * 8 * 2  # 2 layers, K and V, H_kv = 2, bf16
    conv, ssm = (24 + 2 * 2 * 5) * 4 * 2, 4 * 6 * 5 * 4  # bf16 window, fp32 state
    assert t["state_cache_bytes"] == 2 * (conv + ssm)
    roles = {s["role"] for s in doc["stages"]}
    assert {"ssm.in_scale", "ssm.mup", "mixer.scale", "attn.in_scale", "attn.out_scale",
            "attn.k_scale", "ffn.gate_scale", "ffn.down_scale", "mixer.sum"} <= roles
    assert "ssm.norm" not in roles and "ssm.gate.mul" in roles  # y ⊙ silu(z), no γ
    with pytest.raises(ShapecalcError, match="parallel"):
        check_trainable(m)


FALCON = {"model_type": "falcon_h1", "vocab_size": 64, "hidden_size": 32,
          "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 8, "mamba_d_ssm": 24, "mamba_n_heads": 4,
          "mamba_d_head": "auto", "mamba_n_groups": 2, "mamba_d_state": 5,
          "mamba_chunk_size": 8}


def test_falcon_h1_reads_its_layout(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**FALCON, "mlp_multipliers": [1.5, 0.5],
                                "lm_head_multiplier": 0.25}))
    m = load_hf_config(path)
    assert m.mixers == ("parallel", "parallel") and m.ssm_head_dim == 6  # 24 / 4 heads
    assert (m.mlp_multipliers, m.logit_scale, m.ssm_multipliers) == (
        (1.5, 0.5), 0.25, (1.0,) * 5)  # absent: FalconH1Config's 1.0 each
    assert not m.ssm_gated_norm  # mamba_rms_norm false (the class default)
    del FALCON["mamba_d_ssm"]
    path.write_text(json.dumps({**FALCON, "mamba_d_ssm": None}))  # I = mamba_expand·D
    assert load_hf_config(path).ssm_heads * load_hf_config(path).ssm_head_dim == 64


BASE = {**FALCON, "mamba_d_ssm": 24}


@pytest.mark.parametrize(("change", "key"), [
    ({"mamba_d_conv": 0}, "mamba_d_conv"),
    ({"mamba_d_state": 0}, "mamba_d_state"),
    ({"mamba_d_head": 5}, "mamba_d_head"),  # 5 × 4 heads is not I = 24
    ({"mamba_n_groups": 3}, "ssm_groups"),  # G = 3 does not divide H_s = 4
    ({"layer_types": ["hybrid", "hybrid"]}, "layer_types"),  # a FalconH1Config property
    ({"layers_block_type": ["hybrid"]}, "layers_block_type"),
    ({"mamba_rms_norm": True, "mamba_norm_before_gate": True}, "mamba_norm_before_gate"),
    ({"ssm_multipliers": [1.0, 1.0]}, "ssm_multipliers"),
    ({"projectors_bias": True}, "projectors_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
])
def test_bad_falcon_h1_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, **change}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err


@pytest.mark.parametrize(("fields", "key"), [
    ({"mixer_types": ["attention", "attention"], "ssm_heads": None, "ssm_head_dim": None,
      "ssm_state": None, "ssm_groups": 1, "conv_kernel": None, "scan_chunk": None,
      "ssm_in_multiplier": None, "ssm_multipliers": None, "ssm_gated_norm": True},
     "ssm_out_multiplier"),
    ({"mixer_types": ["parallel", "mamba3"]}, "mixer_types"),
    ({"mixer_types": ["parallel"]}, "mixer_types"),  # 1 layer, N = 2
    ({"scan_chunk": None}, "scan_chunk"),
])
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, fields, key):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in {**PAR, **fields}.items() if v is not None}))
    r = cli("trace", "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


def test_tensor_parallelism_is_refused_in_one_line(cli, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(PAR))
    r = cli("trace", "--config", str(path), "--tp", "2")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err


def test_serve_holds_its_keys_and_a_state_slot(cli, tmp_path):
    """serve's hybrid KV cache manager: a parallel layer's KV blocks and its Mamba-2 state."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(PAR))
    r = cli("serve", "--config", str(path), "--gpu", "h100-sxm", "--rate", "2", "--requests",
            "20", "--prompt-tokens", "64", "--output-tokens", "8", "--json")
    assert r.code == 0, r.err
    pool = json.loads(r.out)["kv_pool"]
    assert pool["state_units_per_sequence"] > 0 and pool["groups"]
