"""totals.flops against PyTorch's FlopCounterMode on the same Hugging Face models (eager attention).

The numbers in tests/data/flop_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/harness.py (flops) (see its README). When torch and transformers are
installed, `test_live_flop_counter` measures again instead of trusting the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.model.config import Workload

DATA = Path(__file__).parent / "data" / "flop_reference.json"
REF = json.loads(DATA.read_text())


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_matmul_flops_equal_flop_counter(case, hf_model):
    m = hf_model(case)
    B, T = case["batch"], case["seq"]

    def flops(**kw):
        return build_trace(m, Workload(batch=B, seq=T, **kw))["totals"]["flops"]

    assert flops() == case["prefill_flops"]
    if case["prefill_last_flops"] is not None:
        assert flops(logits="last") == case["prefill_last_flops"]
    assert flops(phase="decode") == case["decode_flops"]
    params = build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]
    assert params == case["num_parameters"]


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_kv_cache_bytes_equal_the_transformers_cache(case, hf_model, kv_matches_hf):
    """Mistral's sliding layers keep min(T, W) tokens in shapecalc, W−1 in transformers."""
    kv_matches_hf(hf_model(case), case)


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2", "falcon_7b_style"])
def test_live_flop_counter(name, hf_model, live_measure):
    case = next(c for c in REF["cases"] if c["name"] == name)
    live = live_measure("flops", case)
    m = hf_model(live)
    for phase, key in (("prefill", "prefill_flops"), ("decode", "decode_flops")):
        wl = Workload(batch=live["batch"], seq=live["seq"], phase=phase)
        assert build_trace(m, wl)["totals"]["flops"] == live[key]
