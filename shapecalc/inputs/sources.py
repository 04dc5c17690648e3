"""Where models come from: preset files, config files, Hugging Face config.json, --set overrides.

Every bad input ends as one `ShapecalcError(field, reason)`; nothing here prints. Stdlib and
pydantic only (no numpy, no rich), so that `--help` and error paths stay fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic_core import ValidationError  # pydantic itself is not loaded to read a file

from ..model.config import ModelConfig, ShapecalcError, Workload, first_error
from ..model.suggest import did_you_mean
from . import files
from .numbers import each_once

_PACKAGE = Path(__file__).resolve().parents[1]


# ── folders ──────────────────────────────────────────────────────────────────────────────────────


def _builtin(kind: str) -> Path:
    """presets/<kind> next to the package (installed wheel), else at the repository top."""
    packaged = _PACKAGE / "presets" / kind
    return packaged if packaged.is_dir() else _PACKAGE.parent / "presets" / kind


def _dirs(extra: list[Path] | None, env: str, kind: str) -> list[Path]:
    user = [Path(p) for p in extra or []]
    user += [Path(p) for p in os.environ.get(env, "").split(os.pathsep) if p]
    return [*user, _builtin(kind)]


def presets_dirs(extra: list[Path] | None = None) -> list[Path]:
    """Model preset folders, first match wins: `extra`, then $SHAPECALC_PRESETS, then built-ins."""
    return _dirs(extra, "SHAPECALC_PRESETS", "models")


def hardware_dirs(extra: list[Path] | None = None) -> list[Path]:
    """Hardware preset folders: `extra`, then $SHAPECALC_HARDWARE, then built-ins."""
    return _dirs(extra, "SHAPECALC_HARDWARE", "hardware")


def _list(dirs: list[Path], field: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    builtin = dirs[-1]
    for d in dirs:
        if not d.is_dir():
            if d == builtin:
                continue
            what = "not a directory" if os.path.lexists(d) else "folder not found"
            raise ShapecalcError(field, f"{what}: {files.shown(d)}")
        here: dict[str, Path] = {}
        # .toml and .json in any case (m.TOML is a preset too, and so a twin of m.json)
        for f in sorted(x for x in d.iterdir() if x.suffix.lower() in (".toml", ".json")):
            if f.stem in here:  # one would silently win over the other
                raise ShapecalcError(field, f"{files.shown(here[f.stem])} and "
                                     f"{files.shown(f)} name the same preset "
                                     f"{files.shown(f.stem)!r}; keep one")
            here[f.stem] = f
            found.setdefault(f.stem, f)  # earlier folders shadow later ones
    return found


def list_presets(extra: list[Path] | None = None) -> dict[str, Path]:
    """Preset name (file stem) → file; user folders shadow built-ins."""
    return _list(presets_dirs(extra), "presets-dir")


def list_hardware(extra: list[Path] | None = None) -> dict[str, Path]:
    """Hardware name (file stem) → file; user folders shadow built-ins."""
    return _list(hardware_dirs(extra), "hardware-dir")


def _preset_path(name: str, extra: list[Path] | None) -> Path:
    known = list_presets(extra)
    if name not in known:
        raise ShapecalcError(
            "preset", f"unknown preset {name!r}{did_you_mean(name, known)}; known: "
            f"{', '.join(sorted(known)) or '(none)'}"
        )
    return known[name]


def load_preset(name: str, extra: list[Path] | None = None) -> ModelConfig:
    model, _ = load_config_file(_preset_path(name, extra))
    return model


# ── config files ─────────────────────────────────────────────────────────────────────────────────


def _parse(path: Path, field: str) -> dict[str, Any]:
    """TOML or JSON by suffix (anything else: TOML, then JSON); a table/object at the top."""
    text = files.read_text(path, field)
    kinds = {".toml": ["TOML"], ".json": ["JSON"]}.get(path.suffix.lower(), ["TOML", "JSON"])
    errors = []
    for kind in kinds:
        try:
            data = files.loads(text, kind, path, field)
            break
        except files.SyntaxRefusal as e:
            if len(kinds) == 1:
                raise
            errors.append(e.detail)
    else:
        raise ShapecalcError(field, f"{files.shown(path)} is neither valid TOML ({errors[0]}) "
                             "nor JSON")
    if not isinstance(data, dict):
        raise ShapecalcError(field, f"{files.shown(path)}: the top level must be a table of "
                             "model fields")
    return data


def _split(data: dict[str, Any]) -> tuple[dict, dict, dict]:
    """Model fields, [published] metadata, raw [workload] table."""
    data = dict(data)
    pub = data.pop("published", {})
    wl = data.pop("workload", {})
    if not isinstance(pub, dict):
        raise ShapecalcError("published", "must be a table with params and source")
    # checkpoint_bytes: a quantized checkpoint's published tensor bytes (total_size)
    extra = set(pub) - {"params", "source", "checkpoint_bytes", "checkpoint_source"}
    if extra:
        raise ShapecalcError(f"published.{sorted(extra)[0]}", "unknown field")
    for key in ("params", "checkpoint_bytes"):
        if key in pub and (type(pub[key]) is not int or pub[key] <= 0):
            raise ShapecalcError(f"published.{key}", "must be a positive integer")
    for key in ("source", "checkpoint_source"):
        if key in pub and not isinstance(pub[key], str):
            raise ShapecalcError(f"published.{key}", "must be a string")
    if not isinstance(wl, dict):
        raise ShapecalcError("workload", "must be a table of workload fields")
    unknown = sorted(set(wl) - set(Workload.field_info()))
    if unknown:  # a typo would leave the default in silently
        raise ShapecalcError(f"workload.{files.escape_controls(unknown[0])}",
                             f"unknown field{did_you_mean(unknown[0], Workload.field_info())}")
    return data, pub, wl


def load_config_file(path: str | Path) -> tuple[ModelConfig, dict]:
    """A TOML/JSON model file → (model, raw [workload] table or {}). [published] is dropped."""
    path = Path(path)
    data = _parse(path, "config")
    if "model_type" in data:
        raise ShapecalcError(
            "config", f"{files.shown(path)}: looks like a Hugging Face config.json; use --hf-config"
        )
    fields, _, wl = _split(data)
    for cls, table, at in ((ModelConfig, fields, ""), (Workload, wl, "workload.")):
        quoted = cls.quoted_number(table)
        if quoted:  # lax validation would read "32" as 32
            raise ShapecalcError(f"{at}{quoted}", f"{files.shown(path)}: must be a number, not a "
                                 "string")
    fields.setdefault("name", files.escape_controls(path.stem))
    try:
        return ModelConfig.model_validate(fields), wl
    except ValidationError as err:
        raise first_error(err) from None


def published(name_or_path: str | Path) -> dict:
    """The [published] table of a preset name or a config file ({} when it has none)."""
    p = Path(name_or_path)
    if not files.path_is(p.is_file):
        p = _preset_path(str(name_or_path), None)
    _, pub, _ = _split(_parse(p, "config"))
    return pub


# ── --set field=value ────────────────────────────────────────────────────────────────────────────


def apply_overrides(model: ModelConfig, items: list[str]) -> ModelConfig:
    """Apply repeatable `--set field=value` (value read as JSON when it parses, else a string)."""
    changes: dict[str, Any] = {}
    each_once(items, "set")
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ShapecalcError("set", f"expected field=value, got {item!r}")
        info = ModelConfig.field_info().get(key)
        if info is None:
            raise ShapecalcError("set", f"unknown field {key!r}")
        text = text.strip()
        value: Any = text
        if info.annotation is not str:
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                pass
        changes[key] = value
    try:
        return ModelConfig.model_validate({**model.model_dump(exclude_unset=False), **changes})
    except ValidationError as err:
        raise first_error(err) from None
