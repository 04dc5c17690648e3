"""The NumPy interpreter's block-sparse attention operations (MiniMax-M3): the block indexer's
key cache, the blocks' max-pooled scores and their top K_blk run for real (the L_blk local
blocks forced in, as transformers does with +inf), the eager convention's block mask and the
sparse kernel's matmuls counted over the keys really selected (NumericOps takes these as its
methods; symbolic_block_sparse.py has the symbolic side). A selection is (indices
[R,B,H_I,Tq,K], valid [R,B,H_I,Tq,K]): a slot on a block of no readable key is not valid (−1
in transformers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .storage import decode, encode, stored_nbytes

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def block_cache(self: NumericBase, k: np.ndarray, layer: int, Tk: Any, Tc: Any) -> np.ndarray:
    st, kvd = self.cache.states, self.wl.kv
    codes = encode(k[:, :, None], kvd)  # [R,B,1,T,D_I]
    before = st.get((layer, "kv.bidx")) if self.decoding else None
    every = codes if before is None else np.concatenate([before, codes], axis=-2)
    st[(layer, "kv.bidx")] = every  # cached like keys (KVCache.layer_bytes counts "kv.")
    if not self.decoding:
        self._rec("kv.write", "KV cache write", "kv_cache", every, dtype=kvd,
                  nbytes=stored_nbytes(every[0], kvd))
    else:
        self._rec("kv.append", "KV cache append", "kv_append", codes, dtype=kvd,
                  nbytes=stored_nbytes(codes[0], kvd))
        self._rec("kv.read", "KV cache read", "kv_cache", every, dtype=kvd,
                  nbytes=stored_nbytes(every[0], kvd))
    return decode(every, kvd, self.dt)


def _positions(Tq: int, Tk: int) -> np.ndarray:
    """The queries' positions: the last Tq of the Tk keys (prefill: all; decode: the new one)."""
    return np.arange(Tk - Tq, Tk)


def block_topk(self: NumericBase, s: np.ndarray, role: str, name: str, size: int, top: int,
               local: int) -> Any:
    R, B, HI, Tq, Tk = s.shape
    nb = -(-Tk // size)
    padded = np.full((R, B, HI, Tq, nb * size), self.neg, dtype=s.dtype)
    padded[..., :Tk] = s  # masked (future) and padding keys score self.neg
    bs = padded.reshape(R, B, HI, Tq, nb, size).max(axis=-1)  # [R,B,H_I,Tq,N_b]
    readable = bs > self.neg
    qb = _positions(Tq, Tk) // size
    for j in range(local):  # the query's own block and the L_blk − 1 before it: always kept
        own = np.broadcast_to(np.maximum(qb - j, 0)[:, None], (R, B, HI, Tq, 1))
        np.put_along_axis(bs, own, np.inf, axis=-1)
    idx = np.argsort(-bs, axis=-1, kind="stable")[..., :min(top, nb)]
    valid = np.take_along_axis(readable, idx, axis=-1)
    self._rec(role, name, "topk", idx, ew=self._el(s) + self._el(bs), dtype="int64",
              nbytes=idx[0].nbytes)
    return idx, valid


def _allowed(self: NumericBase, sel: Any, heads: int, Tq: int, Tk: int, size: int
             ) -> np.ndarray:
    """[R,B,H/p,Tq,Tk]: the keys of each query's valid selected blocks it may read (each indexer
    head's selection repeated over its H/H_I query heads; each rank its own heads')."""
    idx, valid = sel
    R, B, HI = idx.shape[:3]
    nb = -(-Tk // size)
    chosen = np.zeros((R, B, HI, Tq, nb + 1), dtype=bool)  # column nb: the invalid slots
    np.put_along_axis(chosen, np.where(valid, idx, nb), True, axis=-1)
    keys = chosen[..., np.arange(Tk) // size]  # [R,B,H_I,Tq,Tk]
    keys &= np.arange(Tk)[None, :] <= _positions(Tq, Tk)[:, None]
    every = np.repeat(keys, self.m.n_heads // HI, axis=2)  # [R,B,H,Tq,Tk]: all query heads
    if heads == self.m.n_heads:
        return every
    # tensor parallel: rank r holds query heads r·H/p … (r+1)·H/p − 1 (the indexer is replicated)
    return np.stack([every[min(r, R - 1), :, r * heads:(r + 1) * heads]
                     for r in range(self.m.n_heads // heads)])


def block_mask(self: NumericBase, s: np.ndarray, sel: Any, role: str, name: str) -> np.ndarray:
    size = self.m.index_block_size or 1
    allowed = _allowed(self, sel, s.shape[2], s.shape[-2], s.shape[-1], size)
    np.copyto(s, self.neg, where=~allowed)
    return self._rec(role, name, "mask", s, ew=self._el(s))


def block_matmul(self: NumericBase, a: np.ndarray, b: np.ndarray, sel: Any, role: str,
                 name: str) -> np.ndarray:
    out, _ = self._mm(a, b)
    scores = role == "attn.scores"
    Tk = out.shape[-1] if scores else a.shape[-1]
    allowed = _allowed(self, sel, a.shape[2], a.shape[-2], Tk, self.m.index_block_size or 1)
    if scores:  # the kernel never reads the other keys
        np.copyto(out, self.neg, where=~allowed)
    inner = a.shape[-1] if scores else b.shape[-1]
    flops = 2 * int(np.count_nonzero(allowed[0])) * inner
    return self._rec(role, name, "matmul", out, flops=flops, operands=(a.shape[1:], b.shape[1:]))
