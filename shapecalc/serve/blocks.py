"""vLLM V1's hybrid KV cache manager, as one replica's scheduler counts it.

vLLM (vllm/v1/core/kv_cache_utils.py) puts the layers that attend alike into KV cache groups
(full, each sliding window W, each chunk C; a stateful mixer's layers form their own), every
group drawing its blocks from one pool; single_type_kv_cache_manager.py gives each group's use:

- FullAttentionManager: a sequence of N token slots holds ⌈N/bs⌉ blocks;
- SlidingWindowManager.remove_skipped_blocks(num_computed_tokens = c): the blocks wholly before
  token c − W + 1 are freed (replaced by the null block), so it holds ⌈N/bs⌉ − ⌊(c−W+1)/bs⌋;
- ChunkedLocalAttentionManager: the blocks before the current chunk's start ⌊c/C⌋·C are freed;
- MambaManager: one block (the state) a running sequence, whatever its length.

allocate_slots removes the skipped blocks before it allocates, so a step on c computed tokens
that needs slots for N holds `own(c, N)`. Here the pool is bytes: a block of group g is bs token
slots of its layers on one rank of the fullest pipeline stage, a state slot the sequence's state
bytes (model/ totals, state_bytes@kind, in the deployment's dtypes); units are their gcd, so a
full-attention model's unit is fit's block and every count is today's. (vLLM pads groups to
equal layer counts and page sizes; the bytes are counted here as the layers hold them.)
"""

from __future__ import annotations

import math

from ..lean import dataclass
from ..model.plan import Chunk, Reach


@dataclass(frozen=True)
class Layout:
    """The groups of one replica's pool, in units of `unit` bytes."""

    block_size: int
    reaches: tuple[Reach, ...]  # each KV group's window: None full, W sliding, Chunk(C)
    weights: tuple[int, ...]  # units a block of each group takes
    state: int  # units one running sequence's states take (0: no stateful mixer)
    units: int  # the pool
    unit: int  # bytes of a unit
    pinned: int = 0  # the shared prefix's blocks (of every group), held once

    @property
    def simple(self) -> bool:
        """One full-attention group and no state: the scheduler's counts need no group."""
        return self.reaches == (None,) and not self.state

    @property
    def per_block(self) -> int:
        return sum(self.weights)

    def skip(self, g: int, c: int) -> int:
        """Blocks of group g freed behind a sequence on c computed tokens."""
        r = self.reaches[g]
        if r is None:
            return 0
        if isinstance(r, Chunk):
            return c // r.size * r.size // self.block_size
        return max(0, c - r + 1) // self.block_size

    def blocks(self, g: int, c: int, n: int) -> int:
        """Blocks of group g a sequence holds (the pinned prefix aside) with slots for n tokens,
        c of them computed."""
        return max(0, -(-n // self.block_size) - max(self.pinned, self.skip(g, c)))

    def own(self, c: int, n: int) -> int:
        """Units a sequence holds (the pinned prefix aside) with slots for n tokens, c computed."""
        return self.state * (n > 0) + sum(w * self.blocks(g, c, n)
                                          for g, w in enumerate(self.weights))

    def held(self, L: int) -> int:
        """Units a decoder on L cached tokens holds at the start of its step, once the chunks'
        skipped blocks are freed (scheduler events) and before the window's (netted in the
        step's need) and the new block: its step then needs own(L, L + 1) − held(L)."""
        return self.state + sum(
            w * self.blocks(g, L - (not isinstance(self.reaches[g], Chunk)), L)
            for g, w in enumerate(self.weights))

    def afford(self, c: int, held: int, free: int) -> int:
        """The most token slots a sequence on c computed tokens holding `held` units can have
        with `free` more units."""
        if not self.per_block:  # states only (no attention layer): no slot limits a chunk
            return 1 << 62 if held + free >= self.state else 0
        base = sum(w * max(self.pinned, self.skip(g, c)) for g, w in enumerate(self.weights))
        return max(0, held + free - self.state + base) // self.per_block * self.block_size

    @property
    def pinned_units(self) -> int:
        return self.pinned * self.per_block


def layout(block_size: int, groups: list[tuple[Reach, int]], layer_bytes: list[int], state: int,
           pool_bytes: int, pinned: int) -> Layout:
    """`groups`: (reach, layers on the stage); `layer_bytes`: one token of one layer of each
    group on a rank; `state`: one sequence's state bytes on the stage; `pool_bytes`: the KV
    memory."""
    sizes = [block_size * layers * b for (_, layers), b in zip(groups, layer_bytes, strict=True)]
    unit = math.gcd(*sizes, state) or 1
    return Layout(block_size, tuple(r for r, _ in groups), tuple(s // unit for s in sizes),
                  -(-state // unit), pool_bytes // unit, unit, pinned)
