"""Records validated by pydantic-core: frozen, with the few pydantic BaseModel methods we use.

pydantic v2's validation engine, without pydantic's model machinery: importing and building that
costs more start-up than `shapecalc trace --json` may spend in all (see
benchmarks/bench_startup.py). ModelConfig, Workload and the GPU profiles are such records.
"""

from __future__ import annotations

import inspect
import sys
from types import UnionType
from typing import (
    Annotated,
    Any,
    ClassVar,
    Literal,
    NamedTuple,
    Union,
    get_args,
    get_origin,
)

from pydantic_core import PydanticCustomError, SchemaValidator


class _Positive:
    """Marks an int that must be > 0."""


class _NonNegative:
    """Marks an int that must be ≥ 0."""


INT_MAX = 2**63 - 1  # the largest count (batch, seq, widths, …): int64's, as sweep's grids hold
Pos = Annotated[int, _Positive]
PosFloat = Annotated[float, _Positive]
NonNeg = Annotated[int, _NonNegative]


class FieldInfo(NamedTuple):
    annotation: Any
    default: Any
    description: str


class _Spec(NamedTuple):
    default: Any
    doc: str


MISSING: Any = object()  # marks a required field


def _doc(default: Any, description: str = "") -> Any:
    return _Spec(default, description)


def _req(description: str) -> Any:
    return _Spec(MISSING, description)


def _core_schema(tp: Any, wrap: bool = True) -> dict[str, Any]:
    """The pydantic-core schema of one annotation (the few kinds our configs use). `wrap`: ints
    and floats refuse booleans (see _number); the JSON Schema reads the plain schema."""
    if get_origin(tp) is Annotated:
        base, *marks = get_args(tp)
        schema = _core_schema(base, wrap=False)
        if _Positive in marks:
            schema["gt"] = 0
        if _NonNegative in marks:
            schema["ge"] = 0
        if schema["type"] == "int":  # a count: NumPy grids hold it in int64
            schema["le"] = INT_MAX
        return _number(schema) if wrap else schema
    if get_origin(tp) in (Union, UnionType):
        inner = [a for a in get_args(tp) if a is not type(None)]
        return {"type": "nullable", "schema": _core_schema(inner[0], wrap)}
    if get_origin(tp) is Literal:
        return {"type": "literal", "expected": list(get_args(tp))}
    if isinstance(tp, type) and issubclass(tp, Record):  # a nested record: a table of fields
        return tp._typed_dict()
    if get_origin(tp) is tuple:  # tuple[X, ...]: a JSON list, kept as a (hashable) tuple
        return {"type": "tuple", "items_schema": [_core_schema(get_args(tp)[0], wrap)],
                "variadic_item_index": 0}
    if tp is str:  # names reach the terminal: no control characters (ESC, NUL, newlines), no
        # bidirectional overrides (text that reads in another order than it is)
        return {"type": "str", "pattern": r"^[^\p{Cc}\x{202A}-\x{202E}\x{2066}-\x{2069}]*$"}
    plain: dict[str, Any] = {"type": {int: "int", bool: "bool", float: "float"}[tp]}
    if tp is float:
        plain["allow_inf_nan"] = False  # inf or nan is no size, and JSON has neither
    return _number(plain) if wrap else plain


def _number(schema: dict[str, Any]) -> dict[str, Any]:
    """An int or float schema that refuses booleans: lax mode reads `true` as 1, which would
    make `n_layers = true` one layer, silently."""
    if schema["type"] not in ("int", "float"):
        return schema
    return {"type": "function-before", "schema": schema,
            "function": {"type": "no-info", "function": _not_bool}}


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("bool_number", "expected a number, not the boolean {value}",
                                  {"value": str(value).lower()})
    return value


def _json_schema(tp: Any) -> dict[str, Any]:
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.model_json_schema()
    core = _core_schema(tp, wrap=False)
    if core["type"] == "nullable":
        return {"anyOf": [_json_schema(get_args(tp)[0]), {"type": "null"}]}
    if core["type"] == "literal":
        return {"enum": core["expected"], "type": "string"}
    if core["type"] == "tuple":
        return {"type": "array", "items": _json_schema(get_args(tp)[0])}
    out: dict[str, Any] = {
        "type": {"int": "integer", "bool": "boolean", "str": "string",
                 "float": "number"}[core["type"]]
    }
    if "gt" in core:
        out["exclusiveMinimum"] = 0
    if "ge" in core:
        out["minimum"] = 0
    return out


def _hints(cls: type) -> dict[str, Any]:
    """What `get_type_hints(cls, include_extras=True)` gives, each distinct annotation text of a
    class evaluated once: get_type_hints compiles every one, and ModelConfig's 154 fields have 31
    texts (~2 ms of each start-up). The same scopes: the module's globals, the class's names."""
    hints: dict[str, Any] = {}
    for base in reversed(cls.__mro__):  # a subclass's annotation wins, as in get_type_hints
        scope, done = dict(vars(base)), {}
        for name, text in inspect.get_annotations(base).items():
            if isinstance(text, str) and text not in done:
                done[text] = eval(text, vars(sys.modules[base.__module__]), scope)
            hints[name] = done[text] if isinstance(text, str) else text
    return hints


class Record:
    """A frozen record validated by pydantic-core. Fields are class annotations with
    `_doc()`/`_req()` values; a field may be another Record (a nested table)."""

    _field_cache: ClassVar[dict[str, FieldInfo]]
    _validator: ClassVar[Any] = None

    @classmethod
    def field_info(cls) -> dict[str, FieldInfo]:
        """Each field's annotation, default (MISSING if required) and description."""
        if "_field_cache" not in cls.__dict__:
            hints = _hints(cls)
            spec: dict[str, _Spec] = {}
            names: dict[str, None] = {}  # fields in order, a base's first
            for base in reversed(cls.__mro__):
                spec |= {k: v for k, v in vars(base).items() if isinstance(v, _Spec)}
                names |= dict.fromkeys(inspect.get_annotations(base))
            cls._field_cache = {
                name: FieldInfo(hints[name], spec[name].default, spec[name].doc)
                for name in names
                if name in spec
            }
        return cls._field_cache

    @classmethod
    def _schema_validator(cls) -> Any:
        if cls.__dict__.get("_validator") is None:
            cls._validator = SchemaValidator(cls._typed_dict())
        return cls._validator

    @classmethod
    def _typed_dict(cls) -> dict[str, Any]:
        flds = {}
        for name, info in cls.field_info().items():
            inner = _core_schema(info.annotation)
            if info.default is MISSING:
                flds[name] = {"type": "typed-dict-field", "schema": inner, "required": True}
            else:
                flds[name] = {
                    "type": "typed-dict-field",
                    "schema": {"type": "default", "schema": inner, "default": info.default},
                    "required": False,
                }
        return {"type": "typed-dict", "fields": flds, "extra_behavior": "forbid"}

    def __init__(self, **data: Any):
        fields = self.field_info()
        data = {k: v.model_dump() if isinstance(v, Record) else v for k, v in data.items()}
        for k, v in self._schema_validator().validate_python(data).items():
            kind = fields[k].annotation
            if get_origin(kind) in (Union, UnionType):  # `Table | None`: the table's record
                kind = next(a for a in get_args(kind) if a is not type(None))
            if isinstance(v, dict) and isinstance(kind, type) and issubclass(kind, Record):
                v = kind(**v)
            object.__setattr__(self, k, v)
        self._check()

    def _check(self) -> None:
        """Rules across fields; raise ShapecalcError naming the field."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen; use model_copy(update=...)")

    def __eq__(self, other: object) -> bool:
        # what `self.model_dump() == other.model_dump()` says, without building the two dicts
        # (~60 µs for a 150-field model; the caches keyed on a model record compare equal records
        # on every hit): one dict comparison in C, or field by field where one is hashed
        if other is self:
            return True
        if type(other) is not type(self):
            return False
        da, db = self.__dict__, other.__dict__  # the fields, and _hash once hashed
        if da.keys() == db.keys():  # both hashed or neither: equal fields have equal hashes
            return da == db
        for k in self.field_info():
            a, b = getattr(self, k), getattr(other, k)
            if a is not b and not a == b:
                return False
        return True

    def __hash__(self) -> int:
        # kept: a frozen record's hash never changes, and the caches keyed on a model record
        # (layer_plan, the closed forms) hash it on every call
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, k) for k in self.field_info()))
            object.__setattr__(self, "_hash", h)
        return h

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.model_dump().items())
        return f"{type(self).__name__}({args})"

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> Any:
        """Validate a mapping (unknown keys refused) and build the object."""
        return cls(**data)

    def model_dump(self, exclude: set[str] | None = None, **_: Any) -> dict[str, Any]:
        return {k: (v.model_dump() if isinstance(v := getattr(self, k), Record) else v)
                for k in self.field_info() if not exclude or k not in exclude}

    def model_copy(self, update: dict[str, Any] | None = None) -> Any:
        return type(self)(**{**self.model_dump(), **(update or {})})

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        props: dict[str, Any] = {}
        required = []
        for name, info in cls.field_info().items():
            prop = _json_schema(info.annotation)
            if info.description:
                prop["description"] = info.description
            if info.default is MISSING:
                required.append(name)
            else:
                prop["default"] = info.default
            props[name] = prop
        return {
            "title": cls.__name__,
            "description": (cls.__doc__ or "").strip(),
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }



    @classmethod
    def quoted_number(cls, data: Any, prefix: str = "") -> str | None:
        """The first field (dotted, nested records included) whose value in `data` is a
        string where the field is a number: lax validation would read `n_layers = "32"` as 32.
        Files are checked with it (a file's number is written as one); flags, `--set` and case
        fields are text and keep the lax reading."""
        if not isinstance(data, dict):
            return None
        for k, v in data.items():
            info = cls.field_info().get(k)
            if info is None:
                continue
            tp = _unwrap(info.annotation)
            if isinstance(tp, type) and issubclass(tp, Record):
                hit = tp.quoted_number(v, f"{prefix}{k}.")
                if hit:
                    return hit
            elif tp in (int, float) and isinstance(v, str):
                return f"{prefix}{k}"
        return None


def _unwrap(tp: Any) -> Any:
    """The type under Annotated[...] and Optional[...]."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif get_origin(tp) in (Union, UnionType):
            tp = next(a for a in get_args(tp) if a is not type(None))
        else:
            return tp
