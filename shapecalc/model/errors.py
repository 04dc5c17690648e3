"""The one error a bad input raises; every command turns it into exit code 2 and one line. And
how a count reads in such a line (or any other): `plural`."""

from __future__ import annotations


class ShapecalcError(Exception):
    """A bad input: `field` names what the user gave, `reason` says why it cannot be used."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 GPU`, `2 GPUs`, `1 replica`: the count and its noun, agreeing."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
