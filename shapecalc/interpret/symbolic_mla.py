"""The symbolic interpreter's Multi-head Latent Attention operations (shapes, formulas, exact
counts): the one-tensor cache, the concatenations, and the per-head blocks of kv_b_proj that
absorbed decode multiplies by. SymbolicOps takes these as its methods; mla.py is the executor's
side. No NumPy here: the trace's start-up path stays light."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.expr import Dim, formula

if TYPE_CHECKING:
    from .symbolic_base import Sym, SymbolicBase


def sym_cache(self: SymbolicBase, x: Sym, layer: int, Tk: Dim, Tc: Dim, what: str) -> Sym:
    *lead, _, width = x.dims
    # the latent [B,T,W] has no head axis: every rank holds it whole
    note = what + ("; replicated on every rank" if self.z.p > 1 and len(lead) == 1 else "")
    self.cache_stages(tuple(lead), width, Tk, Tc, note)
    return x if self.wl.phase == "prefill" else self._act(*lead, Tk, width)


def sym_concat(self: SymbolicBase, parts: list[Sym], role: str, name: str,
               heads: Dim | None = None) -> Sym:
    first = parts[0].dims
    width = first[-1]
    for p in parts[1:]:
        width = width + p.dims[-1]
    note = "the shared k_rope broadcast to every head" if heads is not None else ""
    return self._rec(role, name, "concat", self._act(*first[:-1], width), note=note)


def sym_head_linear(self: SymbolicBase, x: Sym, role: str, name: str, d_in: Dim, d_out: Dim,
                    of: str, part: str) -> Sym:
    B, H, T, _ = x.dims
    half = "W_UK (its k_nope half)" if part == "k" else "W_UV (its v half)"
    note = f"each head's block of {of.removeprefix('attn.')}_proj: {half}"
    w = H * d_in * d_out
    return self._rec(role, name, "matmul", self._act(B, H, T, d_out),
                     flops=formula([2, B, H, T, d_in, d_out]), params=(w.value, str(w.expr)),
                     note=note, split="column" if self.z.p > 1 else "",
                     operands=((B, H, T, d_in), (H, d_in, d_out)))
