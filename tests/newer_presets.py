"""The presets newer than the 52 the golden file recorded first (the 2025–2026 families, their
quantized forms, the stateful mixers): the tests that run every preset take these under
`pytest -m slow`, one preset per family staying in the default run elsewhere
(test_families_reference, test_mixers, test_quant), so that the default suite keeps its time."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "golden_cases_newer", Path(__file__).parent / "golden" / "cases.py")
assert _spec and _spec.loader
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
ORIGINAL = _cases.original_presets(json.loads(gzip.decompress(_cases.PATH.read_bytes())))


def default_or_slow(names: list[str]) -> list[object]:
    """Each name as a parameter; a newer preset's marked slow."""
    return [pytest.param(n, marks=[] if n in ORIGINAL else [pytest.mark.slow]) for n in names]
