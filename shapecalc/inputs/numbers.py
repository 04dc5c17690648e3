"""Numbers typed by hand (grid values, --perf terms, SLO times, lengths): int() and float() read
any Unicode decimal digit (٣ and ３ as 3), which no one means to type and a terminal shows as
something else than what runs, so these are ASCII. The flags' own ints and floats: cli/digits.py."""

from __future__ import annotations

from ..model.errors import ShapecalcError
from ..model.record import INT_MAX

ASCII_DIGITS = "digits must be ASCII 0-9"


def parse_number(text: str, field: str) -> float:
    """A float: ASCII digits only."""
    if not text.isascii():
        raise ShapecalcError(field, f"{text!r}: {ASCII_DIGITS}")
    try:
        return float(text)
    except ValueError:
        raise ShapecalcError(field, f"{text!r} is not a number") from None


def pos_int(s: str, field: str, whole: str) -> int:
    """A count in 1..2⁶³−1 (`_` as a digit separator), part of the value `whole`."""
    s = s.strip().replace("_", "")
    try:
        if not s.isascii():
            raise ValueError
        v = int(s)
    except ValueError:
        raise ShapecalcError(field, f"{s!r} in {whole!r} is not an integer" + (
            "" if s.isascii() else f": {ASCII_DIGITS}")) from None
    if v < 1:
        raise ShapecalcError(field, f"{v} in {whole!r} must be ≥ 1")
    if v > INT_MAX:
        raise ShapecalcError(field, f"{v} in {whole!r} must be at most 2⁶³−1 = {INT_MAX}")
    return v


def bounded(v: float, field: str, lo: float, hi: float, what: str = "", key: str = "") -> float:
    """A value already read (a flag, a file's field) within [lo, hi]: the one range check, so
    no count allocates or loops without bound and no rate or ratio divides into inf/0. A bool
    (JSON `true`) is not a number; NaN and ±inf are outside every range."""
    unit, name = f" {what}" if what else "", f"{key}: " if key else ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ShapecalcError(field, f"{name}{v!r} is not a number")
    if not (lo <= v <= hi):  # False for NaN
        raise ShapecalcError(field, f"{name}must be in [{lo:g}, {hi:g}]{unit}, got {v!r}")
    return v


def bounded_int(v: object, field: str, lo: int, hi: int, what: str = "", key: str = "") -> int:
    """An integer within [lo, hi]; a bool or a float (2.7, 2.0) is refused, not truncated.
    `key`: what the value is inside the field (a file's record and key), said first."""
    unit, name = f" {what}" if what else "", f"{key}: " if key else ""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ShapecalcError(field, f"{name}{v!r} is not an integer")
    if not (lo <= v <= hi):
        raise ShapecalcError(field, f"{name}must be in [{lo:,}, {hi:,}]{unit}, got {v:,}")
    return v


def named_numbers(items: list[str] | tuple[str, ...] | None, field: str,
                  names: tuple[str, ...]) -> list[tuple[str, float, str]]:
    """Repeatable `NAME=VALUE` flags (--perf, --fw-term): (name, number, text) each, the name one
    of `names`, each given once, the number through the bounded parser; the caller checks its
    range."""
    each_once(items, field)
    out = []
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in names:
            raise ShapecalcError(field, f"expected NAME=VALUE with NAME one of {', '.join(names)}"
                                 f", got {item!r}")
        out.append((key, parse_number(text, f"{field}.{key}"), text))
    return out


def each_once(items: list[str] | tuple[str, ...] | None, field: str) -> None:
    """Repeatable `KEY=VALUE` flags (--set, --set-gpu, --perf): a key given twice is refused,
    not the first value silently dropped for the last."""
    seen: dict[str, str] = {}
    for item in items or ():
        key = item.partition("=")[0].strip()
        if key in seen:
            raise ShapecalcError(field, f"{key} is given twice ({seen[key]!r}, {item!r}): give "
                                 "each once")
        seen[key] = item
