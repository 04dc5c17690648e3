"""The convolution mixers (LFM2's gated short conv): verify passes, its one form checked against
T single-token decode steps, and a perturbed prefill rule is caught; the state is the conv window
alone; tensor parallelism splits the channels; the lfm2 reader; bad configs exit 2 naming the
key; train refuses the mixer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import mamba2 as numeric_conv
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.plan import layer_plan

# LFM2's layout: short convs around one attention layer with per-head q/k norms, SwiGLU, tied
LFM = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
           ffn="swiglu", norm="rmsnorm", positions="rope", qk_norm=True, tie_embeddings=True,
           mixer_types=["short_conv", "attention", "short_conv"], conv_kernel=3, conv_bias=False)


# LFM3's layout: short convs beside full and sliding attention with a gate per head, every
# branch's output normed (sandwich)
LFM3 = {**LFM, "n_layers": 4, "mixer_types": ["short_conv", "attention", "short_conv",
                                              "attention"],
        "layer_types": ["full", "full", "full", "sliding"], "sliding_window": 5,
        "attn_head_gate": True, "norm_position": "sandwich", "conv_kernel": 4}


def _check(r: dict, start: str) -> dict:
    return next(c for c in r["checks"] if c["name"].startswith(start))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("T", [2, 19])  # under K_c, and past it
def test_verify_passes(bias, phase, T):
    r = verify(ModelConfig(**{**LFM, "conv_bias": bias}),
               Workload(batch=2, seq=T, phase=phase, dtype="fp32"), precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    assert _check(r, "state cache bytes")["ok"]
    if phase == "prefill":
        assert _check(r, "prefill conv == T single-token decode steps")["ok"]


def test_the_decode_steps_check_catches_a_perturbed_prefill_rule(monkeypatch):
    model, wl = ModelConfig(**LFM), Workload(batch=1, seq=19, dtype="fp32")
    start = "prefill conv == T single-token decode steps"
    assert _check(verify(model, wl, precision="float64"), start)["ok"]
    span = numeric_conv._prefill_span

    def one_token_late(x: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
        seq, s = span(x, K)  # the convolution's window one position late
        return seq, np.concatenate([np.zeros_like(s[:, :, :1]), s[:, :, :-1]], axis=2)

    monkeypatch.setattr(numeric_conv, "_prefill_span", one_token_late)
    c = _check(verify(model, wl, precision="float64"), start)
    assert not c["ok"] and float(c["measured"]) > 1e-6


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_on_lfm3s_layout(phase):
    r = verify(ModelConfig(**LFM3), Workload(batch=2, seq=11, phase=phase, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    roles = {s["role"] for s in build_trace(ModelConfig(**LFM3), Workload(seq=11))["stages"]}
    assert {"attn.head_gate", "attn.head_gate.mul", "mixer.post_norm", "attn.post_norm",
            "ffn.post_norm"} <= roles


@pytest.mark.parametrize("fields", [LFM, LFM3], ids=["lfm2", "lfm3"])
def test_verify_passes_under_tensor_parallelism(fields):
    r = verify(ModelConfig(**fields), Workload(batch=2, seq=19, dtype="fp32", tp=2),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    one = build_trace(ModelConfig(**fields), Workload(batch=2, seq=19))
    two = build_trace(ModelConfig(**fields), Workload(batch=2, seq=19, tp=2))
    assert 2 * two["parallel"]["tp"]["state_cache_bytes_per_rank"] == \
        one["totals"]["state_cache_bytes"] > 0


def test_the_state_is_the_conv_window_alone():
    plan = layer_plan(ModelConfig(**LFM))
    assert [k.label for k in plan.kinds] == ["short conv", "full attention"]
    seen = set()
    for T in (1, 2, 3, 300):
        for phase in ("prefill", "decode"):
            t = build_trace(ModelConfig(**LFM), Workload(batch=3, seq=T, phase=phase))["totals"]
            seen.add(t["state_cache_bytes"])
            assert t["mixer_flops_convention"] == "transformers-torch"
    assert seen == {2 * 3 * 32 * 3 * 2}  # two layers × B × [D, K_c] in bf16, whatever T is


def test_the_short_conv_prefill_flops_by_hand():
    """in_proj 2·B·T·D·3D, the conv 2·B·D·K_c·(T + K_c − 1), out_proj 2·B·T·D·D."""
    B, T, D, K = 2, 10, 32, 3
    doc = build_trace(ModelConfig(**LFM), Workload(batch=B, seq=T))
    conv = [s for s in doc["stages"] if s["role"].startswith("conv.")]
    by = {s["role"]: s["flops"] for s in conv}
    assert by == {"conv.in": 2 * B * T * D * 3 * D, "conv.bx": 0,
                  "conv.conv": 2 * B * D * K * (T + K - 1), "conv.cy": 0,
                  "conv.out": 2 * B * T * D * D}


@pytest.mark.parametrize(("change", "key"), [
    ({"conv_kernel": 0}, "conv_kernel"),
    ({"conv_kernel": None}, "conv_kernel"),
    ({"mixer_types": ["short_conv", "attention"]}, "mixer_types"),  # 2 layers, N = 3
    ({"mixer_types": ["short_conv", "conv", "attention"]}, "mixer_types"),
])
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in {**LFM, **change}.items() if v is not None}))
    r = cli("trace", "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


LFM2 = {"model_type": "lfm2", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
        "block_auto_adjust_ff_dim": False, "layer_types": ["conv", "conv", "full_attention",
                                                           "conv"]}


@pytest.mark.parametrize(("change", "key"), [
    ({"conv_L_cache": 0}, "conv_L_cache"),
    ({"layer_types": ["conv", "full_attention"]}, "layer_types"),  # 2 layers, N = 4
    ({"layer_types": ["conv", "sliding_attention", "conv", "conv"]}, "layer_types"),
    ({"layer_types": None, "full_attn_idxs": [1, 7]}, "full_attn_idxs"),
    ({"block_ff_dim": 0}, "block_ff_dim"),
])
def test_bad_lfm2_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**LFM2, **change}.items() if v is not None}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err


def test_lfm2_reads_its_layout(tmp_path):
    from shapecalc.inputs.hf import load_hf_config
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LFM2, "layer_types": None, "full_attn_idxs": [1],
                                "block_auto_adjust_ff_dim": True, "block_ff_dim": 96,
                                "block_multiple_of": 16, "tie_embedding": False}))
    m = load_hf_config(path)
    assert m.mixers == ("short_conv", "attention", "short_conv", "short_conv")
    # ⌊2·96/3⌋ = 64; tie_embedding wins over tie_word_embeddings (true by default)
    assert (m.d_ff, m.tie_embeddings, m.conv_kernel, m.conv_bias, m.qk_norm) == (
        64, False, 3, False, True)


LFM3_HF = {"model_type": "lfm3", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 5,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
           "intermediate_size": 48, "pad_token_id": 0}


@pytest.mark.parametrize(("change", "key"), [
    ({"conv_L_cache": 0}, "conv_L_cache"),
    ({"layer_types": ["conv"] * 4}, "layer_types"),  # 4 layers, N = 5
    ({"layer_types": ["conv", "linear_attention", "conv", "conv", "conv"]}, "layer_types"),
    ({"sliding_window": 0}, "sliding_window"),  # layer 4 slides (the default pattern)
    ({"intermediate_size": 0}, "intermediate_size"),
])
def test_bad_lfm3_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LFM3_HF, **change}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err


def test_lfm3_reads_its_layout(tmp_path):
    from shapecalc.inputs.hf import load_hf_config
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LFM3_HF))
    m = load_hf_config(path)
    # Lfm3Config's default pattern: i mod 4 = 2 full, i mod 4 = 0 (i > 0) sliding, else conv
    assert m.mixers == ("short_conv", "short_conv", "attention", "short_conv", "attention")
    assert m.layer_types == ("full", "full", "full", "full", "sliding")
    assert (m.sliding_window, m.conv_kernel, m.attn_head_gate, m.norm_position, m.d_ff) == (
        256, 7, True, "sandwich", 48)
    path.write_text(json.dumps({**LFM3_HF, "use_sandwich_norm": False, "layer_types": [
        "conv", "full_attention", "conv", "conv", "full_attention"],
        "use_attention_gate": False}))
    m = load_hf_config(path)
    assert (m.sliding_window, m.attn_head_gate, m.norm_position) == (None, False, "pre")


def test_train_refuses_the_short_conv_and_the_head_gate():
    from shapecalc.train.memory import check_trainable
    with pytest.raises(ShapecalcError, match="short_conv"):
        check_trainable(ModelConfig(**LFM))
    attention_only = {k: v for k, v in LFM3.items() if not k.startswith("conv_")}
    with pytest.raises(ShapecalcError) as e:
        check_trainable(ModelConfig(**{**attention_only, "mixer_types": None}))
    assert e.value.field == "attn_head_gate"


MOE_HF = {"model_type": "lfm2_moe", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
          "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
          "num_dense_layers": 1, "layer_types": ["conv", "full_attention", "conv", "conv"]}


@pytest.mark.parametrize(("change", "key"), [
    ({"layer_types": None}, "layer_types"),  # Lfm2MoeConfig writes none; its model needs them
    ({"layer_types": ["conv", "sliding_attention", "conv", "conv"]}, "layer_types"),
    ({"num_dense_layers": -1}, "num_dense_layers"),
    ({"num_experts": 0}, "num_experts"),
    ({"conv_L_cache": 0}, "conv_L_cache"),
])
def test_bad_lfm2_moe_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**MOE_HF, **change}.items() if v is not None}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], r.err


def test_lfm2_moe_reads_its_layout(tmp_path):
    from shapecalc.inputs.hf import load_hf_config
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MOE_HF))
    m = load_hf_config(path)
    assert m.mixers == ("short_conv", "attention", "short_conv", "short_conv")
    assert m.ffn_types == ("dense", "moe", "moe", "moe")
    assert (m.d_ff, m.dff_expert, m.n_experts, m.experts_per_token, m.router_scoring,
            m.norm_topk_prob, m.routed_scaling_factor) == (48, 16, 4, 2, "sigmoid", True, 1.0)
