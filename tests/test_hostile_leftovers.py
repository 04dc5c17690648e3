"""The first hostile corpus's leftovers (issue 25): a key of fixed kind read with the wrong kind
(a list or string max_position_embeddings in OPT, an integer layer_types) is one line, not a
TypeError (inputs/hf_base.check_kind); an export that fails leaves stdout empty
(render/console.py writes --svg/--html first); a key no reader knows is said in a note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_errors import _one_clean_line

HF = Path(__file__).resolve().parent / "data" / "hf"


def _config(tmp_path, base, **change):
    cfg = json.loads((HF / f"{base}.json").read_text())
    cfg.update(change)
    p = tmp_path / f"{base}-x.json"
    p.write_text(json.dumps(cfg))
    return str(p)


@pytest.mark.parametrize(("base", "key", "value"), [
    ("opt-125m", "max_position_embeddings", [2048]),  # list + 2: a TypeError
    ("opt-125m", "max_position_embeddings", "2048"),
    ("opt-125m", "max_position_embeddings", True),  # read as 1 (+2 rows)
    ("gpt2", "n_positions", 1024.0),
    ("gemma3-1b", "layer_types", 5),  # `for t in 5`: a TypeError
    ("gemma3-1b", "layer_types", "sliding_attention"),  # read letter by letter
    ("llama2-7b", "max_position_embeddings", {"a": 1}),
    ("llama2-7b", "head_dim", "128"),
])
def test_a_key_of_the_wrong_kind(cli, tmp_path, base, key, value):
    line = _one_clean_line(cli("trace", "--hf-config", _config(tmp_path, base, **{key: value})))
    assert line.startswith(f"error: {key}"), line


@pytest.mark.parametrize("args", [
    ("trace", "--preset", "seed-tiny", "--svg", "/dev/full"),
    ("trace", "--preset", "seed-tiny", "--format", "csv", "--html", "/dev/full"),
    ("fit", "--preset", "seed-tiny", "--gpu", "H100-SXM", "--json", "--svg", "/dev/full"),
    ("serve", "--preset", "seed-tiny", "--gpu", "H100-SXM", "--requests", "5", "--svg",
     "/dev/full"),
    ("sweep", "seed-tiny", "--batch", "1,2", "--seq", "16", "--svg", "/dev/full"),  # streamed
    ("sweep", "seed-tiny", "--batch", "1,2", "--seq", "16", "--format", "csv", "--html",
     "/dev/full"),
    ("compare", "seed-tiny", "seed-tiny@n_layers=2", "--json", "--html", "/dev/full"),
])
def test_a_failing_export_prints_nothing(cli, args):
    """The table was printed to stdout, then --svg failed (exit 2 after a partial output)."""
    line = _one_clean_line(cli(*args))  # one line, stdout empty
    assert "/dev/full" in line


def test_a_key_no_reader_knows_is_noted(cli, tmp_path):
    p = _config(tmp_path, "opt-125m", my_new_gating="topk")
    r = cli("trace", "--hf-config", p, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["notes"] == [
        "keys not read (assumed to change no shape): my_new_gating"]
    r = cli("trace", "--hf-config", p)
    assert "note: keys not read (assumed to change no shape): my_new_gating" in r.out
    plain = cli("trace", "--hf-config", str(HF / "opt-125m.json"), "--json")
    assert "notes" not in json.loads(plain.out)  # neutral keys (dropouts, token ids) say nothing
