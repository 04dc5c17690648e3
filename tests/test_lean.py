"""shapecalc.lean.dataclass behaves as dataclasses.dataclass, without the code it compiles."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import KW_ONLY, asdict, field, fields, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shapecalc import lean


def _pair(frozen: bool) -> tuple[type, type]:
    """The same class made by the stdlib and by lean."""

    def make(deco: Any) -> type:
        @deco
        class Point:
            x: int
            y: float = 1.5
            tags: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
            _: KW_ONLY
            name: str = "p"

            def __post_init__(self) -> None:
                object.__setattr__(self, "y", self.y * 2)  # a derived value, as PerfParams does

        return Point

    return (make(dataclasses.dataclass(frozen=frozen)), make(lean.dataclass(frozen=frozen)))


@given(st.integers(), st.floats(allow_nan=True), st.text(max_size=5), st.booleans())
def test_same_values_repr_eq_hash_and_replace(x: int, y: float, name: str, frozen: bool) -> None:
    std, mine = _pair(frozen)
    a, b = std(x, y, name=name), mine(x, y, name=name)
    assert repr(a) == repr(b)
    assert asdict(a) == asdict(b) or math.isnan(y)
    assert [f.name for f in fields(a)] == [f.name for f in fields(b)]
    # equality as the stdlib's: a tuple of the compared fields (an identical NaN is equal)
    assert (a == a) == (b == b) and (a == std(x, y, name=name)) == (b == mine(x, y, name=name))
    assert (b == mine(x + 1, y, name=name)) is False
    assert b != a  # another class: never equal
    assert repr(replace(a, x=x + 1)) == repr(replace(b, x=x + 1))
    if frozen:
        assert hash(b) == hash(mine(x, y, {"ignored": 1}, name=name)) or math.isnan(y)
        for obj in (a, b):
            with pytest.raises(dataclasses.FrozenInstanceError):
                obj.x = 3  # type: ignore[misc]
            with pytest.raises(dataclasses.FrozenInstanceError):
                del obj.x  # type: ignore[misc]
    else:
        assert type(a).__hash__ is None and type(b).__hash__ is None  # eq without frozen
        b.x = x + 1
        assert b.x == x + 1


@pytest.mark.parametrize("frozen", [True, False])
def test_same_errors(frozen: bool) -> None:
    for cls in _pair(frozen):
        with pytest.raises(TypeError, match="missing"):
            cls()
        with pytest.raises(TypeError, match="positional"):
            cls(1, 2.0, {}, "too many")
        with pytest.raises(TypeError, match="unexpected keyword"):
            cls(1, z=3)
        with pytest.raises(TypeError, match="multiple values"):
            cls(1, x=2)
        assert cls(1).tags == {} and cls(1).tags is not cls(1).tags  # a fresh factory value


def test_no_code_compiled() -> None:
    """The point of it: lean writes no source (dataclasses' _create_fn compiles each method)."""
    made: list[str] = []
    real = dataclasses._create_fn  # type: ignore[attr-defined]

    def spy(*args: Any, **kw: Any) -> Any:
        made.append(args[0])
        return real(*args, **kw)

    dataclasses._create_fn = spy  # type: ignore[attr-defined]
    try:
        @lean.dataclass(frozen=True)
        class Lean:
            a: int

        assert made == []
        dataclasses.dataclass(frozen=True)(type("Std", (), {"__annotations__": {"a": "int"}}))
        assert {"__init__", "__repr__", "__eq__", "__setattr__"} <= set(made)  # the spy sees
    finally:
        dataclasses._create_fn = real  # type: ignore[attr-defined]


def test_a_class_without_docstring_gets_one() -> None:
    @lean.dataclass
    class Bare:
        a: int

    assert Bare.__doc__ == "Bare(a)"
    assert Bare(1) == Bare(a=1)
