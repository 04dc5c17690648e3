"""KV caches for the NumPy executor: contiguous, and paged through block tables as vLLM does.

Each layer keeps at most its own window W of tokens (the layer plan's `windows`: None for full
attention), or a chunked layer the tokens of its current chunk (Chunk(C)), so local and global
layers of one model hold different amounts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..model.config import ceil_div
from ..model.plan import Chunk, Reach, held
from .storage import decode, encode, measure, stored_nbytes

Windows = Reach | Sequence[Reach]


class _PerLayer(list):  # type: ignore[type-arg]
    """One window for every layer (a model whose layers all attend alike)."""

    def __init__(self, window: Reach):
        super().__init__()
        self.window = window

    def __getitem__(self, layer: Any) -> Any:
        return self.window

    def __iter__(self) -> Any:
        return iter([self.window])


def _windows(w: Windows) -> Sequence[Reach]:
    return list(w) if isinstance(w, (list, tuple)) else _PerLayer(w)  # type: ignore[arg-type]


class KVCache:
    """Tokens seen per sequence, their validity (padding) and the next position; each layer
    stores the codes of the tokens it keeps, in the KV dtype. Subclasses decide where.
    `windows`: each layer's window W (None: full attention), or one for every layer."""

    def __init__(self, kv_dtype: str, windows: Windows, compute: Any):
        self.kv, self.windows, self.dt = kv_dtype, _windows(windows), compute
        self.total = 0  # tokens seen per sequence
        self.seen = np.zeros((0, 0), dtype=bool)  # [B, total]: which tokens are real
        self.next_pos = np.zeros(0, dtype=np.int64)  # [B]: the next token's position
        # a stateful mixer's fixed-size state per (layer, part): the conv window, the scan's S
        self.states: dict[tuple[int, str], np.ndarray] = {}
        self.index_keys: dict[int, np.ndarray] = {}  # dots3: a DSA layer's k_I, apart, in fp32

    def held_at(self, layer: int) -> int:
        """Tokens layer `layer` keeps: min(total, W), or its current chunk's."""
        return held(self.windows[layer], self.total)

    @property
    def held(self) -> int:
        """Tokens the longest-reaching layers keep."""
        return max(held(W, self.total) for W in self.windows)

    def valid(self, layer: int) -> np.ndarray:
        """[B, held]: which of the layer's kept tokens are real (not padding)."""
        return self.seen[:, self.total - self.held_at(layer) :]

    def start(self, valid_new: np.ndarray) -> None:
        """Book-keeping for a step adding `valid_new` [B, Tq] tokens (once per step, all layers)."""
        old = self.seen if self.total else valid_new[:, :0]
        self.total += valid_new.shape[1]
        self.seen = np.concatenate([old, valid_new], axis=1)
        count = valid_new.sum(axis=1)
        self.next_pos = count if self.total == valid_new.shape[1] else self.next_pos + count

    def write_parts(self, layer: int, parts: tuple[np.ndarray, ...]
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Prefill: keep the last `held` tokens of parts of one shape [R, B, heads, T, width]
        (K and V; MLA's one latent or [K, V]); returns them as read back from the cache (all T
        tokens, through the KV dtype: [R, parts, …]) and the stored codes."""
        codes = encode(np.stack(parts, axis=1), self.kv)
        self._store(layer, np.ascontiguousarray(codes[..., -self.held_at(layer) :, :]))
        return decode(codes, self.kv, self.dt), self._load(layer)

    def append_parts(self, layer: int, parts: tuple[np.ndarray, ...]
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Decode: store the new token's parts; returns its codes and all held codes."""
        new = encode(np.stack(parts, axis=1), self.kv)
        self._add(layer, new)
        return new, self._load(layer)

    def _store(self, layer: int, codes: np.ndarray) -> None:
        raise NotImplementedError

    def _add(self, layer: int, codes: np.ndarray) -> None:
        raise NotImplementedError

    def _load(self, layer: int) -> np.ndarray:
        raise NotImplementedError

    def nbytes(self) -> list[int]:
        """Bytes one rank stores, per layer that holds K and V."""
        raise NotImplementedError

    def held_layers(self) -> list[int]:
        """The layers that hold K and V, in nbytes' order."""
        raise NotImplementedError

    def layer_bytes(self, k: int) -> list[int]:
        """Bytes per layer of the first k: 0 where a layer's mixer keeps no K and V."""
        by = dict(zip(self.held_layers(), self.nbytes(), strict=True))
        for (layer, part), codes in self.states.items():  # entries cached like keys
            if part.startswith("kv."):  # (DeepSeek-V4's compressed entries)
                by[layer] = by.get(layer, 0) + self._entry_bytes(part, codes)
        for layer, keys in self.index_keys.items():  # dots3's indexer keys, in fp32
            by[layer] = by.get(layer, 0) + measure(keys[0], "fp32")
        return [by.get(layer, 0) for layer in range(k)]

    def _entry_bytes(self, part: str, codes: np.ndarray) -> int:
        """Bytes of one layer's entries kept beside K and V (contiguous here)."""
        return stored_nbytes(codes[0], self.kv)


class ContiguousKV(KVCache):
    """One array per layer: [R, 2, B, H_kv, held, Dh] in the KV dtype."""

    def __init__(self, kv_dtype: str, windows: Windows, compute: Any):
        super().__init__(kv_dtype, windows, compute)
        self.codes: dict[int, np.ndarray] = {}

    def _store(self, layer: int, codes: np.ndarray) -> None:
        self.codes[layer] = codes

    def _add(self, layer: int, codes: np.ndarray) -> None:
        both = np.concatenate([self.codes[layer], codes], axis=-2)
        self.codes[layer] = both[..., -self.held_at(layer) :, :]

    def _load(self, layer: int) -> np.ndarray:
        return self.codes[layer]

    def nbytes(self) -> list[int]:
        return [stored_nbytes(c[0], self.kv) for c in self.codes.values()]

    def held_layers(self) -> list[int]:
        return list(self.codes)


class _Group:
    """The block table of the layers that share one window (vLLM's KV cache group): token i
    lives in logical block i // block_size, slot i % block_size; with a window W, i counts
    modulo a ring of ceil(W/block_size) blocks; with chunks of C, i counts from its chunk's start
    (i mod C), and a new chunk frees the old chunk's blocks (vLLM's chunked local attention)."""

    def __init__(self, window: Reach, block_size: int, batch: int, max_tokens: int,
                 seed: int):
        self.chunk = window.size if isinstance(window, Chunk) else None
        reach = self.chunk if self.chunk is not None else window
        assert not isinstance(reach, Chunk)
        tokens = max_tokens if reach is None else min(max_tokens, reach)
        self.per_seq = ceil_div(tokens, block_size)
        self.ring = (self.chunk or self.per_seq * block_size) if reach is not None else None
        self.table = np.full((batch, self.per_seq), -1, dtype=np.int64)
        # physical blocks are handed out in shuffled order, so reading through the table is what
        # puts the tokens back in order
        self.free = np.random.default_rng(seed).permutation(batch * self.per_seq)

    @property
    def blocks(self) -> int:
        return int(np.count_nonzero(self.table >= 0))

    def new_chunk(self, before: int, after: int) -> None:
        """A step from `before` to `after` tokens that enters a new chunk frees the blocks of the
        chunk before (the step writes its tokens afterwards)."""
        if self.chunk and before and (before - 1) // self.chunk != (after - 1) // self.chunk:
            used = self.table[self.table >= 0]
            self.free = np.concatenate([used, self.free])
            self.table[:] = -1


class PagedKV(KVCache):
    """vLLM-style paging (the second seed's §9 (the paged KV cache)): pools of physical
    blocks of `block_size` tokens per layer, and one block table per sequence for each group of
    layers with the same window, shared by the layers of that group."""

    def __init__(self, kv_dtype: str, windows: Windows, compute: Any,
                 block_size: int, batch: int, max_tokens: int, seed: int = 0):
        super().__init__(kv_dtype, windows, compute)
        self.bs = block_size
        self.groups = {W: _Group(W, block_size, batch, max_tokens, seed)
                       for W in dict.fromkeys(self.windows)}
        self.pools: dict[int, np.ndarray] = {}

    def start(self, valid_new: np.ndarray) -> None:
        before = self.total
        super().start(valid_new)
        for g in self.groups.values():
            g.new_chunk(before, self.total)

    def _entry_bytes(self, part: str, codes: np.ndarray) -> int:
        """The block indexer's keys (MiniMax-M3) are paged as K and V are: whole blocks."""
        n = super()._entry_bytes(part, codes)
        if part != "kv.bidx" or not codes.shape[-2]:
            return n
        return n // codes.shape[-2] * ceil_div(codes.shape[-2], self.bs) * self.bs

    @property
    def blocks(self) -> int:
        """Blocks allocated over all groups."""
        return sum(g.blocks for g in self.groups.values())

    @property
    def table(self) -> np.ndarray:
        """The block table, when every layer shares one."""
        (group,) = self.groups.values()
        return group.table

    def _slots(self, layer: int, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = self.groups[self.windows[layer]]
        j = idx % g.ring if g.ring else idx
        logical = j // self.bs
        need = g.table[:, logical] < 0  # allocate blocks touched for the first time
        if need.any():
            cols = np.unique(logical[need.any(axis=0)])
            for_cols = g.table[:, cols]
            miss = for_cols < 0
            count = int(miss.sum())
            for_cols[miss], g.free = g.free[:count], g.free[count:]
            g.table[:, cols] = for_cols
        return g.table[:, logical], np.broadcast_to(j % self.bs, (g.table.shape[0], j.size))

    def _put(self, layer: int, codes: np.ndarray, idx: np.ndarray) -> None:
        R, n, B, hkv, _, dh = codes.shape
        pool = self.pools.get(layer)
        if pool is None:
            per_seq = self.groups[self.windows[layer]].per_seq
            pool = self.pools[layer] = np.zeros(
                (B * per_seq, self.bs, R, n, hkv, dh), dtype=codes.dtype)
        phys, slot = self._slots(layer, idx)
        pool[phys, slot] = codes.transpose(2, 4, 0, 1, 3, 5)  # [B, tokens, R, 2, H_kv, Dh]

    def _store(self, layer: int, codes: np.ndarray) -> None:
        self._put(layer, codes, np.arange(self.total - self.held_at(layer), self.total))

    def _add(self, layer: int, codes: np.ndarray) -> None:
        self._put(layer, codes, np.arange(self.total - codes.shape[-2], self.total))

    def _load(self, layer: int) -> np.ndarray:
        phys, slot = self._slots(layer, np.arange(self.total - self.held_at(layer), self.total))
        return self.pools[layer][phys, slot].transpose(2, 3, 0, 4, 1, 5)

    def nbytes(self) -> list[int]:
        """Bytes of the blocks allocated to each layer's group (whole blocks, a partly filled
        last one included)."""
        return [self.groups[self.windows[layer]].blocks * stored_nbytes(pool[0, :, 0], self.kv)
                for layer, pool in self.pools.items()]

    def held_layers(self) -> list[int]:
        return list(self.pools)
