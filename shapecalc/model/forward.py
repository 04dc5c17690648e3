"""The forward pass of a decoder-only Transformer, written once.

`forward()` is plain code over a small vocabulary of operations (`Ops`, in ops.py). The symbolic
interpreter (interpret/symbolic.py) answers each operation with shapes, formulas and exact counts;
the NumPy interpreter (interpret/numeric.py) answers it with real arrays. Neither can drift from
the other: there is one model.

With tensor parallelism the forward describes ONE rank: heads, KV heads, Dff and the vocabulary
are that rank's share, and the row-parallel outputs meet in an all-reduce (Megatron/vLLM layout).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import gemma
from .config import ModelConfig, Workload, ceil_div
from .expr import Dim, Expr
from .mla import mla_attention
from .ops import Ops
from .plan import Chunk, LayerSpec, held, layer_plan


class Sizes(NamedTuple):
    """The dims one rank works with, each carrying its symbol (`H/p`, `T′`, …)."""

    B: Dim
    Tq: Dim  # query tokens of this step: T in prefill, 1 in decode
    Tk: Dim  # keys a full-attention query reads: T in prefill, T′ = T+1 in decode
    D: Dim
    H: Dim
    Hkv: Dim
    Dh: Dim
    Dff: Dim
    E: Dim  # routed experts (every rank holds each expert's Dff_e/p slice)
    k: Dim  # experts a token is routed to
    Dffe: Dim  # a routed expert's width (per rank)
    Dffs: Dim  # all shared experts' width, n_s·Dff_s (per rank)
    V: Dim
    N: Dim
    Dc: Dim  # MLA: the KV latent width (kv_lora_rank)
    Dq: Dim  # MLA: the query latent width (q_lora_rank)
    Dn: Dim  # MLA: a head's q/k width without RoPE
    Dr: Dim  # MLA: the decoupled RoPE width (and the RoPE width of every model)
    Dv: Dim  # MLA: a head's value width
    p: int
    kv_replicated: bool
    T: int  # the workload's T
    decode: bool
    poly: bool  # only B and T are symbols; every other size is its number (the closed form)

    def sym(self, symbol: str, value: int) -> Dim:
        """A size that prints as `symbol` (a plain number in poly mode)."""
        return Dim.const(value) if self.poly else Dim.of(symbol, value)

    def keys(self, spec: LayerSpec) -> tuple[Dim, Dim]:
        """(Tk, Tc) of one layer kind: keys each query reads, tokens its cache holds after the
        step. A sliding layer's cache keeps at most W tokens, so decode reads T′ = min(T+1, W)."""
        if spec.chunk is not None and self.T + int(self.decode) > spec.chunk:
            return self._chunk_keys(spec.chunk)
        W = spec.window  # (a chunked layer within its first chunk reads as a full one)
        if not self.decode:
            return self.Tk, (self.sym("W", W) if W is not None and W < self.T else self.Tk)
        if W is not None and W < self.T + 1:
            tk = self.sym("T′", W)
        else:  # T′ = T + 1: in poly mode, that very polynomial in T
            tk = Dim(self.T + 1, Expr.sym("T") + Expr.const(1)) if self.poly else Dim.of(
                "T′", self.T + 1)
        return tk, tk

    def _chunk_keys(self, C: int) -> tuple[Dim, Dim]:
        """A chunked layer (Llama 4): its last query reads the keys of its own chunk, T_c =
        ((n−1) mod C) + 1 of the n tokens after the step, and the cache keeps just those. Prefill
        computes all T×T scores (eager attention; the chunk mask hides the others), so its
        queries read Tk = T; decode reads T_c = (T mod C) + 1 keys."""
        n = self.T + (1 if self.decode else 0)
        c = held(Chunk(C), n)
        # in poly mode (T in one chunk's regime) a polynomial: n − C·⌊(n−1)/C⌋
        tc = Dim(c, Expr.sym("T") + Expr.const(c - self.T)) if self.poly else Dim.of("T_c", c)
        return (tc if self.decode else self.Tk), tc

    @staticmethod
    def of(model: ModelConfig, wl: Workload, p: int | None = None, poly: bool = False) -> Sizes:
        """The sizes of one rank. With `poly`, only B and T are symbols (every formula is then a
        polynomial in B and T: what the closed form reads)."""
        p = wl.tp if p is None else p
        T = wl.seq

        def of(sym: str, value: int) -> Dim:
            return Dim.const(value) if poly else Dim.of(sym, value)

        def shard(sym: str, value: int) -> Dim:
            if poly:
                return Dim.const(ceil_div(value, p))
            if p == 1:
                return Dim.of(sym, value)
            return Dim(ceil_div(value, p), Expr.sym(sym) * Expr([((("p", -1),), 1)]))

        def shard_n(n_sym: str, n: int, sym: str, value: int) -> Dim:  # n·value, split over p
            d = Dim.of(n_sym, n) * Dim.of(sym, value)
            return d if p == 1 else Dim(ceil_div(n * value, p), d.expr * Expr([((("p", -1),), 1)]))

        hkv = model.kv_heads
        replicated = p > hkv
        decode = wl.phase == "decode"
        tq = Dim.const(1) if decode else Dim.of("T", T)
        return Sizes(
            B=Dim.of("B", wl.batch),
            Tq=tq,
            Tk=Dim.of("T′", T + 1) if decode else tq,
            D=of("D", model.d_model),
            H=shard("H", model.n_heads),
            # vLLM: with fewer KV heads than ranks, every rank holds one (replicated) KV head.
            # MHA prints its KV heads as H, as the seeds do (2·N·B·H·T·Dh)
            Hkv=Dim.const(1) if replicated else shard("H" if hkv == model.n_heads else "H_kv", hkv),
            Dh=of("Dh", model.dh),
            Dff=shard("Dff", model.d_ff),
            E=of("E", model.n_experts or 0),
            k=of("k", model.experts_per_token or 0),
            Dffe=shard("Dff_e", model.dff_expert),
            Dffs=shard("Dff_s", model.n_shared_experts * model.dff_shared)
            if model.n_shared_experts == 1 or poly
            else shard_n("n_s", model.n_shared_experts, "Dff_s", model.dff_shared),
            V=shard("N_vocab", model.vocab_size),
            N=of("N", model.n_layers),
            Dc=of("D_c", model.kv_lora_rank or 0),
            Dq=of("D_q", model.q_lora_rank or 0),
            Dn=of("D_n", model.qk_nope_head_dim or 0),
            Dr=of("D_r", model.rot) if model.mla else of("Dh", model.dh),
            Dv=of("D_v", model.v_dim) if model.mla else of("Dh", model.dh),
            p=p,
            kv_replicated=replicated,
            T=T,
            decode=decode,
            poly=poly,
        )


# the activation each FFN kind applies (gated kinds to the gate)
ACT = {"gelu": "gelu", "geglu": "gelu", "relu": "relu", "swiglu": "silu"}


def forward(ops: Ops, model: ModelConfig, wl: Workload, z: Sizes) -> Any:
    """One forward step (prefill of T tokens, or decode of one token) on one rank."""
    m = model
    tp = z.p > 1
    ops.group("embedding")
    ids = ops.token_ids(z.B, z.Tq)
    x = ops.embed(ids, z.V, z.D, "vocab" if tp else "replicated")
    if tp:  # each rank looked up only its slice of the vocabulary
        x = ops.allreduce(x, "comm.allreduce", "embedding all-reduce")
    if m.embedding_scale:
        x = ops.scale(x, "embed.scale", "embedding scale", m.d_model**0.5, "√D")
    if m.embedding_norm:  # BLOOM's word_embeddings_layernorm
        x = ops.norm(x, "embed.norm", "embedding norm")
    if m.embedding_multiplier is not None:  # Granite
        x = ops.scale(x, "embed.scale", "embedding multiplier", m.embedding_multiplier,
                      f"{m.embedding_multiplier:g}")
    if m.positions in ("learned", "sinusoidal"):
        x = ops.positions(x, m.positions, m.max_positions)
    angles = gemma.rope_angles(ops, m, z.Tq, z.Dr if m.mla else _rotary(m, z))

    for layer, spec, _ in ops.layers(layer_plan(m)):
        ops.group("block")
        x = _block(ops, m, spec, wl, z, x, layer, angles[spec.attention == "sliding"])

    ops.group("head")
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


def _block(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, x: Any,
           layer: int, angles: Any) -> Any:
    if spec.norm_position != "post":  # pre, and sandwich/output (their branches normed too)
        pre = spec.norm_position != "output"  # OLMo 2: no pre-norms
        h = ops.norm(x, "attn.norm", "attention norm") if pre else x
        attend = mla_attention if m.mla else _attention
        a = attend(ops, m, spec, wl, z, h, layer, angles)
        if m.parallel_block:  # x + attn(h) + ffn(h), one all-reduce
            if m.parallel_norms == 2:  # GPT-NeoX, Falcon's new decoder: the FFN's own norm of x
                h = ops.norm(x, "ffn.norm", "FFN norm")
            f = _ffn(ops, m, z, h, reduce=False)
            s = ops.add(a, f, "block.sum", "attention + FFN")
            if z.p > 1:
                s = ops.allreduce(s, "comm.allreduce", "all-reduce")
            return ops.add(x, s, "residual", "residual")
        if z.p > 1:
            a = ops.allreduce(a, "comm.allreduce", "attention all-reduce")
        a = gemma.post_norm(ops, spec, a, "attn")
        x = ops.add(x, _branch(ops, m, a), "residual", "residual")
        h = ops.norm(x, "ffn.norm", "FFN norm") if pre else x
        f = _moe(ops, m, z, h, z.p > 1) if spec.ffn == "moe" else _ffn(ops, m, z, h, z.p > 1)
        f = gemma.post_norm(ops, spec, f, "ffn")
        return ops.add(x, _branch(ops, m, f), "residual", "residual")
    # post-norm (original Transformer): U = Norm(X + MHA(X)); Y = Norm(U + FFN(U))
    a = _attention(ops, m, spec, wl, z, x, layer, angles)
    if z.p > 1:
        a = ops.allreduce(a, "comm.allreduce", "attention all-reduce")
    x = ops.norm(ops.add(x, _branch(ops, m, a), "residual", "residual"), "attn.norm",
                 "attention norm")
    f = _ffn(ops, m, z, x, reduce=z.p > 1)
    return ops.norm(ops.add(x, _branch(ops, m, f), "residual", "residual"), "ffn.norm",
                    "FFN norm")


def _branch(ops: Ops, m: ModelConfig, y: Any) -> Any:
    """A branch's output before its residual add: × residual_multiplier (Granite)."""
    if m.residual_multiplier is None:
        return y
    return ops.scale(y, "residual.scale", "residual multiplier", m.residual_multiplier,
                     f"{m.residual_multiplier:g}")


def _rotary(m: ModelConfig, z: Sizes) -> Dim:
    """R: the width RoPE turns in each head, Dh unless partial rotary."""
    return z.Dh if m.rot == m.dh else z.sym("R", m.rot)


def _attention(ops: Ops, m: ModelConfig, spec: LayerSpec, wl: Workload, z: Sizes, h: Any,
               layer: int, angles: Any) -> Any:
    qw, kvw = z.H * z.Dh, z.Hkv * z.Dh
    if m.fused_qkv:
        qkv = ops.linear(h, "attn.qkv", "qkv projection (fused)", z.D, qw + kvw * 2, m.qkv_bias,
                         "column")
        q, k, v = ops.split(qkv, [qw, kvw, kvw])
    else:
        q = ops.linear(h, "attn.q", "q projection", z.D, qw, m.qkv_bias, "column")
        k = ops.linear(h, "attn.k", "k projection", z.D, kvw, m.qkv_bias, "column")
        v = ops.linear(h, "attn.v", "v projection", z.D, kvw, m.qkv_bias, "column")
    q, k = gemma.qk_norm_all(ops, m, q, k, qw, kvw)
    q = ops.split_heads(q, "attn.q.heads", "q", z.H, z.Dh)
    k = ops.split_heads(k, "attn.k.heads", "k", z.Hkv, z.Dh)
    v = ops.split_heads(v, "attn.v.heads", "v", z.Hkv, z.Dh)
    if m.qk_norm and m.qk_norm_width == "head":  # Qwen3: over each head's Dh, before RoPE
        q = ops.norm(q, "attn.q_norm", "q norm", z.Dh, "rmsnorm")
        k = ops.norm(k, "attn.k_norm", "k norm", z.Dh, "rmsnorm")
    if m.qk_norm_per_head:  # StableLM, Cohere: LayerNorm over Dh, γ per head
        q = ops.head_norm(q, "attn.q_norm", "q norm (per head)", z.H)
        k = ops.head_norm(k, "attn.k_norm", "k norm (per head)", z.Hkv)
    if angles is not None and not spec.nope:
        q = ops.rope(q, "attn.rope", "RoPE q", angles)
        k = ops.rope(k, "attn.rope", "RoPE k", angles)
    q, k = _llama4_qk(ops, m, spec, z, q, k)
    Tk, Tc = z.keys(spec)
    k, v = ops.kv_cache(k, v, layer, Tk, Tc)
    groups = z.H.value // z.Hkv.value
    if groups > 1:  # GQA/MQA: each KV head serves `groups` query heads
        k = ops.repeat_kv(k, "attn.repeat_kv", "repeat k", groups, z.H)
        v = ops.repeat_kv(v, "attn.repeat_kv", "repeat v", groups, z.H)
    W, C = spec.window, spec.chunk
    kt = ops.transpose_last(k, "attn.kT", "kᵀ")
    s = ops.matmul(q, kt, "attn.scores", "QKᵀ", causal=True, window=W, chunk=C)
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
    a = ops.softmax(s, "attn.softmax", "softmax", z.H if m.attention_sinks else None)
    o = ops.matmul(a, v, "attn.values", "A·V", causal=True, window=W, chunk=C)
    o = ops.merge_heads(o, "attn.merge", "merge heads")
    if m.attn_output_gate:  # AFMoE: o ⊙ sigmoid(h·W_g), W_g split by column as W_q
        g = ops.linear(h, "attn.gate", "output gate", z.D, qw, False, "column")
        g = ops.activation(g, "attn.gate.act", "gate", "sigmoid")
        o = ops.mul(o, g, "attn.gate.mul", "gate ⊙ attention")
    return ops.linear(o, "attn.out", "output projection WO", qw, z.D, m.attn_out_bias, "row")


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
    return q, k


def _ffn(ops: Ops, m: ModelConfig, z: Sizes, h: Any, reduce: bool, width: Dim | None = None,
         role: str = "ffn", label: str = "FFN") -> Any:
    """A dense FFN of `width` (default Dff): gate and up split by column, down by row."""
    act, w = ACT[m.ffn], z.Dff if width is None else width
    if m.gated:
        g = ops.linear(h, f"{role}.gate", f"{label} gate", z.D, w, m.ffn_bias, "column")
        u = ops.linear(h, f"{role}.up", f"{label} up", z.D, w, m.ffn_bias, "column")
        u = ops.mul(ops.activation(g, f"{role}.act", "activation", act), u, f"{role}.mul",
                    "gate ⊙ up")
    else:
        u = ops.linear(h, f"{role}.up", f"{label} up", z.D, w, m.ffn_bias, "column")
        u = ops.activation(u, f"{role}.act", "activation", act)
    y = ops.linear(u, f"{role}.down", f"{label} down", w, z.D, m.ffn_bias, "row")
    return ops.allreduce(y, "comm.allreduce", "FFN all-reduce") if reduce else y


def _moe(ops: Ops, m: ModelConfig, z: Sizes, h: Any, reduce: bool) -> Any:
    """Mixture-of-Experts: a router picks k of E experts per token; their outputs are combined
    by the routing weights; shared experts (if any) see every token. Under tensor parallelism
    each expert's Dff_e is split as a dense FFN's is, and the sum is all-reduced once."""
    logits = ops.linear(h, "moe.router", "router", z.D, z.E, m.router_bias, "replicated")
    routing = ops.route(logits, "moe.route", "routing", z.k)
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
