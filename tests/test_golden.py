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


def _default(key: str) -> bool:
    """The default run: every trace and sweep case of the first 52 presets, and their fit and
    compare at the plain prefill (the other two workloads of fit and compare run under -m slow,
    as do the presets newer than the first 52: each of those is measured against transformers by
    default, tests/test_families_reference.py, test_mixers_reference.py and their kin)."""
    command, preset, *rest = key.split()
    return preset in ORIGINAL and (command in ("trace", "sweep") or rest == ["prefill"])


KEYS = [pytest.param(k, marks=[] if _default(k) else [pytest.mark.slow]) for k in sorted(GOLDEN)]


def _code(argv: list[str], want: dict) -> int:
    """The exit code recorded, but for compare and sweep with --gpu where no column or row fits:
    1 since the exit status became one rule (0 success, 1 a negative verdict, 2 bad input); the
    JSON recorded is unchanged."""
    doc = want.get("json")
    if want["code"] != 0 or argv[0] not in ("compare", "sweep") or "--gpu" not in argv:
        return int(want["code"])
    fits = ([it["fit"]["fits"] for it in doc] if argv[0] == "compare"
            else [row["fits"] for row in doc if "fits" in row])
    return 1 if fits and not any(fits) else 0


@pytest.mark.parametrize("key", KEYS)
def test_golden(cli, key):
    argv = cases.argvs()[key]
    want = GOLDEN[key]
    r = cli(*argv)
    assert r.code == _code(argv, want), r.err
    if "json" not in want:
        assert r.err.strip() == want["err"]
        return
    bad = contains(want["json"], cases.parse(r.out, argv[0] == "sweep"))
    assert bad is None, bad
