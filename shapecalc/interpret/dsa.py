"""The NumPy interpreter's DeepSeek Sparse Attention operations: the indexer's head-weighted
sum, the top-K_sel selection run for real, the eager convention's index mask, and the sparse
kernel's gather and per-query matmuls (NumericOps takes these as its methods; symbolic_dsa.py
has the symbolic side). A selection is (indices [R,B,Tq,K], valid [R,B,Tq,K]): a query whose
reach is shorter than K_sel also picks masked keys, which are not valid."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .numeric_base import NumericBase


def _causal(self: NumericBase) -> bool:
    return self.wl.attention_flops == "causal" and not self.decoding


def head_sum(self: NumericBase, s: np.ndarray, w: np.ndarray, role: str, name: str
             ) -> np.ndarray:
    # [R,B,Tq,1,H_I] @ [R,B,Tq,H_I,Tk] → [R,B,1,Tq,Tk]: one head, so the masks apply as to scores
    out, flops = self._mm(w[..., None, :], s.transpose(0, 1, 3, 2, 4))
    out = out[..., 0, :][:, :, None]
    B, Tq, Tk, H = out.shape[1], out.shape[3], out.shape[4], s.shape[2]
    if _causal(self):  # the (query, key) pairs the causal mask allows
        flops = 2 * B * int(np.count_nonzero(self.causal)) * H
    return self._rec(role, name, "matmul", out, flops=flops,
                     operands=((B, Tq, 1, H), (B, Tq, H, Tk)))


def topk(self: NumericBase, s: np.ndarray, role: str, name: str, k: Any) -> Any:
    s = s[:, :, 0]  # [R,B,Tq,Tk]
    K = min(int(k.value), s.shape[-1])
    idx = np.argsort(-s, axis=-1, kind="stable")[..., :K]
    valid = np.take_along_axis(s, idx, axis=-1) > self.neg  # masked keys picked past the reach
    self._rec(role, name, "topk", idx, ew=self._el(s), dtype="int64")
    self._selection = idx, valid  # what a later layer sharing it reads (shared_selection)
    return idx, valid


def shared_selection(self: NumericBase, role: str, name: str, k: Any, keys: Any) -> Any:
    sel = self._selection
    assert sel is not None, "a shared top-k layer before any indexer layer"
    self._rec(role, name, "reuse", sel[0], dtype="int64")
    return sel


def select_mask(self: NumericBase, s: np.ndarray, sel: Any, role: str, name: str
                ) -> np.ndarray:
    idx, _ = sel
    chosen = np.zeros((*idx.shape[:-1], s.shape[-1]), dtype=bool)  # [R,B,Tq,Tk]
    np.put_along_axis(chosen, idx, True, axis=-1)
    np.copyto(s, self.neg, where=~chosen[:, :, None])
    return self._rec(role, name, "mask", s, ew=self._el(s))


def gather(self: NumericBase, x: np.ndarray, sel: Any, role: str, name: str) -> np.ndarray:
    idx, valid = sel  # x [R,B,Tk,W] (the latent: R = 1), idx [1,B,Tq,K]
    b = np.arange(x.shape[1])[:, None, None]
    g = x[0][b, idx[0]][None]  # [1,B,Tq,K,W]
    g[~valid] = 0  # a kernel skips the invalid slots (FlashMLA: index −1)
    self._valid = valid
    return self._rec(role, name, "gather", g)


def selected_matmul(self: NumericBase, a: np.ndarray, b: np.ndarray, role: str, name: str
                    ) -> np.ndarray:
    valid = self._valid  # the selection gather() read: [1,B,Tq,K]
    scores = role == "attn.scores"
    at = a.transpose(0, 1, 3, 2, 4)  # [R,B,Tq,H,·]
    out, flops = self._mm(at, b.swapaxes(-1, -2) if scores else b)
    out = out.transpose(0, 1, 3, 2, 4)  # [R,B,H,Tq,K] or [R,B,H,Tq,W]
    if scores:
        np.copyto(out, self.neg, where=~valid[:, :, None])
    if _causal(self):  # only the valid selected keys
        inner = a.shape[-1] if scores else b.shape[-1]
        flops = 2 * a.shape[2] * int(np.count_nonzero(valid[0])) * inner
    return self._rec(role, name, "matmul", out, flops=flops,
                     operands=(a.shape[1:], b.shape[1:]))


def index_cache(self: NumericBase, x: np.ndarray, layer: int, Tk: Any, Tc: Any, dtype: str
                ) -> np.ndarray:
    """dots3: the indexer keys [R,B,T,D_I] kept apart from the latent, in `dtype` (fp32: the
    values as computed), on the cache object beside the layers' codes; every token read."""
    keys = self.cache.index_keys
    if not self.decoding:
        keys[layer] = x
        self._rec("kv.write", "KV cache write", "kv_cache", x, dtype=dtype)
        return x
    keys[layer] = np.concatenate([keys[layer], x], axis=-2)
    self._rec("kv.append", "KV cache append", "kv_append", x, dtype=dtype)
    self._rec("kv.read", "KV cache read", "kv_cache", keys[layer], dtype=dtype)
    return keys[layer]
