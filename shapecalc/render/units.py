"""Numbers as people read them: decimal FLOPs and counts, binary bytes (KiB, MiB, GiB)."""

from __future__ import annotations

import math
from typing import Any

from ..model.errors import plural  # noqa: F401  (the render layer's name for it)


def _scaled(n: int, units: tuple[tuple[str, int], ...], suffix: str, plain: str) -> str:
    """n with the largest prefix not above it, to 2 decimals (`1.28 MFLOP`), else `plain`."""
    for unit, scale in units:
        if n >= scale:
            return f"{n / scale:.2f} {unit}{suffix}"
    return plain


_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6),
            ("k", 10**3))
_BINARY = (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_COUNT = (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3))


def human_flops(n: int) -> str:
    """Decimal prefixes for FLOPs (k, M, G, T, P, E)."""
    return _scaled(n, _DECIMAL, "FLOP", f"{n} FLOP")


def human_bytes(n: int) -> str:
    """Binary prefixes, said as such: KiB, MiB, GiB, TiB, PiB."""
    return _scaled(n, _BINARY, "", f"{n} B")


def human_count(n: int) -> str:
    return _scaled(n, _COUNT, "", str(n))


def exact_bytes(n: int) -> str:
    return f"{n:,} B ({human_bytes(n)})" if n >= 1024 else f"{n:,} B"


def human_time(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


def human_rate(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:,.1f}" if x < 1e6 else f"{x:.3g}"


def money(x: float | None) -> str:
    return "—" if x is None else f"${x:,.4g}"


def fmt_value(kind: str, v: Any) -> str:
    """One value of a table cell by its kind: bytes, flops, count, int, time, rate, money, …"""
    if v is None:
        return "—"
    if kind == "bytes":
        return human_bytes(int(v))
    if kind == "flops":
        return human_flops(int(v)) if isinstance(v, int) else human_flops(round(v))
    if kind == "count":
        return human_count(int(v))
    if kind == "int":
        return f"{int(v):,}"
    if kind == "time":
        return human_time(v)
    if kind == "rate":
        return human_rate(v)
    if kind == "money":
        return money(v)
    if kind == "float":
        return f"{v:,.3g}"
    if kind == "bool":
        return "yes" if v else "no"
    return str(v)
