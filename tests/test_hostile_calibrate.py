"""Issue 25's second hostile corpus, `calibrate`: every record is checked whole before any is
resolved (plan/calibrate.check_record), one line naming the record and the key: no traceback
(a missing key, a wrong type), no silent coercion (tp 0 as 1, `true` as 1, 2.7 as 2), no NaN
fitted, no unit ignored; and `--check` with `--write` is refused, not a write of nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from test_errors import _one_clean_line

DATA = Path(__file__).resolve().parent / "data" / "serving-measurements.json"
RECORDS = json.loads(DATA.read_text(encoding="utf-8"))["records"]
FIRST = RECORDS[0]["id"]  # a throughput_fixed_batch record, tp 4


def _pop(k):
    return lambda r: r.pop(k)


def _set(**kv):
    return lambda r: r.update(kv)


@pytest.mark.parametrize(("change", "words"), [
    (_pop("value"), ("value",)),  # KeyError tracebacks
    (_pop("model"), ("model",)),
    (_pop("gpu"), ("gpu",)),
    (_pop("metric_type"), ("metric_type",)),
    (_set(tp=0), ("tp", "got 0")),  # read as tp 1
    (_set(tp=True), ("tp", "True")),  # read as 1
    (_set(batch=2.7), ("batch", "2.7")),  # read as 2
    (_set(tp="4"), ("tp", "'4'")),
    (_set(input_len=-5), ("input_len",)),
    (_set(output_len=0), ("output_len",)),
    (_set(value=-3), ("value",)),
    (_set(value=0), ("value",)),
    (_set(value=float("nan")), ("value", "nan")),  # was fitted
    (_set(value=float("inf")), ("value",)),
    (_set(value=True), ("value",)),
    (_set(value="289"), ("value",)),
    (_set(unit="tokens/s"), ("unit", "tokens/s/GPU")),  # a total throughput read as per GPU
    (_set(unit=None), ("unit",)),
    (_set(model=7), ("model", "string")),
    (_set(dtype=["fp16"]), ("dtype", "string")),
    (_set(n_gpus=3), ("n_gpus",)),
    (_set(inputlen=5), ("inputlen", "input_len")),  # a typo left the default 16 in
])
def test_each_record_is_checked(cli, tmp_path, change, words):
    recs = copy.deepcopy(RECORDS)
    change(recs[0])
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"records": recs}))
    line = _one_clean_line(cli("calibrate", str(p), "--check"))
    assert line.startswith("error: calibrate") and FIRST in line, line
    for w in words:
        assert w in line, (w, line)


@pytest.mark.parametrize("doc", [{"records": {"a": 1}}, {"records": "x"}, {"records": [1]},
                                 {"records": [RECORDS[0], RECORDS[0]]}, [RECORDS[0]]])
def test_the_records_list_itself(cli, tmp_path, doc):
    p = tmp_path / "m.json"
    p.write_text(json.dumps(doc))
    assert _one_clean_line(cli("calibrate", str(p), "--check")).startswith("error: calibrate")


@pytest.mark.parametrize("flags", [("--write", "OUT"), ("--write-defaults",)])
def test_check_with_a_write_is_refused(cli, tmp_path, flags):
    """--check --write wrote nothing and said nothing."""
    out = tmp_path / "out"
    args = [str(out) if f == "OUT" else f for f in flags]
    line = _one_clean_line(cli("calibrate", str(DATA), "--check", *args))
    assert line.startswith(f"error: {flags[0][2:]}"), line
    assert not out.exists()
