"""Multi-token-prediction modules (DeepSeek-V3 §2.2; GLM-4.5): counted apart as totals.mtp_params,
left out of params as the published counts leave them out, traced with --mtp, and checked by
the NumPy executor like every other stage."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import ShapecalcError, Workload

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def test_deepseek_v3_mtp_params_by_hand():
    """One module as the checkpoint's layer 61 stores it: embed_tokens, enorm, hnorm, eh_proj
    [2D→D], a decoder layer (MLA + the MoE of a late layer), shared_head.norm and .head."""
    D, V, H, dq, dc, dr, dn, dv = 7168, 129280, 128, 1536, 512, 64, 128, 128
    E, dffe, shared = 256, 2048, 1
    attention = (D + D * dq + dq + dq * H * (dn + dr) + D * (dc + dr) + dc
                 + dc * H * (dn + dv) + H * dv * D)
    moe = D + E * D + E * 3 * D * dffe + shared * 3 * D * dffe
    module = V * D + 3 * D + 2 * D * D + attention + moe + D * V
    t = build_trace(load_preset("deepseek-v3"), Workload(batch=1, seq=16))["totals"]
    assert t["mtp_params"] == module == 13_463_426_048
    # the published 671 B is the main model alone (the Hub's 685 B adds this module and the fp8
    # scales)
    assert t["params"] == 671_026_404_352
    assert t["mtp_flops"] is None and t["mtp_kv_cache_bytes"] is None


def test_mtp_is_traced_with_the_flag_and_kept_out_of_the_totals():
    m = load_preset("glm-4.5-air")
    plain = build_trace(m, Workload(batch=2, seq=64))
    traced = build_trace(m, Workload(batch=2, seq=64, mtp=True))
    for key in ("params", "flops", "kv_cache_bytes", "weight_bytes"):
        assert traced["totals"][key] == plain["totals"][key], key
    mtp = [s for s in traced["stages"] if s["group"] == "mtp"]
    assert mtp and not [s for s in plain["stages"] if s["group"] == "mtp"]
    assert traced["totals"]["mtp_flops"] == sum(s["flops"] * s["repeat"] for s in mtp) > 0
    assert traced["totals"]["mtp_params"] == plain["totals"]["mtp_params"] > 0
    # its own cache: one layer of the model's last kind, 2·H_kv·Dh per token (bf16)
    assert traced["totals"]["mtp_kv_cache_bytes"] == 2 * 64 * 2 * 8 * 128 * 2
    # eh_proj: 2·B·T·2D·D
    proj = next(s for s in mtp if s["role"] == "mtp.proj")
    assert proj["flops"] == 2 * 2 * 64 * 2 * 4096 * 4096


@pytest.mark.parametrize("preset", ["deepseek-v3", "glm-4.5-air"])
def test_verify_checks_the_mtp_stages(preset):
    from test_presets_verify import reduced

    from shapecalc.check.verify import verify
    from shapecalc.model.plan import layer_plan

    m = reduced(load_preset(preset))
    for wl in (Workload(batch=1, seq=8, mtp=True), Workload(batch=1, seq=8, tp=2, mtp=True,
                                                             phase="decode")):
        doc = verify(m, wl, layers=layer_plan(m).covering())
        names = {c["name"] for c in doc["checks"]}
        assert {"MTP params", "MTP flops", "MTP KV cache bytes"} <= names
        assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]


def test_mtp_on_a_model_without_modules_or_with_pp_is_refused(cli):
    with pytest.raises(ShapecalcError, match="mtp_layers = 0"):
        build_trace(load_preset("llama3-8b"), Workload(mtp=True))
    with pytest.raises(ShapecalcError) as info:
        build_trace(load_preset("deepseek-v3"), Workload(mtp=True, pp=2))
    assert info.value.field == "mtp"
    r = cli("trace", "--preset", "llama3-8b", "--mtp")
    assert r.code == 2 and r.out == "" and len(r.err.strip().splitlines()) == 1
    assert "mtp" in r.err


@pytest.mark.parametrize("value", [-1, 1.5, "1", True])
def test_a_bad_mtp_count_is_refused_naming_the_key(tmp_path, value):
    cfg = json.loads((ROOT / "tests" / "data" / "hf" / "deepseek-v3.json").read_text())
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**cfg, "num_nextn_predict_layers": value}))
    with pytest.raises(ShapecalcError) as info:
        load_hf_config(p)
    assert info.value.field == "num_nextn_predict_layers"


def test_the_readers_take_the_mtp_count_and_its_alias(tmp_path):
    cfg = json.loads((ROOT / "tests" / "data" / "hf" / "glm-4.5-air.json").read_text())
    assert load_hf_config(ROOT / "tests" / "data" / "hf" / "glm-4.5-air.json").mtp_layers == 1
    assert load_hf_config(ROOT / "tests" / "data" / "hf" / "kimi-k2.json").mtp_layers == 0
    cfg.pop("num_nextn_predict_layers")
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**cfg, "num_mtp_layers": 2}))  # Glm4MoeConfig's attribute_map
    assert load_hf_config(p).mtp_layers == 2
