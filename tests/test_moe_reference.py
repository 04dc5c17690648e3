"""Mixture-of-Experts against PyTorch: parameter totals equal `sum(p.numel())` of the transformers
model built on the meta device from each real config.json, and matmul FLOPs equal FlopCounterMode
on small, really-run models of each family with real routing (eager attention, the eager experts
loop: each expert on the tokens routed to it).

The numbers in tests/data/moe_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/measure_moe.py (see its README). When torch and transformers are
installed, `test_live_flop_counter` measures again instead of trusting the file.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload

DATA = Path(__file__).parent / "data"
REF = json.loads((DATA / "moe_reference.json").read_text())


def _model(case, tmp_path):
    path = tmp_path / f"{case['name']}.json"
    path.write_text(json.dumps(case["hf_config"]))
    return load_hf_config(path)


def _flops(m, case, **kw):
    wl = Workload(batch=case["batch"], seq=case["seq"], dtype="fp32", **kw)
    return build_trace(m, wl)["totals"]["flops"]


@pytest.mark.parametrize("name", sorted(REF["published"]))
def test_params_equal_the_meta_device_count_and_the_published_one(name):
    pub = REF["published"][name]
    m = load_hf_config(Path(__file__).parent.parent / pub["file"])
    params = build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]
    assert params == pub["params_meta"]
    if pub.get("params_published") is not None:
        assert params == pub["params_published"]


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_matmul_flops_equal_flop_counter_with_real_routing(case, tmp_path):
    m = _model(case, tmp_path)
    assert _flops(m, case) == case["prefill_flops"]
    assert _flops(m, case, logits="last") == case["prefill_last_flops"]
    assert _flops(m, case, phase="decode") == case["decode_flops"]
    assert build_trace(m, Workload(batch=1, seq=1))["totals"]["params"] == case["params"]


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="torch and transformers are not installed (pip install torch==2.13.0 transformers)",
)
@pytest.mark.parametrize("name", [c["name"] for c in REF["cases"][:3]])
def test_live_flop_counter(name, tmp_path):
    spec = importlib.util.spec_from_file_location(
        "measure_moe", Path(__file__).parent / "torch_reference" / "measure_moe.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = next(c for c in REF["cases"] if c["name"] == name)
    kwargs = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
    live = mod.measure_case(name, case["model_type"], kwargs)
    m = _model(live, tmp_path)
    for key, kw in (("prefill_flops", {}), ("decode_flops", {"phase": "decode"})):
        assert _flops(m, live, **kw) == live[key]
