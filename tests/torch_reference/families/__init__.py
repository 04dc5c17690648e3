"""The families of reference cases, by name (each a families/<name>.py holding FAMILY)."""

from __future__ import annotations

from . import alibi, classic, flops, gemma, llama4, mla, moe
from .family import Family

FAMILIES: dict[str, Family] = {
    m.FAMILY.name: m.FAMILY for m in (flops, alibi, classic, gemma, llama4, mla, moe)
}
