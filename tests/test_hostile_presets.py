"""Issue 25's second hostile corpus, preset folders (inputs/sources.py): two files naming the
same preset in one folder are refused, not one silently dropped; an unknown [workload] key is
refused, not ignored; a control character in a file name is shown escaped by `presets`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_errors import _one_clean_line

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "presets" / "models" / "seed-tiny.toml"


@pytest.mark.parametrize("args", [("presets",), ("trace", "--preset", "m"),
                                  ("trace", "--preset", "seed-tiny")])
def test_two_files_one_preset(cli, tmp_path, args):
    shutil.copy(TINY, tmp_path / "m.toml")
    (tmp_path / "m.json").write_text('{"name": "other"}')
    line = _one_clean_line(cli(*args, "--presets-dir", str(tmp_path)))
    assert line.startswith("error: presets-dir") and "m.toml" in line and "m.json" in line


def test_two_files_one_hardware_profile(cli, tmp_path):
    gpu = (ROOT / "presets" / "hardware" / "H100-SXM.toml").read_text()
    (tmp_path / "g.toml").write_text(gpu)
    (tmp_path / "G.toml").write_text(gpu)  # another stem: both kept
    (tmp_path / "g.json").write_text("{}")
    line = _one_clean_line(cli("hardware", "--hardware-dir", str(tmp_path)))
    assert line.startswith("error: hardware-dir") and "g.json" in line


@pytest.mark.parametrize("key", ["bogus_key", "sequence", "Seq"])
@pytest.mark.parametrize("how", ["--config", "--preset"])
def test_unknown_workload_keys(cli, tmp_path, key, how):
    p = tmp_path / "w.toml"
    p.write_text(TINY.read_text() + f"\n[workload]\n{key} = 64\n")
    args = ("--config", str(p)) if how == "--config" else (
        "--preset", "w", "--presets-dir", str(tmp_path))
    line = _one_clean_line(cli("trace", *args))
    assert line.startswith(f"error: workload.{key}"), line


def test_known_workload_keys_still_read(cli, tmp_path):
    p = tmp_path / "w.toml"
    p.write_text(TINY.read_text() + "\n[workload]\nseq = 64\n")
    r = cli("trace", "--config", str(p))
    assert r.code == 0 and "T=64" in r.out, (r.err, r.out[:300])


def test_a_control_character_in_a_name_is_escaped(cli, tmp_path):
    shutil.copy(TINY, tmp_path / "e\x1b[31mx.toml")
    r = cli("presets", "--presets-dir", str(tmp_path))
    assert r.code == 0, r.err
    assert "\x1b" not in r.out and "e\\x1b[31mx" in r.out


@pytest.mark.parametrize(("edit", "field"), [
    (lambda t: t.replace("n_layers = 1", 'n_layers = "1"'), "n_layers"),  # read as 1
    (lambda t: t + '\n[workload]\nseq = "64"\n', "workload.seq"),
])
def test_a_quoted_number_in_a_file(cli, tmp_path, edit, field):
    """Lax validation read a string "1" in a file as the number 1, silently."""
    text = TINY.read_text()
    assert "n_layers = 1" in text
    (tmp_path / "q.toml").write_text(edit(text))
    for args in (("--config", str(tmp_path / "q.toml")),
                 ("--preset", "q", "--presets-dir", str(tmp_path))):
        line = _one_clean_line(cli("trace", *args))
        assert line.startswith(f"error: {field}") and "string" in line, line


@pytest.mark.parametrize(("old", "new", "field"), [
    ("hbm_bandwidth = ", 'hbm_bandwidth = "3.35e12" #', "gpu.hbm_bandwidth"),
    ("[peak_flops]", '[perf]\nlayer_overhead_s = "5e-6"\n[peak_flops]',
     "gpu.perf.layer_overhead_s"),
])
def test_a_quoted_number_in_a_profile(cli, tmp_path, old, new, field):
    gpu = (ROOT / "presets" / "hardware" / "H100-SXM.toml").read_text()
    assert old in gpu
    (tmp_path / "g.toml").write_text(gpu.replace(old, new, 1))
    line = _one_clean_line(cli("hardware", str(tmp_path / "g.toml")))
    assert line.startswith(f"error: {field}"), line
