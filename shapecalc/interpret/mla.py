"""The NumPy interpreter's Multi-head Latent Attention operations: the one-tensor cache (the
latent, or the expanded [K, V]), concatenation with a shared k_rope broadcast to every head, and
the per-head blocks of kv_b_proj that absorbed decode multiplies by (NumericOps takes these as its
methods; symbolic_mla.py has the symbolic side)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .numeric_base import NumericBase




def cache(self: NumericBase, x: np.ndarray, layer: int, Tk: Any, Tc: Any, what: str
          ) -> np.ndarray:
    """One cached tensor per layer: MLA's latent [R,B,T,D_c+D_r] (kept as one head) or its
    expanded [K, V] [R,B,H,T,·]; returns every token the step reads, through the KV dtype."""
    latent = x.ndim == 4  # [R,B,T,W]: stored as one head

    def shown(codes: np.ndarray) -> np.ndarray:  # [R,1,B,heads,T,W] as the tensor cached
        return codes[:, 0, :, 0] if latent else codes[:, 0]

    back = self.cache_step(layer, (x[:, :, None] if latent else x,), shown)[:, 0]
    return back[:, :, 0] if latent else back


def concat(self: NumericBase, parts: list[np.ndarray], role: str, name: str, heads: Any = None
           ) -> np.ndarray:
    if heads is not None:  # broadcast a one-head part to every head
        n = max(p.shape[2] for p in parts)
        parts = [np.broadcast_to(p, (*p.shape[:2], n, *p.shape[3:])) for p in parts]
    R = max(p.shape[0] for p in parts)
    parts = [np.broadcast_to(p, (R, *p.shape[1:])) for p in parts]
    return self._rec(role, name, "concat", np.concatenate(parts, axis=-1))


def head_linear(self: NumericBase, x: np.ndarray, role: str, name: str, d_in: Any, d_out: Any,
                of: str, part: str) -> np.ndarray:
    # rank r's kv_b columns are its heads' [k_nope | v] blocks, side by side
    shards, _, _, _, W = self.w.linear(self._layer, of, self.p)
    if W is None:  # streamed weights: this one matrix is made whole
        W = self.w.stacked(shards[0])
    m, hq = self.m, x.shape[2]
    dn = m.qk_nope_head_dim or 0
    blocks = W.reshape(W.shape[0], W.shape[1], hq, -1)  # [R, D_c, H/p, D_n + D_v]
    if part == "k":  # q_nope [.., D_n] · W_UKᵀ → [.., D_c]
        Wh = blocks[..., :dn].transpose(0, 2, 3, 1)  # [R, H/p, D_n, D_c]
    else:  # latent output [.., D_c] · W_UV → [.., D_v]
        Wh = blocks[..., dn:].transpose(0, 2, 1, 3)  # [R, H/p, D_c, D_v]
    out, flops = self._mm(x, Wh[:, None])
    return self._rec(role, name, "matmul", out, flops=flops, params=Wh[0].size,
                     operands=(x.shape[1:], Wh.shape[1:]))


def split(x: np.ndarray, parts: list[Any]) -> list[np.ndarray]:
    """MLA's splits are per head, or of latents every rank holds whole: no TP share to apply."""
    cuts = np.cumsum([int(d.value) for d in parts])
    assert cuts[-1] == x.shape[-1], (cuts, x.shape)
    return np.split(x, cuts[:-1], axis=-1)
