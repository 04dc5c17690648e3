"""Output schemas declared as rows: (key, type, what it means[, default]), one row a key.

`described` makes a pydantic model from the rows (extra keys forbidden) whose JSON Schema
carries every key's description, so `shapecalc schema NAME` documents each key it validates.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, create_model, field_validator
from pydantic import Field as PydField

from ..model.config import ModelConfig, Workload


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkloadChecked(Strict):
    """An output whose `workload` dict must be a valid Workload (its own schema)."""

    @field_validator("workload", check_fields=False)
    @classmethod
    def _workload(cls, v: dict[str, Any]) -> dict[str, Any]:
        Workload.model_validate(v)
        return v


class RecordsChecked(WorkloadChecked):
    """An output whose `model` dict must be a valid ModelConfig too."""

    @field_validator("model", check_fields=False)
    @classmethod
    def _model(cls, v: dict[str, Any]) -> dict[str, Any]:
        ModelConfig.model_validate(v)
        return v


def described(name: str, doc: str, *rows: tuple[Any, ...],
              base: type[BaseModel] = Strict) -> Any:
    """A model named `name`, documented `doc`; a row of four has a default (an optional key)."""
    fields: dict[str, Any] = {}
    for key, typ, desc, *default in rows:
        assert desc, f"{name}.{key}: a key needs a description"
        fields[key] = (typ, PydField(*default, description=desc))
    return create_model(name, __base__=base, __doc__=doc, **fields)


def d(text: str, *default: Any) -> Any:
    """A field's description (and default) in a model written as a class: `x: int = d("...")`."""
    assert text, "a key needs a description"
    return PydField(*default, description=text)


def many(model: Any) -> Any:
    """list[model] for a model `described` made (a value to mypy, not a type)."""
    return list.__class_getitem__(model)


def inline(schema: dict[str, Any], key: str, model: Any, where: str | None = None) -> None:
    """Put model's whole schema at property `key` (of the root, or of the definition `where`):
    a dict the output carries, such as the model's fields; its description kept and its
    definitions moved to the root."""
    sub = dict(model.model_json_schema())
    schema.setdefault("$defs", {}).update(sub.pop("$defs", {}))
    props = (schema if where is None else schema["$defs"][where])["properties"]
    desc = props[key].get("description")
    props[key] = {**sub, **({"description": desc} if desc else {})}
