"""Multi-head Latent Attention (DeepSeek-V2/V3, Kimi K2), part of the one forward definition.

Written over the same `Ops` as forward.py; both interpreters run it."""

from __future__ import annotations

from typing import Any

from . import dsa
from .config import ModelConfig, Workload
from .expr import Dim
from .ops import Ops
from .plan import LayerSpec
from .sizes import Sizes


def mla_attention(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, h: Any,
                  layer: int, angles: Any) -> Any:
    """Multi-head Latent Attention (DeepSeek-V2/V3). K and V of every head come from a latent
    c_KV of D_c per token, plus one RoPE key k_rope of D_r shared by all heads; the cache keeps
    the latent (`absorbed`, `latent`) or every head's K and V (`expanded`). Prefill expands the
    latent through kv_b_proj in every form (as engines do: compute-bound, T queries); decode
    differs: `latent` re-expands all T′ cached latents each step (transformers 5.x), `absorbed`
    folds kv_b_proj into the query and the output (vLLM, SGLang, FlashMLA) and attends over the
    latents themselves, `expanded` reads the cached K and V. Under TP the down-projections and
    the latent cache are replicated on every rank; q_b, kv_b and o are split by heads."""
    form, decode = wl.mla, z.decode
    one = Dim.const(1)
    cq = None
    if m.q_lora_rank is not None:
        cq = ops.linear(h, "attn.q_a", "q down-projection (q_a)", z.D, z.Dq, m.qkv_bias,
                        "replicated")
        cq = ops.norm(cq, "attn.q_a_norm", "q latent norm", z.Dq, "rmsnorm")
        if m.mla_latent_scale:  # dots3: the normed latent × √(D/D_q) (the indexer reads it too)
            cq = ops.scale(cq, "attn.q_a_scale", "q latent scale",
                           (m.d_model / m.q_lora_rank) ** 0.5, "√(D/D_q)")
        q = ops.linear(cq, "attn.q_b", "q up-projection (q_b)", z.Dq, z.H * z.Dh,
                       False, "column")
    else:
        q = ops.linear(h, "attn.q", "q projection", z.D, z.H * z.Dh, False, "column")
    q = ops.split_heads(q, "attn.q.heads", "q", z.H, z.Dh)
    q_nope, q_rope = ops.split(q, [z.Dn, z.Dr])
    kv = ops.linear(h, "attn.kv_a", "kv down-projection (kv_a, with k_rope)", z.D, z.Dc + z.Dr,
                    m.qkv_bias, "replicated")
    c, k_rope = ops.split(kv, [z.Dc, z.Dr])
    c = ops.norm(c, "attn.kv_a_norm", "kv latent norm", z.Dc, "rmsnorm")
    if m.mla_latent_scale:  # dots3: × √(D/D_c)
        c = ops.scale(c, "attn.kv_a_scale", "kv latent scale",
                      (m.d_model / m.kv_lora_rank) ** 0.5, "√(D/D_c)")  # type: ignore[operator]
    if m.mla_rope_norm:  # dots3's k_rope_only_layernorm: an RMSNorm of D_r before RoPE
        k_rope = ops.norm(k_rope, "attn.k_rope_norm", "k_rope norm", z.Dr, "rmsnorm")
    if angles is not None:
        q_rope = ops.rope(q_rope, "attn.rope", "RoPE q_rope", angles)
        k_rope = ops.rope(k_rope, "attn.rope", "RoPE k_rope", angles)
    Tk, Tc = z.keys(spec)
    sel = None  # DSA: each query's selected keys
    indexed = m.dsa and spec.attention != "sliding"  # dots3's sliding MLA runs no indexer

    def expand(c_t: Any, r_t: Any) -> tuple[Any, Any]:
        """Latents [B,t,D_c] and k_rope [B,t,D_r] → every head's K [B,H,t,D_n+D_r], V."""
        kvb = ops.linear(c_t, "attn.kv_b", "kv up-projection (kv_b)", z.Dc, z.H * (z.Dn + z.Dv),
                         False, "column")
        kvb = ops.split_heads(kvb, "attn.kv_b.heads", "k_nope, v", z.H, z.Dn + z.Dv)
        k_nope, v = ops.split(kvb, [z.Dn, z.Dv])
        r_h = ops.split_heads(r_t, "attn.k.heads", "k_rope", one, z.Dr)
        return ops.concat([k_nope, r_h], "attn.k.concat", "k = [k_nope, k_rope]", z.H), v

    if form == "expanded":
        k, v = expand(c, k_rope)
        kv_all = ops.mla_cache(ops.concat([k, v], "attn.kv.concat", "[K, V]"), layer, Tk, Tc,
                               "K of H·(D_n+D_r) and V of H·D_v")
        k, v = ops.split(kv_all, [z.Dh, z.Dv])
    else:
        if indexed and spec.shared_topk:  # GLM-5's IndexShare: no indexer, no k_I cached
            lat = ops.mla_cache(ops.concat([c, k_rope], "attn.latent", "latent [c_KV, k_rope]"),
                                layer, Tk, Tc, "latent c_KV of D_c and k_rope of D_r")
            sel = ops.shared_selection("attn.topk", "the previous indexer layer's top-K_sel",
                                       z.Ks, Tk)
        elif indexed and m.index_cache_dtype:  # dots3: k_I cached apart, in fp32
            k_i = dsa.indexer_keys(ops, z, h, angles)
            lat = ops.mla_cache(ops.concat([c, k_rope], "attn.latent", "latent [c_KV, k_rope]"),
                                layer, Tk, Tc, "latent c_KV of D_c and k_rope of D_r")
            k_all = ops.index_cache(k_i, layer, Tk, Tc, m.index_cache_dtype)
            sel = dsa.select(ops, m, wl, z, h, cq, k_all, angles)
        elif indexed:  # the indexer's key k_I of D_I is cached beside the latent
            k_i = dsa.indexer_keys(ops, z, h, angles)
            lat = ops.mla_cache(ops.concat([c, k_rope, k_i], "attn.latent",
                                           "latent [c_KV, k_rope] and indexer key k_I"),
                                layer, Tk, Tc, "latent c_KV of D_c, k_rope of D_r and the "
                                "indexer's k_I of D_I")
            lat, k_all = ops.split(lat, [z.Dc + z.Dr, z.DI])
            sel = dsa.select(ops, m, wl, z, h, cq, k_all, angles)
        else:
            lat = ops.mla_cache(ops.concat([c, k_rope], "attn.latent", "latent [c_KV, k_rope]"),
                                layer, Tk, Tc, "latent c_KV of D_c and k_rope of D_r")
        c_all, r_all = ops.split(lat, [z.Dc, z.Dr])
        if sel is not None and wl.selection == "sparse":
            return _out(ops, m, z, h, dsa.sparse_attention(ops, m, z, q_nope, q_rope, lat, sel))
        if form == "absorbed" and decode:
            return _mla_absorbed(ops, m, wl, z, q_nope, q_rope, lat, c_all, h, sel)
        k, v = expand(c_all, r_all)
    q = ops.concat([q_nope, q_rope], "attn.q.concat", "q = [q_nope, q_rope]")
    kt = ops.transpose_last(k, "attn.kT", "kᵀ")
    s = ops.matmul(q, kt, "attn.scores", "QKᵀ", causal=True, window=spec.window)
    s = ops.scale(s, "attn.scale", "scale", m.dh**-0.5, "1/√Dh, Dh = D_n+D_r")
    if not decode:
        s = ops.mask(s, "attn.mask", "causal mask", "causal")
    if not decode and spec.window is not None and spec.window < wl.seq:  # dots3's sliding MLA
        s = ops.mask(s, "attn.mask", "sliding-window mask", "window", spec.window)
    if wl.padding_mask:
        s = ops.mask(s, "attn.mask", "padding mask", "padding")
    if sel is not None:  # eager DSA: the dense scores, all but the selected keys masked
        s = ops.select_mask(s, sel, "attn.mask", "index mask (unselected keys)")
    a = ops.softmax(s, "attn.softmax", "softmax", z.H if m.attention_sinks else None)
    o = ops.matmul(a, v, "attn.values", "A·V", causal=True, window=spec.window)
    return _out(ops, m, z, h, o)


def _out(ops: Ops, m: ModelConfig, z: Sizes, h: Any, o: Any) -> Any:
    """Each head's output o [B,H,T,D_v] → [B,T,D]: the gates, the merge and WO."""
    o = ops.merge_heads(_head_gate(ops, m, z, h, o), "attn.merge", "merge heads")  # [B,T,H·D_v]
    if m.attn_output_gate:  # Hunyuan 4: o ⊙ sigmoid(h·W_g), W_g [D, H·D_v] (gate_proj, no bias)
        g = ops.linear(h, "attn.gate", "output gate projection", z.D, z.H * z.Dv, False,
                       "column")  # [B,T,H·D_v]
        o = ops.mul(o, ops.activation(g, "attn.gate.act", "output gate", "sigmoid"),
                    "attn.gate.mul", "o ⊙ gate")  # [B,T,H·D_v]
    return ops.linear(o, "attn.out", "output projection WO", z.H * z.Dv, z.D, m.attn_out_bias,
                      "row")  # [B,T,D]


def _head_gate(ops: Ops, m: ModelConfig, z: Sizes, h: Any, o: Any) -> Any:
    """Ling 3.0: each head's output o [B,H,T,D_v] × sigmoid(x·W_g), one gate per head."""
    if not m.attn_head_gate:
        return o
    g = ops.linear(h, "attn.head_gate", "head-wise output gate", z.D, z.H, False,  # [B,T,H]
                   "column")
    g = ops.activation(g, "attn.head_gate.act", "head gate", "sigmoid")  # [B,T,H]
    g = ops.split_heads(g, "attn.head_gate.heads", "gate", z.H, Dim.const(1))  # [B,H,T,1]
    return ops.mul(o, g, "attn.head_gate.mul", "o ⊙ gate (per head)")  # [B,H,T,D_v]


def _mla_absorbed(ops: Ops, m: ModelConfig, wl: Workload, z: Sizes, q_nope: Any, q_rope: Any,
                  lat: Any, c_all: Any, h: Any, sel: Any = None) -> Any:
    """MLA decode in the latent space: q_nope·W_UKᵀ puts each head's query beside the cached
    latents, so scores read [c_KV, k_rope] (D_c + D_r) directly, A·c_KV gives each head a
    latent output, and W_UV lifts it to D_v. kv_b_proj's two halves are used as W_UK and W_UV,
    never applied to the cache."""
    one = Dim.const(1)
    ql = ops.head_linear(q_nope, "attn.q_absorb", "q absorbed (q_nope·W_UKᵀ)", z.Dn, z.Dc,
                         "attn.kv_b", "k")
    q = ops.concat([ql, q_rope], "attn.q.concat", "q = [q_latent, q_rope]")
    lat_h = ops.split_heads(lat, "attn.latent.heads", "latent", one, z.Dc + z.Dr)
    kt = ops.transpose_last(lat_h, "attn.kT", "latentᵀ")
    s = ops.matmul(q, kt, "attn.scores", "Q·latentᵀ", causal=True, window=None)
    s = ops.scale(s, "attn.scale", "scale", m.dh**-0.5, "1/√Dh, Dh = D_n+D_r")
    if wl.padding_mask:
        s = ops.mask(s, "attn.mask", "padding mask", "padding")
    if sel is not None:  # DeepSeek's reference decode: every latent scored, the unselected masked
        s = ops.select_mask(s, sel, "attn.mask", "index mask (unselected keys)")
    a = ops.softmax(s, "attn.softmax", "softmax", z.H if m.attention_sinks else None)
    c_h = ops.split_heads(c_all, "attn.latent.heads", "c_KV", one, z.Dc)
    o = ops.matmul(a, c_h, "attn.values", "A·c_KV", causal=True, window=None)
    o = ops.head_linear(o, "attn.v_up", "v up-projection (·W_UV)", z.Dc, z.Dv, "attn.kv_b",
                        "v")
    return _out(ops, m, z, h, o)
