"""Seeded weights of the full model, made on first use, and their tensor-parallel shards.

Weights are derived from the full model and split here (q/k/v, gate/up by columns, o/down by rows,
vocabulary by rows), never from the `Dim`s forward() passes, so a wrong symbolic size shows up as a
mismatch instead of being copied.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..model.config import ModelConfig, ceil_div
from ..model.plan import layer_kv_heads, layer_plan, widened
from .storage import alloc

STD = 0.02  # small weights keep float16 activations finite
_POOL = 4_194_301  # seeded normals tiled over weights: random-looking, filled at memcpy speed


@lru_cache(maxsize=4)
def _pool(seed: int, dtype: type, std: float) -> np.ndarray:
    """The seeded pool, made once per (seed, dtype, std) in a process (drawing 4 M normals takes
    ~70 ms; verify, verify --train and explain make several Weights alike): read-only, shared."""
    rng = np.random.default_rng(seed)
    pool: np.ndarray = (rng.standard_normal(_POOL, dtype=np.float32) * std).astype(dtype)
    pool.flags.writeable = False
    return pool


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
        self.pool = _pool(seed, self.dtype, float(std))
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
        if sh.how == "replicated":  # every rank holds it whole
            return W[None]
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
        first = (r // sh.groups) * sh.dh if sh.how == "kvrep" else (
            0 if sh.how == "replicated" else r * sh.width)
        return self.block(sh.key, sh.shape, (0, sh.shape[0]), (first + c0, first + c1))

    def linear(self, layer: int, role: str, p: int) -> tuple[list[Shard], Any, int, bool, Any]:
        """(shards side by side, bias [p|1, 1, width] or [D] or None, bias params per rank, bias
        on rank 0 only, resident operand [p|1, d_in, width] or None)."""
        k = (layer, role, p)
        if k not in self.shards:
            shards, b, bparams, row_bias = self._linear(layer, role, p)
            W = None
            if self.resident:
                parts = [self.stacked(sh) for sh in shards]
                W = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
            self.shards[k] = (shards, b, bparams, row_bias, W)
        return self.shards[k]

    def lm_key(self) -> tuple:
        """The LM head's matrix: the embedding table when tied."""
        return ("embedding",) if self.m.tie_embeddings else ("lm head",)

    def borrowed(self, role: str, key: tuple) -> bool:
        """A matrix another stage owns and counts: the tied LM head's (the embedding's), an MTP
        module's head that is the model's (MiMo-V2-Flash)."""
        return key == ("embedding",) or (role == "mtp.head" and key == ("lm head",))

    def at(self, layer: int) -> ModelConfig:
        """The model as layer `layer` sees it: its own widths (dots3's per_layer_config)."""
        m = self.m
        if m.layer_widths is None or not 0 <= layer < m.n_layers:
            return m
        plan = layer_plan(m)
        return widened(m, plan.kinds[plan.kind_of[layer]])

    def _linear(self, layer: int, role: str, p: int) -> tuple[list[Shard], Any, int, bool]:
        m = self.at(layer)
        D, dh, H, Hkv = m.d_model, m.layer_dh(layer), m.n_heads, layer_kv_heads(m, layer)
        if role.startswith("ple."):  # Gemma 4's per-layer embeddings: replicated
            dp = m.ple_dim or 0
            d_in, width = {"ple.proj": (D, m.n_layers * dp), "ple.gate": (D, dp),
                           "ple.out": (dp, D)}[role]
            return [Shard((layer, role), (d_in, width), "replicated", p, d_in, width)], None, 0, \
                False
        if role == "head.lm":
            key = self.lm_key()
            vp = m.vocab_size if p == 1 else self.vocab_rows // p
            b = None
            if m.lm_head_bias:
                full = self.get(("lm head", "bias"), (self.vocab_rows,))
                b = full[: m.vocab_size][None, None] if p == 1 else full.reshape(p, 1, -1)
            sh = Shard(key, (self.vocab_rows, D), "vocab", p, D, vp)
            return [sh], b, b[0].size if b is not None else 0, False
        if role == "mtp.head":  # an MTP module's own head (the checkpoint's shared_head.head)
            vp = m.vocab_size if p == 1 else self.vocab_rows // p
            own = self.lm_key() if m.mtp_shared_head else (layer, role)  # MiMo: the model's
            return [Shard(own, (self.vocab_rows, D), "vocab", p, D, vp)], None, 0, False
        if role in V4_ROLES and m.shared_kv:  # DeepSeek-V4: replicated
            dq, gd = m.q_lora_rank or 0, (m.o_groups or 0) * (m.o_lora_rank or 0)
            hi, di = m.csa_index_heads or 0, m.csa_index_head_dim or 0
            d_in, width = {"attn.q_a": (D, dq), "attn.q_b": (dq, H * dh), "attn.kv": (D, dh),
                           "attn.o_b": (gd, D), "attn.hca.kv": (D, dh),
                           "attn.hca.gate": (D, dh), "attn.csa.kv": (D, 2 * dh),
                           "attn.csa.gate": (D, 2 * dh), "attn.idx.kv": (D, 2 * di),
                           "attn.idx.gate": (D, 2 * di), "attn.idx.q": (dq, hi * di),
                           "attn.idx.w": (D, hi)}[role]
            if role == "attn.q_b":  # heads split by column, the rest replicated
                return [Shard((layer, role), (d_in, width), "column", p, d_in, width // p)], \
                    None, 0, False
            if role == "attn.o_b":  # the output groups split by rows, then all-reduced
                return [Shard((layer, role), (d_in, width), "row", p, d_in // p, width)], \
                    None, 0, False
            return [Shard((layer, role), (d_in, width), "replicated", p, d_in, width)], None, \
                0, False
        if role.startswith("hc.") and role.endswith(".proj"):  # mHC [n_hc·D → logits], replicated
            n = m.hc_streams or 1
            width = n if role == "hc.head.proj" else (
                (n + 2) * n if m.hc_mixing == "sinkhorn" else 2 * n)
            return [Shard((layer, role), (n * D, width), "replicated", p, n * D, width)], None, 0, \
                False
        if role == "mtp.proj":  # eh_proj [2D→D], replicated on every rank
            return [Shard((layer, role), (2 * D, D), "replicated", p, 2 * D, D)], None, 0, False
        if role == "attn.qkv":  # each rank's fused matrix is its q, k and v shards side by side
            parts = [self._linear(layer, r, p) for r in ("attn.q", "attn.k", "attn.v")]
            b = np.concatenate([x[1] for x in parts], axis=-1) if m.qkv_bias else None
            return [x[0][0] for x in parts], b, sum(x[2] for x in parts), False
        if role in MIXER_PARTS:  # a mixer's fused projection: each rank its heads of each part
            subs = [self._linear(layer, r, p) for r in MIXER_PARTS[role]]
            b = np.concatenate([x[1] for x in subs], axis=-1) if subs[0][1] is not None else None
            return [x[0][0] for x in subs], b, sum(x[2] for x in subs), False
        if role in ("attn.bidx.q", "attn.bidx.k"):  # the block indexer's, replicated, no bias
            di = m.block_index_head_dim or 0
            width = di * (m.block_index_heads or 0) if role == "attn.bidx.q" else di
            return [Shard((layer, role), (D, width), "replicated", p, D, width)], None, 0, False
        if role in _MLA_ROLES or (m.mla and role == "attn.q"):
            return self._mla_linear(layer, role, p)
        if role.startswith("mamba."):  # Mamba-1, on one rank (config.check refuses p > 1)
            d_in, width = {"mamba.in": (D, 2 * m.mamba_inner),
                           "mamba.x": (m.mamba_inner, (m.mamba_dt_rank or 0)
                                       + 2 * (m.ssm_state or 0)),
                           "mamba.dt": (m.mamba_dt_rank or 0, m.mamba_inner),
                           "mamba.out": (m.mamba_inner, D)}[role]
            has = m.mamba_proj_bias and role in ("mamba.in", "mamba.out")
            bm = self.get((layer, role, "bias"), (width,))[None, None] if has else None
            return [Shard((layer, role), (d_in, width), "column", 1, d_in, width)], bm, \
                width if has else 0, False
        if role in _KDA_LOW_RANK:  # KDA's gates: D → D_k replicated, D_k → H·D_k by heads
            dk, kd = m.gdn_qk_dim or 0, (m.gdn_qk_heads or 0) * (m.gdn_qk_dim or 0)
            if role.endswith("_a"):
                return [Shard((layer, role), (D, dk), "replicated", p, D, dk)], None, 0, False
            return [Shard((layer, role), (dk, kd), "column", p, dk, kd // p)], None, 0, False
        if role.startswith("moe.router") and m.router_hidden is not None:  # ZAYA's router
            rh = m.router_hidden
            d_in, width = (m.d_model, rh) if role == "moe.router.down" else (
                rh, (m.n_experts or 0) + 1 if role == "moe.router" else rh)
            bf = self.get((layer, role, "bias"), (width,)) if role != "moe.router" else None
            sh = Shard((layer, role), (d_in, width), "replicated", p, d_in, width)
            return [sh], (bf[None, None] if bf is not None else None), \
                width if bf is not None else 0, False
        shared = m.n_shared_experts * m.dff_shared
        kd = (m.gdn_qk_heads or 0) * (m.gdn_qk_dim or 0)
        vd = (m.gdn_v_heads or 0) * (m.gdn_v_dim or 0)
        dv = dh if m.v_head_dim is None else m.v_head_dim  # D_v: MLA's, MiMo-V2-Flash's
        width = {"attn.q": H * dh, "attn.k": Hkv * dh, "attn.v": Hkv * dv, "attn.out": H * dv,
                 "ffn.gate": m.layer_d_ff(layer), "ffn.up": m.layer_d_ff(layer),
                 "ffn.down": m.layer_d_ff(layer),
                 "moe.shared.gate": shared, "moe.shared.up": shared, "moe.shared.down": shared,
                 # Inkling's router scores its shared experts too
                 "moe.router": (m.n_experts or 0) + m.n_shared_experts * ("inkling" in m.mixers),
                 "moe.shared_gate": 1,
                 # Mamba-2: in [D → z, x, B, C, dt] (its parts), out [I → D]
                 "ssm.in.z": m.ssm_inner, "ssm.in.x": m.ssm_inner,
                 "ssm.in.B": m.ssm_groups * (m.ssm_state or 0),
                 "ssm.in.C": m.ssm_groups * (m.ssm_state or 0), "ssm.in.dt": m.ssm_heads or 0,
                 "ssm.out": m.ssm_inner,
                 # gated DeltaNet: q, k, v, z, b, a (fused or not), out [H_v·D_hv → D]
                 "gdn.q": kd, "gdn.k": kd, "gdn.v": vd, "gdn.z": vd,
                 "gdn.b": m.gdn_v_heads or 0, "gdn.a": m.gdn_v_heads or 0,
                 "gdn.out": (m.gdn_v_heads or 0) * (m.gdn_v_dim or 0),
                 "attn.gate": H * m.v_dim,
                 # the short conv: in [D → B, C, x], out [D → D]
                 "conv.in.B": D, "conv.in.C": D, "conv.in.x": D, "conv.out": D,
                 # KDA: q, k, v [D → H·D_k] each, β [D → H], full-rank gates, out [H·D_k → D];
                 # the head-wise gate [D → H] (LFM3's, Ling 3.0's MLA's)
                 "kda.q": kd, "kda.k": kd, "kda.v": kd, "kda.b": m.gdn_qk_heads or 0,
                 "kda.f": kd, "kda.g": kd, "kda.out": kd, "attn.head_gate": H,
                 # CCA: each half of the value, this token's and the delayed one
                 "cca.v_now": Hkv * dh // 2, "cca.v_delayed": Hkv * dh // 2,
                 "attn.r": H * (m.rel_dim or 0)}[role]
        has_b = {"attn.out": m.attn_out_bias, "ffn.gate": m.ffn_bias, "ffn.up": m.ffn_bias,
                 "ffn.down": m.ffn_bias, "moe.shared.gate": m.ffn_bias,
                 "moe.shared.up": m.ffn_bias, "moe.shared.down": m.ffn_bias,
                 "moe.router": m.router_bias, "moe.shared_gate": False, "ssm.in": False,
                 "attn.head_gate": False, "attn.gate": m.qkv_bias and not m.mla,
                 "ssm.out": False}.get(role, m.conv_bias if role.startswith("conv.") else (
                     not role.startswith(("gdn.", "ssm.", "kda.")) and m.qkv_bias))
        if role in ("moe.router", "moe.shared_gate"):  # replicated on every rank (vLLM)
            bf = self.get((layer, role, "bias"), (width,)) if has_b else None
            sh = Shard((layer, role), (D, width), "replicated", p, D, width)
            return [sh], (bf[None, None] if bf is not None else None), \
                width if has_b else 0, False
        if role in ("attn.out", "ffn.down", "moe.shared.down", "ssm.out", "gdn.out", "conv.out",
                    "kda.out"):
            # row-parallel: rank r holds rows r·n/p …; the bias is added once
            b = self.get((layer, role, "bias"), (D,)) if has_b else None
            return [Shard((layer, role), (width, D), "row", p, width // p, D)], b, \
                D if has_b else 0, True
        bf = self.get((layer, role, "bias"), (width,)) if has_b else None
        if role in ("attn.k", "attn.v") and Hkv < p:
            # vLLM: rank r holds (a copy of) KV head r // (p/H_kv)
            hd = width // Hkv  # a head's width: Dh, or the value's D_v
            sh = Shard((layer, role), (D, width), "kvrep", p, D, hd, hd, p // Hkv)
            b = bf.reshape(Hkv, 1, hd)[np.arange(p) // (p // Hkv)] if bf is not None else None
        else:
            sh = Shard((layer, role), (D, width), "column", p, D, width // p)
            b = bf.reshape(p, 1, width // p) if bf is not None else None
        return [sh], b, b[0].size if b is not None else 0, False

    def _mla_linear(self, layer: int, role: str, p: int) -> tuple[list[Shard], Any, int, bool]:
        """MLA's projections: the down-projections (q_a, kv_a with k_rope) replicated on every
        rank, the up-projections (q or q_b, kv_b) split by heads. Biases: attention_bias puts
        them on q_a and kv_a (and o), never on the up-projections."""
        m = self.at(layer)
        H, dc, dr = m.n_heads, m.kv_lora_rank or 0, m.rot
        d_in, width, how = {
            "attn.q": (m.d_model, H * m.dh, "column"),
            "attn.q_a": (m.d_model, m.q_lora_rank or 0, "replicated"),
            "attn.q_b": (m.q_lora_rank or 0, H * m.dh, "column"),
            "attn.kv_a": (m.d_model, dc + dr, "replicated"),
            "attn.kv_b": (dc, H * ((m.qk_nope_head_dim or 0) + m.v_dim), "column"),
            # DSA's lightning indexer (no biases), replicated on every rank
            "attn.index_q": (m.q_lora_rank or 0, (m.index_heads or 0) * (m.index_head_dim or 0),
                             "replicated"),
            "attn.index_k": (m.d_model, m.index_head_dim or 0, "replicated"),
            "attn.index_w": (m.d_model, m.index_heads or 0, "replicated"),
        }[role]
        if how == "replicated":
            biased = m.qkv_bias and not role.startswith("attn.index")
            bf = self.get((layer, role, "bias"), (width,)) if biased else None
            return [Shard((layer, role), (d_in, width), how, p, d_in, width)], (
                bf[None, None] if bf is not None else None), width if bf is not None else 0, False
        return [Shard((layer, role), (d_in, width), how, p, d_in, width // p)], None, 0, False


# DeepSeek-V4's projections, each replicated (weights._linear)
V4_ROLES = ("attn.q_a", "attn.q_b", "attn.kv", "attn.o_b", "attn.hca.kv", "attn.hca.gate",
            "attn.csa.kv", "attn.csa.gate", "attn.idx.kv", "attn.idx.gate", "attn.idx.q",
            "attn.idx.w")
# MLA's projections (weights._mla_linear)
_MLA_ROLES = ("attn.q_a", "attn.q_b", "attn.kv_a", "attn.kv_b", "attn.index_q", "attn.index_k",
              "attn.index_w")
# the stateful mixers' fused projections, as the parts each rank holds its heads of (vLLM's
# merged column-parallel layout: rank r's operand is [z_r | x_r | B_r | C_r | dt_r])
MIXER_PARTS = {
    "ssm.in": ("ssm.in.z", "ssm.in.x", "ssm.in.B", "ssm.in.C", "ssm.in.dt"),
    "gdn.qkvz": ("gdn.q", "gdn.k", "gdn.v", "gdn.z"),
    "gdn.ba": ("gdn.b", "gdn.a"),
    "gdn.qkv": ("gdn.q", "gdn.k", "gdn.v"),
    "conv.in": ("conv.in.B", "conv.in.C", "conv.in.x"),
    "kda.qkv": ("kda.q", "kda.k", "kda.v"),
}
_KDA_LOW_RANK = ("kda.f_a", "kda.f_b", "kda.g_a", "kda.g_b")  # the gates' two factors
