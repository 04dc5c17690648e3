"""`dataclass` without the code it compiles: for the classes a command defines at start-up.

`dataclasses.dataclass` writes `__init__`, `__repr__`, `__eq__`, `__hash__` and the frozen
`__setattr__`/`__delattr__` as source and compiles each at every start: on Python 3.11 about
1.7 ms a class, 17 classes on `serve`'s path (~7% of its start-up; benchmarks/bench_startup.py).
Here those methods are this module's, written once (in the bytecode cache); the class is still a
dataclass (`fields`, `replace` and `asdict` work, `field(...)` and `KW_ONLY` too) with the same
semantics as `dataclasses.dataclass(frozen=...)`: eq and hash over the compared fields, frozen
instances refuse assignment, `__post_init__` runs last. An instance costs a few µs more to make,
so a class made per request (serve's Request) keeps the stdlib's.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

C = TypeVar("C", bound=type)
_MISSING: Any = dataclasses.MISSING


@dataclass_transform(field_specifiers=(dataclasses.field,))
def dataclass(cls: C | None = None, /, *, frozen: bool = False) -> Any:
    """As `dataclasses.dataclass(cls, frozen=frozen)` (eq, repr and init on)."""

    def wrap(c: C) -> C:
        if not c.__doc__:  # dataclasses would make one of inspect.signature (it tokenizes)
            c.__doc__ = f"{c.__name__}({', '.join(inspect.get_annotations(c))})"
        dataclasses.dataclass(c, init=False, repr=False, eq=False)  # its fields only: no code
        _methods(c, frozen)
        return c

    return wrap if cls is None else wrap(cls)


def _methods(c: type, frozen: bool) -> None:
    fields = dataclasses.fields(c)
    inits = [f for f in fields if f.init]
    positional = tuple(f.name for f in inits if not f.kw_only)
    # (name, default, factory) in the order dataclasses' __init__ takes them
    spec = tuple((f.name, f.default, f.default_factory)
                 for f in sorted(inits, key=lambda f: bool(f.kw_only)))
    names = {f.name for f in inits}
    shown = tuple(f.name for f in fields if f.repr)
    compared = tuple(f.name for f in fields if f.compare)
    post = getattr(c, "__post_init__", None)
    name = c.__qualname__
    put = object.__setattr__

    def __init__(self: Any, *args: Any, **kw: Any) -> None:
        if len(args) > len(positional):
            raise TypeError(f"{name}.__init__() takes {len(positional) + 1} positional "
                            f"arguments but {len(args) + 1} were given")
        for k in kw:
            if k not in names:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument {k!r}")
        given = dict(zip(positional, args, strict=False))
        for k in kw:
            if k in given:
                raise TypeError(f"{name}.__init__() got multiple values for argument {k!r}")
        given.update(kw)
        for k, default, factory in spec:
            if k in given:
                put(self, k, given[k])
            elif default is not _MISSING:
                put(self, k, default)
            elif factory is not _MISSING:
                put(self, k, factory())  # type: ignore[operator]
            else:
                raise TypeError(f"{name}.__init__() missing 1 required argument: {k!r}")
        if post is not None:
            post(self)

    def __repr__(self: Any) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(
            f"{k}={getattr(self, k)!r}" for k in shown) + ")"

    def key(self: Any) -> tuple[Any, ...]:  # as a tuple, so identical NaNs compare equal too
        return tuple(getattr(self, k) for k in compared)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return key(self) == key(other)

    methods: dict[str, Callable[..., Any] | None] = {
        "__init__": __init__, "__repr__": __repr__, "__eq__": __eq__}
    if frozen:
        def __setattr__(self: Any, k: str, value: Any) -> None:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {k!r}")

        def __delattr__(self: Any, k: str) -> None:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {k!r}")

        def __hash__(self: Any) -> int:
            return hash(key(self))

        methods.update(__setattr__=__setattr__, __delattr__=__delattr__, __hash__=__hash__)
    elif "__hash__" not in c.__dict__ or c.__dict__["__hash__"] is None:
        methods["__hash__"] = None  # eq without frozen: unhashable, as dataclasses makes it
    for k, fn in methods.items():
        if fn is not None:
            fn.__qualname__ = f"{name}.{k}"
        setattr(c, k, fn)
    # dataclasses.replace and friends read the parameters: say what the class now behaves as
    params = c.__dataclass_params__  # type: ignore[attr-defined]
    for k, v in (("init", True), ("repr", True), ("eq", True), ("frozen", frozen)):
        object.__setattr__(params, k, v)
