"""Block-sparse attention (MiniMax-M3's MiniMax Sparse Attention), part of the one forward
definition: a block indexer scores every key, max-pools the scores over blocks of S_blk keys and
keeps, per query and per KV group, the top K_blk blocks (its own block and the L_blk − 1 before
it always among them); GQA then reads only the keys of those blocks.

Written over the same `Ops` as forward.py; both interpreters run it. Two conventions count it
(the workload's `selection`): `eager` is what transformers computes (the dense scores over every
key, the unselected blocks masked: MiniMaxM3VLIndexer.build_block_mask), `sparse` what the
block-sparse kernel computes (MiniMax's MSA: each query reads only the keys of its K_blk
blocks, as far as it may read: (min(K_blk, ⌊t/S_blk⌋+1) − 1)·S_blk + (t mod S_blk) + 1 keys at
position t)."""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .expr import Dim
from .ops import Ops
from .sizes import Sizes


def block_select(ops: Ops, m: ModelConfig, z: Sizes, h: Any, layer: int, angles: Any,
                 Tk: Dim, Tc: Dim) -> Any:
    """The block indexer (MiniMaxM3VLIndexer): q [D → H_I·D_I] and one key head [D → D_I], each
    RMS-normed over D_I (Gemma's 1 + γ) and turned by the layer's RoPE on its first R; its key
    cached beside K and V; scores q·kᵀ over every key, in fp32 (no weights, no ReLU: a max over
    each block ranks it). Returns each query's selected blocks per indexer head."""
    HI, DI = z.sym("H_I", m.block_index_heads or 1), z.sym("D_I", m.block_index_head_dim or 1)
    q = ops.linear(h, "attn.bidx.q", "block indexer q", z.D, HI * DI, False,  # [B,T,H_I·D_I]
                   "replicated")
    q = ops.split_heads(q, "attn.bidx.q.heads", "block indexer q", HI, DI)  # [B,H_I,T,D_I]
    q = ops.norm(q, "attn.bidx.q_norm", "block indexer q norm", DI, "rmsnorm")  # [B,H_I,T,D_I]
    k = ops.linear(h, "attn.bidx.k", "block indexer k", z.D, DI, False,  # [B,T,D_I]
                   "replicated")
    k = ops.norm(k, "attn.bidx.k_norm", "block indexer k norm", DI, "rmsnorm")  # [B,T,D_I]
    if angles is not None:
        q = ops.rope(q, "attn.rope", "RoPE block indexer q", angles)  # [B,H_I,T,D_I]
        k = ops.rope(k, "attn.rope", "RoPE block indexer k", angles)  # [B,T,D_I]
    k = ops.block_cache(k, layer, Tk, Tc)  # [B,1,T′,D_I]: every cached indexer key
    kt = ops.transpose_last(k, "attn.bidx.kT", "k_Iᵀ")  # [B,1,D_I,T′]
    s = ops.matmul(q, kt, "attn.index_scores", "block indexer scores q_I·k_Iᵀ",  # [B,H_I,T,T′]
                   causal=True, window=None)
    if not z.decode:  # future keys never win a block
        s = ops.mask(s, "attn.index_mask", "block indexer causal mask", "causal")
    return ops.block_topk(s, "attn.topk", "top-K_blk key blocks",  # [B,H_I,T,K]
                          m.index_block_size or 1, m.index_topk_blocks or 1,
                          m.index_local_blocks or 1)


def block_keys(size: int, top: int, t: int) -> int:
    """Keys the block-sparse kernel reads for the query at position t: the keys up to t of its
    min(K_blk, ⌊t/S_blk⌋ + 1) selected blocks (every earlier selected block whole; its own,
    always selected, up to t)."""
    return (min(top, t // size + 1) - 1) * size + t % size + 1


def block_pairs(size: int, top: int, first: int, queries: int) -> int:
    """Σ block_keys over the queries at positions first … first + queries − 1, in closed form:
    t + 1 for t below K_blk·S_blk, then (K_blk − 1)·S_blk + (t mod S_blk) + 1."""
    def upto(n: int) -> int:  # Σ_{t<n} block_keys(t)
        dense = min(n, top * size)
        total = dense * (dense + 1) // 2
        if n > dense:
            full, part = divmod(n - dense, size)  # whole blocks past the cut, then a part
            total += (n - dense) * ((top - 1) * size + 1)
            total += full * size * (size - 1) // 2 + part * (part - 1) // 2
        return total
    return upto(first + queries) - upto(first)
