"""The NumPy interpreter's core: its state (the step's ids, positions, masks, cache), how each
operation records its Stage, and the matmuls and cache writes every operation shares. NumericOps
(numeric.py) adds the operations; the variants' modules (MLA, MoE, ALiBi, Llama 4, the mixers)
take a NumericBase, so they import this module and numeric.py imports them, never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..model.config import ModelConfig, Workload
from ..model.ops import Ops
from ..model.stage import Stage
from .caches import KVCache
from .storage import decode, measure, stored_nbytes
from .weights import Weights


class NumericBase(Ops):
    def __init__(self, model: ModelConfig, wl: Workload, weights: Weights, p: int,
                 ids: np.ndarray, cache: KVCache, *, layers: int | None = None,
                 valid: np.ndarray | None = None,
                 on_layer: Callable[[int, int], None] | None = None, keep_operands: bool = False):
        self.m, self.wl, self.w, self.p = model, wl, weights, p
        self.base = model  # self.m is a layer's own widths (dots3) inside that layer
        self.keep_operands = keep_operands  # the benchmark replays the very same GEMMs
        self.dt = weights.dtype
        self.ids = np.asarray(ids, dtype=np.int64)
        self.cache, self.n_run, self.on_layer = cache, layers, on_layer
        self.decoding = wl.phase == "decode"
        self.stages: list[Stage] = []
        self.gemms: list[tuple[Any, Any]] = []  # operand shapes (or operands) of every matmul
        self.routed: list[np.ndarray] = []  # each MoE layer's [B,T,k] expert ids
        self.ep_traffic: list[dict[str, int]] = []  # with ep > 1: each MoE layer's all-to-all
        self.boundaries: list[int] = []
        self.full_out: np.ndarray | None = None
        self._group, self._layer = "embedding", -1
        self._kind: int | None = None
        self._mixer = "attention"  # the current layer's token mixer
        self._last: np.ndarray | None = None
        self._hq = model.n_heads // p
        self._kv_of: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # each layer's K/V this step
        self._valid: Any = None  # DSA: the selection the last gather() read (dsa.py)
        self._selection: Any = None  # DSA: the last topk()'s, for the layers that share it
        self.neg = self.dt(np.finfo(self.dt).min / 2)  # masked score: exp() gives 0, no overflow
        B, Tq = self.ids.shape
        if valid is None:
            valid = np.ones((B, Tq), dtype=bool)
        cache.start(valid)
        self.valid = valid
        if self.decoding:
            pos = cache.next_pos[:, None] - 1
        else:  # left padding: a sequence's first real token is position 0
            pos = np.maximum(np.cumsum(valid, axis=1) - 1, 0)
        # positions shared by all rows unless padding shifts them
        self.pos = pos[0] if (pos == pos[0]).all() else pos
        i = np.arange(Tq)[:, None]
        self._ij = i, np.arange(Tq)[None, :]
        self.causal = self._ij[1] <= i  # prefill: queries and keys are the same T tokens

    def _window(self, W: int | None) -> np.ndarray:
        i, j = self._ij
        return (i - j < W) if W is not None else np.ones_like(self.causal)

    def _key_valid(self) -> np.ndarray:
        """[B, keys] the current layer's queries may read: its cache in decode, else the step."""
        return self.cache.valid(self._layer) if self.decoding else self.valid

    # -- recording -------------------------------------------------------------------------------
    def _el(self, a: np.ndarray) -> int:
        return a.size // a.shape[0]  # elements one rank touches

    def _rec(self, role: str, name: str, op: str, a: np.ndarray, *, flops: int = 0, ew: int = 0,
             params: int = 0, dtype: str | None = None, nbytes: int | None = None,
             operands: tuple[tuple[int, ...], ...] = ()) -> np.ndarray:
        dtype = dtype or self.wl.act
        self.stages.append(Stage(
            name=name, op=op, group=self._group, dims=[], shape=list(a.shape[1:]), flops=flops,
            elementwise_flops=ew, params=params,
            bytes=measure(a[0], dtype) if nbytes is None else nbytes, dtype=dtype, role=role,
            kind=self._kind, operands=[list(x) for x in operands], extra={"layer": self._layer}))
        self._last = a
        return a

    def _mm(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
        out = np.matmul(a, b)
        self.gemms.append((a, b) if self.keep_operands else (a.shape, b.shape))
        return out, 2 * self._el(out) * a.shape[-1]  # each output element: k multiply-adds

    def _streamed(self, x: np.ndarray, shards: list[Any], tied: bool
                  ) -> tuple[np.ndarray, int, int]:
        """x @ W with W made chunk by chunk (streamed weights); FLOPs and params of rank 0's
        chunks, each from the chunk really made."""
        ranks = max(x.shape[0], self.p) if self.p > 1 else 1
        width = sum(sh.width for sh in shards)
        y = np.empty((ranks, x.shape[1], width), dtype=self.dt)
        step = max(1, self.w.chunk_bytes // (shards[0].d_in * y.itemsize))
        flops = params = 0
        for r in range(ranks):  # ranks and chunks: a handful of big GEMMs each
            xr = x[r if x.shape[0] > 1 else 0]
            start = 0
            for sh in shards:
                for c0 in range(0, sh.width, step):
                    c1 = min(sh.width, c0 + step)
                    w = self.w.chunk(sh, r, c0, c1)
                    np.matmul(xr, w, out=y[r, :, start + c0 : start + c1])
                    self.gemms.append((xr.shape, w.shape))
                    if r == 0:
                        flops += 2 * xr.shape[0] * w.shape[0] * w.shape[1]
                        params += 0 if tied else w.size
                start += sh.width
        return y, flops, params

    def cache_step(self, layer: int, parts: tuple[np.ndarray, ...],
                   shown: Callable[[np.ndarray], np.ndarray] = lambda c: c) -> np.ndarray:
        """One layer's cache entry of `parts` (K and V; MLA's one tensor): written in prefill,
        appended and read whole in decode, each a stage (`shown`: the codes as the stage shows
        them). Returns every token the step reads, through the KV dtype: [R, parts, …]."""
        kv = self.wl.kv
        if not self.decoding:
            back, codes = self.cache.write_parts(layer, parts)
            self._rec("kv.write", "KV cache write", "kv_cache", shown(codes), dtype=kv,
                      nbytes=stored_nbytes(codes[0], kv))
            return back
        new, codes = self.cache.append_parts(layer, parts)
        self._rec("kv.append", "KV cache append", "kv_append", shown(new), dtype=kv,
                  nbytes=stored_nbytes(new[0], kv))
        self._rec("kv.read", "KV cache read", "kv_cache", shown(codes), dtype=kv,
                  nbytes=stored_nbytes(codes[0], kv))
        return decode(codes, kv, self.dt)
