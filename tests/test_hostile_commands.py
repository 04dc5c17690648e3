"""Issue 25's second hostile corpus, `train`, `verify --train`, `verify` and `hardware`: one
test per root cause. Counts go through the one bounded check (inputs/numbers.py); verify
--train refuses on its budget before any array is made; a hardware profile is range-checked
whole at load and a unit must be one of its field's."""

from __future__ import annotations

import pytest
from test_errors import _one_clean_line

GPU = """name = "X"
source = "a test"
memory_bytes = 80000000000
hbm_bandwidth = 3.35e12
link_bandwidth = 4.5e11
[peak_flops]
bf16 = 9.89e14
"""


def _refused(cli, *args, field, word=""):
    line = _one_clean_line(cli(*args))
    assert line.startswith(f"error: {field}"), line
    assert word in line, line
    return line


@pytest.mark.parametrize(("flag", "field"), [
    ("--global-batch", "global-batch"), ("--grad-accum", "grad-accum")])
@pytest.mark.parametrize("value", ["0", "-4"])
def test_train_batches_are_bounded(cli, flag, field, value):
    """0 was a ZeroDivisionError."""
    _refused(cli, "train", "--preset", "seed-tiny", flag, value, field=field)


@pytest.mark.parametrize("args", [("--seq", "1000000000000"), ("--seq", "100000"),
                                  ("--batch", "1000000000000")])
def test_verify_train_refuses_on_its_budget(cli, args):
    """--seq 10¹² was a NumPy allocation traceback (14.6 TiB of token ids)."""
    _refused(cli, "verify", "--train", "--preset", "seed-tiny", *args, field="memory",
             word="budget")


def test_verify_needs_two_token_ids(cli):
    """vocab_size=1 was rng.integers' ValueError (low >= high) in the causal check."""
    _refused(cli, "verify", "--preset", "seed-tiny", "--set", "vocab_size=1",
             field="vocab_size")


@pytest.mark.parametrize(("item", "word"), [
    ("memory_bytes=80GiB/s", "B/s"),  # a bandwidth for a size
    ("hbm_bandwidth=80GiB", "B"),
    ("peak_flops.bf16=3TB/s", "B/s"),
    ("link_bandwidth=1TFLOP/s", "FLOP/s"),
])
def test_a_unit_must_be_its_fields(cli, item, word):
    _refused(cli, "hardware", "H100-SXM", "--set-gpu", item, field="set-gpu", word=word)


def test_matching_units_still_read(cli):
    for item in ("memory_bytes=80GiB", "hbm_bandwidth=3.35TB/s", "peak_flops.bf16=989TFLOP/s",
                 "hbm_bandwidth=3e12"):
        r = cli("hardware", "H100-SXM", "--set-gpu", item, "--json")
        assert r.code == 0, (item, r.err)


@pytest.mark.parametrize(("perf", "field"), [
    ("layer_overhead_s = 50", "perf.layer_overhead_s"),
    ("gemm_efficiency = 3", "perf.gemm_efficiency"),
    ("gemm_half_tokens = -1", "perf.gemm_half_tokens"),
    ("link_efficiency = nan", "gpu.perf.link_efficiency"),
])
@pytest.mark.parametrize("command", [("hardware",), ("fit", "--preset", "seed-tiny", "--gpu")])
def test_perf_terms_checked_at_load(cli, tmp_path, perf, field, command):
    """A profile's [perf] terms were range-checked only when a command used them."""
    p = tmp_path / "x.toml"
    p.write_text(GPU + "[perf]\n" + perf + "\n")
    _refused(cli, *command, str(p), field=field)


def test_an_empty_name_is_refused(cli, tmp_path):
    p = tmp_path / "x.toml"
    p.write_text(GPU.replace('name = "X"', 'name = "  "'))
    _refused(cli, "hardware", str(p), field="gpu.name")
    _refused(cli, "hardware", "H100-SXM", "--set-gpu", "name=", field="gpu.name")


@pytest.mark.parametrize("args", [
    ("hardware", "H100-SXM", "--set-gpu", "hbm_bandwidth=1e12", "--set-gpu",
     "hbm_bandwidth=2e12"),
    ("fit", "--preset", "seed-tiny", "--gpu", "H100-SXM", "--perf", "layer_overhead_s=1e-5",
     "--perf", "layer_overhead_s=2e-5"),
    ("train", "--preset", "seed-tiny", "--gpu", "H100-SXM", "--perf", "gemm_efficiency=0.5",
     "--perf", "gemm_efficiency=0.6"),
    ("trace", "--preset", "seed-tiny", "--set", "n_layers=2", "--set", "n_layers=3"),
])
def test_a_key_given_twice(cli, args):
    """The first value was silently dropped for the last (numbers.each_once)."""
    assert "given twice" in _one_clean_line(cli(*args))
