"""CCA (ZAYA's compressed convolutional attention): verify passes, its one form (the two q/k
convs) checked against T single-token decode steps, and a perturbed prefill rule is caught; the
FLOPs by hand (as FlopCounterMode counts modeling_zaya.py's torch path); the state is the conv
window and the delayed value, beside the KV cache; bad configs exit 2 naming the key; train
refuses the mixer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.interpret import cca as numeric_cca
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.plan import layer_plan
from shapecalc.train.memory import check_trainable

# ZAYA's attention: CCA in every layer, partial RoPE, a sliding layer, GQA, tied
CCA = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
           ffn="swiglu", norm="rmsnorm", positions="rope", rotary_dim=4, tie_embeddings=True,
           mixer_types=["cca", "cca", "cca"], layer_types=["full", "sliding", "full"],
           sliding_window=5, cca_time0=2, cca_time1=3)
START = "prefill conv == T single-token decode steps"


def _check(r: dict, start: str) -> dict:
    return next(c for c in r["checks"] if c["name"].startswith(start))


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("T", [2, 13])  # under K_q and W, and past them
def test_verify_passes(phase, T):
    r = verify(ModelConfig(**CCA), Workload(batch=2, seq=T, phase=phase, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    assert _check(r, "state cache bytes")["ok"]
    if phase == "prefill":
        assert _check(r, START)["ok"]


def test_the_decode_steps_check_catches_a_perturbed_prefill_rule(monkeypatch):
    model, wl = ModelConfig(**CCA), Workload(batch=1, seq=7, dtype="fp32")
    assert _check(verify(model, wl, precision="float64"), START)["ok"]
    window = numeric_cca._window

    def one_token_late(past: np.ndarray, x: np.ndarray) -> np.ndarray:
        s = window(past, x)  # the convs' input one position late
        return np.concatenate([np.zeros_like(s[:, :, :1]), s[:, :, :-1]], axis=2)

    monkeypatch.setattr(numeric_cca, "_window", one_token_late)
    c = _check(verify(model, wl, precision="float64"), START)
    assert not c["ok"] and float(c["measured"]) > 1e-6


def test_the_flops_by_hand():
    """Prefill: the depthwise conv 2·B·C·K_d·(T + K_g − 1) over the input padded by K_q, the
    grouped one 2·B·T·C·Dh·K_g, the zero token's delayed value 2·B·D·H_kv·Dh/2; decode: K_g
    depthwise outputs, one grouped."""
    B, T, D, H, Hkv, dh, Kd, Kg = 2, 10, 32, 4, 2, 8, 2, 3
    C = (H + Hkv) * dh
    for phase, want in (("prefill", {"cca.conv": 2 * B * C * Kd * (T + Kg - 1),
                                     "cca.conv_grouped": 2 * B * T * C * dh * Kg,
                                     "cca.delay": 2 * B * D * Hkv * dh // 2}),
                        ("decode", {"cca.conv": 2 * B * C * Kd * Kg,
                                    "cca.conv_grouped": 2 * B * C * dh * Kg, "cca.delay": 0})):
        doc = build_trace(ModelConfig(**CCA), Workload(batch=B, seq=T, phase=phase))
        got = {s["role"]: s["flops"] for s in doc["stages"] if s["role"] in want}
        assert got == want
        params = {s["role"]: s["params"] for s in doc["stages"] if s["role"].startswith("cca.")}
        assert params["cca.conv"] == C * Kd + C and params["cca.k_scale"] == Hkv
        assert params["cca.conv_grouped"] == C * dh * Kg + C


def test_the_state_is_the_window_and_the_delayed_value():
    plan = layer_plan(ModelConfig(**CCA))
    assert [k.label for k in plan.kinds] == ["CCA full attention", "CCA sliding window W=5"]
    seen = set()
    for T in (1, 2, 300):
        for phase in ("prefill", "decode"):
            t = build_trace(ModelConfig(**CCA), Workload(batch=3, seq=T, phase=phase))["totals"]
            seen.add(t["state_cache_bytes"])
            assert t["kv_cache_bytes"] > 0
    # three layers × B × ([(H + H_kv)·Dh, K_q] + H_kv·Dh/2) in bf16, whatever T is
    assert seen == {3 * 3 * ((4 + 2) * 8 * 3 + 2 * 8 // 2) * 2}


def test_train_refuses_cca():
    with pytest.raises(ShapecalcError, match="cca"):
        check_trainable(ModelConfig(**CCA))


@pytest.mark.parametrize(("change", "key"), [
    ({"cca_time0": 0}, "cca_time0"),
    ({"cca_time0": None}, "cca_time0"),
    ({"cca_time0": 1, "cca_time1": 1}, "cca_time1"),
    ({"mixer_types": ["attention"] * 3}, "cca_time0"),  # a cca field without a cca layer
    ({"qk_norm": True}, "qk_norm"),
    ({"head_dim": 7, "n_kv_heads": 1}, "head_dim"),  # H_kv·Dh odd: no two value halves
    ({"mixer_types": ["cca", "cca"]}, "mixer_types"),  # 2 layers, N = 3
])
def test_bad_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in {**CCA, **change}.items() if v is not None}))
    r = cli("trace", "--config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


def test_tensor_parallelism_and_vllms_state_cache_are_refused(cli, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(CCA))
    for flags, key in ((["--tp", "2"], "tp"), (["--state-cache", "vllm"], "state_cache")):
        r = cli("trace", "--config", str(path), *flags)
        assert r.code == 2 and key in r.err and len(r.err.strip().splitlines()) == 1, r.err
