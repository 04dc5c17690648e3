"""Hugging Face config.json → ModelConfig: one generic reader over the table of families
(hf_families.py), then the audit of the keys the family leaves unread (hf_keys.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..model.config import ModelConfig, ShapecalcError, first_error
from . import files, hf_keys, hf_quant, hf_render
from .hf_base import HF as _HF
from .hf_families import FAMILIES, SUPPORTED
from .sources import _parse
from .unsupported import Unsupported

__all__ = ["SUPPORTED", "_HF", "Unsupported", "load_hf_config", "read_family"]
# the keys of each config.json read (by model name) that no family reads: trace's notes
UNREAD: dict[str, list[str]] = {}
# families that need what shapecalc does not model yet: the one line each is refused with
REFUSED: dict[str, str] = {}


def read_family(h: _HF, mt: str) -> dict[str, Any]:
    """The fields model_type `mt`'s entry reads from `h`: its refusals, its mechanisms in
    order, its fixed fields; then the audit of the keys it leaves unread (hf_keys.py): a
    shape-changing key no mechanism reads is refused, never ignored."""
    family = FAMILIES[mt]
    h.family = family
    h.cfg = {**family.widths, **h.cfg}
    h.refusals()
    fields: dict[str, Any] = {}
    for m in family.mechanisms:
        try:
            m.read(h, fields)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError) as e:
            # a value of a kind no check above caught (a list where a reader multiplies): one
            # line naming the key that is of another kind than its family's default, never a
            # traceback
            raise h.wrong_kind(e) from None
    fields.update(family.fixed)
    hf_keys.audit(h.cfg, mt, family.reads | family.ignored)
    return fields


def load_hf_config(path: str | Path) -> ModelConfig:
    """A Hugging Face config.json (or the folder holding one) → ModelConfig."""
    path = Path(path)
    if files.path_is(path.is_dir):
        path = path / "config.json"
    cfg = _parse(path, "hf-config")
    mt, known = cfg.get("model_type"), ", ".join(SUPPORTED)
    if mt is None:
        raise ShapecalcError("model_type", f"missing from {files.shown(path)}; supported: {known}")
    text = cfg.get("text_config")
    inner = text.get("model_type") if isinstance(text, dict) else None
    for key, x in (("model_type", mt), ("text_config.model_type", inner)):
        if x is not None and not isinstance(x, str):  # a family's name: looked up, hashed
            raise ShapecalcError(key, f"must be a family's name (a string), not {x!r}")
    mt, inner = (x if isinstance(x, str) else repr(x) for x in (mt, inner))
    where = f"{mt!r}" + (f" (its text_config: {inner!r})" if isinstance(text, dict) else "")
    if mt in REFUSED or inner in REFUSED:
        raise ShapecalcError("model_type", f"{where} needs {REFUSED.get(mt) or REFUSED[inner]}")
    multimodal = mt not in SUPPORTED and inner in SUPPORTED and isinstance(text, dict)
    if multimodal and isinstance(text, dict):
        # a multimodal config: the decoder is its text model (the vision side is not counted);
        # tie_word_embeddings may sit at the top
        tied = {k: cfg[k] for k in ("tie_word_embeddings",) if k in cfg}
        cfg, mt = {**tied, **text}, inner
    elif mt not in SUPPORTED:
        raise Unsupported(path, where, known, cfg)
    else:  # a text model's own config: a text_config beside it must agree (hf_render.py)
        hf_render.check_text_config(cfg, mt)
    fields = read_family(_HF(cfg), mt)
    unread = hf_keys.unread(cfg, _known())
    fields["quantization"] = hf_quant.read(_parse(path, "hf-config"))  # the top's config
    # Say only what differs from the defaults, so a loaded config reads like a preset.
    heads, d = fields["n_heads"], fields["d_model"]
    if isinstance(heads, int) and fields.get("n_kv_heads") == heads:
        fields["n_kv_heads"] = None
    if isinstance(heads, int) and isinstance(d, int) and d % heads == 0:
        if fields.get("head_dim") == d // heads:
            fields["head_dim"] = None
    stem = path.stem if path.stem != "config" else path.resolve().parent.name
    fields["name"] = files.escape_controls(stem) or "custom"
    if multimodal:  # the line that says what was read
        fields["name"] += " (text_config of a multimodal config; the vision tower is not counted)"
    if unread:
        UNREAD[fields["name"]] = unread
    try:
        return ModelConfig.model_validate(fields)
    except ValidationError as err:
        e = first_error(err)
        raise ShapecalcError(e.field, f"{e.reason} (read from {files.shown(path)})") from None


def _known() -> frozenset[str]:
    """Every key some family reads, ignores, defaults or aliases."""
    keys: set[str] = set()
    for f in FAMILIES.values():
        keys |= f.reads | f.ignored | set(f.defaults) | set(f.widths)
        keys |= set(f.aliases) | {a for v in f.aliases.values() for a in v}
    return frozenset(keys)


def notes(model: ModelConfig) -> list[str]:
    """What a report should say about how `model` was read: keys its config.json gave that no
    reader reads (assumed to change no shape)."""
    keys = UNREAD.get(model.name)
    shown = ", ".join(files.escape_controls(k) for k in keys or ())
    return [f"keys not read (assumed to change no shape): {shown}"] if keys else []
