"""Inkling (short convs on k, v and both branches, the relative bias from the hidden states, own
sliding-layer heads, shared experts in the router's softmax, log-scaled logits on the full
layers): verify passes at reduced width, prefill and decode, past the window and the bias's
extent (the convs' one form checked against T single-token decode steps); the four fp32 conv
windows a layer; the sliding layers' own heads in the shapes and the KV bytes; the inkling
reader's bad configs exit 2 naming the key; train refuses it (no backward rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.plan import layer_plan, widened
from shapecalc.model.widths import LayerWidths, check_widths

# 3 layers: sliding (own heads 6, 3, 10), full, sliding; a dense first layer; W = 6, X_rel = 5;
# the full layer's logits log-scaled from position 3 on
INKLING = {"model_type": "inkling_text", "vocab_size": 64, "hidden_size": 24,
           "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 8, "swa_num_attention_heads": 6, "swa_num_key_value_heads": 3,
           "swa_head_dim": 10, "sliding_window_size": 6, "d_rel": 3, "rel_extent": 5,
           "layer_types": ["hybrid_sliding", "hybrid", "hybrid_sliding"], "dense_mlp_idx": 1,
           "intermediate_size": 20, "moe_intermediate_size": 8, "n_routed_experts": 5,
           "num_experts_per_tok": 2, "n_shared_experts": 2, "conv_kernel_size": 3,
           "log_scaling_n_floor": 3, "log_scaling_alpha": 0.5}
REF = Path(__file__).parent / "data" / "mixers_reference_inkling.json"


def _load(tmp_path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return load_hf_config(path)


@pytest.mark.parametrize("phase", ["prefill", pytest.param("decode", marks=pytest.mark.slow)])
def test_verify_passes_at_reduced_width(tmp_path, phase):
    r = verify(_load(tmp_path, INKLING), Workload(batch=2, seq=9, phase=phase, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]
    if phase == "prefill":  # the convs' one form: the prefill against T single-token steps
        assert any(c["name"].startswith("prefill conv") for c in r["checks"])
        # τ reads each query's place, pads included (as transformers): a padded row differs
        pad = next(c for c in r["checks"] if c["name"].startswith("padding mask"))
        assert "log-scaled" in str(pad)


@pytest.mark.slow
def test_verify_passes_on_the_preset_at_reduced_width(tmp_path):
    """The preset's 66 layers at the reduced width its reference case measured (T = 24: past
    the window of 20, not the bias's extent of 40)."""
    case = next(c for c in json.loads(REF.read_text())["cases"] if c["name"] == "inkling")
    r = verify(_load(tmp_path, case["hf_config"]), Workload(batch=1, seq=24, dtype="fp32"),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


def test_the_layers_state_and_heads(tmp_path):
    m = _load(tmp_path, INKLING)
    kinds = layer_plan(m).kinds
    # sliding · dense, full · MoE, sliding · MoE: the sliding layers' own heads (layer_widths)
    own = (("n_heads", 6), ("n_kv_heads", 3), ("head_dim", 10))
    assert [k.widths for k in kinds] == [own, (), own]
    doc = build_trace(m, Workload(batch=1, seq=9, dtype="bf16"))
    state = [s for s in doc["stages"] if s["role"] == "state.conv"]
    # four windows a layer, each [B, C, K_c] in fp32: k and v (H_kv·Dh), both branches (D)
    assert sorted(s["shape"][1] for s in state) == [16, 16, *[24] * 6, 30, 30, 30, 30]
    assert {(s["shape"][2], s["dtype"]) for s in state} == {(3, "fp32")}
    t = doc["totals"]
    assert t["state_cache_bytes"] == 4 * 3 * (2 * (2 * 30 + 2 * 24) + (2 * 16 + 2 * 24))
    # K and V: the sliding layers' 3 heads of 10 over min(T, W) = 6 tokens, the full layer's
    # 2 heads of 8 over T = 9, in bf16
    assert t["kv_cache_bytes"] == 2 * 2 * (2 * 3 * 10 * 6 + 2 * 8 * 9)
    assert t["kv_cache_paged_bytes"] >= t["kv_cache_bytes"]
    scaled = [s for s in doc["stages"] if s["role"] == "attn.log_scale"]
    assert [s["repeat"] for s in scaled] == [1]  # the full layer's only
    router = next(s for s in doc["stages"] if s["role"] == "moe.router")
    assert router["shape"][-1] == 5 + 2  # the routed and the shared experts' logits


@pytest.mark.parametrize(("change", "key"), [
    ({"layer_types": ["hybrid", "full_attention", "hybrid"]}, "layer_types"),
    ({"layer_types": ["hybrid", "hybrid"]}, "layer_types"),  # 2 layers, N = 3
    ({"mlp_layer_types": ["dense", "moe", "dense"]}, "mlp_layer_types"),
    ({"local_layer_ids": [0, 7], "layer_types": None}, "local_layer_ids"),
    ({"d_rel": 0}, "d_rel"),
    ({"rel_extent": "40"}, "rel_extent"),
    ({"conv_kernel_size": 0}, "conv_kernel_size"),
    ({"swa_num_key_value_heads": 4}, "swa_num_key_value_heads"),  # 4 does not divide 6
    ({"n_shared_experts": 0}, "n_shared_experts"),
    ({"route_scale": 0}, "route_scale"),
    ({"logits_mup_width_multiplier": -1.0}, "logits_mup_width_multiplier"),
    ({"unpadded_vocab_size": 65}, "unpadded_vocab_size"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"log_scaling_n_floor": 0}, "log_scaling_n_floor"),
    ({"log_scaling_alpha": -0.1}, "log_scaling_alpha"),
])
def test_bad_inkling_configs_exit_2_naming_the_key(cli, tmp_path, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in {**INKLING, **change}.items() if v is not None}))
    r = cli("trace", "--hf-config", str(path))
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.err, r.err


def test_inkling_fields_need_an_inkling_layer_and_tp_is_refused(tmp_path):
    m = _load(tmp_path, INKLING)
    with pytest.raises(ShapecalcError, match="rel_dim"):  # the inkling fields without one
        ModelConfig.model_validate({**m.model_dump(), "mixer_types": None, "conv_kernel": None})
    with pytest.raises(ShapecalcError, match="tp"):
        build_trace(m, Workload(batch=1, seq=4, tp=2))


def test_train_refuses_inkling(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(INKLING))
    r = cli("train", "--hf-config", str(path))
    assert r.code == 2 and "inkling" in r.err and "backward" in r.err, r.err


@pytest.mark.slow
def test_against_transformers_with_an_unpadded_head(cli, tmp_path):
    """The dense-first reference case (unpadded_vocab_size: transformers' logits stop at 300 of
    320, the head's FLOPs the whole vocabulary's) against transformers' own counts."""
    case = next(c for c in json.loads(REF.read_text())["cases"]
                if c["name"] == "inkling-dense-first")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(case["hf_config"]))
    r = cli("verify", "--against", "transformers", "--hf-config", str(path), "--seq", "40")
    assert r.code == 0 and "all checks pass" in r.out, (r.out, r.err)


def test_the_presets_kv_cache_by_each_layers_own_heads(cli):
    """The sliding layers' 16 KV heads and the full layers' 8 (layer_widths.n_kv_heads) in the
    trace's cache and in fit's (B=8, T=8192: the 55 sliding layers hold W = 512 tokens)."""
    sliding, full = 55 * 8 * 512 * 2 * 16 * 128 * 2, 11 * 8 * 8192 * 2 * 8 * 128 * 2
    args = ("--preset", "inkling", "--batch", "8", "--seq", "8192", "--json")
    t = json.loads(cli("trace", *args).out)["totals"]
    assert [g["bytes"] for g in t["kv_cache_groups"]] == [sliding, full]
    assert t["kv_cache_paged_bytes"] == t["kv_cache_bytes"] == sliding + full == 4_798_283_776
    assert t["kv_cache_bytes_per_token"] == 55 * 2 * 16 * 128 * 2 + 11 * 2 * 8 * 128 * 2
    fit = json.loads(cli("fit", *args, "--gpu", "h200").out)
    assert fit["memory_per_rank"]["kv_cache"] == sliding + full


def test_layer_widths_kv_heads_and_head_dim(tmp_path):
    """A GQA layer's own H_kv and Dh (layer_widths.n_kv_heads, head_dim): widened takes them
    from the layer; each layer's H a whole number of its own H_kv groups; not on MLA."""
    m = _load(tmp_path, INKLING)
    kinds = layer_plan(m).kinds
    assert [(w.n_heads, w.kv_heads, w.dh) for w in (widened(m, k) for k in kinds)] == [
        (6, 3, 10), (4, 2, 8), (6, 3, 10)]
    assert kinds[0].label.endswith("· H=6 · H_kv=3 · Dh=10")
    widths = m.layer_widths.model_dump()
    with pytest.raises(ShapecalcError) as err:  # H_ℓ = 6 over 4 KV heads
        m.model_copy(update={"layer_widths": {**widths, "n_kv_heads": (4, 2, 4)}})._check()
    assert err.value.field == "layer_widths.n_heads"
    with pytest.raises(ShapecalcError) as err:  # a list of other than N values
        m.model_copy(update={"layer_widths": {**widths, "head_dim": (10, 8)}})._check()
    assert err.value.field == "layer_widths.head_dim"
    with pytest.raises(ShapecalcError) as err:
        check_widths(LayerWidths(n_kv_heads=(2, 2, 2)), 3, load_preset("deepseek-v3"))
    assert err.value.field == "layer_widths.n_kv_heads"


def test_layer_widths_kv_heads_on_plain_attention():
    """layer_widths.n_kv_heads on a plain GQA model: each layer's K and V of its own heads,
    tp splits every layer's H_kv (or refuses in one field), verify passes at tp 1 and 2."""
    m = ModelConfig(vocab_size=64, d_model=48, n_layers=2, n_heads=12, n_kv_heads=4, d_ff=64,
                    positions="rope", layer_widths={"n_kv_heads": (4, 6)})
    t = build_trace(m, Workload(batch=1, seq=8))["totals"]
    assert t["kv_cache_bytes"] == 2 * 2 * 8 * 4 * (4 + 6)  # bf16 · K, V · T · Dh · Σ H_kv
    with pytest.raises(ShapecalcError, match="H_kv=6") as err:
        build_trace(m, Workload(batch=1, seq=8, tp=4))
    assert err.value.field == "tp"
    for tp in (1, 2):
        r = verify(m, Workload(batch=1, seq=8, dtype="fp32", tp=tp), precision="float64")
        assert r["ok"], [c["name"] for c in r["checks"] if not c["ok"]]
