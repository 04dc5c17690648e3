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


def compress(self: NumericBase, kv: np.ndarray, gate: np.ndarray, layer: int, ratio: int
             ) -> np.ndarray:
    m, st = self.m, self.cache.states
    R, B, _, dh = kv.shape
    x = np.stack([kv, gate], axis=1)  # [R,2,B,T,Dh]
    held = st.get((layer, "hca.buffer")) if self.decoding else None
    if held is not None:
        x = np.concatenate([held, x], axis=-2)
    usable = x.shape[-2] // ratio * ratio
    win, rest = x[..., :usable, :], x[..., usable:, :]
    n = usable // ratio
    before = st.get((layer, "kv.hca")) if self.decoding else None
    first = 0 if before is None else before.shape[-2]  # entries already made
    bias = self.w.get((layer, "attn.hca.pool", "bias"), (ratio, dh))
    kvw = win[:, 0].reshape(R, B, n, ratio, dh)
    g = win[:, 1].reshape(R, B, n, ratio, dh) + bias
    g = np.exp(g - g.max(axis=-2, keepdims=True))
    pooled = (kvw * (g / g.sum(axis=-2, keepdims=True))).sum(axis=-2)  # [R,B,n,Dh]
    self._rec("attn.hca.pool", "compressor pool (softmax over m′)", "compress", pooled,
              ew=POOL_EW * kvw[0].size, params=bias.size)
    gamma = self.w.get((layer, "attn.hca.norm", "γ"), (dh,), base=1.0)
    y, ew = rotary.normalize(pooled, "rmsnorm")
    y *= gamma
    self._rec("attn.hca.norm", "compressor norm", "rmsnorm", y, ew=ew + self._el(y),
              params=gamma.size)
    pos = (first + np.arange(n)) * ratio  # each window's first position
    _, cos, sin = rotary.tables(m.rot, pos, self.dt, m.rope_interleaved, m.rope_base)
    y, turned = rotary.rotate(y, cos, sin, m.rope_interleaved)
    self._rec("attn.hca.rope", "RoPE entries", "rope", y, ew=3 * self._el(turned))
    st[(layer, "hca.buffer")] = rest
    self._rec("state.hca", "compressor buffer (kv, gate)", "state_cache",
              rest.transpose(0, 1, 2, 3, 4), nbytes=measure(rest[0], self.wl.act))
    kvd = self.wl.kv
    codes = encode(y, kvd)
    every = codes if before is None else np.concatenate([before, codes], axis=-2)
    st[(layer, "kv.hca")] = every  # cached like keys (KVCache.layer_bytes counts "kv." states)
    if not self.decoding:
        self._rec("kv.entries.write", "KV cache write (entries)", "kv_cache", every, dtype=kvd,
                  nbytes=stored_nbytes(every[0], kvd))
    else:
        self._rec("kv.entries.append", "KV cache append (entries)", "kv_append", codes, dtype=kvd,
                  nbytes=stored_nbytes(codes[0], kvd))
        self._rec("kv.entries.read", "KV cache read (entries)", "kv_cache", every, dtype=kvd,
                  nbytes=stored_nbytes(every[0], kvd))
    return decode(every, kvd, self.dt)[:, :, None]  # [R,B,1,n,Dh]


def cat_keys(self: NumericBase, a: np.ndarray, b: np.ndarray, role: str, name: str
             ) -> np.ndarray:
    return self._rec(role, name, "concat", np.concatenate([a, b.astype(a.dtype)], axis=-2))


def window_mask(self: NumericBase, s: np.ndarray, role: str, name: str, window: int | None,
                ratio: int | None) -> np.ndarray:
    T = s.shape[-2]
    i, j = self._ij
    allowed = (j <= i) & ((i - j < window) if window is not None else True)
    if ratio is not None:  # entry e is closed for query t once (e+1)·m′ ≤ t+1
        e = np.arange(s.shape[-1] - T)[None, :]
        allowed = np.concatenate([allowed, (e + 1) * ratio <= i + 1], axis=-1)
    np.copyto(s, self.neg, where=~allowed)
    return self._rec(role, name, "mask", s, ew=self._el(s))


def grouped_linear(self: NumericBase, x: np.ndarray, role: str, name: str, groups: Any,
                   d_in: Any, d_out: Any) -> np.ndarray:
    g, dg = self.m.o_groups or 1, self.m.o_lora_rank or 1
    R, B, T, width = x.shape
    w = self.w.get((self._layer, role), (g, width // g, dg))
    xg = x.reshape(R, B * T, g, width // g).transpose(0, 2, 1, 3)  # [R,g,BT,Dh·H/g]
    y, flops = self._mm(xg, w[None])  # [R,g,BT,d_g]
    y = y.transpose(0, 2, 1, 3).reshape(R, B, T, g * dg)
    return self._rec(role, name, "linear", y, flops=flops, params=w.size)
