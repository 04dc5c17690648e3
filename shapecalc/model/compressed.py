"""DeepSeek-V4's attention (shared_kv), part of the one forward definition, as transformers 5.24's
DeepseekV4Attention and DeepseekV4HCACompressor compute it (eager).

Symbols: D_q the query latent, g head groups and d_g each group's width in the output
projection, W the window every layer keeps, m′ an hca layer's compression ratio. The query goes
through the latent (q_a, its RMSNorm, q_b), each head RMS-normed without γ; one K=V head [D → Dh]
(its RMSNorm) is both key and value; RoPE turns the R = rotary_dim dims of each head. A sliding
layer attends to the window's keys; an hca layer also to its compressed entries: each m′ tokens
pooled (a softmax over the window of m′ of gate + position bias, weighting the kv) into one
entry, RMS-normed and turned at its window's position. Eager attention scores every key against
every query in prefill (T window keys + ⌊T/m′⌋ entries, masked); decode reads min(T+1, W) window
keys and ⌊(T+1)/m′⌋ entries. Each head's sink joins the softmax; the output's RoPE is undone;
the grouped output projection maps each group's H·Dh/g to d_g, then g·d_g to D.
"""

from __future__ import annotations

from typing import Any

from . import gemma
from .config import ModelConfig, Workload
from .expr import Dim, Expr
from .ops import Ops
from .plan import LayerSpec
from .sizes import Sizes


def v4_attention(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, h: Any,
                 layer: int, angles: Any) -> Any:
    one, qw = Dim.const(1), z.H * z.Dh
    # the output groups split over the p ranks, as the heads are: g/p each
    g, dg = z.sym("g", (m.o_groups or 1) // z.p), z.sym("d_g", m.o_lora_rank or 1)
    if z.p > 1 and not z.poly:
        g = Dim((m.o_groups or 1) // z.p, Expr.sym("g") * Expr([((("p", -1),), 1)]))
    qr = ops.linear(h, "attn.q_a", "q_a projection", z.D, z.Dq, False, "replicated")  # [B,T,D_q]
    qr = ops.norm(qr, "attn.q_a_norm", "q_a norm", z.Dq, "rmsnorm")  # [B,T,D_q]
    q = ops.linear(qr, "attn.q_b", "q_b projection", z.Dq, qw, False, "column")  # [B,T,H·Dh]
    q = ops.split_heads(q, "attn.q.heads", "q", z.H, z.Dh)  # [B,H,T,Dh]
    q = ops.norm(q, "attn.q_l2norm", "q norm (no γ)", z.Dh, "l2norm")  # [B,H,T,Dh]
    q = ops.rope(q, "attn.rope", "RoPE q", angles)  # [B,H,T,Dh]
    kv = ops.linear(h, "attn.kv", "K=V projection", z.D, z.Dh, False, "replicated")  # [B,T,Dh]
    kv = ops.norm(kv, "attn.kv_norm", "K=V norm", z.Dh, "rmsnorm")  # [B,T,Dh]
    kv = ops.split_heads(kv, "attn.k.heads", "K=V", one, z.Dh)  # [B,1,T,Dh]
    kv = ops.rope(kv, "attn.rope", "RoPE K=V", angles)  # [B,1,T,Dh]
    Tk, Tc = z.keys(spec)
    kv = ops.shared_kv_cache(kv, layer, Tk, Tc)  # [B,1,Tk,Dh]: the window's keys
    selected = None
    if spec.compress is not None:  # hca, csa: the compressed entries beside the window
        part = spec.attention
        c = _compressor(ops, z, h, layer, spec.compress, part, z.Dh)  # [B,1,n,Dh]: every entry
        if part == "csa":  # its indexer picks each query's K_sel entries
            selected = _indexer(ops, m, z, h, qr, layer, spec.compress, angles)
        kv = ops.cat_keys(kv, c, f"attn.{part}.cat", "window ‖ entries")  # [B,1,Tk+n,Dh]
    k = ops.repeat_kv(kv, "attn.repeat_kv", "repeat K=V", z.H.value, z.H)  # [B,H,Tk+n,Dh]
    kt = ops.transpose_last(k, "attn.kT", "kᵀ")  # [B,H,Dh,Tk+n]
    s = ops.matmul(q, kt, "attn.scores", "QKᵀ", causal=False, window=None)  # [B,H,T,Tk+n]
    s = ops.scale(s, "attn.scale", "scale", *gemma.score_scale(m))
    if wl.phase == "prefill" or selected is not None:  # decode: the window, closed entries
        s = ops.window_mask(s, "attn.mask", "window and entries mask", spec.window,
                            spec.compress, selected)
    a = ops.softmax(s, "attn.softmax", "softmax", z.H)  # [B,H,T,Tk+n], each head's sink
    o = ops.matmul(a, k, "attn.values", "A·V (V = K)", causal=False, window=None)  # [B,H,T,Dh]
    o = ops.rope(o, "attn.rope_out", "RoPE undone on the output", angles)  # [B,H,T,Dh]
    o = ops.merge_heads(o, "attn.merge", "merge heads")  # [B,T,H·Dh]
    o = ops.grouped_linear(o, "attn.o_a", "grouped output o_a", g, qw, dg)  # [B,T,g·d_g]
    return ops.linear(o, "attn.o_b", "output o_b", g * dg, z.D, False, "row")  # [B,T,D]


def _compressor(ops: Ops, z: Sizes, h: Any, layer: int, ratio: int, part: str, w: Dim) -> Any:
    """Every entry so far [B,1,n,w] of one compressor (hca; csa and its indexer's over
    overlapping windows: kv and gate 2w wide, each window's first half the previous one's)."""
    width = w if part == "hca" else w * 2
    ckv = ops.linear(h, f"attn.{part}.kv", "compressor kv", z.D, width, False,  # [B,T,w|2w]
                     "replicated")
    cg = ops.linear(h, f"attn.{part}.gate", "compressor gate", z.D, width, False,  # [B,T,w|2w]
                    "replicated")
    return ops.compress(ckv, cg, layer, ratio, part)  # [B,1,n,w]


def _indexer(ops: Ops, m: ModelConfig, z: Sizes, h: Any, qr: Any, layer: int, ratio: int,
             angles: Any) -> Any:
    """The csa indexer: its own compressor's keys [B,1,n,D_I], queries from the q latent,
    Σ_h w_h·ReLU(q_h·k) over every entry, the top K_sel of the closed ones: [B,T,K]."""
    HI, DI = z.sym("H_I", m.csa_index_heads or 1), z.sym("D_I", m.csa_index_head_dim or 1)
    k = _compressor(ops, z, h, layer, ratio, "idx", DI)  # [B,1,n,D_I]
    q = ops.linear(qr, "attn.idx.q", "indexer q", z.Dq, HI * DI, False, "replicated")
    q = ops.split_heads(q, "attn.idx.heads", "indexer q", HI, DI)  # [B,H_I,T,D_I]
    q = ops.rope(q, "attn.idx.rope", "RoPE indexer q", angles)  # [B,H_I,T,D_I]
    w = ops.linear(h, "attn.idx.w", "indexer head weights", z.D, HI, False,  # [B,T,H_I]
                   "replicated")
    return ops.index_select(q, k, w, ratio, m.csa_index_topk or 1)  # [B,T,K]


def _floors(T: int, m: int, cap: int | None = None) -> int:
    """Σ_{t=1..T} min(⌊t/m⌋, cap): the closed entries the T queries of a prefill may read (at
    most cap each: the csa indexer's K_sel)."""
    def upto(n: int) -> int:  # Σ_{t=1..n} ⌊t/m⌋ = m·q(q−1)/2 + q·(r+1), n = q·m + r
        q, r = divmod(n, m)
        return m * q * (q - 1) // 2 + q * (r + 1)
    if cap is None or T < cap * m:
        return upto(T)
    return upto(cap * m - 1) + (T - cap * m + 1) * cap


def sparse_kernel_keys(m: ModelConfig, T: int, phase: str) -> dict[str, int]:
    """Keys a sparse kernel's queries read (each only what it may), summed over the step's
    queries, per layer type: the window's min(t+1, W), hca's closed entries ⌊(t+1)/m′⌋, csa's
    min(K_sel, ⌊(t+1)/m⌋) selected entries. Eager attention scores all T (+ every entry)."""
    W = m.sliding_window or 0
    if phase == "decode":  # one query at position T
        win, n = min(T + 1, W), T + 1
        hca = n // m.compress_ratio_hca if m.compress_ratio_hca else 0
        csa = min(m.csa_index_topk or 0, n // m.compress_ratio_csa) if m.compress_ratio_csa \
            else 0
    else:
        win = W * (W + 1) // 2 + (T - W) * W if T > W else T * (T + 1) // 2
        hca = _floors(T, m.compress_ratio_hca) if m.compress_ratio_hca else 0
        csa = _floors(T, m.compress_ratio_csa, m.csa_index_topk) if m.compress_ratio_csa else 0
    return {"sliding": win, "hca": win + hca, "csa": win + csa}


def sparse_kernel_flops(m: ModelConfig, B: int, T: int, phase: str) -> int:
    """QKᵀ and A·V over those keys, every layer: 2·2·B·H·keys·Dh each."""
    keys = sparse_kernel_keys(m, T, phase)
    return sum(4 * B * m.n_heads * keys[t] * m.dh for t in m.layer_types or ())
