"""The classic families against PyTorch: GPT-NeoX (parallel and sequential), GPT-J, Phi, StableLM,
Cohere, Granite and Falcon's new decoder. Parameter totals equal `sum(p.numel())` of the
transformers model built on the meta device from each real config.json (and the published figure
where an exact one exists); matmul FLOPs equal FlopCounterMode on tiny, really-run models (eager
attention); the KV cache equals the bytes transformers' cache holds after a prefill, except for
Falcon's new decoder, whose cache keeps K and V for every query head (shapecalc reports the H_kv
heads the model computes, as engines cache them; both figures are in the data).

The numbers in tests/data/classic_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/harness.py (classic). When torch and transformers are installed,
`test_live_*` measures again instead of trusting the file (one case by default, every case
under `pytest -m slow`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload

ROOT = Path(__file__).parent.parent
REF = json.loads((ROOT / "tests" / "data" / "classic_reference.json").read_text())
CASES = {c["name"]: c for c in REF["cases"]}


def _totals(m, case, **kw):
    wl = Workload(batch=case["batch"], seq=case["seq"], dtype="fp32", **kw)
    return build_trace(m, wl)["totals"]


def _kv_needed(m, case):
    """The KV bytes the model needs: transformers' own cache, less the copies of Falcon's new
    decoder (it broadcasts K and V to all H query heads before caching)."""
    (heads,) = case["kv_cache_heads_hf"]
    assert case["kv_cache_bytes_hf"] * m.kv_heads % heads == 0
    return case["kv_cache_bytes_hf"] * m.kv_heads // heads


@pytest.mark.parametrize("name", sorted(REF["published"]))
def test_params_equal_the_meta_device_count(name):
    pub = REF["published"][name]
    m = load_hf_config(ROOT / pub["file"])
    params = build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]
    assert params == pub["params_meta"]
    if pub["params_published"] is not None:
        assert params == pub["params_published"]
    assert m.rot == pub["rotary_dim"] or pub["rotary_dim"] is None


def test_pythia_and_neox_20b_equal_their_published_totals_to_the_unit():
    exact = {n for n, p in REF["published"].items() if p["params_published"] is not None}
    assert exact == {"pythia-1.4b", "gpt-neox-20b"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_flops_params_kv_and_rotary_width_equal_transformers(name, hf_model):
    case = CASES[name]
    m = hf_model(case)
    prefill = _totals(m, case)
    assert prefill["flops"] == case["prefill_flops"]
    assert _totals(m, case, logits="last")["flops"] == case["prefill_last_flops"]
    assert _totals(m, case, phase="decode")["flops"] == case["decode_flops"]
    assert prefill["params"] == case["params"]
    assert m.rot == case["rotary_dim"]
    assert prefill["kv_cache_bytes"] == _kv_needed(m, case)
    assert case["kv_cache_tokens_hf"] == [case["seq"]]


def test_falcon_new_decoder_caches_every_query_head_and_shapecalc_reports_h_kv(hf_model):
    for name in ("falcon_new_two_norms", "falcon_new_one_norm"):
        case = CASES[name]
        m = hf_model(case)
        assert case["kv_cache_heads_hf"] == [m.n_heads] and m.kv_heads < m.n_heads
        kv = _totals(m, case)["kv_cache_bytes"]
        assert kv * m.n_heads == case["kv_cache_bytes_hf"] * m.kv_heads
        assert kv < case["kv_cache_bytes_hf"]
    # every other family caches exactly what the model needs
    for case in REF["cases"]:
        if case["model_type"] != "falcon":
            m = hf_model(case)
            assert case["kv_cache_heads_hf"] == [m.kv_heads]
            assert _totals(m, case)["kv_cache_bytes"] == case["kv_cache_bytes_hf"]


def test_the_variants_are_read_from_the_configs(hf_model):
    got = {n: hf_model(c) for n, c in CASES.items()}
    assert (got["gpt_neox_parallel"].parallel_norms, got["gpt_neox_sequential"].parallel_block) \
        == (2, False)
    assert got["gptj"].rope_interleaved and got["gptj"].parallel_norms == 1
    assert got["stablelm_parallel_qknorm"].qk_norm_per_head
    assert got["cohere_qknorm_head24"].logit_scale == 0.125
    g = got["granite_gqa_head24"]
    assert (g.embedding_multiplier, g.attention_multiplier, g.residual_multiplier,
            g.logit_scale) == (12.0, 0.0078125, 0.22, 0.125)
    assert got["falcon_new_two_norms"].parallel_norms == 2
    assert got["falcon_new_one_norm"].parallel_norms == 1


@pytest.mark.parametrize("name", [  # one by default (torch is slow to start); all under -m slow
    "falcon_new_two_norms",
    *(pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)
      if n != "falcon_new_two_norms"),
])
def test_live_flop_counter_and_cache(name, hf_model, live_measure):
    live = live_measure("classic", CASES[name])
    m = hf_model(live)
    assert _totals(m, live)["flops"] == live["prefill_flops"]
    assert _totals(m, live, phase="decode")["flops"] == live["decode_flops"]
    assert _totals(m, live)["kv_cache_bytes"] == _kv_needed(m, live)
    assert m.rot == live["rotary_dim"]
