"""fit answers one point in plain Python ints (no NumPy on its path); sweep answers grids in NumPy
arrays. Both run the same formulas (plan/memory.py over costs/scalar.py or costs/grid.py): they
must agree exactly, at every size, and fit must never import NumPy."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shapecalc.costs.grid import evaluate
from shapecalc.inputs.hardware import load_gpu
from shapecalc.inputs.sources import load_preset
from shapecalc.model.config import DTYPE_BITS, ModelConfig, Workload
from shapecalc.plan.cases import closed_form_for, valid
from shapecalc.plan.fit import fit, point
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.roofline import plan_arrays

TWO = ModelConfig(name="two-kinds", vocab_size=50, d_model=16, n_layers=4, n_heads=4,
                  n_kv_heads=2, d_ff=32, ffn="swiglu", norm="rmsnorm", positions="rope",
                  sliding_window=4, layer_types=("sliding", "sliding", "full", "full"))
MODELS = {name: load_preset(name) for name in ("llama3-8b", "mistral-7b", "gpt2", "qwen2.5-0.5b")}
MODELS["two-kinds"] = TWO


def arrays_at(model, wl, gpu, opts, peak):
    cf = closed_form_for(model, wl)
    one = np.array([1], dtype=np.int64)
    big = max(wl.batch, wl.seq) >= 2**40
    as_arr = (lambda x: np.array([x], dtype=object)) if big else (lambda x: one * x)
    return plan_arrays(cf, gpu, opts, as_arr(wl.batch), as_arr(wl.seq), one * wl.tp,
                       one * wl.pp, one * DTYPE_BITS[wl.dtype], one * DTYPE_BITS[wl.kv],
                       one * DTYPE_BITS[wl.act], np.array([peak]))


@given(name=st.sampled_from(sorted(MODELS)), batch=st.sampled_from([1, 3, 64, 2**50]),
       seq=st.sampled_from([1, 4, 5, 1000, 4096, 4097]), tp=st.sampled_from([1, 2, 4]),
       pp=st.sampled_from([1, 2, 4]), kv=st.sampled_from(["bf16", "fp8", "int4"]),
       attention=st.sampled_from(["flash", "eager"]),
       chunk=st.sampled_from([None, 512]))
def test_one_point_equals_the_grid(name, batch, seq, tp, pp, kv, attention, chunk):
    model = MODELS[name]
    wl = Workload(batch=batch, seq=seq, tp=tp, pp=pp, kv_dtype=kv, logits="last")
    if not (valid(model, wl) and valid(model, wl, phase="decode")):
        return
    gpu = load_gpu("h100-sxm")
    opts = PlanOptions(attention=attention, max_batched_tokens=chunk, price=2.0)
    peak = gpu.peak("bf16")
    cf = closed_form_for(model, wl)
    one = point(cf, gpu, opts, wl, peak, with_times=True)
    grid = arrays_at(model, wl, gpu, opts, peak)
    assert set(one) == set(grid)
    for k, v in one.items():
        g = grid[k][0]
        if isinstance(v, float) and math.isnan(v):
            assert math.isnan(g), k
        else:
            assert v == g, (k, v, g)
    # and the totals themselves
    totals = cf.at(batch, seq, "prefill", tp, pp, "bf16", kv)
    arr = evaluate(cf, batch, seq, "prefill", tp, pp, "bf16", kv)
    assert totals == {k: int(v[0]) for k, v in arr.items()}


def test_fit_with_eager_attention_sizes_the_workspace_with_the_scores():
    gpu = load_gpu("h100-sxm")
    wl = Workload(batch=1, seq=4096, logits="last")
    flash = fit(load_preset("llama3-8b"), wl, gpu, PlanOptions())
    eager = fit(load_preset("llama3-8b"), wl, gpu, PlanOptions(attention="eager"))
    # eager attention writes the [B,H,T,T] scores: 32 heads × 4096² × 2 bytes, twice
    assert eager["memory_per_rank"]["activations"] == 2 * 32 * 4096 * 4096 * 2
    assert flash["memory_per_rank"]["activations"] < eager["memory_per_rank"]["activations"]


def test_fit_json_does_not_import_numpy():
    code = ("import sys\nfrom shapecalc.cli import main\n"
            "sys.argv = ['shapecalc', 'fit', '--preset', 'llama3-70b', '--gpu', 'h100-sxm', "
            "'--tp', '4', '--json']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "assert 'numpy' not in sys.modules, 'numpy imported'\n"
            "assert 'rich' not in sys.modules, 'rich imported'\n"
            "assert 'pydantic.main' not in sys.modules, 'pydantic BaseModel imported'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args", [
    ["trace", "--preset", "llama2-70b", "--json"],
    ["compare", "llama3-8b", "--json"],
])
def test_json_paths_do_not_import_rich(args):
    code = ("import sys\nfrom shapecalc.cli import main\n"
            f"sys.argv = ['shapecalc', *{args!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "assert 'rich' not in sys.modules, 'rich imported'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
