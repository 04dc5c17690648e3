"""The 2025–2026 families that are entries over existing mechanisms, against PyTorch: at each
family's preset config.json and at its config class's defaults, parameters equal the transformers
model built on the meta device at full size, and at reduced width (the same formulas) prefill and
decode FLOPs equal FlopCounterMode at B=1, T=16 and T=300 with logits on every position, and the
KV cache equals the bytes transformers' cache holds after the prefill (a sliding layer at
min(T, W) tokens, vLLM's convention, beside transformers' W−1).

The numbers in tests/data/families_reference.json were measured with torch 2.13.0 and
transformers 5.24.0 by tests/torch_reference/measure_families.py. With torch and transformers
installed, `test_live_*` measures one case again instead of trusting the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import Workload

ROOT = Path(__file__).parent.parent
REF = json.loads((ROOT / "tests" / "data" / "families_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
PRESETS = {"smollm3-3b": "smollm3", "seed-oss-36b": "seed_oss", "glm-4.5-air": "glm4_moe",
           "command-r7b": "cohere2", "exaone-4.0-32b": "exaone4", "minimax-m2": "minimax_m2",
           "hy3": "hy_v3", "k-exaone": "exaone_moe",
           "granite-swa": "granite_swa", "granitemoe-swa": "granitemoe_swa",
           "afmoe": "afmoe"}


def _model(tmp_path, cfg: dict):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def _totals(m, case, **kw):
    return build_trace(m, Workload(batch=case["batch"], seq=case["seq"], dtype="fp32",
                                   **kw))["totals"]


@pytest.mark.parametrize("name", sorted(REF["params"]))
def test_params_equal_the_meta_device_count_at_full_size(name, tmp_path):
    entry = REF["params"][name]
    m = _model(tmp_path, {"model_type": entry["model_type"], **entry["hf_config"]})
    assert build_trace(m, Workload(batch=1, seq=1))["totals"]["params"] == entry["params_meta"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_flops_params_and_kv_equal_transformers_at_reduced_width(name, tmp_path):
    case = CASES[name]
    m = _model(tmp_path, {"model_type": case["model_type"], **case["hf_config"]})
    prefill = _totals(m, case)
    assert prefill["flops"] == case["prefill_flops"]
    assert _totals(m, case, phase="decode")["flops"] == case["decode_flops"]
    assert prefill["params"] == case["params"]
    assert prefill["kv_cache_bytes"] == case["kv_cache_bytes_window_W"]


def test_both_seqs_and_both_configs_of_every_family_are_measured():
    fams = {c["model_type"] for c in CASES.values()}
    assert fams == set(PRESETS.values())
    for mt in fams:
        seqs = sorted(c["seq"] for c in CASES.values() if c["model_type"] == mt)
        assert seqs == [16, 16, 300, 300], mt


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_equal_their_config_json(preset):
    """The preset is the stored config.json, read: the same model, field by field."""
    want = load_hf_config(ROOT / "tests" / "data" / "hf" / f"{preset}.json")
    got = load_preset(preset)
    skip = {"name"}
    assert {k: v for k, v in got.model_dump().items() if k not in skip} == \
        {k: v for k, v in want.model_dump().items() if k not in skip}


def test_live_remeasure_one_case(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    sys.path.insert(0, str(ROOT / "tests" / "torch_reference"))
    import measure_families

    case = CASES[min(CASES)]
    cfg = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
    live = measure_families.measure_case(case["name"], case["model_type"], cfg, case["seq"])
    for key in ("prefill_flops", "decode_flops", "params", "kv_cache_bytes_window_W"):
        assert live[key] == case[key], key
