"""Numbers as people read them (decimal FLOPs, binary bytes) and the console tables print to."""

from __future__ import annotations

from rich.console import Console


def make_console() -> Console:
    """A terminal keeps its width; a pipe or file gets room for the whole table."""
    c = Console()
    return c if c.is_terminal else Console(width=200)


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
