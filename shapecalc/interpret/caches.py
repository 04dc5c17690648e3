"""KV caches for the NumPy executor: contiguous, and paged through a block table as vLLM does."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model.config import ceil_div
from .storage import decode, encode, stored_nbytes


class KVCache:
    """Tokens held per sequence (at most W with a sliding window), their validity (padding) and
    the next position; layers store codes in the KV dtype. Subclasses decide where codes live."""

    def __init__(self, kv_dtype: str, window: int | None, compute: Any):
        self.kv, self.window, self.dt = kv_dtype, window, compute
        self.total = 0  # tokens seen per sequence
        self.held = 0  # tokens kept: min(total, W)
        self.valid = np.zeros((0, 0), dtype=bool)  # [B, held]
        self.next_pos = np.zeros(0, dtype=np.int64)  # [B]: the next token's position

    def start(self, valid_new: np.ndarray) -> None:
        """Book-keeping for a step adding `valid_new` [B, Tq] tokens (once per step, all layers)."""
        old = self.valid if self.total else valid_new[:, :0]
        self.total += valid_new.shape[1]
        self.held = self.total if self.window is None else min(self.total, self.window)
        self.valid = np.concatenate([old, valid_new], axis=1)[:, -self.held :]
        count = valid_new.sum(axis=1)
        self.next_pos = count if self.total == valid_new.shape[1] else self.next_pos + count

    def write(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                      np.ndarray]:
        """Prefill: keep the last `held` tokens; returns K, V as read back from the cache (all T
        tokens, through the KV dtype) and the stored codes [R, 2, B, H_kv, held, Dh]."""
        codes = encode(np.stack([k, v], axis=1), self.kv)
        self._store(layer, np.ascontiguousarray(codes[..., -self.held :, :]))
        back = decode(codes, self.kv, self.dt)
        return back[:, 0], back[:, 1], self._load(layer)

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Decode: store the new token; returns its codes and all held codes."""
        new = encode(np.stack([k, v], axis=1), self.kv)
        self._add(layer, new)
        return new, self._load(layer)

    def _store(self, layer: int, codes: np.ndarray) -> None:
        raise NotImplementedError

    def _add(self, layer: int, codes: np.ndarray) -> None:
        raise NotImplementedError

    def _load(self, layer: int) -> np.ndarray:
        raise NotImplementedError

    def nbytes(self) -> list[int]:
        """Bytes one rank stores, per layer."""
        raise NotImplementedError


class ContiguousKV(KVCache):
    """One array per layer: [R, 2, B, H_kv, held, Dh] in the KV dtype."""

    def __init__(self, kv_dtype: str, window: int | None, compute: Any):
        super().__init__(kv_dtype, window, compute)
        self.codes: dict[int, np.ndarray] = {}

    def _store(self, layer: int, codes: np.ndarray) -> None:
        self.codes[layer] = codes

    def _add(self, layer: int, codes: np.ndarray) -> None:
        both = np.concatenate([self.codes[layer], codes], axis=-2)
        self.codes[layer] = both[..., -self.held :, :]

    def _load(self, layer: int) -> np.ndarray:
        return self.codes[layer]

    def nbytes(self) -> list[int]:
        return [stored_nbytes(c[0], self.kv) for c in self.codes.values()]


class PagedKV(KVCache):
    """vLLM-style paging (second seed §9): a pool of physical blocks of `block_size` tokens per
    layer and one block table per sequence, shared by all layers. Token i lives in logical block
    i // block_size, slot i % block_size; with a sliding window, i counts modulo the ring of
    ceil(W/block_size) blocks. Physical blocks are handed out in shuffled order, so reading
    through the table is what puts the tokens back in order."""

    def __init__(self, kv_dtype: str, window: int | None, compute: Any, block_size: int,
                 batch: int, max_tokens: int, seed: int = 0):
        super().__init__(kv_dtype, window, compute)
        self.bs = block_size
        tokens = max_tokens if window is None else min(max_tokens, window)
        self.per_seq = ceil_div(tokens, block_size)
        self.ring = self.per_seq * block_size if window is not None else None
        self.table = np.full((batch, self.per_seq), -1, dtype=np.int64)
        self.free = np.random.default_rng(seed).permutation(batch * self.per_seq)
        self.pools: dict[int, np.ndarray] = {}

    @property
    def blocks(self) -> int:
        return int(np.count_nonzero(self.table >= 0))

    def _slots(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        j = idx % self.ring if self.ring else idx
        logical = j // self.bs
        need = self.table[:, logical] < 0  # allocate blocks touched for the first time
        if need.any():
            cols = np.unique(logical[need.any(axis=0)])
            for_cols = self.table[:, cols]
            miss = for_cols < 0
            count = int(miss.sum())
            for_cols[miss], self.free = self.free[:count], self.free[count:]
            self.table[:, cols] = for_cols
        return self.table[:, logical], np.broadcast_to(j % self.bs, (self.table.shape[0], j.size))

    def _put(self, layer: int, codes: np.ndarray, idx: np.ndarray) -> None:
        R, _, B, hkv, _, dh = codes.shape
        pool = self.pools.get(layer)
        if pool is None:
            pool = self.pools[layer] = np.zeros(
                (B * self.per_seq, self.bs, R, 2, hkv, dh), dtype=codes.dtype)
        phys, slot = self._slots(idx)
        pool[phys, slot] = codes.transpose(2, 4, 0, 1, 3, 5)  # [B, tokens, R, 2, H_kv, Dh]

    def _store(self, layer: int, codes: np.ndarray) -> None:
        self._put(layer, codes, np.arange(self.total - self.held, self.total))

    def _add(self, layer: int, codes: np.ndarray) -> None:
        self._put(layer, codes, np.arange(self.total - codes.shape[-2], self.total))

    def _load(self, layer: int) -> np.ndarray:
        phys, slot = self._slots(np.arange(self.total - self.held, self.total))
        return self.pools[layer][phys, slot].transpose(2, 3, 0, 4, 1, 5)

    def nbytes(self) -> list[int]:
        """Bytes of the blocks allocated (whole blocks, a partly filled last one included)."""
        return [self.blocks * stored_nbytes(pool[0, :, 0], self.kv) for pool in self.pools.values()]


