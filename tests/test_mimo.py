"""MiMo-V2-Flash (mimo_v2_flash) where its reference data does not reach: the layout its reader
takes from the config (sliding layers with 2·H_kv KV heads and a sink per head, values narrower
than q/k, the window of sliding_window_size + 1 keys), the cache each layer holds, the model
fields' rules, and the values refused in one line naming the key (its counts against
transformers are in test_families_reference.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ShapecalcError, Workload
from shapecalc.model.parallel import kv_bytes_per_sequence, kv_heads_per_rank

CONFIG = Path(__file__).parent / "data" / "hf" / "mimo-v2-flash.json"
BASE = json.loads(CONFIG.read_text())
FULL = [i for i in range(48) if i == 0 or not (i + 1) % 6]  # 9 full layers, 39 sliding


def _load(tmp_path, change: dict):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**BASE, **change}))
    return load_hf_config(p)


def test_reads_its_layout(tmp_path):
    m = _load(tmp_path, {})
    assert [i for i, t in enumerate(m.layer_types) if t == "full"] == FULL
    assert (m.kv_heads, m.kv_heads_sliding, m.dh, m.v_dim, m.rot) == (4, 8, 192, 128, 64)
    assert m.attention_sinks and m.sinks_sliding_only and m.value_multiplier == 0.707
    assert (m.rope_base, m.rope_base_local, m.sliding_window) == (5e6, 1e4, 129)
    assert m.ffn_types == ("dense",) + ("moe",) * 47 and m.n_shared_experts == 0
    # SGLang's key: that many keys before the query, the window one more
    assert _load(tmp_path, {"sliding_window_size": 128}).sliding_window == 129
    assert _load(tmp_path, {"sliding_window_size": 31}).sliding_window == 32


def test_each_layer_caches_its_own_kv_heads_of_dh_plus_dv():
    """After T tokens: a full layer 4 heads × (192 + 128) × T, a sliding one 8 heads × (192 +
    128) × min(T, 129); under tp=8 the full layers' 4 heads replicate, the sliding layers' 8
    split one a rank."""
    m = load_preset("mimo-v2-flash")
    for T in (16, 300):
        want = 2 * 320 * (9 * 4 * T + 39 * 8 * min(T, 129))  # bf16
        assert kv_bytes_per_sequence(m, "bf16", T, "prefill") == want
        assert build_trace(m, Workload(batch=1, seq=T))["totals"]["kv_cache_bytes"] == want
    assert (kv_heads_per_rank(m, 8), kv_heads_per_rank(m, 8, "sliding")) == (1, 1)
    assert (kv_heads_per_rank(m, 2), kv_heads_per_rank(m, 2, "sliding")) == (2, 4)
    assert kv_bytes_per_sequence(m, "bf16", 300, "prefill", p=8) == 2 * 320 * (
        9 * 300 + 39 * 129)


def test_sinks_only_on_the_sliding_layers():
    m = load_preset("mimo-v2-flash")
    with_sinks = build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]
    none = m.model_copy(update=dict(attention_sinks=False, sinks_sliding_only=False))
    assert with_sinks - build_trace(none, Workload(batch=1, seq=1))["totals"]["params"] == \
        39 * 64


def test_its_mtp_layers_are_counted_apart_as_a_sliding_dense_block_each(tmp_path):
    """Each: enorm, hnorm, eh_proj [2D → D], a sliding block (8 KV heads of 192 and 128, 64
    sinks, two norms) with a dense MLP of 16384, a final norm; the model's embedding and LM head
    (0.33B each, as published); params unchanged (the published 309B leaves them out)."""
    m = load_preset("mimo-v2-flash")
    D = 4096
    each = 5 * D + 2 * D * D + D * (64 * 192 + 8 * 192 + 8 * 128 + 64 * 128) + 64 + 3 * D * 16384
    totals = build_trace(m, Workload(batch=1, seq=16))["totals"]
    assert (totals["params"], totals["mtp_params"]) == (308778768832, 3 * each)
    assert each == 329273408
    assert _load(tmp_path, {"num_nextn_predict_layers": 0}).mtp_layers == 0


@pytest.mark.slow  # the NumPy executor over the MTP modules
def test_verify_passes_with_the_mtp_modules_traced():
    from test_presets_verify import reduced

    from shapecalc.check.verify import verify
    from shapecalc.model.plan import layer_plan
    m = reduced(load_preset("mimo-v2-flash"))
    for phase in ("prefill", "decode"):
        doc = verify(m, Workload(batch=1, seq=8, tp=2, mtp=True, phase=phase),
                     layers=layer_plan(m).covering())
        assert doc["ok"], [c["name"] for c in doc["checks"] if not c["ok"]]


@pytest.mark.parametrize("change, field", [
    ({"v_head_dim": "128"}, "v_head_dim"),
    ({"v_head_dim": 0}, "v_head_dim"),
    ({"attention_value_scale": 0}, "attention_value_scale"),
    ({"attention_value_scale": True}, "attention_value_scale"),
    ({"sliding_window_size": -1}, "sliding_window_size"),
    ({"n_group": 3}, "n_group"),
    ({"num_nextn_predict_layers": -1}, "num_nextn_predict_layers"),
    ({"num_nextn_predict_layers": 1, "layer_types": ["full_attention"] * 48},
     "num_nextn_predict_layers"),
    ({"topk_group": 2}, "topk_group"),
    ({"num_key_value_heads": 64}, "num_key_value_heads"),
    ({"layer_types": ["full_attention"] * 47}, "layer_types"),
    ({"rope_parameters": {"full_attention": {"rope_theta": 1e4}}}, "rope_parameters"),
    ({"rope_parameters": {**BASE["rope_parameters"], "sliding_attention": {
        "rope_theta": 1e4, "partial_rotary_factor": 0.5}}},
     "rope_parameters.sliding_attention.partial_rotary_factor"),
    ({"rope_parameters": {**BASE["rope_parameters"], "full_attention": {
        "rope_theta": "1e4"}}}, "rope_parameters.full_attention.rope_theta"),
])
def test_refuses_in_one_line_naming_the_key(tmp_path, change, field):
    with pytest.raises(ShapecalcError) as e:
        _load(tmp_path, change)
    assert e.value.field == field
    assert "\n" not in str(e.value)


@pytest.mark.slow  # a subprocess
def test_a_bad_config_exits_2_with_one_line(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**BASE, "v_head_dim": -8}))
    r = subprocess.run([sys.executable, "-m", "shapecalc", "trace", "--hf-config", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "v_head_dim" in r.stderr


def test_train_refuses_what_has_no_backward_rule():
    from shapecalc.train.memory import check_trainable

    m = load_preset("mimo-v2-flash")
    for update, field in ((dict(), "kv_heads_sliding"),
                          (dict(kv_heads_sliding=None), "v_head_dim"),
                          (dict(kv_heads_sliding=None, v_head_dim=None), "value_multiplier")):
        with pytest.raises(ShapecalcError) as e:
            check_trainable(m.model_copy(update=update))
        assert e.value.field == field


@pytest.mark.parametrize("update, field", [
    (dict(sinks_sliding_only=True, attention_sinks=False), "sinks_sliding_only"),
    (dict(kv_heads_sliding=8, layer_types=None, sliding_window=None, mtp_block="last"),
     "kv_heads_sliding"),
    (dict(kv_heads_sliding=6), "kv_heads_sliding"),
    (dict(fused_qkv=True), "v_head_dim"),
    (dict(mtp_block="sliding_dense", sliding_window=None, layer_types=None,
          kv_heads_sliding=None, sinks_sliding_only=False), "mtp_block"),
])
def test_the_fields_rules(update, field):
    m = load_preset("mimo-v2-flash")
    with pytest.raises(ShapecalcError) as e:
        type(m).model_validate({**m.model_dump(), **update})
    assert e.value.field == field


@pytest.mark.slow  # a dozen traces of the full model
def test_the_closed_form_equals_the_pipeline():
    """Sweep's closed form (each KV group at its own heads) equals build_trace at random
    points: phases, tp 1–8 (the full layers' 4 heads replicate past 4, the sliding 8 past 8),
    pp 1–4, dtypes."""
    import random

    from test_closed import DTYPES, assert_equal_at

    from shapecalc.costs.closed import ClosedForm
    m = load_preset("mimo-v2-flash")
    cf, rng = ClosedForm(m), random.Random(7)
    points = [dict(batch=rng.randint(1, 64), seq=rng.choice([16, 128, 129, 130, 300, 5000]),
                   phase=rng.choice(["prefill", "decode"]), tp=rng.choice([1, 2, 4, 8]),
                   pp=rng.randint(1, 4), dtype=rng.choice(DTYPES),
                   kv_dtype=rng.choice(DTYPES), act_dtype=rng.choice(DTYPES))
              for _ in range(12)]
    assert_equal_at(m, cf, points)
