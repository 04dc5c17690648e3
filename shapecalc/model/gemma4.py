"""Gemma 4's parts of forward(): the per-layer embeddings (PLE), built once from the token ids
and the embeddings, and fed into each layer after its FFN, and the layer scalar. forward.py calls
these with its Ops (Gemma4TextModel.get_per_layer_inputs, project_per_layer_inputs and the end of
Gemma4TextDecoderLayer.forward in transformers 5.24)."""

from __future__ import annotations

from typing import Any

from .config import ModelConfig
from .ops import Ops
from .sizes import Sizes


def per_layer_inputs(ops: Ops, m: ModelConfig, z: Sizes, ids: Any, x: Any) -> Any:
    """[B,N,T,D_p]: each layer's input, (RMSNorm(x·W_p/√D) + E_p[ids]·√D_p)/√2, the table and
    the projection N·D_p wide (all layers packed), the norm's γ of D_p shared by the layers."""
    Dp, Vp = z.sym("D_p", m.ple_dim or 0), z.sym("N_vocab_p", m.ple_vocab or 0)
    e = ops.table(ids, "ple.embed", "per-layer embeddings", Vp, z.N * Dp)  # [B,T,N·D_p]
    e = ops.scale(e, "ple.embed_scale", "per-layer embedding scale", (m.ple_dim or 0) ** 0.5,
                  "√D_p")
    e = ops.split_heads(e, "ple.heads", "per-layer embeddings", z.N, Dp)  # [B,N,T,D_p]
    p = ops.linear(x, "ple.proj", "per-layer projection", z.D, z.N * Dp, False,
                   "replicated")  # [B,T,N·D_p]
    p = ops.scale(p, "ple.proj_scale", "per-layer projection scale", m.d_model**-0.5, "1/√D")
    p = ops.split_heads(p, "ple.heads", "per-layer projection", z.N, Dp)  # [B,N,T,D_p]
    p = ops.norm(p, "ple.norm", "per-layer projection norm", Dp, "rmsnorm")  # γ of D_p
    s = ops.add(p, e, "ple.add", "projection + embeddings")  # [B,N,T,D_p]
    return ops.scale(s, "ple.scale", "per-layer input scale", 2**-0.5, "1/√2")


def per_layer_block(ops: Ops, m: ModelConfig, z: Sizes, x: Any, ple: Any, layer: int) -> Any:
    """After the FFN's residual: x + RMSNorm(W_o·(gelu(x·W_g) ⊙ p_ℓ)), p_ℓ the layer's
    [B,T,D_p] slice of the per-layer inputs; both matrices replicated on every rank."""
    Dp = z.sym("D_p", m.ple_dim or 0)
    p = ops.layer_input(ple, layer, "ple.slice", "the layer's per-layer input")  # [B,T,D_p]
    g = ops.linear(x, "ple.gate", "per-layer input gate", z.D, Dp, False, "replicated")
    g = ops.activation(g, "ple.act", "activation", "gelu")  # [B,T,D_p]
    g = ops.mul(g, p, "ple.mul", "gate ⊙ per-layer input")
    y = ops.linear(g, "ple.out", "per-layer output projection", Dp, z.D, False, "replicated")
    y = ops.norm(y, "ple.post_norm", "post per-layer input norm")  # γ of D
    return ops.add(x, y, "residual", "residual")


def layer_scalar(ops: Ops, m: ModelConfig, x: Any) -> Any:
    """Each layer's output × its layer_scalar (a buffer the checkpoint holds: no parameter;
    1 in a freshly built model, as the executor takes it)."""
    if not m.layer_scalar:
        return x
    return ops.scale(x, "block.scalar", "layer scalar", 1.0, "s_ℓ")
