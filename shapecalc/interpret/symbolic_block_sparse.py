"""The symbolic interpreter's block-sparse attention operations (MiniMax-M3; shapes, formulas,
exact counts): the block indexer's key cache, the top-K_blk blocks, the eager convention's block
mask and the sparse kernel's matmuls over the selected blocks' keys. SymbolicOps takes these as
its methods; block_sparse.py is the executor's side.

The sparse kernel's (query, key) pairs are block_sparse.block_pairs, written here as a
polynomial in T within each stretch of T between multiples of S_blk (the closed form cuts
there): the first K_blk·S_blk queries read t + 1 keys, each later one (K_blk − 1)·S_blk +
(t mod S_blk) + 1."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.expr import Dim, formula, sum_formula
from .symbolic_base import ELEMENTWISE, Sym

if TYPE_CHECKING:
    from .symbolic_base import SymbolicBase


def sym_block_cache(self: SymbolicBase, k: Sym, layer: int, Tk: Dim, Tc: Dim) -> Sym:
    B, _, DI = k.dims
    one = Dim.const(1)
    self.cache_stages((B, one), DI, Tk, Tc, "the block indexer's key k_I (one head)")
    return self._act(B, one, Tk if self.wl.phase == "decode" else self.z.Tq, DI)


def sym_block_topk(self: SymbolicBase, s: Sym, role: str, name: str, size: int, top: int,
                   local: int) -> Sym:
    B, HI, Tq, Tk = s.dims
    nb = -(-Tk.value // size)
    Nb = self.z.sym("N_blk", nb)  # ⌈T′/S_blk⌉ blocks
    K = self.z.sym("K_blk", top) if top <= nb else Nb
    ew = sum_formula([formula([1, B, HI, Tq, Tk]), formula([ELEMENTWISE["topk"], B, HI, Tq, Nb])])
    return self._rec(role, name, "topk", Sym((B, HI, Tq, K), "int64"), ew_extra=ew,
                     note=f"max over each block of S_blk={size} keys, the {local} ending at the "
                     "query's block kept; indices, no FLOPs")


def sym_block_mask(self: SymbolicBase, s: Sym, sel: Sym, role: str, name: str) -> Sym:
    return self._rec(role, name, "mask", s, ew=ELEMENTWISE["mask"],
                     note="keys outside the query's selected blocks masked (eager: scores stay "
                     "dense)")


def _two_pairs(self: SymbolicBase, Tk: Dim) -> list[Dim]:
    """2 × the (query, key) pairs the kernel reads per head, as factors: T(T+1) up to
    K_blk·S_blk, then the quadratic of the current stretch; decode: 2 × its query's keys."""
    m, z = self.m, self.z
    size, top = m.index_block_size or 1, m.index_topk_blocks or 1
    cut = top * size
    if self.wl.phase == "decode":
        P = Tk.value - 1  # T′ = T + 1 keys; the query sits at T′ − 1
        if P // size + 1 <= top:
            return [Dim.const(2), Tk]
        return [Dim.const(2), Tk + ((top - 1) * size - P // size * size)]
    T = z.Tq
    if T.value <= cut:
        return [T, T + 1]
    f = (T.value - cut - 1) // size  # whole blocks past the cut before the current one
    u = T + (-(cut + f * size))  # 1 … S_blk queries of the current block
    rest = cut * (cut + 1) - 2 * cut * ((top - 1) * size + 1) + f * size * (size - 1)
    return [u * (u + -1) + T * (2 * ((top - 1) * size + 1)) + rest]


def sym_block_matmul(self: SymbolicBase, a: Sym, b: Sym, sel: Sym, role: str, name: str
                     ) -> Sym:
    B, H, Tq, _ = a.dims
    scores = role == "attn.scores"
    inner, Tk = (a.dims[-1], b.dims[-1]) if scores else (b.dims[-1], a.dims[-1])
    out = self._act(B, H, Tq, b.dims[-1])
    pairs = _two_pairs(self, Tk)
    return self._rec(role, name, "matmul", out, flops=formula([B, H, *pairs, inner]),
                     note="per query: the keys of its K_blk selected blocks it may read",
                     operands=(a.dims, b.dims))
