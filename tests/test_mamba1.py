"""Mamba-1 (the selective scan, Jamba's mixer): verify passes (its prefill scan equals T
single-token decode steps, and every other check); a perturbed prefill rule is caught; the jamba
reader's layer plan; bad configs are refused in one line naming the key; train refuses it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import mamba1 as numeric_mamba1
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.model.errors import ShapecalcError
from shapecalc.model.plan import layer_plan
from shapecalc.train.memory import check_trainable

# Jamba's layout: Mamba-1 (RMSNorms on Δ, B, C, projection biases), attention, a MoE layer
M1 = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40,
          ffn="swiglu", norm="rmsnorm", positions="none", n_experts=4, experts_per_token=2,
          mixer_types=["mamba1", "attention", "mamba1"], ffn_types=["dense", "moe", "dense"],
          ssm_state=6, conv_kernel=4, mamba_expand=2, mamba_dt_rank=3, mamba_bcdt_norm=True,
          mamba_proj_bias=True)
STEPS = "prefill scan == T single-token decode steps"


def _steps_check(r: dict) -> dict:
    return next(c for c in r["checks"] if c["name"].startswith(STEPS))


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("T", [3, 19])  # under K_c (the cache pads the prompt), past it
def test_verify_passes(phase, T):
    r = verify(ModelConfig(**M1), Workload(batch=2, seq=T, phase=phase, dtype="fp32"),
               precision="float64")
    bad = [c for c in r["checks"] if not c["ok"]]
    assert not bad, bad
    names = [c["name"] for c in r["checks"]]
    assert "state cache bytes (all layers)" in names
    assert (phase == "prefill") == any(n.startswith(STEPS) for n in names)


def test_the_steps_check_catches_a_perturbed_prefill_rule(monkeypatch):
    model, wl = ModelConfig(**M1), Workload(batch=1, seq=9, dtype="fp32")
    assert _steps_check(verify(model, wl, precision="float64"))["ok"]
    discretize = numeric_mamba1._discretize

    def off_by_a_little(delta, A, Bm, x):  # each decay one part in 10⁴ too strong
        dA, dBx = discretize(delta, A, Bm, x)
        return dA * 1.0001, dBx

    monkeypatch.setattr(numeric_mamba1, "_discretize", off_by_a_little)
    c = _steps_check(verify(model, wl, precision="float64"))
    assert not c["ok"] and float(c["measured"]) > 1e-6


def test_the_scan_counts_by_hand():
    """Prefill: one [B,D_i,N_s]×[B,N_s,1] bmm per token (2·B·T·D_i·N_s); the state
    [D_i, N_s] fp32 and the conv window [D_i, K_c] per sequence, whatever T is."""
    m = ModelConfig(**M1)
    Di, N, K = 64, 6, 4
    for T in (5, 300):
        st = build_trace(m, Workload(batch=2, seq=T))["stages"]
        ro = [s for s in st if s["role"] == "mamba.readout"]
        assert ro and ro[0]["flops"] == 2 * 2 * T * Di * N
        t = build_trace(m, Workload(batch=2, seq=T, dtype="bf16"))["totals"]
        assert t["state_cache_bytes"] == 2 * 2 * (Di * N * 4 + Di * K * 2)  # 2 layers, B=2
    assert [k.label for k in layer_plan(m).kinds] == ["Mamba-1", "full attention · MoE"]


def test_train_refuses_mamba1():
    with pytest.raises(ShapecalcError, match="mamba1"):
        check_trainable(ModelConfig(**M1))


BAD = [  # (a field, its bad value, the key the message must name)
    ("conv_kernel", 0, "conv_kernel"),
    ("ssm_state", 0, "ssm_state"),
    ("mamba_dt_rank", 0, "mamba_dt_rank"),
    ("mamba_dt_rank", None, "mamba_dt_rank"),  # Mamba-1 layers need it
    ("mixer_types", ["mamba1", "attention"], "mixer_types"),  # 2 layers, N = 3
    ("mixer_types", ["mamba1", "mamba0", "attention"], "mixer_types"),
    ("scan_chunk", 8, "scan_chunk"),  # Mamba-1's scan has no chunk
]


@pytest.mark.parametrize(("field", "value", "key"), BAD)
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, field, value, key):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in {**M1, field: value}.items() if v is not None}))
    r = cli("trace", "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


def test_tensor_parallelism_is_refused_in_one_line(cli, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(M1))
    r = cli("trace", "--config", str(path), "--tp", "2")
    assert r.code == 2 and "tp" in r.err and len(r.err.strip().splitlines()) == 1, r.err


JAMBA = {"model_type": "jamba", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 40,
         "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_experts": 4, "mamba_d_state": 6, "mamba_dt_rank": 3}


@pytest.mark.parametrize(("change", "key"), [
    ({"mamba_d_conv": 0}, "mamba_d_conv"),
    ({"mamba_d_state": 0}, "mamba_d_state"),
    ({"mamba_dt_rank": 0}, "mamba_dt_rank"),
    ({"mamba_dt_rank": "full"}, "mamba_dt_rank"),
    ({"attn_layer_offset": 8}, "attn_layer_offset"),  # not below attn_layer_period
    ({"expert_layer_period": 0}, "expert_layer_period"),
    ({"layer_types": ["full_attention"] * 8}, "layer_types"),  # a JambaConfig property
    ({"layers_block_type": ["mamba"] * 8}, "layers_block_type"),
    ({"hidden_act": "gelu"}, "hidden_act"),  # the conv's activation
    ({"num_experts": 0}, "num_experts"),
])
def test_bad_jamba_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**JAMBA, **change}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err


def test_jamba_reads_its_layout(tmp_path):
    from shapecalc.inputs.hf import load_hf_config
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**JAMBA, "mamba_dt_rank": "auto"}))
    m = load_hf_config(path)
    assert m.mixers == ("mamba1",) * 4 + ("attention",) + ("mamba1",) * 3
    assert m.ffn_types == ("dense", "moe") * 4 and m.n_experts == 4
    assert (m.mamba_dt_rank, m.mamba_inner, m.positions) == (2, 64, "none")  # ⌈32/16⌉, 2·D
    path.write_text(json.dumps({**JAMBA, "num_experts": 1}))  # one expert: every layer dense
    assert load_hf_config(path).n_experts is None
    np.testing.assert_equal(build_trace(load_hf_config(path), Workload(seq=4))["totals"][
        "mixer_flops_convention"], "transformers-torch")


def test_closed_form_equals_the_trace():
    """A state is constant in T and the scan linear in it: the closed form (sweep, fit, compare)
    equals the stage list on both sides of the conv's cut at T = K_c, prefill and decode."""
    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at
    model = ModelConfig(**M1)
    points = [dict(batch=b, seq=t, phase=ph, tp=1, pp=pp, dtype="bf16", kv_dtype="fp8",
                   act_dtype="fp32")
              for b, t, ph, pp in ((1, 1, "prefill", 1), (3, 3, "prefill", 2),
                                   (2, 4, "prefill", 3), (1, 57, "prefill", 1),
                                   (2, 1, "decode", 1), (4, 33, "decode", 2))]
    assert_equal_at(model, ClosedForm(model, logits="all"), points)


def test_serve_holds_a_state_slot_per_sequence_for_mamba1(cli):
    """serve's hybrid KV cache manager gives each running sequence one state slot (the conv
    window and the scan's state) beside the attention blocks."""
    r = cli("serve", "--preset", "jamba-mini-1.5", "--gpu", "b200", "--rate", "2", "--requests",
            "20", "--prompt-tokens", "256", "--output-tokens", "8", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["kv_pool"]["state_units_per_sequence"] > 0
