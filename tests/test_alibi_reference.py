"""BLOOM, MPT, GPT-BigCode and StarCoder2 against PyTorch: parameter totals equal `sum(p.numel())`
of the transformers model built on the meta device from each real config.json (and the published
integer where one exists); matmul FLOPs equal FlopCounterMode on small, really-run models of each
family (eager attention); KV-cache bytes equal the Hugging Face cache after a prefill.

Sliding windows: transformers' DynamicSlidingWindowLayer keeps W−1 tokens after a prefill longer
than W, where shapecalc (as vLLM) reports a cache of W tokens; the file records both, and the test
asserts shapecalc equals the W figure and differs from transformers' by exactly one token per layer.

The numbers in tests/data/alibi_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/harness.py (alibi) (see its README). When torch and transformers are
installed, `test_live_flop_counter` measures again instead of trusting the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.model.config import Workload

DATA = Path(__file__).parent / "data"
REF = json.loads((DATA / "alibi_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}
PRESETS = ("bloom-560m", "bloom-7b1", "starcoder")


def _totals(m, case, **kw):
    return build_trace(m, Workload(batch=case["batch"], seq=case["seq"], dtype="fp32",
                                   **kw))["totals"]


def test_the_reference_covers_every_family_and_measured_cleanly():
    assert not REF["errors"]
    assert {c["model_type"] for c in REF["cases"]} == {"bloom", "mpt", "gpt_bigcode",
                                                       "starcoder2"}
    assert {p["model_type"] for p in REF["published"].values()} == {
        "bloom", "mpt", "gpt_bigcode", "starcoder2"}


@pytest.mark.parametrize("name", sorted(REF["published"]))
def test_params_equal_the_meta_device_count_and_the_published_one(name):
    pub = REF["published"][name]
    m = load_hf_config(Path(__file__).parent.parent / pub["file"])
    params = build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]
    assert params == pub["params_meta"]
    if pub["params_published"] is not None:
        assert params == pub["params_published"]


@pytest.mark.parametrize("name", PRESETS)
def test_presets_equal_their_config_json_and_the_published_count(name):
    got, want = load_preset(name), load_hf_config(DATA / "hf" / f"{name}.json")
    for attr in want.model_dump(exclude={"name"}):
        assert getattr(got, attr) == getattr(want, attr), attr
    assert published(name)["params"] == REF["published"][name]["params_published"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matmul_flops_and_params_equal_flop_counter(name, hf_model):
    case = CASES[name]
    m = hf_model(case)
    assert _totals(m, case)["flops"] == case["prefill_flops"]
    assert _totals(m, case, logits="last")["flops"] == case["prefill_last_flops"]
    assert _totals(m, case, phase="decode")["flops"] == case["decode_flops"]
    assert build_trace(m, Workload(batch=1, seq=1))["totals"]["params"] == case["params"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_kv_cache_bytes_equal_the_hf_cache_after_prefill(name, hf_model):
    case = CASES[name]
    m = hf_model(case)
    kv = _totals(m, case)["kv_cache_bytes"]
    assert kv == case["kv_cache_bytes_window_W"]
    W, T = m.sliding_window, case["seq"]
    if W is None or W >= T:
        assert kv == case["kv_cache_bytes"]
        assert case["kv_cache_tokens_per_layer"] == [T] * m.n_layers
    else:  # transformers keeps W−1 tokens per layer; shapecalc reports W
        assert case["kv_cache_tokens_per_layer"] == [W - 1] * m.n_layers
        one_token = 2 * case["batch"] * m.kv_heads * m.dh * 4  # K and V, fp32
        assert kv - case["kv_cache_bytes"] == m.n_layers * one_token


def test_gpt_bigcode_mqa_caches_one_head():
    case = CASES["gpt_bigcode_mqa"]
    B, T = case["batch"], case["seq"]
    dh = case["hf_config"]["n_embd"] // case["hf_config"]["n_head"]
    assert case["kv_cache_key_shape_per_layer"] == [[B, 1, T, dh]] * case["hf_config"]["n_layer"]


@pytest.mark.parametrize("name", ["bloom_h6", "mpt_h12", "starcoder2_sliding4"])
def test_live_flop_counter(name, hf_model, live_measure):
    live = live_measure("alibi", CASES[name])
    m = hf_model(live)
    assert _totals(m, live)["flops"] == live["prefill_flops"]
    assert _totals(m, live, phase="decode")["flops"] == live["decode_flops"]
    assert _totals(m, live)["kv_cache_bytes"] == live["kv_cache_bytes_window_W"]
