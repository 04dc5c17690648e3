"""A `text_config` beside a supported top-level model_type (issue 12, HF oddities): read only
when it agrees with the top level on every shape key it gives; otherwise refused in one line
naming text_config (it was ignored). Multimodal configs (gemma3, llama4: their text model in
text_config) are read as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HF = Path(__file__).resolve().parent / "data" / "hf"
LLAMA = json.loads((HF / "llama3-8b.json").read_text())
SHAPES = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
          "num_key_value_heads", "vocab_size", "model_type")
# Llama-3-8B's published count (meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters)
PARAMS = 8_030_261_248


def _write(tmp_path: Path, text_config: object, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({**LLAMA, "text_config": text_config}))
    return str(path)


def _params(cli, path: str) -> int:
    r = cli("trace", "--hf-config", path, "--seq", "16", "--json")
    assert r.code == 0, r.err
    return r.json()["totals"]["params"]


@pytest.mark.parametrize("text_config", [
    None,  # null: nothing nested
    {k: LLAMA[k] for k in SHAPES},  # a copy of the top level's shapes
    {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"},  # no shape key
    {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},  # values, not shapes
    {"use_sliding_window": False},  # a shape key at its neutral value
], ids=["null", "copy", "no-shape", "rope-values", "neutral"])
def test_text_config_that_agrees_is_read(cli, tmp_path, text_config):
    assert _params(cli, _write(tmp_path, text_config)) == PARAMS


@pytest.mark.parametrize(("change", "key"), [
    ({"num_hidden_layers": 5}, "num_hidden_layers"),
    ({"hidden_size": 2048}, "hidden_size"),
    ({"model_type": "gemma3_text"}, "model_type"),
    ({"sliding_window": 4096}, "sliding_window"),  # absent at the top
    ({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor"),  # inside a dict
], ids=["layers", "width", "model_type", "absent-at-top", "nested"])
def test_text_config_that_changes_shapes_is_refused(cli, tmp_path, change, key):
    path = _write(tmp_path, {**{k: LLAMA[k] for k in SHAPES}, **change})
    r = cli("trace", "--hf-config", path, "--json")
    assert r.code == 2 and r.out == ""
    line = r.err.strip()
    assert "\n" not in line and line.startswith("error: text_config: ") and f"its {key} =" in line
    assert "Traceback" not in r.err


def test_text_config_not_an_object(cli, tmp_path):
    r = cli("trace", "--hf-config", _write(tmp_path, "llama"), "--json")
    assert r.code == 2 and r.err == "error: text_config: must be an object, not 'llama'\n"


def test_multimodal_configs_still_read_their_text_model(cli):
    """gemma3 and llama4 (not supported at the top) keep their decoder in text_config."""
    for name in ("gemma3-4b", "llama4-scout"):
        r = cli("trace", "--hf-config", str(HF / f"{name}.json"), "--seq", "16", "--json")
        assert r.code == 0, r.err
        assert "text_config of a multimodal config" in r.json()["model"]["name"]


def test_transformers_reads_the_nested_one_too():
    """Why it is refused: transformers builds LlamaForCausalLM's layers from the top level, but
    get_text_config() (generation, cache set-up) returns the nested text_config, so the two
    disagree inside transformers itself."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig.from_dict(
        {**LLAMA, "text_config": {**{k: LLAMA[k] for k in SHAPES}, "num_hidden_layers": 5}})
    assert cfg.num_hidden_layers == 32
    nested = cfg.get_text_config(decoder=True)
    assert nested is not cfg and nested["num_hidden_layers"] == 5
