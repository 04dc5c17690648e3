"""The one error a bad input raises; every command turns it into exit code 2 and one line."""

from __future__ import annotations


class ShapecalcError(Exception):
    """A bad input: `field` names what the user gave, `reason` says why it cannot be used."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
