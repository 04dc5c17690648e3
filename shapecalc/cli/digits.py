"""Numbers on the command line are ASCII: Python's int() and float() read any Unicode decimal
digit (`--batch ٣` and the fullwidth `--batch ３` were batch 3), which no one means to type and
which a terminal shows as something else than what runs. Each int and float option and argument
of a command refuses them in one line naming the flag (click's "Invalid value for '--batch'"),
and keeps click's messages for every other value. Grids (`--batch 1,8..64x2`) are checked where
they are parsed (plan/cases.py)."""

from __future__ import annotations

from typing import Any

from ..inputs.numbers import ASCII_DIGITS as REASON


def _convert(self: Any, value: Any, param: Any, ctx: Any) -> Any:
    if isinstance(value, str) and not value.isascii():
        from typer.core import _click

        kind = "integer" if isinstance(self, _click.types.IntParamType) else "number"
        self.fail(f"{value!r} is not a valid {kind}: {REASON}", param, ctx)
    return super(type(self), self).convert(value, param, ctx)


_ASCII: dict[type, type] = {}


def ascii_numbers(cmd: Any) -> None:
    """Make the int and float parameters of `cmd` (not its subcommands) refuse non-ASCII."""
    from typer.core import _click

    number = (_click.types.IntParamType, _click.types.FloatParamType)
    for p in getattr(cmd, "params", ()):
        t = p.type
        if not isinstance(t, number) or type(t) in _ASCII.values():
            continue
        cls = type(t)
        if cls not in _ASCII:
            _ASCII[cls] = type(cls.__name__, (cls,), {"convert": _convert})
        new: Any = object.__new__(_ASCII[cls])
        new.__dict__.update(t.__dict__)
        p.type = new
