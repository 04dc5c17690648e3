"""Mixture-of-Experts against PyTorch: parameter totals equal `sum(p.numel())` of the transformers
model built on the meta device from each real config.json, and matmul FLOPs equal FlopCounterMode
on small, really-run models of each family with real routing (eager attention, the eager experts
loop: each expert on the tokens routed to it).

The numbers in tests/data/moe_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/harness.py (moe) (see its README). When torch and transformers are
installed, `test_live_flop_counter` measures again instead of trusting the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload
from shapecalc.model.quant import source_fields

DATA = Path(__file__).parent / "data"
REF = json.loads((DATA / "moe_reference.json").read_text())


def _flops(m, case, **kw):
    wl = Workload(batch=case["batch"], seq=case["seq"], dtype="fp32", **kw)
    return build_trace(m, wl)["totals"]["flops"]


@pytest.mark.parametrize("name", sorted(REF["published"]))
def test_params_equal_the_meta_device_count_and_the_published_one(name):
    pub = REF["published"][name]
    m = load_hf_config(Path(__file__).parent.parent / pub["file"])
    params = build_trace(m, Workload(batch=1, seq=1, **source_fields(m, {})))["totals"]["params"]
    assert params == pub["params_meta"]
    if pub.get("params_published") is not None:
        assert params == pub["params_published"]


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_matmul_flops_equal_flop_counter_with_real_routing(case, hf_model):
    m = hf_model(case)
    assert _flops(m, case) == case["prefill_flops"]
    assert _flops(m, case, logits="last") == case["prefill_last_flops"]
    assert _flops(m, case, phase="decode") == case["decode_flops"]
    assert build_trace(m, Workload(batch=1, seq=1))["totals"]["params"] == case["params"]


@pytest.mark.parametrize("name", [c["name"] for c in REF["cases"][:3]])
def test_live_flop_counter(name, hf_model, live_measure):
    case = next(c for c in REF["cases"] if c["name"] == name)
    live = live_measure("moe", case)
    m = hf_model(live)
    for key, kw in (("prefill_flops", {}), ("decode_flops", {"phase": "decode"})):
        assert _flops(m, live, **kw) == live[key]


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_kv_cache_bytes_equal_the_transformers_cache(case, hf_model, kv_matches_hf):
    """gpt-oss's sliding layers keep min(T, W) tokens in shapecalc, W−1 in transformers."""
    kv_matches_hf(hf_model(case), case)
