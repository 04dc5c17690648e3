"""The stateful mixers against PyTorch: parameters equal transformers' meta-device count at full
size; prefill and decode FLOPs equal FlopCounterMode on the torch path (B=1, T=16 and T=300,
past one chunk; reduced width, real tensors); KV and state bytes equal transformers' cache after
the prefill (bf16: conv states in bf16, recurrent states in fp32).

The numbers in tests/data/mixers_reference.json were measured with torch 2.13.0 and transformers
5.24.0 by tests/torch_reference/measure_mixers.py; with torch installed, `test_live` measures
one case again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload

ROOT = Path(__file__).parent.parent
DATA = ROOT / "tests" / "data"
# mixers_reference.json and the groups measured apart (measure_mixers.py --cases), same T
REFS = [json.loads(p.read_text()) for p in
        [DATA / "mixers_reference.json", *sorted(DATA.glob("mixers_reference_*.json"))]]
REF = REFS[0]
assert all(r["T"] == REF["T"] and r["B"] == REF["B"] for r in REFS)
CASES = {c["name"]: c for r in REFS for c in r["cases"]}
TORCH_DTYPE = {"bf16": "torch.bfloat16", "fp32": "torch.float32"}


def _load(tmp_path: Path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return load_hf_config(path)


def _totals(m, T: int, **kw):
    return build_trace(m, Workload(batch=1, seq=T, **kw))["totals"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_params_equal_the_meta_device_count(tmp_path, name):
    case = CASES[name]
    m = _load(tmp_path, case["full_config"])
    assert _totals(m, 1)["params"] == case["params_meta"]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("T", REF["T"])
def test_flops_equal_flopcountermode(tmp_path, name, T):
    case, step = CASES[name], CASES[name]["steps"][str(T)]
    m = _load(tmp_path, case["hf_config"])
    # MLA (Kimi-Linear): transformers keeps the latent and re-expands it every step
    form = {"mla_form": "latent"} if m.mla else {}
    assert _totals(m, T, dtype="fp32", **form)["flops"] == step["prefill_flops"]
    assert _totals(m, T, dtype="fp32", phase="decode", **form)["flops"] == step["decode_flops"]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("T", REF["T"])
def test_cache_bytes_equal_transformers_cache(tmp_path, name, T):
    case, cache = CASES[name], CASES[name]["steps"][str(T)]["cache_bf16"]
    m = _load(tmp_path, case["hf_config"])
    doc = build_trace(m, Workload(batch=1, seq=T, dtype="bf16"))
    t = doc["totals"]
    if m.sliding_window is not None:  # transformers' cache keeps W−1 tokens of a sliding layer
        # after the prefill, shapecalc W (as tests/test_gemma.py compares them)
        w1 = m.model_copy(update={"sliding_window": m.sliding_window - 1})
        assert t["kv_cache_bytes"] >= _totals(w1, T, dtype="bf16")["kv_cache_bytes"]
        t = {**t, "kv_cache_bytes": _totals(w1, T, dtype="bf16")["kv_cache_bytes"]}
    assert t["kv_cache_bytes"] == cache["kv_cache_bytes"]
    assert t["state_cache_bytes"] == cache["state_cache_bytes"]
    # the parts each family's cache holds, in their dtypes, as the trace's state stages say: conv
    # states follow the model's dtype, the scans' recurrent states stay in fp32; a short conv
    # (LFM2) holds no recurrent state
    dtypes = {part: dt for _, part, _, dt in cache["shapes"] if part.endswith("_states")}
    traced = {"conv_states" if s["role"] == "state.conv" else "recurrent_states":
              TORCH_DTYPE[s["dtype"]] for s in doc["stages"] if s["role"].startswith("state.")}
    assert dtypes == traced
    # Inkling's short convs run in fp32, and so do their windows
    conv = "torch.float32" if "inkling" in m.mixers else "torch.bfloat16"
    assert dtypes.get("conv_states", conv) == conv
    # CCA's recurrent state is the last delayed value, in the model's dtype (ZAYA)
    want = "torch.bfloat16" if "cca" in m.mixers else "torch.float32"
    assert dtypes.get("recurrent_states", want) == want


def test_live():
    if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")):
        pytest.skip("torch and transformers are not installed "
                    "(pip install torch==2.13.0 transformers==5.24.0)")
    path = ROOT / "tests" / "torch_reference" / "measure_mixers.py"
    spec = importlib.util.spec_from_file_location("measure_mixers", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    case = CASES["nemotron_h-class-defaults"]
    live = mod.measure(case["full_config"], case["hf_config"])
    assert live == {k: case[k] for k in ("params_meta", "steps")}


PRESETS = ("nemotron-nano-9b-v2", "qwen3-next-80b-a3b", "qwen3.5-9b", "qwen3.5-35b-a3b",
           "lfm2-1.2b", "lfm3-1.7b", "lfm2-8b-a1b", "jamba-mini-1.5", "falcon-h1-7b",
           "kimi-linear-48b-a3b", "olmo-hybrid-7b", "ling-3.0-flash", "qwen3.5-27b",
           "zaya1-8b", "granite-4.0-h-small", "inkling")


@pytest.mark.parametrize("name", PRESETS)
def test_preset_equals_its_config_import_and_the_meta_device_count(name):
    """Each preset is its config.json in tests/data/hf field by field; its parameters are
    transformers' meta-device count (tests/data/hf/published.json, measured like the others)."""
    from shapecalc.inputs.sources import load_preset, published
    got, want = load_hf_config(ROOT / "tests" / "data" / "hf" / f"{name}.json"), load_preset(name)
    assert got.model_dump(exclude={"name"}) == want.model_dump(exclude={"name"})
    meta = json.loads((ROOT / "tests" / "data" / "hf" / "published.json").read_text())[name]
    assert _totals(want, 1)["params"] == meta == published(name)["params"]
