"""The config.json a built-in preset was written from, where one is stored.

The presets in presets/models were written from the Hub's config.json files kept in tests/data/hf
(same stem, but for the aliases below); a wheel ships those files as shapecalc/presets/hf
(pyproject.toml). Stdlib only.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]
# preset → the stem of its config.json where the two differ
ALIASES = {"phi3-mini": "phi3-mini-4k"}


def hf_dir() -> Path:
    """The stored config.json files: in the wheel, else in the repository's tests/data/hf."""
    packaged = _PACKAGE / "presets" / "hf"
    return packaged if packaged.is_dir() else _PACKAGE.parent / "tests" / "data" / "hf"


def stored_config(preset: str) -> Path | None:
    """The stored config.json of built-in preset `preset`, or None."""
    path = hf_dir() / f"{ALIASES.get(preset, preset)}.json"
    return path if path.is_file() and path.stem != "published" else None
