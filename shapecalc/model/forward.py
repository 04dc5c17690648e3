"""The forward pass of a decoder-only Transformer, written once.

`forward()` is plain code over a small vocabulary of operations (`Ops`, in ops.py). The symbolic
interpreter (interpret/symbolic.py) answers each operation with shapes, formulas and exact counts;
the NumPy interpreter (interpret/numeric.py) answers it with real arrays. Neither can drift from
the other: there is one model.

With tensor parallelism the forward describes ONE rank: heads, KV heads, Dff and the vocabulary
are that rank's share, and the row-parallel outputs meet in an all-reduce (Megatron/vLLM layout).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from . import gemma, gemma4
from .config import ModelConfig, Workload
from .expr import Dim
from .ops import Ops
from .plan import LayerSpec, layer_plan, mtp_spec
from .sizes import Sizes
from .zaya import residual

__all__ = ["ACT", "Ops", "Sizes", "forward"]


# the activation each FFN kind applies (gated kinds to the gate)
ACT = {"gelu": "gelu", "geglu": "gelu", "relu": "relu", "relu2": "relu2", "xielu": "xielu",
       "swiglu": "silu"}
# the token mixers other than attention: one function each, over Ops, in model/<module>.py.
# These and the other mechanisms of a few families (MLA, DeepSeek-V4's attention, CCA,
# hyper-connections, block-sparse attention, Inkling's layer, ZAYA's router) are imported where
# a model first uses them: a plain decoder loads none (start-up: benchmarks/bench_startup.py).
MIXERS = {"mamba2": ("mamba2", "mamba2_mixer"), "gated_deltanet": ("gated_deltanet",
          "gated_deltanet_mixer"), "short_conv": ("short_conv", "short_conv_mixer"),
          "mamba1": ("mamba1", "mamba1_mixer"), "kda": ("kda", "kda_mixer")}


def _mixer(kind: str) -> Callable[..., Any]:
    module, name = MIXERS[kind]
    fn: Callable[..., Any] = getattr(importlib.import_module(f".{module}", __package__), name)
    return fn


def forward(ops: Ops, model: ModelConfig, wl: Workload, z: Sizes) -> Any:
    """One forward step (prefill of T tokens, or decode of one token) on one rank."""
    m = model
    tp = z.p > 1
    ops.group("embedding")
    ids = ops.token_ids(z.B, z.Tq)
    x = ops.embed(ids, z.V, z.D, "vocab" if tp else "replicated")
    if tp:  # each rank looked up only its slice of the vocabulary
        x = ops.allreduce(x, "comm.allreduce", "embedding all-reduce")
    embedded = x  # what MTP modules sharing the model's embedding read (MiMo-V2-Flash)
    if m.embedding_scale:
        x = ops.scale(x, "embed.scale", "embedding scale", m.d_model**0.5, "√D")
    if m.embedding_norm:  # BLOOM's word_embeddings_layernorm
        x = ops.norm(x, "embed.norm", "embedding norm")
    if m.embedding_affine:  # ZAYA: (x + b)·s
        x = ops.affine(x, "embed.affine", "input scale and bias")
    if m.embedding_multiplier is not None:  # Granite
        x = ops.scale(x, "embed.scale", "embedding multiplier", m.embedding_multiplier,
                      f"{m.embedding_multiplier:g}")
    if m.positions in ("learned", "sinusoidal"):
        x = ops.positions(x, m.positions, m.max_positions)
    ple = gemma4.per_layer_inputs(ops, m, z, ids, x) if m.ple_dim else None  # Gemma 4
    angles = gemma.rope_angles(  # the full layers' R (Gemma 4: Dh_g), the sliding layers'
        ops, m, z.Tq, z.Dr if m.mla else (z.sym("Dh_g", m.global_head_dim) if m.global_head_dim
                                          else _rotary(m, z)),
        z.Dr if m.mla else _rotary(m, z, m.rotary_dim_local))
    if m.hc_streams:  # the residual becomes n_hc streams [B,T,n_hc,D]
        from . import hyper

        x = hyper.expand(ops, m, z, x)

    plan = layer_plan(m)
    for layer, spec, _ in ops.layers(plan):
        ops.group("block")
        mw, zw = z.widened(m, spec, wl)  # dots3: a layer of its own widths
        x = _block(ops, mw, spec, wl, zw, x, layer, angles[spec.attention == "sliding"])
        if ple is not None:  # Gemma 4: the layer's per-layer input, after its FFN
            x = gemma4.per_layer_block(ops, mw, zw, x, ple, layer)
        x = gemma4.layer_scalar(ops, mw, x)
    if wl.mtp:
        _mtp(ops, m, wl, z, plan, ids, x, angles, embedded)

    ops.group("head")
    if m.hc_streams:
        from . import hyper

        x = hyper.head(ops, m, z, x)
    if m.norm_position != "post":
        x = ops.norm(x, "head.norm", "final norm")
    if wl.logits == "last":
        x = ops.last_position(x, "head.last", "last position")
    logits = ops.linear(x, "head.lm", "lm head", z.D, z.V, m.lm_head_bias,
                        "vocab" if tp else "replicated")
    if m.final_softcap is not None:  # Gemma 2: on every logit (each rank its vocabulary slice)
        logits = ops.softcap(logits, "head.softcap", "final logit softcap", m.final_softcap)
    if tp:
        logits = ops.allgather(logits, "comm.allgather", "logits all-gather",
                               z.sym("N_vocab", m.vocab_size))
    if m.logit_scale is not None:  # Cohere's logit_scale, Granite's 1/logits_scaling
        logits = ops.scale(logits, "head.scale", "logit scale", m.logit_scale,
                           f"{m.logit_scale:g}")
    if wl.logits == "all":
        logits = ops.last_position(logits, "head.last", "last position")
    return logits


def _mtp(ops: Ops, m: ModelConfig, wl: Workload, z: Sizes, plan: Any, ids: Any, h: Any,
         angles: Any, embedded: Any) -> None:
    """The multi-token-prediction modules (DeepSeek-V3 §2.2, as its checkpoint stores them:
    embed_tokens, enorm, hnorm, eh_proj, one decoder layer, shared_head.norm and .head each): the
    main model's last hidden states h [B,T,D] and the next tokens' embeddings, each RMS-normed,
    concatenated [B,T,2D] and projected to D, then one block of the last layer's kind and the
    module's own head. Module j+1 reads module j's hidden states; they chain, as in training
    and in speculative drafting. MiMo-V2-Flash's (mtp_block sliding_dense, mtp_shared_head): a
    sliding block with a dense FFN, the model's embedding lookup and LM head, a final norm."""
    tp = z.p > 1
    kind = plan.kind_of[-1]
    spec = mtp_spec(m)
    for layer in ops.extra_layers(plan, kind, m.mtp_layers):
        ops.group("mtp")
        if m.mtp_shared_head:  # the model's own lookup (the same table)
            e = embedded
        else:
            e = ops.embed(ids, z.V, z.D, "vocab" if tp else "replicated")  # its own copy
            if tp:
                e = ops.allreduce(e, "comm.allreduce", "MTP embedding all-reduce")
        e = ops.norm(e, "mtp.enorm", "MTP embedding norm")
        hn = ops.norm(h, "mtp.hnorm", "MTP hidden norm")
        c = ops.concat([e, hn], "mtp.concat", "MTP [embedding; hidden]")
        # eh_proj [2D→D] is replicated: each rank projects the whole concatenation
        h = ops.linear(c, "mtp.proj", "MTP eh_proj", z.D + z.D, z.D, False, "replicated")
        h = _block(ops, m, spec, wl, z, h, layer, angles[spec.attention == "sliding"])
        y = ops.norm(h, "mtp.norm", "MTP head norm")
        if wl.logits == "last":
            y = ops.last_position(y, "mtp.last", "last position")
        logits = ops.linear(y, "mtp.head", "MTP head", z.D, z.V, False,
                            "vocab" if tp else "replicated")
        if tp:
            ops.allgather(logits, "comm.allgather", "MTP logits all-gather",
                          z.sym("N_vocab", m.vocab_size))


def _block(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, x: Any,
           layer: int, angles: Any) -> Any:
    if spec.mixer == "inkling":  # Inkling's layer (inkling.py)
        from .inkling import inkling_block

        return inkling_block(ops, m, spec, wl, z, x, layer, _ffn)
    if spec.mixer == "parallel":  # Falcon-H1: x + Mamba-2(h)·m_s + Attn(h·a_in)·a_out
        h = ops.norm(x, "attn.norm", "input norm")
        y = _times(ops, _mixer("mamba2")(ops, m, z, h, layer), m.ssm_out_multiplier,
                   "mixer.scale", "SSM out multiplier")
        a = _attention(ops, m, spec, wl, z, _times(ops, h, m.attention_in_multiplier,
                       "attn.in_scale", "attention in multiplier"), layer, angles)
        a = _times(ops, a, m.attention_out_multiplier, "attn.out_scale",
                   "attention out multiplier")
        x = ops.add(x, ops.add(y, a, "mixer.sum", "Mamba-2 + attention"), "residual", "residual")
        return _ffn_block(ops, m, spec, z, x, True)
    if not spec.attends:  # a state-space mixer or none, then the FFN (if any): pre-norm
        if spec.mixer != "none":
            h = ops.norm(x, "mixer.norm", "mixer norm")
            y = _mixer(spec.mixer)(ops, m, z, h, layer)
            if z.p > 1:  # out_proj is split by rows: the ranks' partial sums meet
                y = ops.allreduce(y, "comm.allreduce", "mixer all-reduce")
            y = gemma.post_norm(ops, spec, y, "mixer")  # LFM3's sandwich norms
            x = ops.add(x, _branch(ops, m, y), "residual", "residual")
        return x if spec.ffn == "none" else _ffn_block(ops, m, spec, z, x, True)
    if spec.norm_position != "post":  # pre, and sandwich/output (their branches normed too)
        pre = spec.norm_position != "output"  # OLMo 2: no pre-norms
        h, mix = _open_half(ops, m, z, x, "attn")
        h = ops.norm(h, "attn.norm", "attention norm") if pre else h
        a = _attend(m)(ops, m, spec, wl, z, h, layer, angles)
        if m.parallel_block:  # x + attn(h) + ffn(h), one all-reduce
            if m.parallel_norms == 2:  # GPT-NeoX, Falcon's new decoder: the FFN's own norm of x
                h = ops.norm(x, "ffn.norm", "FFN norm")
            # the channel mixer of the layer: dense, or MoE (Cohere 2 MoE)
            f = _moe(ops, m, z, h, False, spec) if spec.ffn == "moe" else _ffn(ops, m, z, h, False)
            s = ops.add(a, f, "block.sum", "attention + FFN")
            if z.p > 1:
                s = ops.allreduce(s, "comm.allreduce", "all-reduce")
            return ops.add(x, s, "residual", "residual")
        if z.p > 1:
            a = ops.allreduce(a, "comm.allreduce", "attention all-reduce")
        a = gemma.post_norm(ops, spec, a, "attn")
        x = _close_half(ops, x, a, mix, "attn") if mix else residual(
            ops, m, x, _branch(ops, m, a))
        return x if spec.ffn == "none" else _ffn_block(ops, m, spec, z, x, pre)
    # post-norm (original Transformer): U = Norm(X + MHA(X)); Y = Norm(U + FFN(U))
    a = _attention(ops, m, spec, wl, z, x, layer, angles)
    if z.p > 1:
        a = ops.allreduce(a, "comm.allreduce", "attention all-reduce")
    x = ops.norm(ops.add(x, _branch(ops, m, a), "residual", "residual"), "attn.norm",
                 "attention norm")
    f = _ffn(ops, m, z, x, reduce=z.p > 1)
    return ops.norm(ops.add(x, _branch(ops, m, f), "residual", "residual"), "ffn.norm",
                    "FFN norm")


def _ffn_block(ops: Ops, m: ModelConfig, spec: LayerSpec, z: Sizes, x: Any, pre: bool) -> Any:
    """The channel mixer's half of a pre-norm block: x + FFN(Norm(x)) (dense or MoE)."""
    h, mix = _open_half(ops, m, z, x, "ffn")
    h = ops.norm(h, "ffn.norm", "FFN norm") if pre else h
    wide = Dim.const(2) * z.Dff if spec.wide_ffn else None  # Gemma 4's double-wide MLP
    f = _moe(ops, m, z, h, z.p > 1, spec) if spec.ffn == "moe" else _ffn(ops, m, z, h, z.p > 1,
                                                                          wide)
    f = gemma.post_norm(ops, spec, f, "ffn")
    if mix:  # hyper-connections: post ⊗ f + combᵀ·x
        return _close_half(ops, x, f, mix, "ffn")
    return residual(ops, m, x, _branch(ops, m, f))


def _attend(m: ModelConfig) -> Callable[..., Any]:
    """The layer's attention: MLA (mla.py), DeepSeek-V4's (compressed.py), else _attention."""
    if m.mla:
        from .mla import mla_attention

        return mla_attention
    if m.shared_kv:
        from .compressed import v4_attention

        return v4_attention
    return _attention


def _open_half(ops: Ops, m: ModelConfig, z: Sizes, x: Any, half: str) -> tuple[Any, Any]:
    """A half-block's input and its hyper-connection mix (hyper.py), or x and None."""
    if not m.hc_streams:
        return x, None
    from . import hyper

    return hyper.open_half(ops, m, z, x, half)


def _close_half(ops: Ops, x: Any, y: Any, mix: Any, half: str) -> Any:
    from . import hyper

    return hyper.close_half(ops, x, y, mix, half)


def _branch(ops: Ops, m: ModelConfig, y: Any) -> Any:
    """A branch's output before its residual add: × residual_multiplier (Granite)."""
    if m.residual_multiplier is None:
        return y
    return ops.scale(y, "residual.scale", "residual multiplier", m.residual_multiplier,
                     f"{m.residual_multiplier:g}")


def _times(ops: Ops, x: Any, factor: float | None, role: str, name: str) -> Any:
    """x × a multiplier (Falcon-H1's μP factors); none given: x itself, no stage."""
    return x if factor is None else ops.scale(x, role, name, factor, f"{factor:g}")


def _rotary(m: ModelConfig, z: Sizes, r: int | None = None) -> Dim:
    """R: the width RoPE turns in each head, Dh unless partial rotary (`r`: another layer
    type's, Laguna's sliding layers)."""
    r = m.rot if r is None else r
    return z.Dh if r == m.dh else z.sym("R_s" if r != m.rot else "R", r)


def _attention(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, h: Any,
               layer: int, angles: Any) -> Any:
    z = z.at(m, spec)  # a layer's own sizes: a sliding H_sw (MiMo-V2-Flash), Gemma 4's Dh_g, H_kv_g
    qw = z.H * z.Dv  # the heads' outputs: H·Dh, or H·D_v with values of their own width
    Tk, Tc = z.keys(spec)
    if spec.kv_source is not None:  # Gemma 4's KV sharing: q alone, the K/V another cached
        q = _q_heads(ops, m, z, h)
        q = q if angles is None else ops.rope(q, "attn.rope", "RoPE q", angles)
        k, v = ops.shared_kv(spec.kv_source, z.B, z.Hkv, Tk, z.Dh)
    else:
        if spec.mixer == "cca":  # ZAYA (cca.py)
            from .cca import cca_qkv

            q, k, v = cca_qkv(ops, m, z, h, layer)
        else:
            q, k, v = _qkv(ops, m, z, h, m.global_k_eq_v and spec.attention == "full")
        if angles is not None and not spec.nope:
            q = ops.rope(q, "attn.rope", "RoPE q", angles)
            k = ops.rope(k, "attn.rope", "RoPE k", angles)
        q, k = _llama4_qk(ops, m, spec, z, q, k)
        k, v = ops.kv_cache(k, v, layer, Tk, Tc)
    sel = None
    if spec.block_sparse:  # MiniMax-M3's MSA
        from .block_sparse import block_select

        sel = block_select(ops, m, z, h, layer, angles, Tk, Tc)
    sparse = sel is not None and wl.selection == "sparse"  # the kernel reads selected blocks only
    groups = z.H.value // z.Hkv.value
    if groups > 1:  # GQA/MQA: each KV head serves `groups` query heads
        k = ops.repeat_kv(k, "attn.repeat_kv", "repeat k", groups, z.H)
        v = ops.repeat_kv(v, "attn.repeat_kv", "repeat v", groups, z.H)
    W, C = spec.window, spec.chunk
    kt = ops.transpose_last(k, "attn.kT", "kᵀ")
    s = (ops.block_matmul(q, kt, sel, "attn.scores", "QKᵀ over the selected blocks") if sparse
         else ops.matmul(q, kt, "attn.scores", "QKᵀ", causal=True, window=W, chunk=C))
    s = ops.scale(s, "attn.scale", "scale", *gemma.score_scale(m))
    if m.attn_softcap is not None:  # Gemma 2: after the scale, before the mask
        s = ops.softcap(s, "attn.softcap", "attention softcap", m.attn_softcap)
    if m.positions == "alibi":  # BLOOM, MPT: the positions enter as a bias on the scores
        s = ops.alibi(s, "attn.alibi", "ALiBi bias")
    if wl.phase == "prefill":
        s = ops.mask(s, "attn.mask", "causal mask", "causal")
    if wl.phase == "prefill" and W is not None and W < wl.seq:
        # decode's cache already holds only W tokens
        s = ops.mask(s, "attn.mask", "sliding-window mask", "window", W)
    if wl.phase == "prefill" and C is not None and C < wl.seq:
        # decode's cache already holds only the current chunk
        s = ops.mask(s, "attn.mask", "chunk mask", "chunk", C)
    if wl.padding_mask:
        s = ops.mask(s, "attn.mask", "padding mask", "padding")
    if sel is not None and not sparse:  # eager: the dense scores, unselected blocks masked
        s = ops.block_mask(s, sel, "attn.mask", "block mask (unselected blocks)")
    sinks = m.attention_sinks and (spec.attention == "sliding" or not m.sinks_sliding_only)
    a = ops.softmax(s, "attn.softmax", "softmax", z.H if sinks else None)
    o = (ops.block_matmul(a, v, sel, "attn.values", "A·V over the selected blocks") if sparse
         else ops.matmul(a, v, "attn.values", "A·V", causal=True, window=W, chunk=C))
    o = ops.merge_heads(o, "attn.merge", "merge heads")
    if m.attn_output_gate:  # Qwen3-Next: o ⊙ sigmoid(h·W_g), W_g q_proj's second half
        g = ops.linear(h, "attn.gate", "output gate projection", z.D, qw, m.qkv_bias, "column")
        o = ops.mul(o, ops.activation(g, "attn.gate.act", "output gate", m.attn_gate_act),
                    "attn.gate.mul", "o ⊙ gate")
    if m.attn_head_gate:  # LFM3: each head's output × sigmoid(h·W_g), W_g [D, H] (g_proj)
        g = ops.linear(h, "attn.head_gate", "head gate projection", z.D, z.H, False, "column")
        o = ops.head_gate(o, ops.activation(g, "attn.head_gate.act", "head gate",
                                            m.attn_gate_act),
                          "attn.head_gate.mul", "o ⊙ gate (per head)")
    return ops.linear(o, "attn.out", "output projection WO", qw, z.D, m.attn_out_bias, "row")


def _qkv(ops: Ops, m: ModelConfig, z: Sizes, h: Any, k_is_v: bool = False
         ) -> tuple[Any, Any, Any]:
    """q [B,H,T,Dh], k and v [B,H_kv,T,Dh]: the projections and the q/k norms (`k_is_v`: no v
    projection, v is k's, as Gemma 4's attention_k_eq_v on its global layers)."""
    qw, kvw = z.H * z.Dh, z.Hkv * z.Dh
    if m.fused_qkv:
        qkv = ops.linear(h, "attn.qkv", "qkv projection (fused)", z.D, qw + kvw * 2, m.qkv_bias,
                         "column")
        q, k, v = ops.split(qkv, [qw, kvw, kvw])
    else:
        q = ops.linear(h, "attn.q", "q projection", z.D, qw, m.qkv_bias, "column")
        k = ops.linear(h, "attn.k", "k projection", z.D, kvw, m.qkv_bias, "column")
        v = k if k_is_v else ops.linear(h, "attn.v", "v projection", z.D, z.Hkv * z.Dv,
                                        m.qkv_bias, "column")
    k = _times(ops, k, m.key_multiplier, "attn.k_scale", "key multiplier")  # Falcon-H1
    v = _times(ops, v, m.value_multiplier, "attn.v_scale", "value scale")  # MiMo-V2-Flash
    q, k = gemma.qk_norm_all(ops, m, q, k, qw, kvw)
    q = ops.split_heads(q, "attn.q.heads", "q", z.H, z.Dh)
    k = ops.split_heads(k, "attn.k.heads", "k", z.Hkv, z.Dh)
    v = ops.split_heads(v, "attn.v.heads", "v", z.Hkv, z.Dv)
    if m.v_norm:  # Gemma 4: RMS over each head's Dh, no weights
        v = ops.norm(v, "attn.v_norm", "v norm", z.Dv, "l2norm")
    if m.qk_norm and m.qk_norm_width == "head":  # Qwen3: over each head's Dh, before RoPE
        q = ops.norm(q, "attn.q_norm", "q norm", z.Dh, "rmsnorm")
        k = ops.norm(k, "attn.k_norm", "k norm", z.Dh, "rmsnorm")
    if m.qk_norm_per_head:  # StableLM, Cohere: LayerNorm over Dh, γ per head
        q = ops.head_norm(q, "attn.q_norm", "q norm (per head)", z.H)
        k = ops.head_norm(k, "attn.k_norm", "k norm (per head)", z.Hkv)
    return q, k, v


def _q_heads(ops: Ops, m: ModelConfig, z: Sizes, h: Any) -> Any:
    """q [B,H,T,Dh] alone, with its per-head norm (a KV-sharing layer: Gemma 4)."""
    q = ops.linear(h, "attn.q", "q projection", z.D, z.H * z.Dh, m.qkv_bias, "column")
    q = ops.split_heads(q, "attn.q.heads", "q", z.H, z.Dh)
    return ops.norm(q, "attn.q_norm", "q norm", z.Dh, "rmsnorm") if m.qk_norm else q


def _llama4_qk(ops: Ops, m: ModelConfig, spec: LayerSpec, z: Sizes, q: Any, k: Any
               ) -> tuple[Any, Any]:
    """Llama 4, after RoPE: on RoPE layers q and k are L2-normed over Dh (use_qk_norm: an RMS norm
    without weights); on NoPE layers q takes the per-position temperature."""
    rope = m.positions == "rope" and not spec.nope
    if m.qk_l2_norm and rope:
        q = ops.norm(q, "attn.q_l2norm", "q L2 norm", z.Dh, "l2norm")
        k = ops.norm(k, "attn.k_l2norm", "k L2 norm", z.Dh, "l2norm")
    if m.attn_temperature_tuning and spec.nope:
        q = ops.temperature(q, "attn.temperature", "attention temperature")
    if m.q_temperature_beta is not None and m.q_temperature_floor is not None:  # Ministral 3
        q = ops.temperature(q, "attn.temperature", "query temperature", m.q_temperature_beta,
                            m.q_temperature_floor, 0)
    return q, k


def _ffn(ops: Ops, m: ModelConfig, z: Sizes, h: Any, reduce: bool, width: Dim | None = None,
         role: str = "ffn", label: str = "FFN") -> Any:
    """A dense FFN of `width` (default Dff): gate and up split by column, down by row."""
    act, w = ACT[m.ffn], z.Dff if width is None else width
    gm, dm = m.mlp_multipliers or (None, None)  # Falcon-H1: gate and output multipliers
    if m.gated:
        g = ops.linear(h, f"{role}.gate", f"{label} gate", z.D, w, m.ffn_bias, "column")
        g = _times(ops, g, gm, f"{role}.gate_scale", "gate multiplier")
        u = ops.linear(h, f"{role}.up", f"{label} up", z.D, w, m.ffn_bias, "column")
        if m.swiglu_limit is not None and not m.swiglu_limit_routed_only:
            g, u = clamped(ops, m, role, g, u)
        u = ops.mul(ops.activation(g, f"{role}.act", "activation", act), u, f"{role}.mul",
                    "gate ⊙ up")
    else:
        u = ops.linear(h, f"{role}.up", f"{label} up", z.D, w, m.ffn_bias, "column")
        u = ops.activation(u, f"{role}.act", "activation", act)
    y = _times(ops, ops.linear(u, f"{role}.down", f"{label} down", w, z.D, m.ffn_bias, "row"),
               dm, f"{role}.down_scale", "down multiplier")
    return ops.allreduce(y, "comm.allreduce", "FFN all-reduce") if reduce else y


def clamped(ops: Ops, m: ModelConfig, role: str, g: Any, u: Any) -> tuple[Any, Any]:
    """Clamped SwiGLU (DeepSeek-V4): gate ≤ L, −L ≤ up ≤ L, before the activation (the dense
    and shared FFNs here, the routed experts in each interpreter's experts())."""
    L = m.swiglu_limit
    assert L is not None
    return (ops.clamp(g, f"{role}.clamp", "gate clamp", None, L),
            ops.clamp(u, f"{role}.clamp", "up clamp", -L, L))


def _moe(ops: Ops, m: ModelConfig, z: Sizes, h: Any, reduce: bool, spec: LayerSpec) -> Any:
    """Mixture-of-Experts: a router picks k of E experts per token; their outputs are combined
    by the routing weights; shared experts (if any) see every token. Under tensor parallelism
    each expert's Dff_e is split as a dense FFN's is, and the sum is all-reduced once."""
    if m.router_hidden is not None:  # ZAYA (zaya.py)
        from .zaya import zaya_router

        logits = zaya_router(ops, m, spec, z, h)
    else:
        logits = ops.linear(h, "moe.router", "router", z.D, z.E, m.router_bias, "replicated")
    if m.router_softcap is not None:  # Laguna: c·tanh(logits/c) before the scoring
        logits = ops.softcap(logits, "moe.router.softcap", "router logit softcap",
                             m.router_softcap)
    routing = ops.route(logits, "moe.route", "routing", z.k, spec.hash_route)
    y = ops.experts(h, routing, z.D, z.E, z.k, z.Dffe)
    if m.routed_scaling_factor is not None:
        y = ops.scale(y, "moe.scale", "routed scaling", m.routed_scaling_factor,
                      f"{m.routed_scaling_factor:g}")
    if m.n_shared_experts:
        s = _ffn(ops, m, z, h, False, z.Dffs, "moe.shared", "shared experts")
        if m.shared_expert_gate:  # Qwen2-MoE: sigmoid(x·w) scales the shared output
            g = ops.linear(h, "moe.shared_gate", "shared expert gate", z.D, Dim.const(1), False,
                           "replicated")
            s = ops.mul(s, ops.activation(g, "moe.shared_gate.act", "gate", "sigmoid"),
                        "moe.shared_gate.mul", "gate × shared")
        y = ops.add(y, s, "moe.add_shared", "routed + shared")
    return ops.allreduce(y, "comm.allreduce", "MoE all-reduce") if reduce else y
