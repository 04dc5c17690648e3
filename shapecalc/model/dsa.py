"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5), part of the one forward definition: the
lightning indexer, the top-K_sel selection, and MLA reading only the selected keys.

Written over the same `Ops` as mla.py; both interpreters run it. Two conventions count it
(the workload's `selection`): `eager` is what transformers and DeepSeek's reference code compute
(dense MLA scores over every key, the unselected masked out), `sparse` what a sparse kernel
computes (FlashMLA's sparse MLA: each query reads only its selected latents, in the absorbed
form, in prefill as in decode)."""

from __future__ import annotations

from typing import Any

from .config import ModelConfig, Workload
from .expr import Dim
from .ops import Ops
from .sizes import Sizes


def indexer_keys(ops: Ops, z: Sizes, h: Any, angles: Any) -> Any:
    """The indexer's one key per token, k_I [B,T,D_I]: wk, a LayerNorm (γ and β), RoPE on its
    first D_r (non-interleaved in transformers; the same count). It is cached beside the latent."""
    k = ops.linear(h, "attn.index_k", "indexer key (wk)", z.D, z.DI, False, "replicated")
    k = ops.norm(k, "attn.index_k_norm", "indexer key norm", z.DI, "layernorm_beta")
    if angles is None:
        return k
    k_rope, k_pass = ops.split(k, [z.Dr, z.DI + z.Dr * -1])
    k_rope = ops.rope(k_rope, "attn.rope", "RoPE indexer k", angles)
    return ops.concat([k_rope, k_pass], "attn.index_k.concat", "k_I = [k_rope, k_pass]")


def select(ops: Ops, m: ModelConfig, wl: Workload, z: Sizes, h: Any, cq: Any, k_all: Any,
           angles: Any) -> Any:
    """The lightning indexer: I[t,s] = Σ_h w[t,h]·relu(q_I[t,h]·k_I[s] / √D_I) / √H_I over
    every key s a query may read, then each query's top min(K_sel, T′) keys. Its queries come
    from the query latent c_Q (wq_b [D_q→H_I·D_I]), its head weights from the input
    (weights_proj [D→H_I]); all of it is replicated on every tensor-parallel rank."""
    one = Dim.const(1)
    q = ops.linear(cq, "attn.index_q", "indexer q (wq_b)", z.Dq, z.HI * z.DI, False,
                   "replicated")
    q = ops.split_heads(q, "attn.index_q.heads", "indexer q", z.HI, z.DI)
    if angles is not None:
        q_rope, q_pass = ops.split(q, [z.Dr, z.DI + z.Dr * -1])
        q_rope = ops.rope(q_rope, "attn.rope", "RoPE indexer q", angles)
        q = ops.concat([q_rope, q_pass], "attn.index_q.concat", "q_I = [q_rope, q_pass]")
    k = ops.split_heads(k_all, "attn.index_k.heads", "indexer k", one, z.DI)
    kt = ops.transpose_last(k, "attn.index_kT", "k_Iᵀ")
    s = ops.matmul(q, kt, "attn.index_scores", "indexer scores q_I·k_Iᵀ", causal=True,
                   window=None)
    s = ops.scale(s, "attn.index_scale", "indexer scale", m.index_head_dim**-0.5,  # type: ignore
                  "1/√D_I")
    s = ops.activation(s, "attn.index_relu", "indexer", "relu")
    w = ops.linear(h, "attn.index_w", "indexer head weights (weights_proj)", z.D, z.HI, False,
                   "replicated")
    w = ops.scale(w, "attn.index_w_scale", "head weight scale", m.index_heads**-0.5,  # type: ignore
                  "1/√H_I")
    i = ops.head_sum(s, w, "attn.index_sum", "index scores Σ_h w·relu(·)")
    if not z.decode:
        i = ops.mask(i, "attn.index_mask", "indexer causal mask", "causal")
    if wl.padding_mask:
        i = ops.mask(i, "attn.index_mask", "indexer padding mask", "padding")
    return ops.topk(i, "attn.topk", "top-K_sel keys", z.Ks)


def sparse_attention(ops: Ops, m: ModelConfig, z: Sizes, q_nope: Any, q_rope: Any, lat: Any,
                     sel: Any) -> Any:
    """The sparse kernel's MLA (FlashMLA sparse, prefill and decode): each query puts its
    q_nope in the latent space (q_nope·W_UKᵀ), gathers its selected latents [c_KV, k_rope]
    (D_c + D_r each), attends over them only (scores 2·H·(D_c+D_r), A·c_KV 2·H·D_c per selected
    key), and W_UV lifts each head's latent output to D_v (returned per head)."""
    ql = ops.head_linear(q_nope, "attn.q_absorb", "q absorbed (q_nope·W_UKᵀ)", z.Dn, z.Dc,
                         "attn.kv_b", "k")
    q = ops.concat([ql, q_rope], "attn.q.concat", "q = [q_latent, q_rope]")
    g = ops.gather(lat, sel, "attn.gather", "selected latents")
    s = ops.selected_matmul(q, g, "attn.scores", "Q·latentᵀ over the selected keys")
    s = ops.scale(s, "attn.scale", "scale", m.dh**-0.5, "1/√Dh, Dh = D_n+D_r")
    a = ops.softmax(s, "attn.softmax", "softmax")
    c_sel, _ = ops.split(g, [z.Dc, z.Dr])
    o = ops.selected_matmul(a, c_sel, "attn.values", "A·c_KV over the selected keys")
    # each head's output [B,H,T,D_v]: mla.py gates (dots3), merges and projects it
    return ops.head_linear(o, "attn.v_up", "v up-projection (·W_UV)", z.Dc, z.Dv, "attn.kv_b",
                           "v")
