"""The NumPy interpreter of forward(): real arrays, seeded weights, KV caches, TP and PP simulated.

Every tensor carries a leading rank axis: [p, …] for values that differ between tensor-parallel
ranks, [1, …] for values every rank holds (broadcast). So one np.matmul runs all ranks on their
shards, and `allreduce` is a sum over that axis. Each operation records a Stage measured from the
arrays themselves: the shape of one rank's array, FLOPs from the operand shapes of every matmul it
ran (2·m·k·n per matmul), elementwise FLOPs as elements × passes it made over them, parameters of
the weight arrays it used, bytes from `.nbytes` after conversion to the workload's dtype.

Weights are derived from the full model and split here (q/k/v, gate/up by columns, o/down by rows,
vocabulary by rows), never from the `Dim`s forward() passes, so a wrong symbolic size shows up as a
mismatch instead of being copied.
"""

from __future__ import annotations

import mmap
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.config import ModelConfig, Workload, ceil_div
from ..model.forward import LINEAR_LABEL, Ops, Sizes, Stage, forward
from ..model.parallel import pp_layers

PRECISIONS: dict[str, Any] = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
STD = 0.02  # small weights keep float16 activations finite
EPS = 1e-5
ROPE_BASE = 10000.0
_POOL = 4_194_301  # seeded normals tiled over weights: random-looking, filled at memcpy speed
# Integer KV caches store round(x / scale) with one fixed scale, so a prefill of T tokens and of
# T+1 tokens quantize the shared tokens identically (decode == full forward still holds).
QSCALE = {"int8": 1 / 32, "fp8": 1 / 32, "int4": 1 / 2}
_MADV_POPULATE_WRITE = 23  # Linux ≥ 5.14



# -- storage dtypes -------------------------------------------------------------------------------
def encode(a: np.ndarray, dtype: str) -> np.ndarray:
    """`a` as stored in `dtype`: bf16 really as the top 16 bits (round to nearest even), int8/fp8/
    int4 as integer codes (NumPy has no fp8; an int8 code has its size)."""
    with np.errstate(all="ignore"):
        if dtype == "fp32":
            return a.astype(np.float32, copy=False)
        if dtype == "fp16":
            return a.astype(np.float16)
        if dtype == "bf16":
            u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
            return ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
        if dtype == "int64":
            return a.astype(np.int64, copy=False)
        lim = 7 if dtype == "int4" else 127
        q = np.rint(a * (1 / QSCALE[dtype]))
        np.clip(q, -lim - 1, lim, out=q)
        return q.astype(np.int8)


def decode(codes: np.ndarray, dtype: str, out: Any) -> np.ndarray:
    if dtype in ("fp32", "fp16"):
        return codes.astype(out, copy=False)
    if dtype == "bf16":
        return (codes.astype(np.uint32) << 16).view(np.float32).astype(out, copy=False)
    return codes.astype(out) * out(QSCALE[dtype])


def pack_int4(codes: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte, as an int4 tensor is stored (odd counts round up)."""
    u = (codes.ravel() & 0xF).astype(np.uint8)
    if u.size % 2:
        u = np.append(u, np.uint8(0))
    return u[0::2] | (u[1::2] << 4)


def stored_nbytes(codes: np.ndarray, dtype: str) -> int:
    return int(pack_int4(codes).nbytes if dtype == "int4" else codes.nbytes)


def measure(a: np.ndarray, dtype: str) -> int:
    """Bytes of `a` once converted to `dtype`, from the converted array's `.nbytes`."""
    return stored_nbytes(encode(a, dtype), dtype)


def alloc(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An empty array. Big ones are mapped with huge pages and populated in one call: faulting
    4 KiB pages one by one costs more than filling them (several seconds for a 70B layer)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if n < 1 << 26 or not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(shape, dtype)
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
        m.madvise(_MADV_POPULATE_WRITE)
    except OSError:  # an older kernel: the fill faults the pages in
        pass
    return np.frombuffer(m, dtype=dtype).reshape(shape)


# -- weights --------------------------------------------------------------------------------------
@dataclass
class Shard:
    """How p ranks split one full weight matrix: rank r's [d_in, width] operand."""

    key: tuple
    shape: tuple[int, int]  # the full matrix, as stored (vocabulary tables: rows = vocabulary)
    how: str  # column | row | vocab (rows, used transposed) | kvrep (one whole KV head)
    p: int
    d_in: int
    width: int  # output columns per rank
    dh: int = 0
    groups: int = 1  # kvrep: ranks per KV head


class Weights:
    """Seeded full (unsharded) weights, made on first use; shards for p ranks are views of them.

    Element f of a flattened matrix is pool[(offset + f) mod P]: iid normals for matrices up to
    P elements, a tiling beyond. Vocabulary tables have ceil(N_vocab/p)·p rows (vLLM pads the
    vocabulary for p ranks). `given` replaces arrays by key (explain's hand-made example).

    `resident=False` streams: no big matrix is ever held whole. A linear makes its shard in
    column chunks, multiplies, and drops them; the embedding gathers only the rows looked up.
    """

    def __init__(self, model: ModelConfig, seed: int = 0, dtype: Any = np.float32, p: int = 1,
                 given: dict[tuple, np.ndarray] | None = None, std: float = STD,
                 resident: bool = True, chunk_bytes: int = 1 << 26):
        self.m, self.seed, self.dtype = model, seed, np.dtype(dtype).type
        self.resident, self.chunk_bytes = resident, chunk_bytes
        self.vocab_rows = ceil_div(model.vocab_size, p) * p
        rng = np.random.default_rng(seed)
        self.pool = (rng.standard_normal(_POOL, dtype=np.float32) * std).astype(self.dtype)
        self.given = {k: np.asarray(v, self.dtype) for k, v in (given or {}).items()}
        self.full: dict[tuple, np.ndarray] = {}
        self.shards: dict[tuple, Any] = {}
        self._ext: np.ndarray | None = None
        self._buf: np.ndarray | None = None

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.full.values())

    def _offset(self, key: tuple) -> int:
        return zlib.crc32(repr((self.seed, *key)).encode()) % _POOL

    def get(self, key: tuple, shape: tuple[int, ...], base: float = 0.0) -> np.ndarray:
        if key in self.given:
            return self.given[key]
        a = self.full.get(key)
        if a is None:
            a = self.full[key] = alloc(shape, self.dtype)
            flat, n, i, off = a.reshape(-1), a.size, 0, self._offset(key)
            while i < n:
                take = min(_POOL - off, n - i)
                flat[i : i + take] = self.pool[off : off + take]
                i, off = i + take, 0
            if base:
                flat += self.dtype(base)
        return a

    def _extended(self, width: int) -> np.ndarray:
        """The pool followed by its own start, so a window of `width` never wraps."""
        if self._ext is None or self._ext.size < _POOL + width:
            self._ext = np.concatenate([self.pool, self.pool[: max(width, 1 << 16)]])
        return self._ext

    def block(self, key: tuple, shape: tuple[int, int], rows: tuple[int, int],
              cols: tuple[int, int]) -> np.ndarray:
        """W[r0:r1, c0:c1] of the matrix `get` would make, made without making W, into a buffer
        reused chunk after chunk (no fresh pages). Row i starts at pool[(off + i·n + c0) mod P]:
        between wraps of the pool the rows are one strided view, copied row by row."""
        (r0, r1), (c0, c1) = rows, cols
        if key in self.given or key in self.full:
            return self.get(key, shape)[r0:r1, c0:c1]
        count, width, stride = r1 - r0, c1 - c0, shape[1]
        ext = self._extended(width)
        if self._buf is None or self._buf.size < count * width:
            self._buf = np.empty(count * width, dtype=self.dtype)
        out = self._buf[: count * width].reshape(count, width)
        start, i = (self._offset(key) + r0 * stride + c0) % _POOL, 0
        while i < count:  # one pass per wrap of the pool, not per row
            n = min(count - i, -(-(_POOL - start) // stride))
            out[i : i + n] = np.lib.stride_tricks.as_strided(
                ext[start:], (n, width), (stride * ext.itemsize, ext.itemsize), writeable=False)
            start, i = (start + n * stride) % _POOL, i + n
        return out

    def rows(self, key: tuple, shape: tuple[int, int], ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of a matrix (an embedding lookup); streamed: without making the matrix."""
        if key in self.given or key in self.full or self.resident:
            return self.get(key, shape)[ids]
        windows = np.lib.stride_tricks.sliding_window_view(self._extended(shape[1]), shape[1])
        return windows[(self._offset(key) + ids * shape[1]) % _POOL]

    # -- shards ------------------------------------------------------------------------------
    def stacked(self, sh: Shard) -> np.ndarray:
        """All ranks' operands as one array [p, d_in, width] (views of the full matrix)."""
        W, p = self.get(sh.key, sh.shape), sh.p
        if sh.how == "vocab":
            V = self.m.vocab_size
            return (W[:V][None] if p == 1 else W.reshape(p, sh.width, -1)).transpose(0, 2, 1)
        if sh.how == "row":
            return W.reshape(p, sh.d_in, W.shape[1])
        if sh.how == "kvrep":
            heads = np.arange(p) // sh.groups
            return W.reshape(W.shape[0], -1, sh.dh)[:, heads, :].transpose(1, 0, 2)
        return W.reshape(W.shape[0], p, sh.width).transpose(1, 0, 2)

    def chunk(self, sh: Shard, r: int, c0: int, c1: int) -> np.ndarray:
        """Rank r's operand, columns c0:c1, made on its own: [d_in, c1 − c0]."""
        if sh.how == "vocab":
            return self.block(sh.key, sh.shape, (r * sh.width + c0, r * sh.width + c1),
                              (0, sh.shape[1])).T
        if sh.how == "row":
            return self.block(sh.key, sh.shape, (r * sh.d_in, (r + 1) * sh.d_in), (c0, c1))
        first = (r // sh.groups) * sh.dh if sh.how == "kvrep" else r * sh.width
        return self.block(sh.key, sh.shape, (0, sh.shape[0]), (first + c0, first + c1))

    def linear(self, layer: int, name: str, p: int) -> tuple[list[Shard], Any, int, bool, Any]:
        """(shards side by side, bias [p|1, 1, width] or [D] or None, bias params per rank, bias
        on rank 0 only, resident operand [p|1, d_in, width] or None)."""
        k = (layer, name, p)
        if k not in self.shards:
            shards, b, bparams, row_bias = self._linear(layer, name, p)
            W = None
            if self.resident:
                parts = [self.stacked(sh) for sh in shards]
                W = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
            self.shards[k] = (shards, b, bparams, row_bias, W)
        return self.shards[k]

    def _linear(self, layer: int, name: str, p: int) -> tuple[list[Shard], Any, int, bool]:
        m = self.m
        D, dh, H, Hkv = m.d_model, m.dh, m.n_heads, m.kv_heads
        if name == "lm head":
            key = ("embedding",) if m.tie_embeddings else ("lm head",)
            vp = m.vocab_size if p == 1 else self.vocab_rows // p
            b = None
            if m.lm_head_bias:
                full = self.get(("lm head", "bias"), (self.vocab_rows,))
                b = full[: m.vocab_size][None, None] if p == 1 else full.reshape(p, 1, -1)
            sh = Shard(key, (self.vocab_rows, D), "vocab", p, D, vp)
            return [sh], b, b[0].size if b is not None else 0, False
        if name == "qkv":  # each rank's fused matrix is its q, k and v shards side by side
            parts = [self._linear(layer, n, p) for n in ("q", "k", "v")]
            b = np.concatenate([x[1] for x in parts], axis=-1) if m.qkv_bias else None
            return [x[0][0] for x in parts], b, sum(x[2] for x in parts), False
        width = {"q": H * dh, "k": Hkv * dh, "v": Hkv * dh, "o": H * dh, "gate": m.d_ff,
                 "up": m.d_ff, "down": m.d_ff}[name]
        has_b = {"o": m.attn_out_bias, "gate": m.ffn_bias, "up": m.ffn_bias,
                 "down": m.ffn_bias}.get(name, m.qkv_bias)
        if name in ("o", "down"):  # row-parallel: rank r holds rows r·n/p …; bias once
            b = self.get((layer, name, "bias"), (D,)) if has_b else None
            return [Shard((layer, name), (width, D), "row", p, width // p, D)], b, \
                D if has_b else 0, True
        bf = self.get((layer, name, "bias"), (width,)) if has_b else None
        if name in ("k", "v") and Hkv < p:  # vLLM: rank r holds (a copy of) KV head r // (p/H_kv)
            sh = Shard((layer, name), (D, width), "kvrep", p, D, dh, dh, p // Hkv)
            b = bf.reshape(Hkv, 1, dh)[np.arange(p) // (p // Hkv)] if bf is not None else None
        else:
            sh = Shard((layer, name), (D, width), "column", p, D, width // p)
            b = bf.reshape(p, 1, width // p) if bf is not None else None
        return [sh], b, b[0].size if b is not None else 0, False


# -- KV caches ------------------------------------------------------------------------------------
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


# -- the interpreter ------------------------------------------------------------------------------
class NumericOps(Ops):
    def __init__(self, model: ModelConfig, wl: Workload, weights: Weights, p: int,
                 ids: np.ndarray, cache: KVCache, *, layers: int | None = None,
                 valid: np.ndarray | None = None,
                 on_layer: Callable[[int, int], None] | None = None, keep_operands: bool = False):
        self.m, self.wl, self.w, self.p = model, wl, weights, p
        self.keep_operands = keep_operands  # the benchmark replays the very same GEMMs
        self.dt = weights.dtype
        self.ids = np.asarray(ids, dtype=np.int64)
        self.cache, self.n_run, self.on_layer = cache, layers, on_layer
        self.decoding = wl.phase == "decode"
        self.stages: list[Stage] = []
        self.gemms: list[tuple[Any, Any]] = []  # operand shapes (or operands) of every matmul
        self.boundaries: list[int] = []
        self.full_out: np.ndarray | None = None
        self._group, self._layer = "embedding", -1
        self._last: np.ndarray | None = None
        self._hq = model.n_heads // p
        self.neg = self.dt(np.finfo(self.dt).min / 2)  # masked score: exp() gives 0, no overflow
        B, Tq = self.ids.shape
        if valid is None:
            valid = np.ones((B, Tq), dtype=bool)
        cache.start(valid)
        if self.decoding:
            pos = cache.next_pos[:, None] - 1
            self.key_valid: np.ndarray = cache.valid
        else:  # left padding: a sequence's first real token is position 0
            pos = np.maximum(np.cumsum(valid, axis=1) - 1, 0)
            self.key_valid = valid
        # positions shared by all rows unless padding shifts them
        self.pos = pos[0] if (pos == pos[0]).all() else pos
        i = np.arange(Tq)[:, None]
        j = np.arange(self.key_valid.shape[1])[None, :]
        self.causal = j <= i
        W = model.sliding_window
        self.window = (i - j < W) if W is not None else np.ones_like(self.causal)

    # -- recording -------------------------------------------------------------------------------
    def _el(self, a: np.ndarray) -> int:
        return a.size // a.shape[0]  # elements one rank touches

    def _rec(self, name: str, op: str, a: np.ndarray, *, flops: int = 0, ew: int = 0,
             params: int = 0, dtype: str | None = None, nbytes: int | None = None) -> np.ndarray:
        dtype = dtype or self.wl.act
        self.stages.append(Stage(
            name=name, op=op, group=self._group, dims=[], shape=list(a.shape[1:]), flops=flops,
            elementwise_flops=ew, params=params,
            bytes=measure(a[0], dtype) if nbytes is None else nbytes, dtype=dtype,
            extra={"layer": self._layer}))
        self._last = a
        return a

    def _mm(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
        out = np.matmul(a, b)
        self.gemms.append((a, b) if self.keep_operands else (a.shape, b.shape))
        return out, 2 * self._el(out) * a.shape[-1]  # each output element: k multiply-adds

    # -- structure -------------------------------------------------------------------------------
    def layers(self, n: int) -> Iterator[int]:
        k = n if self.n_run is None else min(n, self.n_run)
        s = self.wl.pp
        # PP: stage i runs its layers, then hands the residual stream to stage i+1. With fewer
        # layers run than stages, every layer stands for a stage.
        cuts = set((np.cumsum(pp_layers(k, s))[:-1] - 1).tolist()) if k >= s else set(range(k))
        for layer in range(k):
            self._layer = layer
            if self.on_layer:
                self.on_layer(layer, k)
            yield layer
            if s > 1 and layer in cuts:
                assert self._last is not None
                self.boundaries.append(measure(self._last[0], self.wl.act))
        self._layer = -1

    def group(self, g: Any) -> None:
        self._group = g

    # -- operations ------------------------------------------------------------------------------
    def token_ids(self, B: Any, T: Any) -> np.ndarray:
        return self._rec("token ids", "input", self.ids[None], dtype="int64")

    def embed(self, ids: np.ndarray, V: Any, D: Any, split: Any) -> np.ndarray:
        vp = self.m.vocab_size if self.p == 1 else self.w.vocab_rows // self.p
        key, shape = ("embedding",), (self.w.vocab_rows, self.m.d_model)
        rows = self.w.rows(key, shape, ids[0])  # [B,T,D]: the rows looked up
        params = vp * self.m.d_model  # streamed: the slice no array holds whole
        if self.w.resident:  # the rank's slice of the table really allocated
            E = self.w.get(key, shape)
            params = (E[: self.m.vocab_size] if self.p == 1 else E.reshape(self.p, vp, -1)[0]).size
        if self.p == 1:
            x = rows[None]
        else:  # rank r looks up the ids in its slice, zeros elsewhere (the all-reduce sums them)
            x = np.zeros((self.p, *rows.shape), dtype=self.dt)
            owner = ids[0] // vp
            b, t = np.indices(ids[0].shape)
            x[owner, b, t] = rows
        return self._rec("embedding", "embed", x, params=params)

    def positions(self, x: np.ndarray, kind: str, rows: int | None) -> np.ndarray:
        D = self.m.d_model
        if kind == "learned":
            assert rows is not None
            P = self.w.get(("positions",), (rows, D))
            pe, params = P[self.pos], P.size
        else:  # a fixed table, not parameters (and, by convention, not counted as work)
            half = np.arange(0, D, 2) / D
            ang = self.pos[..., None] / (10000.0**half)
            pe = np.empty((*ang.shape[:-1], D), dtype=self.dt)
            pe[..., 0::2], pe[..., 1::2] = np.sin(ang), np.cos(ang)
            params = 0
        if pe.ndim == 3:  # per-sequence positions (left padding)
            pe = pe[None]
        y = x + pe
        return self._rec("position add", "add", y, ew=self._el(y), params=params)

    def rope_angles(self, T: Any, Dh: Any) -> np.ndarray:
        dh = self.m.dh
        inv = (ROPE_BASE ** (-np.arange(0, dh, 2) / dh)).astype(np.float32)
        ang = self.pos.astype(np.float32)[..., None] * inv  # positions ⊗ frequencies: [T,Dh/2]
        cos = np.concatenate([np.cos(ang)] * 2, axis=-1).astype(self.dt)
        sin = np.sin(ang).astype(self.dt)
        sin = np.concatenate([-sin, sin], axis=-1)  # rotate-half's sign folded into the table
        if ang.ndim == 3:  # per-sequence positions [B,T,Dh] → [B,1,T,Dh] against [R,B,H,T,Dh]
            cos, sin = cos[:, None], sin[:, None]
        self._rope = (cos, sin)
        return self._rec("RoPE angles", "outer", ang[None], ew=ang.size, dtype="fp32")

    def scale(self, x: np.ndarray, name: str, factor: float, label: str) -> np.ndarray:
        # the scores are fresh from QKᵀ and used once: scale them in place
        y = np.multiply(x, self.dt(factor), out=x if name == "scale" else None)
        return self._rec(name, "scale", y, ew=self._el(y))

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:
        m, n, D = self.m, self._el(x), self.m.d_model
        key = (self._layer, name)
        g = self.w.get((*key, "γ"), (D,), base=1.0)
        params = g.size
        if m.norm == "layernorm":  # mean, subtract, square, mean, divide
            y = x - x.mean(axis=-1, keepdims=True)
            var = np.square(y).mean(axis=-1, keepdims=True)
            y /= np.sqrt(var + self.dt(EPS))
            ew = 5 * n
        else:  # square, mean, divide
            ms = np.square(x).mean(axis=-1, keepdims=True)
            y = x / np.sqrt(ms + self.dt(EPS))
            ew = 3 * n
        y *= g
        ew += n
        if m.has_norm_bias:
            b = self.w.get((*key, "β"), (D,))
            y += b
            ew, params = ew + n, params + b.size
        return self._rec(name, m.norm, y, ew=ew, params=params)

    def linear(self, x: np.ndarray, name: str, d_in: Any, d_out: Any, bias: bool,
               split: Any) -> np.ndarray:
        shards, b, params, row_bias, W = self.w.linear(self._layer, name, self.p)
        rows = x.shape[1:-1]
        x2 = x.reshape(x.shape[0], -1, x.shape[-1])
        if W is not None:
            y, flops = self._mm(x2, W)
            params += W[0].size if shards[0].key != ("embedding",) else 0  # tied: no new array
        else:
            y, flops, wparams = self._streamed(x2, shards)
            params += wparams
        ew = 0
        if b is not None:
            if row_bias:  # a row-parallel bias is added once: on rank 0, before the all-reduce
                y[0] += b
            else:
                y += b
            ew = self._el(y)
        y = y.reshape(y.shape[0], *rows, y.shape[-1])
        label = LINEAR_LABEL.get(name, name)
        return self._rec(label, "linear", y, flops=flops, ew=ew, params=params)

    def _streamed(self, x: np.ndarray, shards: list[Any]) -> tuple[np.ndarray, int, int]:
        """x @ W with W made chunk by chunk (streamed weights); FLOPs and params of rank 0's
        chunks, each from the chunk really made."""
        ranks = max(x.shape[0], self.p) if self.p > 1 else 1
        width = sum(sh.width for sh in shards)
        y = np.empty((ranks, x.shape[1], width), dtype=self.dt)
        step = max(1, self.w.chunk_bytes // (shards[0].d_in * y.itemsize))
        flops = params = 0
        tied = shards[0].key == ("embedding",)
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

    def split(self, x: np.ndarray, parts: list[Any]) -> list[np.ndarray]:
        dh = self.m.dh
        kv = max(1, self.m.kv_heads // self.p) * dh
        widths = [self._hq * dh, kv, kv]
        assert len(parts) == 3 and sum(widths) == x.shape[-1]
        return [x[..., :widths[0]], x[..., widths[0]:widths[0] + kv], x[..., widths[0] + kv:]]

    def split_heads(self, x: np.ndarray, name: str, heads: Any, Dh: Any) -> np.ndarray:
        R, B, T, width = x.shape
        dh = self.m.dh
        r = self._rec(f"{name}: reshape", "reshape", x.reshape(R, B, T, width // dh, dh))
        if name == "q":
            self._hq = width // dh
        return self._rec(f"{name}: transpose", "transpose", r.transpose(0, 1, 3, 2, 4))

    def rope(self, x: np.ndarray, name: str, angles: Any) -> np.ndarray:
        cos, sin = self._rope
        h = x.shape[-1] // 2
        rot = np.concatenate([x[..., h:], x[..., :h]], axis=-1)  # moves data, no arithmetic
        y = x * cos
        rot *= sin
        y += rot
        return self._rec(name, "rope", y, ew=3 * self._el(y))

    def kv_cache(self, k: np.ndarray, v: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray]:
        kv = self.wl.kv
        if not self.decoding:
            k, v, codes = self.cache.write(layer, k, v)
            self._rec("KV cache write", "kv_cache", codes, dtype=kv,
                      nbytes=stored_nbytes(codes[0], kv))
            return k, v
        new, codes = self.cache.append(layer, k, v)
        self._rec("KV cache append", "kv_append", new, dtype=kv, nbytes=stored_nbytes(new[0], kv))
        self._rec("KV cache read", "kv_cache", codes, dtype=kv, nbytes=stored_nbytes(codes[0], kv))
        back = decode(codes, kv, self.dt)
        return back[:, 0], back[:, 1]

    def repeat_kv(self, x: np.ndarray, name: str, groups: int, heads: Any) -> np.ndarray:
        return self._rec(name, "repeat", np.repeat(x, self._hq // x.shape[2], axis=2))

    def transpose_last(self, x: np.ndarray, name: str) -> np.ndarray:
        return self._rec(name, "transpose", x.swapaxes(-1, -2))

    def matmul(self, a: np.ndarray, b: np.ndarray, name: str, causal: bool) -> np.ndarray:
        out, flops = self._mm(a, b)
        if causal and self.wl.attention_flops == "causal" and not self.decoding:
            # a causal kernel computes only the (query, key) pairs the masks allow
            pairs = int(np.count_nonzero(self.causal & self.window))
            qk = name == "QKᵀ"
            batch = self._el(out) // (out.shape[-2] * out.shape[-1])
            flops = 2 * batch * pairs * (a.shape[-1] if qk else b.shape[-1])
        return self._rec(name, "matmul", out, flops=flops)

    def mask(self, s: np.ndarray, name: str, kind: str) -> np.ndarray:
        allowed = {"causal": self.causal, "window": self.window}.get(kind)
        if allowed is None:  # padding: [B,1,1,T] over the keys
            allowed = self.key_valid[:, None, None, :]
        np.copyto(s, self.neg, where=~allowed)
        return self._rec(name, "mask", s, ew=self._el(s))

    def softmax(self, s: np.ndarray, name: str) -> np.ndarray:
        # row max, subtract, exp, row sum, divide: in place, the scores are not needed again
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        return self._rec(name, "softmax", s, ew=5 * self._el(s))

    def merge_heads(self, x: np.ndarray, name: str) -> np.ndarray:
        t = self._rec(f"{name}: transpose", "transpose", x.transpose(0, 1, 3, 2, 4))
        R, B, T, H, dh = t.shape
        return self._rec(f"{name}: reshape", "reshape", t.reshape(R, B, T, H * dh))

    def add(self, a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
        y = a + b
        return self._rec(name, "add", y, ew=self._el(y))

    def activation(self, x: np.ndarray, name: str, kind: str) -> np.ndarray:
        n = self._el(x)
        if kind == "relu":
            y, ew = np.maximum(x, 0, out=x), n
        elif kind == "silu":  # x / (1 + e^−x): negate, exp, add, divide
            u = np.negative(x)
            np.exp(u, out=u)
            u += 1
            y, ew = np.divide(x, u, out=u), 4 * n
        else:  # gelu (tanh form): ½·x·(1 + tanh(c·(x + 0.044715·x³))), 8 passes
            c = np.sqrt(2 / np.pi)
            u = x * x
            u *= self.dt(c * 0.044715)
            u += self.dt(c)
            u *= x
            np.tanh(u, out=u)
            u += 1
            u *= x
            u *= self.dt(0.5)
            y, ew = u, 8 * n
        return self._rec(f"{name} ({kind})", kind, y, ew=ew)

    def mul(self, a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
        y = a * b
        return self._rec(name, "mul", y, ew=self._el(y))

    def allreduce(self, x: np.ndarray, name: str) -> np.ndarray:
        sent = measure(x[0], self.wl.act)  # one rank's partial sum, in the activation dtype
        return self._rec(name, "allreduce", x.sum(axis=0, keepdims=True), nbytes=sent)

    def allgather(self, x: np.ndarray, name: str, full: Any) -> np.ndarray:
        p, vp = x.shape[0], x.shape[-1]
        g = np.moveaxis(x, 0, -2).reshape(*x.shape[1:-1], p * vp)[..., : self.m.vocab_size]
        return self._rec(name, "allgather", g[None])

    def last_position(self, x: np.ndarray, name: str) -> np.ndarray:
        self.full_out = x  # every position: what the mask checks compare
        return self._rec(name, "slice", x[:, :, -1])


# -- one step -------------------------------------------------------------------------------------
@dataclass
class Step:
    logits: np.ndarray  # [B, N_vocab]: the last position
    full: np.ndarray  # every position, as it reached the last-position slice
    stages: list[Stage]
    boundaries: list[int]  # PP hand-offs, bytes each
    kv_bytes: list[int]  # per layer run, one rank
    kv_blocks: int | None = None  # a paged cache's blocks after this step
    gemms: list[tuple[Any, Any]] = field(default_factory=list)


def step(model: ModelConfig, wl: Workload, weights: Weights, ids: np.ndarray, *,
         p: int | None = None, cache: KVCache | None = None, layers: int | None = None,
         valid: np.ndarray | None = None,
         on_layer: Callable[[int, int], None] | None = None, keep_operands: bool = False) -> Step:
    """Run forward() once (a prefill of ids [B,T], or a decode of ids [B,1] on `cache`)."""
    p = wl.tp if p is None else p
    if cache is None:
        cache = ContiguousKV(wl.kv, model.sliding_window, weights.dtype)
    ops = NumericOps(model, wl, weights, p, ids, cache, layers=layers, valid=valid,
                     on_layer=on_layer, keep_operands=keep_operands)
    with np.errstate(over="ignore", under="ignore"):
        logits = forward(ops, model, wl, Sizes.of(model, wl, p))
    assert ops.full_out is not None
    return Step(logits[0], ops.full_out[0], ops.stages, ops.boundaries, cache.nbytes(),
                getattr(cache, "blocks", None), ops.gemms)
