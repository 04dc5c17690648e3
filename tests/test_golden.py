"""Every number stays: trace, fit, compare and sweep JSON for all presets at three workloads equal
the recorded output (tests/golden/cases.py), apart from keys added since: the same keys in the same
order with the same values and types, so that without the new keys the bytes are the same."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "golden_cases", Path(__file__).parent / "golden" / "cases.py")
assert _spec and _spec.loader
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

GOLDEN = json.loads(gzip.decompress(cases.PATH.read_bytes()))


def contains(old: object, new: object, where: str = "") -> str | None:
    """None if `new` holds everything `old` holds (dicts may gain keys), else where it differs."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return f"{where}: was an object"
        if [k for k in new if k in old] != list(old):  # same order, new keys aside
            return f"{where}: keys reordered"
        for k, v in old.items():
            if k not in new:
                return f"{where}.{k}: missing"
            bad = contains(v, new[k], f"{where}.{k}")
            if bad:
                return bad
        return None
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return f"{where}: list length {len(old)} → {len(new) if isinstance(new, list) else '?'}"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            bad = contains(a, b, f"{where}[{i}]")
            if bad:
                return bad
        return None
    if type(old) is not type(new) or old != new:
        return f"{where}: {old!r} → {new!r}"
    return None


def test_contains_finds_changes():
    assert contains({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2, "c": 3}], "d": 4}) is None
    assert contains({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ".a[1].b: 2 → 3"
    assert contains({"a": 1}, {"a": 1.0}) is not None
    assert contains([1, 2], [1]) is not None
    assert contains({"a": 1, "b": 2}, {"b": 2, "a": 1}) == ": keys reordered"


@pytest.mark.parametrize("key", sorted(GOLDEN))
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
