"""totals.flops against PyTorch's FlopCounterMode on the same Hugging Face models (eager attention).

The numbers in tests/data/flop_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/measure_flops.py (see its README). When torch and transformers are
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

DATA = Path(__file__).parent / "data" / "flop_reference.json"
REF = json.loads(DATA.read_text())


def _model(case, tmp_path):
    path = tmp_path / f"{case['name']}.json"
    path.write_text(json.dumps(case["hf_config"]))
    return load_hf_config(path)


@pytest.mark.parametrize("case", REF["cases"], ids=[c["name"] for c in REF["cases"]])
def test_matmul_flops_equal_flop_counter(case, tmp_path):
    m = _model(case, tmp_path)
    B, T = case["batch"], case["seq"]

    def flops(**kw):
        return build_trace(m, Workload(batch=B, seq=T, **kw))["totals"]["flops"]

    assert flops() == case["prefill_flops"]
    if case["prefill_last_flops"] is not None:
        assert flops(logits="last") == case["prefill_last_flops"]
    assert flops(phase="decode") == case["decode_flops"]
    params = build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]
    assert params == case["num_parameters"]


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="torch and transformers are not installed (pip install torch==2.13.0 transformers)",
)
@pytest.mark.parametrize("name", ["llama_gqa", "gpt2", "falcon_7b_style"])
def test_live_flop_counter(name, tmp_path):
    spec = importlib.util.spec_from_file_location(
        "measure_flops", Path(__file__).parent / "torch_reference" / "measure_flops.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = next(c for c in REF["cases"] if c["name"] == name)
    kwargs = {k: v for k, v in case["hf_config"].items() if k != "model_type"}
    live = mod.measure_case(name, case["model_type"], kwargs)
    m = _model(live, tmp_path)
    for phase, key in (("prefill", "prefill_flops"), ("decode", "decode_flops")):
        wl = Workload(batch=live["batch"], seq=live["seq"], phase=phase)
        assert build_trace(m, wl)["totals"]["flops"] == live[key]
