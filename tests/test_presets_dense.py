"""Dense presets of the families shapecalc imports (Llama 3.1/3.2/3.3, Qwen3, Phi-3): each preset
equals the import of its model's config.json field by field, and its parameters equal the
transformers model built on the meta device from that config.json (tests/data/hf/published.json)
and the published figure in the preset's [published] table.

published.json's counts were measured with torch 2.13.0 and transformers 5.24.0
(`AutoModelForCausalLM.from_config` under `torch.device("meta")`, `sum(p.numel())`);
`test_live_meta_device_count` measures again when torch and transformers are installed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.model.config import Workload

HF = Path(__file__).parent / "data" / "hf"
META = json.loads((HF / "published.json").read_text())
# preset → its config.json in tests/data/hf
PRESETS = {
    "llama3.1-8b": "llama3.1-8b", "llama3.1-70b": "llama3.1-70b", "llama3.2-1b": "llama3.2-1b",
    "llama3.2-3b": "llama3.2-3b", "llama3.3-70b": "llama3.3-70b", "qwen3-32b": "qwen3-32b",
    "phi3-mini": "phi3-mini-4k",
}  # fmt: skip (qwen3-8b: tests/test_moe_reference.py)


def _params(m) -> int:
    return build_trace(m, Workload(batch=1, seq=1))["totals"]["params"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_equals_its_config_import(name):
    got, want = load_hf_config(HF / f"{PRESETS[name]}.json"), load_preset(name)
    for attr in want.model_dump(exclude={"name"}):  # every field, each named on failure
        assert getattr(got, attr) == getattr(want, attr), attr


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_params_equal_the_meta_device_count_and_the_published_figure(name):
    pub = published(name)
    assert "huggingface.co/" in pub["source"]
    params = _params(load_preset(name))
    assert params == META[PRESETS[name]] == pub["params"]


def test_hand_counts():
    """Two totals by hand: Llama 3.2 1B ties its embeddings (the [128256, 2048] matrix once),
    Qwen3-32B's heads are 128 wide although D/H = 80."""
    d, dff, v, n = 2048, 8192, 128256, 16
    layer = d * d + 2 * d * 8 * 64 + d * d + 3 * d * dff + 2 * d
    assert _params(load_preset("llama3.2-1b")) == v * d + n * layer + d == 1_235_814_400
    d, dff, v, n, hdh = 5120, 25600, 151936, 64, 64 * 128
    layer = 2 * d * hdh + 2 * d * 8 * 128 + 3 * d * dff + 2 * d + 2 * 128
    assert _params(load_preset("qwen3-32b")) == 2 * v * d + n * layer + d == 32_762_123_264
    tied = load_hf_config(HF / "llama3.2-3b.json")
    assert tied.tie_embeddings and not load_hf_config(HF / "llama3.1-8b.json").tie_embeddings


def test_rope_scaling_changes_no_shape(tmp_path):
    """Llama 3.1's rope_scaling (llama3) rescales frequencies: the same model without it."""
    cfg = json.loads((HF / "llama3.1-8b.json").read_text())
    plain = {**cfg, "rope_scaling": None}
    p = tmp_path / "llama3.1-8b.json"
    p.write_text(json.dumps(plain))
    assert load_hf_config(p) == load_hf_config(HF / "llama3.1-8b.json")


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")),
                    reason="torch and transformers are not installed")
def test_live_meta_device_count():
    """The counts in published.json, measured again on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    for stem in sorted(set(PRESETS.values())):
        cfg = AutoConfig.from_pretrained(HF / f"{stem}.json")
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        assert sum(p.numel() for p in model.parameters()) == META[stem], stem
