"""Every bad input: exit code 2, one line on stderr naming the field and why, no traceback."""

from __future__ import annotations

import json

import pytest

BAD = [
    # (arguments, the field the message must name)
    (["--set", "d_model=9"], "n_heads"),  # D not divisible by H
    (["--preset", "llama2-7b", "--set", "n_kv_heads=3"], "n_kv_heads"),  # H % H_kv
    (["--preset", "llama2-70b", "--tp", "3"], "tp"),  # p does not divide H
    (["--preset", "llama2-70b", "--tp", "128"], "tp"),  # p does not divide Dff
    (["--preset", "seed-tiny", "--pp", "2"], "pp"),  # pp > N
    (["--batch", "0"], "batch"),
    (["--seq", "-5"], "seq"),
    (["--tp", "0"], "tp"),
    (["--set", "d_ff=0"], "d_ff"),
    (["--dtype", "fp64"], "dtype"),
    (["--kv-dtype", "int3"], "kv_dtype"),
    (["--phase", "train"], "phase"),
    (["--logits", "first"], "logits"),
    (["--preset", "nope"], "preset"),
    (["--set", "colour=blue"], "set"),
    (["--set", "d_model"], "set"),
    (["--preset", "gpt2", "--seq", "4096"], "seq"),  # beyond the learned position table
    (["--preset", "gpt2", "--preset", "gpt2", "--config", "x.toml"], "preset"),  # given twice
    (["--preset", "gpt2", "--config", "x.toml"], "model"),
    (["--set", "parallel_block=true", "--set", "norm_position=post"], "parallel_block"),
    (["--batch", "many"], "batch"),  # not an integer: the parser's own error, one line
    (["--frobnicate"], "frobnicate"),
]


def _one_clean_line(r):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err and r.out == ""
    return lines[0]


@pytest.mark.parametrize(("args", "field"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_workload_and_model(cli, args, field):
    line = _one_clean_line(cli("trace", *args))
    assert line.startswith("error: ") and field in line


def test_missing_and_malformed_files(cli, tmp_path):
    line = _one_clean_line(cli("trace", "--config", str(tmp_path / "missing.toml")))
    assert "config" in line and "not found" in line
    bad = tmp_path / "bad.toml"
    bad.write_text("d_model = = 3\n")
    assert "config" in _one_clean_line(cli("trace", "--config", str(bad)))
    badj = tmp_path / "bad.json"
    badj.write_text("{nope")
    assert "config" in _one_clean_line(cli("trace", "--config", str(badj)))
    assert "not found" in _one_clean_line(cli("trace", "--hf-config", str(tmp_path / "no.json")))
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(
        "vocab_size = 10\nd_model = 8\nn_layers = 1\nn_heads = 2\nd_ff = 8\n"
        'positions = "none"\nwingspan = 3\n'
    )
    assert "wingspan" in _one_clean_line(cli("trace", "--config", str(unknown)))


def test_hf_config_refusals(cli, tmp_path):
    # a model_type neither shapecalc's table nor transformers knows (one transformers knows is
    # measured by it, where it is installed: tests/test_day0.py)
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"model_type": "not_a_family", "hidden_size": 768}))
    assert "model_type" in _one_clean_line(cli("trace", "--hf-config", str(unknown)))
    partial = tmp_path / "partial.json"
    partial.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "vocab_size": 10,
                "num_attention_heads": 2,
                "num_hidden_layers": 1,
                "intermediate_size": 8,
            }
        )
    )
    assert "hidden_size" in _one_clean_line(cli("trace", "--hf-config", str(partial)))


def test_config_file_with_workload_table(cli, tmp_path):
    f = tmp_path / "toy.toml"
    f.write_text(
        'name = "toy"\nvocab_size = 100\nd_model = 16\nn_layers = 2\nn_heads = 4\n'
        'd_ff = 64\npositions = "none"\n[workload]\nbatch = 3\nseq = 5\n'
    )
    r = cli("trace", "--config", str(f), "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["workload"]["batch"] == 3 and doc["workload"]["seq"] == 5
    r = cli("trace", "--config", str(f), "--batch", "7", "--json")
    assert r.json()["workload"]["batch"] == 7  # the command line wins
