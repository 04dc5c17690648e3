"""The NumPy rules of DeepSeek-V4's attention (model/compressed.py), as transformers 5.24's
DeepseekV4Attention and DeepseekV4HCACompressor compute them: the one K=V cache, the hca
compressor run for real (its buffer of an unfinished window and its entries kept in the cache
across steps), the window-and-entries mask, the grouped output projection. Each stage is
measured from its arrays (elementwise: the convention of symbolic_compressed.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import rotary
from .numeric_base import NumericBase
from .storage import decode, encode, measure, stored_nbytes
from .symbolic_compressed import POOL_EW


def shared_kv_cache(self: NumericBase, kv: np.ndarray, layer: int, Tk: Any, Tc: Any
                    ) -> np.ndarray:
    return self.cache_step(layer, (kv,), lambda c: c[:, 0])[:, 0]  # K = V: one part


def compress(self: NumericBase, kv: np.ndarray, gate: np.ndarray, layer: int, ratio: int,
             part: str = "hca") -> np.ndarray:
    m, st = self.m, self.cache.states
    R, B, _, width = kv.shape
    overlap = part != "hca"
    w = width // 2 if overlap else width
    x = np.stack([kv, gate], axis=1)  # [R,2,B,T,width]
    held = st.get((layer, f"{part}.buffer")) if self.decoding else None
    if held is not None:
        x = np.concatenate([held, x], axis=-2)
    usable = x.shape[-2] // ratio * ratio
    win, rest = x[..., :usable, :], x[..., usable:, :]
    n = usable // ratio
    before = st.get((layer, f"kv.{part}")) if self.decoding else None
    first = 0 if before is None else before.shape[-2]  # entries already made
    bias = self.w.get((layer, f"attn.{part}.pool", "bias"), (ratio, width))
    kvw = win[:, 0].reshape(R, B, n, ratio, width)
    g = win[:, 1].reshape(R, B, n, ratio, width) + bias
    if overlap:  # slots [m:2m] this window's second half, [0:m] the previous window's first
        prior = st.get((layer, f"{part}.overlap")) if self.decoding else None
        okv = np.zeros((R, B, n, 2 * ratio, w), dtype=kvw.dtype)
        og = np.full((R, B, n, 2 * ratio, w), -np.inf, dtype=g.dtype)
        okv[..., ratio:, :], og[..., ratio:, :] = kvw[..., w:], g[..., w:]
        okv[:, :, 1:, :ratio], og[:, :, 1:, :ratio] = kvw[:, :, :-1, :, :w], g[:, :, :-1, :, :w]
        if prior is not None and n:
            okv[:, :, 0, :ratio], og[:, :, 0, :ratio] = prior[0], prior[1]
        if n:
            st[(layer, f"{part}.overlap")] = np.stack([kvw[:, :, -1, :, :w], g[:, :, -1, :, :w]])
        kvw, g = okv, og
    g = np.exp(g - g.max(axis=-2, keepdims=True))
    pooled = (kvw * (g / g.sum(axis=-2, keepdims=True))).sum(axis=-2)  # [R,B,n,w]
    name = "indexer compressor" if part == "idx" else "compressor"
    slots = "2m" if overlap else "m′"
    self._rec(f"attn.{part}.pool", f"{name} pool (softmax over {slots})", "compress", pooled,
              ew=POOL_EW * kvw[0].size, params=bias.size)
    gamma = self.w.get((layer, f"attn.{part}.norm", "γ"), (w,), base=1.0)
    y, ew = rotary.normalize(pooled, "rmsnorm")
    y *= gamma
    self._rec(f"attn.{part}.norm", f"{name} norm", "rmsnorm", y, ew=ew + self._el(y),
              params=gamma.size)
    pos = (first + np.arange(n)) * ratio  # each window's first position
    _, cos, sin = rotary.tables(m.rot, pos, self.dt, m.rope_interleaved, m.rope_base)
    y, turned = rotary.rotate(y, cos, sin, m.rope_interleaved)
    self._rec(f"attn.{part}.rope", f"RoPE {name} entries", "rope", y, ew=3 * self._el(turned))
    st[(layer, f"{part}.buffer")] = rest
    self._rec(f"state.{part}", f"{name} buffer (kv, gate)", "state_cache", rest,
              nbytes=measure(rest[0], self.wl.act))
    if overlap:
        ov = st.get((layer, f"{part}.overlap"))
        o = ov if ov is not None else np.zeros((2, R, B, 0, w), dtype=self.dt)
        self._rec(f"state.{part}.overlap", f"{name} overlap kv", "state_cache", o[0],
                  nbytes=measure(o[0][0], self.wl.act))
        self._rec(f"state.{part}.overlap", f"{name} overlap gate", "state_cache", o[1],
                  dtype="fp32", nbytes=measure(o[1][0], "fp32"))
    kvd = self.wl.kv
    codes = encode(y, kvd)
    every = codes if before is None else np.concatenate([before, codes], axis=-2)
    st[(layer, f"kv.{part}")] = every  # cached like keys (KVCache.layer_bytes counts "kv.")
    if not self.decoding:
        self._rec(f"kv.entries.{part}.write", f"KV cache write ({name} entries)", "kv_cache",
                  every, dtype=kvd, nbytes=stored_nbytes(every[0], kvd))
    else:
        self._rec(f"kv.entries.{part}.append", f"KV cache append ({name} entries)",
                  "kv_append", codes, dtype=kvd, nbytes=stored_nbytes(codes[0], kvd))
        self._rec(f"kv.entries.{part}.read", f"KV cache read ({name} entries)", "kv_cache",
                  every, dtype=kvd, nbytes=stored_nbytes(every[0], kvd))
    return decode(every, kvd, self.dt)[:, :, None]  # [R,B,1,n,w]


def index_select(self: NumericBase, q: np.ndarray, k: np.ndarray, w: np.ndarray, ratio: int,
                 topk: int) -> np.ndarray:
    _, B, HI, T, DI = q.shape
    n = k.shape[-2]
    qt = q.transpose(0, 1, 3, 2, 4)  # [R,B,T,H_I,D_I]
    s, flops = self._mm(qt, np.swapaxes(k, -1, -2))  # [R,B,T,H_I,n]
    self._rec("attn.idx.scores", "indexer scores q·kᵀ", "matmul", s, flops=flops, dtype="fp32",
              operands=(qt.shape[1:], (B, 1, DI, n)))
    s = np.maximum(s, 0) * self.dt(DI ** -0.5)
    self._rec("attn.idx.relu", "indexer ReLU, × 1/√D_I", "relu", s, ew=2 * self._el(s),
              dtype="fp32")
    wt = w * self.dt(HI ** -0.5)  # [R,B,T,H_I]
    score = (s * wt[..., None]).sum(axis=-2)  # [R,B,T,n]
    self._rec("attn.idx.weigh", "Σ_h w_h·scores", "combine", score,
              ew=2 * self._el(s) + self._el(w), dtype="fp32")
    pos = self.cache.next_pos[0] - T + np.arange(T) if self.decoding else np.arange(T)
    closed = np.arange(n)[None, :] < ((pos + 1) // ratio)[:, None]  # [T,n]
    score = np.where(closed, score, -np.inf)
    self._rec("attn.idx.mask", "entries not yet closed masked", "mask", score,
              ew=self._el(score), dtype="fp32")
    ids = np.argsort(-score, axis=-1, kind="stable")[..., :min(topk, n)]  # the top K_sel
    valid = np.take_along_axis(np.broadcast_to(closed, score.shape), ids, axis=-1)
    ids = np.where(valid, ids, -1)  # fewer closed than K_sel: −1, as transformers marks them
    return self._rec("attn.idx.topk", f"top-{topk} entries", "topk", ids,
                     ew=self._el(score), dtype="int64", nbytes=ids[0].nbytes)


def cat_keys(self: NumericBase, a: np.ndarray, b: np.ndarray, role: str, name: str
             ) -> np.ndarray:
    return self._rec(role, name, "concat", np.concatenate([a, b.astype(a.dtype)], axis=-2))


def window_mask(self: NumericBase, s: np.ndarray, role: str, name: str, window: int | None,
                ratio: int | None, selected: np.ndarray | None = None) -> np.ndarray:
    B, T, keys = s.shape[1], s.shape[-2], s.shape[-1]
    # the window's keys: all T in prefill; in decode what the cache holds after the step
    n = keys - (self.cache.held_at(self._layer) if self.decoding else T)
    if self.decoding:  # every window key readable; entries closed: all; the selection masks
        allowed = np.ones((T, keys - n), dtype=bool)
        i = np.full((T, 1), self.cache.next_pos[0] - 1)
    else:
        i, j = self._ij
        allowed = (j <= i) & ((i - j < window) if window is not None else True)
    ent = np.broadcast_to((np.arange(n)[None, :] + 1) * (ratio or 1) <= i + 1, (B, T, n))
    if selected is not None:  # csa: only the indexer's picks [R,B,T,K] (−1: none)
        pick = np.zeros((B, T, n + 1), dtype=bool)
        b, t, _ = np.indices(selected.shape[1:])
        pick[b, t, np.where(selected[0] >= 0, selected[0], n)] = True
        ent = ent & pick[..., :n]
    full = np.concatenate([np.broadcast_to(allowed, (B, T, keys - n)), ent], axis=-1)
    np.copyto(s, self.neg, where=~full[None, :, None])
    return self._rec(role, name, "mask", s, ew=self._el(s))


def grouped_linear(self: NumericBase, x: np.ndarray, role: str, name: str, groups: Any,
                   d_in: Any, d_out: Any) -> np.ndarray:
    g, dg, p = self.m.o_groups or 1, self.m.o_lora_rank or 1, self.p
    R, B, T, width = x.shape  # width: one rank's H·Dh/p, its g/p groups
    gp = g // p
    w = self.w.get((self._layer, role), (g, width // gp, dg))
    xg = x.reshape(R, B * T, gp, width // gp).transpose(0, 2, 1, 3)  # [R,g/p,BT,H·Dh/g]
    y, flops = self._mm(xg, w.reshape(p, gp, width // gp, dg)[:R])  # rank r's groups
    y = y.transpose(0, 2, 1, 3).reshape(R, B, T, gp * dg)
    return self._rec(role, name, "linear", y, flops=flops, params=w.size // p)
