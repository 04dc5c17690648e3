"""Every number stays: trace, fit, compare and sweep JSON for all presets at three workloads equal
the recorded output (tests/golden/cases.py), apart from keys added since: the same keys in the same
order with the same values and types, so that without the new keys the bytes are the same."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from jsondiff import contains

_spec = importlib.util.spec_from_file_location(
    "golden_cases", Path(__file__).parent / "golden" / "cases.py")
assert _spec and _spec.loader
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

GOLDEN = json.loads(gzip.decompress(cases.PATH.read_bytes()))


def test_contains_finds_changes():
    assert contains({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2, "c": 3}], "d": 4}) is None
    assert contains({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ".a[1].b: 2 → 3"
    assert contains({"a": 1}, {"a": 1.0}, strict=False) is None
    assert contains({"a": 1}, {"a": 1.0}) is not None
    assert contains([1, 2], [1]) is not None
    assert contains({"a": 1, "b": 2}, {"b": 2, "a": 1}) == ": keys reordered"


ORIGINAL = cases.original_presets(GOLDEN)
KEYS = [pytest.param(k, marks=[] if k.split()[1] in ORIGINAL or (k.startswith("trace ")
                     and k.endswith(" prefill")) else [pytest.mark.slow]) for k in sorted(GOLDEN)]


@pytest.mark.parametrize("key", KEYS)
def test_golden(cli, key):
    argv = cases.argvs()[key]
    want = GOLDEN[key]
    r = cli(*argv)
    assert r.code == want["code"], r.err
    if "json" not in want:
        assert r.err.strip() == want["err"]
        return
    bad = contains(want["json"], cases.parse(r.out, argv[0] == "sweep"))
    assert bad is None, bad
