"""The symbolic interpreter's DeepSeek Sparse Attention operations (shapes, formulas, exact
counts): the indexer's head-weighted sum, the top-K_sel selection, the index mask of the eager
convention, and the sparse kernel's gather and per-query matmuls. SymbolicOps takes these as its
methods; dsa.py is the executor's side."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.expr import Dim, expr_of, formula
from .symbolic_base import ELEMENTWISE, Sym

if TYPE_CHECKING:
    from .symbolic_base import SymbolicBase


def _pairs(self: SymbolicBase, keys: Dim) -> list[Dim] | None:
    """Under a causal count in prefill, 2 × the (query, selected key) pairs (_triangle); None:
    count them all."""
    if self.wl.attention_flops != "causal" or self.wl.phase != "prefill":
        return None
    return _triangle(self, keys)


def _triangle(self: SymbolicBase, keys: Dim) -> list[Dim]:
    """2 × the (query, selected key) pairs a causal kernel reads in prefill: Σ_i min(i+1, K)
    keys for K < T (K·(2T−K+1)/2), else the lower triangle T(T+1)/2."""
    T = self.z.Tq
    if keys.value >= T.value:
        return [T, T + 1]
    return [keys, T * 2 + keys * -1 + 1]


def sym_head_sum(self: SymbolicBase, s: Sym, w: Sym, role: str, name: str) -> Sym:
    B, H, Tq, Tk = s.dims
    pairs = _pairs(self, Tk)
    flops = formula([2, B, Tq, Tk, H]) if pairs is None else formula([B, *pairs, H])
    return self._rec(role, name, "matmul", self._act(B, Dim.const(1), Tq, Tk), flops=flops,
                     note="[1,H_I]×[H_I,Tk] per query" + ("" if pairs is None else
                                                           "; causal half: lower triangle only"),
                     operands=((B, Tq, Dim.const(1), H), (B, Tq, H, Tk)))


def _selected(self: SymbolicBase, Tk: Dim) -> Dim:
    """K: the keys each query selects, min(K_sel, Tk)."""
    return self.z.Ks if self.z.Ks.value < Tk.value else Tk


def sym_topk(self: SymbolicBase, s: Sym, role: str, name: str, k: Dim) -> Sym:
    B, _, Tq, Tk = s.dims
    K = _selected(self, Tk)
    return self._rec(role, name, "topk", Sym((B, Tq, K), "int64"),
                     ew_extra=formula([ELEMENTWISE["topk"], B, Tq, Tk]),
                     note=f"each query's top min(K_sel, {Tk.symbol}) keys: indices, no FLOPs")


def sym_shared_selection(self: SymbolicBase, role: str, name: str, k: Dim, keys: Dim) -> Sym:
    z = self.z
    return self._rec(role, name, "reuse", Sym((z.B, z.Tq, _selected(self, keys)), "int64"),
                     note="reused: this layer runs no indexer")


def sym_select_mask(self: SymbolicBase, s: Sym, sel: Sym, role: str, name: str) -> Sym:
    out = self._rec(role, name, "mask", s, ew=ELEMENTWISE["mask"],
                    note="keys outside the query's selection masked (eager: scores stay dense)")
    self.stages[-1].extra["mask_dims"] = [sel.dims[0].symbol, "1", sel.dims[1].symbol,
                                          s.dims[-1].symbol]
    return out


def sym_gather(self: SymbolicBase, x: Sym, sel: Sym, role: str, name: str) -> Sym:
    B, Tq, K = sel.dims
    return self._rec(role, name, "gather", self._act(B, Tq, K, x.dims[-1]),
                     note="each query's selected latents (a kernel reads them in place)")


def sym_selected_matmul(self: SymbolicBase, a: Sym, b: Sym, role: str, name: str) -> Sym:
    B, H, Tq, _ = a.dims
    K, W = b.dims[2], b.dims[3]
    scores = role == "attn.scores"
    out = self._act(B, H, Tq, K) if scores else self._act(B, H, Tq, W)
    pairs = _pairs(self, K)
    flops = formula([2, B, H, Tq, K, W]) if pairs is None else formula([B, H, *pairs, W])
    note = "per query: its own selected keys only" + (
        "" if pairs is None else "; causal: only the selected keys it may read")
    out = self._rec(role, name, "matmul", out, flops=flops, note=note, operands=(a.dims, b.dims))
    if pairs is None and self.z.poly and self.wl.phase == "prefill":  # the closed form's causal
        self.stages[-1].poly_causal = expr_of(  # count, from this same pass (symbolic.matmul)
            formula([B, H, *_triangle(self, K), W])[1])
    return out


def sym_index_cache(self: SymbolicBase, x: Sym, layer: int, Tk: Dim, Tc: Dim, dtype: str) -> Sym:
    """dots3: the indexer keys [B,T,D_I] cached apart from the latent, in their own dtype."""
    *lead, _, width = x.dims
    note = f"the indexer's k_I of D_I, in {dtype}" + (
        "; replicated on every rank" if self.z.p > 1 else "")
    self.cache_stages(tuple(lead), width, Tk, Tc, note, dtype)
    return x if self.wl.phase == "prefill" else self._act(*lead, Tk, width)
