"""`--mode` against a case's own `@dtype` (issue 12): a mode stands for the width flags it names
(--dtype, --act-dtype, --kv-dtype where none was given), and the case/flag rule holds for them as
for @tp: a case's own @field wins over the flag for that field, the mode's other widths still
apply, and compare, sweep and fit agree. Nothing is ignored silently: the widths each column
runs at are in its output."""

from __future__ import annotations

import json

import pytest

GPU = ("--gpu", "H100-SXM")


def _widths(cli, case: str, *flags: str) -> list[tuple[str, str, str, str]]:
    """(weights, activations, kv cache, GEMM peak) of `case` in compare, sweep and fit."""
    c = cli("compare", case, *flags, *GPU, "--json")
    s = cli("sweep", case, *flags, *GPU)
    f = cli("fit", case, *flags, *GPU, "--json")
    assert c.code == 0 and s.code == 0 and f.code in (0, 1), (c.err, s.err, f.err)
    item, row, doc = c.json()[0], json.loads(s.out.splitlines()[0]), f.json()
    w = doc["assumptions"]["widths"]
    got = [(item["widths"]["weights"], item["widths"]["activations"],
            item["widths"]["kv_cache"], item["fit"]["assumptions"]["widths"]["compute"]),
           (row["dtype"], row["act_dtype"] if "act_dtype" in row else w["activations"],
            row["kv_dtype"], w["compute"]),
           (w["weights"], w["activations"], w["kv_cache"], w["compute"])]
    return got


@pytest.mark.parametrize(("case", "flags", "want"), [
    # the mode alone: int8 weight-only, 16-bit GEMMs, bf16 activations and cache
    ("llama3-8b", ("--mode", "int8-wo"), ("int8", "bf16", "bf16", "bf16")),
    # the case's @dtype wins over the mode's: fp8 weights run W8A8 (GEMMs at the fp8 peak);
    # the mode's activation and cache widths stay
    ("llama3-8b@dtype=fp8", ("--mode", "int8-wo"), ("fp8", "bf16", "bf16", "fp8")),
    ("llama3-8b@dtype=int8", ("--mode", "fp8"), ("int8", "bf16", "bf16", "bf16")),
    # the case's @kv_dtype wins over fp8-kv's fp8 cache; the mode's weights stay
    ("llama3-8b@kv_dtype=bf16", ("--mode", "fp8-kv"), ("bf16", "bf16", "bf16", "bf16")),
    ("llama3-8b@kv_dtype=fp8", ("--mode", "int8-wo"), ("int8", "bf16", "fp8", "bf16")),
    # as with an explicit flag: @dtype over --dtype, the flag's others
    ("llama3-8b@dtype=int4", ("--dtype", "fp8", "--kv-dtype", "fp8"),
     ("int4", "bf16", "fp8", "bf16")),
], ids=["mode", "dtype-over-int8-wo", "dtype-over-fp8", "kv-over-fp8-kv", "kv-over-int8-wo",
        "as-flags"])
def test_case_fields_win_over_the_mode(cli, case, flags, want):
    for got in _widths(cli, case, *flags):
        assert got == want, (case, flags, got)


def test_mode_is_not_a_case_field(cli):
    """A mode is a command's flag; a case pins widths with @dtype, @act_dtype and @kv_dtype."""
    r = cli("compare", "llama3-8b@mode=fp8")
    assert r.code == 2 and r.err == "error: case: 'llama3-8b@mode=fp8': unknown field 'mode'\n"


def test_the_table_says_each_columns_widths(cli, monkeypatch):
    """Nothing silent: compare's header names each column's widths."""
    monkeypatch.setenv("COLUMNS", "200")
    r = cli("compare", "llama3-8b@dtype=fp8", "llama3-8b", "--mode", "int8-wo")
    assert r.code == 0, r.err
    head = r.out.split("params")[0]
    assert "fp8" in head and "int8" in head
