"""The one home of the quantities that parallelism derives: how tensor parallelism shards KV
heads, the bytes a KV cache holds per token, ring all-reduce traffic, how pipeline stages split
the layers, and bytes of a parameter count. Trace, closed form, planning and verify import them."""

from __future__ import annotations

from .config import ceil_div


def pp_layers(n_layers: int, s: int) -> list[int]:
    """Layers per pipeline stage, as vLLM splits them: the remainder goes to the stages just
    before the last one (the last already holds the final norm and LM head)."""
    parts = [n_layers // s] * s
    for i in range(2, n_layers % s + 2):
        parts[-i] += 1
    return parts


def ring_allreduce_bytes(nbytes: int, p: int) -> int:
    """Bytes one rank sends in a ring all-reduce of an `nbytes` buffer over p ranks:
    reduce-scatter then all-gather, each p−1 steps of one ⌈nbytes/p⌉ chunk."""
    return 2 * (p - 1) * ceil_div(nbytes, p) if p > 1 else 0
