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
from shapecalc.model.config import ShapecalcError, Workload

ROOT = Path(__file__).parent.parent
REF = json.loads((ROOT / "tests" / "data" / "families_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
PRESETS = {
    "smollm3-3b": "smollm3", "seed-oss-36b": "seed_oss", "glm-4.5-air": "glm4_moe",
    "dots-llm1": "dots1", "cwm-32b": "cwm", "olmo3-7b": "olmo3", "olmo3-32b": "olmo3",
    "glm-4.7-flash": "glm4_moe_lite", "mistral-small-4": "mistral4",
    "command-r7b": "cohere2", "exaone-4.0-32b": "exaone4", "minimax-m2": "minimax_m2",
    "hy3": "hy_v3",
    "solar-open-100b": "solar_open", "hunyuan-a13b": "hunyuan_v1_moe",
    "ernie-4.5-21b-a3b": "ernie4_5_moe", "ernie-4.5-300b-a47b": "ernie4_5_moe",
    "k-exaone": "exaone_moe", "granite-swa": "granite_swa", "granitemoe-swa": "granitemoe_swa",
    "afmoe": "afmoe", "apertus-8b": "apertus", "apertus-70b": "apertus",
    "ministral-3-8b": "ministral3", "nanochat-d32": "nanochat",
    "command-a-plus": "cohere2_moe",
    "mimo-v2-flash": "mimo_v2_flash",
    "gemma-4": "gemma4_text",
    "laguna": "laguna",
}
# families measured at their class defaults only (no preset: Apertus 1.5's released checkpoints
# prune the LM head, which is refused)
CLASS_ONLY = {"apertus1p5_text", "gemma4_unified_text"}


def _model(tmp_path, cfg: dict):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def _totals(m, case, **kw):
    if m.mla:  # transformers 5.24 caches MLA's latent and expands it at every step
        kw["mla_form"] = "latent"
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


def test_both_seqs_and_every_config_of_every_family_are_measured():
    """Each preset and the class defaults at both T; a family whose class defaults transformers
    cannot build (recorded with its error) at its presets only."""
    fams = {c["model_type"] for c in CASES.values()}
    assert fams == set(PRESETS.values()) | CLASS_ONLY
    for mt in fams:
        seqs = sorted(c["seq"] for c in CASES.values() if c["model_type"] == mt)
        configs = sum(v == mt for v in PRESETS.values()) + (mt not in REF["unbuildable"])
        assert seqs == [16] * configs + [300] * configs, mt


@pytest.mark.parametrize("mt", sorted(REF["unbuildable"]))
def test_unbuildable_class_defaults_are_refused_in_one_line(mt, tmp_path):
    """Where transformers cannot build a model from its own class defaults (the data holds the
    error it raises), shapecalc refuses them too, naming the key the class leaves null, instead
    of guessing the missing count."""
    entry = REF["unbuildable"][mt]
    with pytest.raises(ShapecalcError) as err:
        _model(tmp_path, {"model_type": mt, **entry["hf_config"]})
    assert entry["hf_config"][err.value.field] is None  # the count the class leaves unset


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


def test_glm4_moe_lite_reads_mlp_layer_types_and_refuses_what_it_ignores(tmp_path):
    """Glm4MoeLite builds each layer's MLP from mlp_layer_types alone (default: the first dense;
    layer i reads entry i, so a longer list builds); first_k_dense_replace, which the class
    never reads, is refused where it disagrees, with the list or without it (one mechanism with
    HY-V3's)."""
    base = json.loads((ROOT / "tests" / "data" / "hf" / "glm-4.7-flash.json").read_text())
    base = {**base, "num_hidden_layers": 4}
    assert _model(tmp_path, base).ffn_types == ("dense", "moe", "moe", "moe")
    given = {**base, "mlp_layer_types": ["dense", "sparse", "dense", "sparse"]}
    assert _model(tmp_path, given).ffn_types == ("dense", "moe", "dense", "moe")
    longer = {**given, "mlp_layer_types": [*given["mlp_layer_types"], "dense"]}
    assert _model(tmp_path, longer).ffn_types == ("dense", "moe", "dense", "moe")  # layer i: i
    for key, cfg in (("first_k_dense_replace", {**base, "first_k_dense_replace": 3}),
                     ("first_k_dense_replace", {**given, "first_k_dense_replace": 3}),
                     ("mlp_layer_types", {**base, "mlp_layer_types": ["dense"] * 4}),
                     ("mlp_layer_types", {**base, "mlp_layer_types": ["sparse"] * 3})):
        with pytest.raises(ShapecalcError) as err:
            _model(tmp_path, cfg)
        assert err.value.field == key


def test_mistral4_ropes_the_rope_part_of_its_qk_head(tmp_path):
    """Mistral4Config sets head_dim to nope + rope whatever is given, and RoPE turns
    int(head_dim · partial_rotary_factor) dims: a factor that misses qk_rope_head_dim is refused
    (transformers' rotary embedding would not fit q and k's rope part)."""
    base = json.loads((ROOT / "tests" / "data" / "hf" / "mistral-small-4.json").read_text())
    want = _model(tmp_path, base)
    assert _model(tmp_path, {**base, "head_dim": 96}) == want  # overwritten by the class
    rope = {**base["rope_parameters"], "partial_rotary_factor": 0.25}
    with pytest.raises(ShapecalcError) as err:
        _model(tmp_path, {**base, "rope_parameters": rope})
    assert err.value.field == "partial_rotary_factor"


def test_solar_open_is_moe_on_every_layer_and_refuses_what_its_class_drops(tmp_path):
    """SolarOpenConfig removes Glm4MoeConfig's intermediate_size and first_k_dense_replace: Dff
    is the experts' width whatever intermediate_size says, and a dense first layer is refused
    (transformers would build MoE there), as is a partial rotary (Llama's RoPE turns all Dh)."""
    base = json.loads((ROOT / "tests" / "data" / "hf" / "solar-open-100b.json").read_text())
    want = _model(tmp_path, base)
    assert want.ffn_types is None and want.d_ff == 1280 and want.d_ff_expert is None
    assert _model(tmp_path, {**base, "intermediate_size": 99}) == want
    for key, value in (("first_k_dense_replace", 1), ("partial_rotary_factor", 0.5)):
        with pytest.raises(ShapecalcError) as err:
            _model(tmp_path, {**base, key: value})
        assert err.value.field == key


def test_hunyuan_takes_per_layer_lists_that_agree_and_refuses_the_rest(tmp_path):
    """Hunyuan-A13B's config lists moe_topk per layer; one value on every layer is read, a list
    that varies is refused, and the original code's keys that transformers' class ignores are
    refused where they would build another model (experts of another width, no shared MLP)."""
    base = json.loads((ROOT / "tests" / "data" / "hf" / "hunyuan-a13b.json").read_text())
    want = _model(tmp_path, base)
    assert (want.n_experts, want.experts_per_token, want.n_shared_experts) == (64, 8, 1)
    assert _model(tmp_path, {**base, "moe_topk": 8}) == want
    for key, value in (("moe_topk", [8] * 31 + [4]), ("moe_intermediate_size", [1536] * 32),
                       ("num_shared_expert", [2] * 32), ("use_mixed_mlp_moe", False),
                       ("use_cla", True), ("head_dim", None)):
        with pytest.raises(ShapecalcError) as err:
            _model(tmp_path, {**base, key: value})
        assert err.value.field == key


def test_ernie_places_moe_layers_by_start_end_and_interval(tmp_path):
    """ERNIE 4.5: layer i is MoE when (i+1) % interval == 0 and start ≤ i ≤ end (-1: the last);
    a null end (the class compares with it) and use_bias (biases the routed experts lack) are
    refused naming the key."""
    base = json.loads((ROOT / "tests" / "data" / "hf" / "ernie-4.5-21b-a3b.json").read_text())
    base = {**base, "num_hidden_layers": 6, "moe_layer_end_index": -1}
    assert _model(tmp_path, base).ffn_types == ("dense",) + ("moe",) * 5
    cut = {**base, "moe_layer_interval": 2, "moe_layer_end_index": 4}
    assert _model(tmp_path, cut).ffn_types == ("dense", "moe", "dense", "moe", "dense", "dense")
    for key, value in (("moe_layer_end_index", None), ("use_bias", True),
                       ("moe_layer_start_index", 6)):
        with pytest.raises(ShapecalcError) as err:
            _model(tmp_path, {**base, key: value})
        assert err.value.field == key
